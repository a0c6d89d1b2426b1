"""Bounds on what an import reads: the size of one record, JSON nesting, the text encoding.

A record is what is parsed at once: a JSONL line, one sample of an Inspect `.eval` log, or a
whole JSON document. Each check fails with one line naming the file, the place and the fix,
never with a traceback (deep JSON would otherwise end in a RecursionError).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Optional

from evalrx.interop.errors import EncodingError, ImportFormatError, NestingTooDeepError, RecordTooLargeError

MiB = 1 << 20
DEFAULT_MAX_RECORD_BYTES = 64 * MiB
DEFAULT_MAX_DEPTH = 200

UTF8_BOM = b"\xef\xbb\xbf"
_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
_DEPTH_CHUNK = 4 * MiB  # bytes scanned at once: bounds the scan's memory on a large record


@dataclass(frozen=True)
class ImportLimits:
    """How big one record may be and how deep its JSON may nest."""

    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH

    def __post_init__(self) -> None:
        if self.max_record_bytes < 1 or self.max_depth < 1:
            raise ValueError(f"import limits must be positive, got {self}")

    @classmethod
    def from_options(cls, max_record_mb: Optional[float] = None, max_depth: Optional[int] = None) -> "ImportLimits":
        """Limits from the CLI's `--max-record-mb` / `--max-depth` (None keeps the default)."""
        return cls(
            max_record_bytes=int(max_record_mb * MiB) if max_record_mb is not None else DEFAULT_MAX_RECORD_BYTES,
            max_depth=max_depth if max_depth is not None else DEFAULT_MAX_DEPTH,
        )


def megabytes(n: int) -> str:
    return f"{n / MiB:,.1f} MB"


def check_size(n: int, path: "str | Path", where: Any, limits: ImportLimits, what: str = "record") -> None:
    """Refuse a record of `n` bytes over the limit, saying how to raise it."""
    if n > limits.max_record_bytes:
        need = -(-n // MiB)
        raise RecordTooLargeError(
            path,
            where,
            f"the {what} is {megabytes(n)}, over the {megabytes(limits.max_record_bytes)} limit on one "
            f"record; raise it with --max-record-mb {need} (the record is held in memory while it is read)",
        )


def read_lines(fh: BinaryIO, path: "str | Path", limits: ImportLimits) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of a binary file, never reading more than the limit of one line."""
    lineno = 0
    while True:
        raw = fh.readline(limits.max_record_bytes + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > limits.max_record_bytes and not raw.endswith(b"\n"):
            check_size(len(raw) + 1, path, lineno, limits, what="line (at least)")
        yield lineno, raw


def decode_utf8(data: bytes, path: "str | Path", where: Any, *, first: bool = False) -> str:
    """The text of UTF-8 bytes; other encodings raise EncodingError naming the line and what was found."""
    if first:
        for bom, name in _BOMS:
            if data.startswith(bom):
                raise EncodingError(
                    path,
                    where or 1,
                    f"the file is {name} (it starts with a {name} byte-order mark); "
                    "save it as UTF-8, e.g. `iconv -f utf-16 -t utf-8 FILE > FILE.utf8`",
                )
        if data.startswith(UTF8_BOM):  # Windows tools write one; it says UTF-8, so it is harmless
            data = data[len(UTF8_BOM) :]
    nul = data.find(b"\x00")
    if nul >= 0:  # raw NULs are never valid JSON text: UTF-16/32 without a byte-order mark
        line, col = _line_col(data, nul, where)
        raise EncodingError(
            path,
            line,
            f"NUL byte at column {col}: the file looks like UTF-16 or UTF-32 without a "
            "byte-order mark; save it as UTF-8",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _line_col(data, exc.start, where)
        bad = data[exc.start]
        guess = "Latin-1 / Windows-1252" if bad >= 0x80 else "not UTF-8"
        raise EncodingError(
            path,
            line,
            f"byte 0x{bad:02x} at column {col} is not UTF-8 (the text looks like {guess}); convert the "
            "file to UTF-8, e.g. `iconv -f latin1 -t utf-8 FILE > FILE.utf8`",
        ) from None


def _line_col(data: bytes, pos: int, where: Any) -> tuple[Any, int]:
    """(where to report, 1-based column) of byte `pos`: a JSONL line keeps its number, a document counts lines."""
    col = pos - (data.rfind(b"\n", 0, pos) + 1) + 1
    line = data.count(b"\n", 0, pos) + 1
    if isinstance(where, str):
        return f"{where}, line {line}", col
    return (line if where is None else where), col


def json_depth(data: bytes, limit: int) -> Optional[int]:
    """The nesting depth of a JSON text when it is over `limit`, else None; counted without recursion."""
    if data.count(b"[") + data.count(b"{") <= limit:  # too few openers to go deeper: the common small record
        return None
    import numpy as np

    # Escapes out of the way (left to right, as JSON reads them), every '"' left opens or closes a string.
    text = data.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    depth = peak = inside = 0
    for start in range(0, len(text), _DEPTH_CHUNK):
        a = np.frombuffer(text, dtype=np.uint8, count=min(_DEPTH_CHUNK, len(text) - start), offset=start)
        in_string = ((np.cumsum(a == 0x22, dtype=np.uint8) + inside) & 1).astype(bool)  # parity survives wrap-around
        inside = int(in_string[-1])
        step = ((a == 0x5B) | (a == 0x7B)).astype(np.int8) - ((a == 0x5D) | (a == 0x7D))
        step[in_string] = 0
        moves = step[step != 0]
        if moves.size:
            run = np.cumsum(moves, dtype=np.int64) + depth
            peak, depth = max(peak, int(run.max())), int(run[-1])
    return peak if peak > limit else None


def parse_json(
    data: bytes,
    path: "str | Path",
    where: Any,
    limits: ImportLimits,
    *,
    first: bool = False,
    what: str = "record",
    depth: Optional[int] = None,
) -> Any:
    """Parse one JSON record within the limits.

    Args:
        data: the record's bytes.
        where: its line number (JSONL), a name (a log entry), or None for a whole-file document
            (errors then name the line inside it).
        first: the record starts the file (a byte-order mark is looked for).
        what: the record's name in a size error ("line", "sample", "file").
        depth: the record's nesting depth when a scan already found it (`json_array_items`); None
            counts it here.
    """
    check_size(len(data), path, where if where is not None else 1, limits, what=what)
    text = decode_utf8(data, path, where, first=first)
    deep = json_depth(data, limits.max_depth) if depth is None else (depth if depth > limits.max_depth else None)
    if deep is not None:
        raise NestingTooDeepError(
            path,
            where if where is not None else 1,
            f"JSON nested {deep} levels deep, over the limit of {limits.max_depth}; flatten "
            "the record, or raise the limit with --max-depth",
        )
    try:
        return json.loads(text)
    except RecursionError:  # a --max-depth above what Python's parser can follow
        raise NestingTooDeepError(
            path, where if where is not None else 1, "JSON nested too deeply for Python's parser; flatten the record"
        ) from None
    except json.JSONDecodeError as exc:
        if where is None:
            raise ImportFormatError(path, exc.lineno, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
        at = f"column {exc.colno}" if isinstance(where, int) else f"line {exc.lineno} column {exc.colno}"
        raise ImportFormatError(path, where, f"not valid JSON ({exc.msg} at {at})") from None
