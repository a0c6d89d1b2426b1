"""Files an import reads and an export writes: existence, content hash, and writes that never leave half a file."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable


def existing(path: "str | Path") -> Path:
    """The path of a file that exists, or FileNotFoundError naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return path


_NAME_SUFFIXES = {".zip", ".json", ".jsonl", ".parquet", ".eval", ".csv", ".atif", ".otlp", ".labels", ".txt"}


def file_stem(path: "str | Path") -> str:
    """A file's name without the format suffixes an export name carries ("run3.atif.jsonl.zip" -> "run3")."""
    name = Path(path).name
    while (suffix := Path(name).suffix).lower() in _NAME_SUFFIXES and len(name) > len(suffix):
        name = name[: -len(suffix)]
    return name


def file_sha256(path: "str | Path") -> str:
    """The sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_lines(path: Path, lines: Iterable[str]) -> int:
    """Write lines to `path` through a `.part` file renamed at the end; returns how many."""
    n = 0
    tmp = path.with_name(path.name + ".part")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line + "\n")
                n += 1
        tmp.replace(path)  # a crash never leaves a half-written export under the real name
    finally:
        tmp.unlink(missing_ok=True)  # nor a .part beside it
    return n
