"""Pictures as files beside an export: `images/<sha256>.<ext>`, each written once, named by its hash.

Formats that refer to pictures by location (ATIF's image content parts, OpenTelemetry's `uri` parts)
point at these files; evalrx JSONL and Parquet carry the bytes inline. Reading back follows a
document's relative paths and `data:` URLs only, and never leaves the document's folder. An export
handed over as one file is a zip of the document and its pictures (`bundle`), unpacked to import
(`bundled_document`, `unbundle`).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from evalrx.core.content import IMAGE_SUFFIXES, sniff_mime
from evalrx.store import export_picture

PICTURES_DIR = "images"
MAX_PICTURE_BYTES = 64 * 1024 * 1024  # a picture file read back on import; larger ones are gaps


def picture_path(picture: dict) -> str:
    """Where an export row's picture (`{"sha256", "mime", "base64"}`) lies, relative to the export file."""
    return f"{PICTURES_DIR}/{picture['sha256']}{IMAGE_SUFFIXES.get(str(picture.get('mime')), '.bin')}"


def as_file(picture: object) -> bool:
    """Whether an export row's picture goes out as a file: a PNG, JPEG, GIF or WebP with its bytes (other
    bytes a tool returned stay inline in the document's own fields)."""
    return isinstance(picture, dict) and picture.get("mime") in IMAGE_SUFFIXES and bool(picture.get("base64"))


def row_pictures(row: dict) -> Iterator[dict]:
    """Every picture of an export row that goes out as a file: the case's, then each step's in order."""
    case = row.get("case") or {}
    if as_file(case.get("image")):
        yield case["image"]
    for step in row.get("steps") or []:
        yield from (p for p in step.get("images") or [] if as_file(p))


def write_pictures(pictures: Iterable[dict], out_dir: Path) -> int:
    """Write each picture once as `out_dir/images/<sha256>.<ext>` (a file already there is the same
    picture, by its name); returns how many files were written."""
    written = 0
    for picture in pictures:
        target = out_dir / picture_path(picture)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")  # a file under its final name is always whole
        part.write_bytes(base64.b64decode(picture["base64"]))
        os.replace(part, target)
        written += 1
    return written


def picture_of(data: bytes) -> dict:
    """The export-row form of picture bytes read back."""
    return export_picture(data)


def data_url_bytes(uri: str) -> Optional[bytes]:
    """The bytes of a base64 `data:` URL; None for anything else (a link, a URL-encoded `data:` URL).

    Raises:
        ValueError: the URL says base64 but its data is not.
    """
    if not (uri.startswith("data:") and ";base64," in uri):
        return None
    try:
        return base64.b64decode(uri.split(";base64,", 1)[1], validate=True)
    except ValueError:
        raise ValueError("an image is not valid base64") from None


def read_picture(location: str, base: Optional[Path]) -> Optional[bytes]:
    """The picture a document's location names: a base64 `data:` URL, or a relative path inside `base`
    (the document's folder). None for anything else (a link, a path outside `base` or through a dot
    folder, a missing, unreadable or oversized file, bytes that are not a PNG, JPEG, GIF or WebP): the
    step then records the picture as one it showed but the import could not keep."""
    if location.startswith("data:"):
        data = data_url_bytes(location)
    elif base is None or "://" in location or location.startswith(("/", "\\")) or _dotted(location):
        return None
    else:
        try:
            root = base.resolve()
            target = (root / location).resolve()
            if not target.is_relative_to(root) or not target.is_file() or target.stat().st_size > MAX_PICTURE_BYTES:
                return None
            data = target.read_bytes()
        except (OSError, RuntimeError, ValueError):  # unreadable, a symlink loop, a NUL in the name
            return None
    return data if data is not None and sniff_mime(data) is not None else None


def _dotted(location: str) -> bool:
    return any(part.startswith(".") for part in location.replace("\\", "/").split("/"))


def bundle(path: Path) -> Path:
    """The export at `path` as one file to hand over: itself, or, where it names pictures written beside
    it, a zip of it and those files of its `images/` folder (`<name>.zip`, the paths as the document
    names them; other files a folder shared with earlier exports holds stay out)."""
    import zipfile

    folder = path.parent / PICTURES_DIR
    if not folder.is_dir():
        return path
    text = path.read_bytes()
    named = [p for p in sorted(folder.iterdir()) if f"{PICTURES_DIR}/{p.name}".encode() in text]
    if not named:
        return path
    out = path.with_name(path.name + ".zip")
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:  # pictures are compressed already
        zf.write(path, path.name)
        for picture in named:
            zf.write(picture, f"{PICTURES_DIR}/{picture.name}")
    return out


BUNDLED_SUFFIXES = (".json", ".jsonl", ".parquet")  # what a zip's one document may be (an export's names)
MAX_UNPACK_RATIO = 200  # a document unpacking to more than this many times the zip's size is refused (a zip bomb)


def bundled_document(path: Path) -> Optional[str]:
    """The document's name inside a zip of one document (a .json, .jsonl or .parquet file) and, beside
    it, an `images/` folder of pictures, as `bundle` writes it; None for any other file or zip."""
    import zipfile

    try:
        with path.open("rb") as fh:
            if not fh.read(4).startswith(b"PK"):
                return None
        with zipfile.ZipFile(path) as zf:
            names = [i.filename for i in zf.infolist() if not i.filename.endswith("/")]
    except (zipfile.BadZipFile, OSError):
        return None
    if "" in names:  # a member whose name is empty (zipfile cuts a name at a NUL): no export of ours
        return None
    docs = [n for n in names if not n.startswith(f"{PICTURES_DIR}/")]
    pictures = [n for n in names if n.startswith(f"{PICTURES_DIR}/")]
    if len(docs) != 1 or "/" in docs[0] or _dotted(docs[0]) or not docs[0].lower().endswith(BUNDLED_SUFFIXES):
        return None
    if any(n.count("/") != 1 or _dotted(n) for n in pictures):
        return None
    return docs[0]


def unbundle(path: Path, into: Path) -> Path:
    """Unpack a `bundled_document` zip into the folder `into`: its document, and its pictures (each at most
    `MAX_PICTURE_BYTES`; a larger one stays out and reads back as a gap); returns the document's path.

    Raises:
        ValueError: the document unpacks to more than `MAX_UNPACK_RATIO` times the zip's size.
    """
    import zipfile

    name = bundled_document(path)
    if name is None:
        raise ValueError(f"{path.name} is not a zip of one document and its {PICTURES_DIR}/ folder")
    cap = max(path.stat().st_size * MAX_UNPACK_RATIO, MAX_PICTURE_BYTES)
    try:
        with zipfile.ZipFile(path) as zf:
            _unpack(zf, name, into, cap)
    except zipfile.BadZipFile as exc:
        raise ValueError(f"a damaged zip ({exc}); zip the export again") from None
    return into / name


def _unpack(zf: Any, name: str, into: Path, cap: int) -> None:
    import shutil

    for info in zf.infolist():
        if info.filename.endswith("/") or (info.filename != name and info.file_size > MAX_PICTURE_BYTES):
            continue
        if info.file_size > cap:
            raise ValueError(
                f"{info.filename} unpacks to {info.file_size:,} bytes, over {MAX_UNPACK_RATIO} times the zip's "
                f"size; unzip it yourself and import {info.filename} from beside its {PICTURES_DIR}/ folder"
            )
        target = into / info.filename  # the names were checked: one document, flat pictures, no dots
        target.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(info) as src, target.open("wb") as out:
            shutil.copyfileobj(src, out)  # zipfile stops at the stated size and checks the CRC
