"""An Inspect AI `.json` log read sample by sample, so a log of any size imports in flat memory.

A whole `.json` log is one JSON document: read at once, its size was the size of one record (a
10,000-sample log of 231 MB was refused by the 64 MB limit meant for one hostile JSONL line) and its
parse held every sample at once. Here `ijson` (yajl's C parser) reads the header (everything before
`samples`: `eval`, `status`, ...), and `json_array_items` hands out each sample's bytes, parsed and
checked like one JSONL line: the record limit, the encoding and the depth apply to each sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Iterator

from evalrx.interop.errors import EncodingError, ImportFormatError
from evalrx.interop.inspect_log import inspect_run_info, sample_record, sample_where
from evalrx.interop.json_array_items import array_items
from evalrx.interop.limits import UTF8_BOM, parse_json
from evalrx.interop.records import Reading, Record

# The keys Inspect writes first in a log (`version`, then `status`, `eval`): a document that starts with
# another key is left to the whole-document readers.
_FIRST_KEYS = frozenset({"version", "status", "eval"})
_BUF = 64 * 1024  # the header parser's read size


def _opened(path: Path) -> BinaryIO:
    """The file open for reading, past a UTF-8 byte-order mark (Windows tools write one)."""
    fh = path.open("rb")
    if fh.read(3) != UTF8_BOM:
        fh.seek(0)
    return fh


def is_inspect_log(path: Path) -> bool:
    """Whether a JSON document's first top-level key is one an Inspect log starts with (reads a few bytes)."""
    import ijson

    try:
        with _opened(path) as fh:
            for prefix, event, value in ijson.parse(fh, buf_size=4096):
                if prefix == "" and event == "start_map":
                    continue
                return prefix == "" and event == "map_key" and value in _FIRST_KEYS
    except (ijson.JSONError, UnicodeDecodeError, ValueError, OSError):
        return False
    return False


def inspect_header(path: Path) -> dict:
    """The log's top-level values before `samples` (the samples are not read here).

    Raises:
        ImportFormatError: the document is not valid JSON up to its samples.
    """
    import ijson

    header: dict = {}
    try:
        with _opened(path) as fh:
            for key, value in _top_level_until_samples(ijson.parse(fh, buf_size=_BUF)):
                header[key] = value
    except ijson.JSONError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]  # yajl adds lines pointing at the spot
        raise ImportFormatError(path, 1, f"not valid JSON ({first[:200]})") from None
    except UnicodeDecodeError:
        raise EncodingError(path, 1, "the file is not UTF-8; convert it, e.g. `iconv -t utf-8 FILE > FILE.utf8`")
    return header


def _top_level_until_samples(events: Iterator) -> Iterator:
    """(key, value) of each top-level entry, built from `events`, until the `samples` key."""
    from ijson.common import ObjectBuilder

    key = None
    builder = None
    depth = 0
    for prefix, event, value in events:
        if builder is None:
            if prefix == "" and event == "map_key":
                if value == "samples":
                    return
                key, builder, depth = value, ObjectBuilder(), 0
            continue
        builder.event(event, value)
        if event in ("start_map", "start_array"):
            depth += 1
        elif event in ("end_map", "end_array"):
            depth -= 1
        if depth == 0:
            yield key, builder.value
            builder = None


def read_inspect_json(reading: Reading, header: dict) -> Iterator[Record]:
    """The samples of an Inspect `.json` log whose `inspect_header` is `header`, one at a time, each
    checked as one record (`parse_json`: size, encoding, depth)."""
    path = reading.path
    run = (*inspect_run_info(header), {"inspect_status": header.get("status")})
    reading.kinds.add("inspect")
    found = False
    for i, (raw, depth) in enumerate(array_items(path, "samples", reading.limits, what="sample")):
        sample = parse_json(raw, path, f"sample {i}", reading.limits, what="sample", depth=depth)
        record = sample_record(sample, path, sample_where(i, sample), run)
        del sample, raw  # this sample's objects go before the next is read
        found = True
        yield record
    if not found:
        raise ImportFormatError(path, 1, "the log has no samples (was it written with log_samples=False?)")


__all__ = ["inspect_header", "is_inspect_log", "read_inspect_json"]
