"""Pictures as files beside an export: `images/<sha256>.<ext>`, each written once, named by its hash.

Formats that refer to pictures by location (ATIF's image content parts, OpenTelemetry's `uri` parts)
point at these files; evalrx JSONL and Parquet carry the bytes inline. Reading back follows a
document's relative paths and `data:` URLs only, and never leaves the document's folder.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Iterable, Iterator, Optional

from evalrx.core.content import sniff_mime

PICTURES_DIR = "images"
_SUFFIX = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}
MAX_PICTURE_BYTES = 64 * 1024 * 1024  # a picture file read back on import; larger ones are gaps


def picture_path(picture: dict) -> str:
    """Where an export row's picture (`{"sha256", "mime", "base64"}`) lies, relative to the export file."""
    return f"{PICTURES_DIR}/{picture['sha256']}{_SUFFIX.get(str(picture.get('mime')), '.bin')}"


def row_pictures(row: dict) -> Iterator[dict]:
    """Every picture an export row carries: the case's, then each step's in order."""
    case = row.get("case") or {}
    if isinstance(case.get("image"), dict) and case["image"].get("base64"):
        yield case["image"]
    for step in row.get("steps") or []:
        yield from step.get("images") or []


def write_pictures(pictures: Iterable[dict], out_dir: Path) -> int:
    """Write each picture once as `out_dir/images/<sha256>.<ext>` (a file already there is the same
    picture, by its name); returns how many files were written."""
    written = 0
    for picture in pictures:
        target = out_dir / picture_path(picture)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base64.b64decode(picture["base64"]))
        written += 1
    return written


def picture_of(data: bytes) -> dict:
    """The export-row form of picture bytes read back."""
    return {
        "sha256": hashlib.sha256(data).hexdigest(),
        "mime": sniff_mime(data, "application/octet-stream"),
        "base64": base64.b64encode(data).decode(),
    }


def read_picture(location: str, base: Optional[Path]) -> Optional[bytes]:
    """The bytes a document's picture location names: a base64 `data:` URL, or a relative path inside
    `base` (the document's folder). None for anything else (a link, a path outside `base`, a missing or
    oversized file): the step then records the picture as one it showed but the import could not keep."""
    if location.startswith("data:"):
        if ";base64," not in location:
            return None
        try:
            return base64.b64decode(location.split(";base64,", 1)[1], validate=True)
        except ValueError:
            raise ValueError("an image is not valid base64") from None
    if base is None or "://" in location or location.startswith(("/", "\\")):
        return None
    root = base.resolve()
    target = (root / location).resolve()
    if not target.is_relative_to(root) or not target.is_file() or target.stat().st_size > MAX_PICTURE_BYTES:
        return None
    return target.read_bytes()


def bundle(path: Path) -> Path:
    """The export at `path` as one file to hand over: itself, or, where pictures were written beside it,
    a zip of it and its `images/` folder (`<name>.zip`, the paths inside as the document names them)."""
    import zipfile

    folder = path.parent / PICTURES_DIR
    if not folder.is_dir():
        return path
    out = path.with_name(path.name + ".zip")
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:  # pictures are compressed already
        zf.write(path, path.name)
        for picture in sorted(folder.iterdir()):
            zf.write(picture, f"{PICTURES_DIR}/{picture.name}")
    return out
