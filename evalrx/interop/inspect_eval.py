"""Reading Inspect AI's binary `.eval` logs one sample at a time.

A `.eval` log is a zip: `header.json` (the eval spec, plan, results; written last),
`_journal/start.json` (the spec, written first: alone it means the log is still being
written or its process died), and `samples/{id}_epoch_{n}.json`, one per sample and epoch.
Inspect writes Zstandard entries (zip method 93) since 0.3.1xx and Deflate before; Python's
zipfile reads neither method 93 nor Inspect's multi-frame streams, so entries are read here
from their local header with `zstandard` (or zlib), and each sample is decompressed, parsed
and dropped before the next: a 2 GB log never sits in memory.
"""

from __future__ import annotations

import re
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Optional

from evalrx.interop.errors import ImportFormatError
from evalrx.interop.inspect_log import inspect_run_info, sample_record
from evalrx.interop.limits import ImportLimits, check_size, parse_json
from evalrx.interop.records import Reading, Record
from evalrx.interop.registry import Format, register

HEADER = "header.json"
START = "_journal/start.json"
_SAMPLE = re.compile(r"^samples/(?P<id>.+)_epoch_(?P<epoch>\d+)\.json$")
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # the 30 fixed bytes before an entry's name
_LOCAL_SIGNATURE = b"PK\x03\x04"
_STORED, _DEFLATED, _ZSTANDARD = 0, 8, 93
_CHUNK = 1 << 20


def is_eval_zip(head: bytes) -> bool:
    """Whether a file's first bytes are a zip's (an empty zip starts with its end record)."""
    return head.startswith((_LOCAL_SIGNATURE, b"PK\x05\x06"))


@dataclass
class EvalSampleEntry:
    name: str
    sample_id: str
    epoch: int
    info: zipfile.ZipInfo


class EvalLogReader:
    """An open `.eval` log: its header and an iterator over its samples.

    Attributes:
        header: `header.json`, or `_journal/start.json` for a log still being written.
        complete: False when the log has no `header.json` (Inspect was still writing it, or died).
        samples: the sample entries, in the dataset's order then by epoch.
        compressions: the zip methods the sample entries use ("zstd", "deflate", "stored").
    """

    def __init__(self, path: "str | Path", limits: Optional[ImportLimits] = None) -> None:
        self.path = Path(path)
        self.limits = limits or ImportLimits()
        try:
            with zipfile.ZipFile(self.path) as zf:
                infos = zf.infolist()
        except zipfile.BadZipFile as exc:
            raise ImportFormatError(
                self.path,
                "zip",
                f"not a readable zip ({exc}); the .eval log is damaged or "
                "truncated (a log still being written is copied whole by Inspect, so copy it "
                "again)",
            ) from None
        entries: dict = {}
        for info in infos:  # a name written twice is a superseded sample: the last one counts, as in Inspect
            entries[info.filename] = info
        self._entries = entries
        name = HEADER if HEADER in entries else START if START in entries else None
        if name is None:
            raise ImportFormatError(
                self.path,
                "zip",
                f"a zip file, but not an Inspect .eval log (it has neither {HEADER} nor {START}) nor an export "
                "zipped with its pictures (one .json, .jsonl or .parquet file beside an images/ folder)",
            )
        self.complete = name == HEADER
        with self.path.open("rb") as fh:
            header = self._json(fh, entries[name])
        if not isinstance(header, dict) or not isinstance(header.get("eval"), dict):
            raise ImportFormatError(self.path, name, "not an Inspect log header (no `eval` object)")
        self.header = header
        self.samples = self._sample_entries()
        self.compressions = sorted(
            {_METHOD_NAMES.get(e.info.compress_type, str(e.info.compress_type)) for e in self.samples}
        )

    def _sample_entries(self) -> list:
        found = []
        for name, info in self._entries.items():
            m = _SAMPLE.match(name)
            if m:
                found.append(EvalSampleEntry(name, m.group("id"), int(m.group("epoch")), info))
        dataset = self.header["eval"].get("dataset")
        ids = dataset.get("sample_ids") if isinstance(dataset, dict) else None  # an order hint only
        ids = ids if isinstance(ids, list) else []
        order = {str(sid): i for i, sid in enumerate(ids)}
        # dataset order then epoch (the zip holds them in completion order, which differs run to run)
        found.sort(
            key=lambda e: (order.get(e.sample_id, len(order)), e.sample_id if e.sample_id not in order else "", e.epoch)
        )
        return found

    def iter_samples(self) -> Iterator[tuple[EvalSampleEntry, Any]]:
        """(entry, parsed sample) one at a time; the previous sample is free to go when the next is read."""
        with self.path.open("rb") as fh:
            for entry in self.samples:
                yield entry, self._json(fh, entry.info)

    def _json(self, fh: BinaryIO, info: zipfile.ZipInfo) -> Any:
        data = read_entry(fh, info, self.path, self.limits)
        return parse_json(data, self.path, info.filename, self.limits, what="log entry")


_METHOD_NAMES = {_STORED: "stored", _DEFLATED: "deflate", _ZSTANDARD: "zstd"}


def read_entry(fh: BinaryIO, info: zipfile.ZipInfo, path: "str | Path", limits: ImportLimits) -> bytes:
    """The uncompressed bytes of one zip entry, streamed from its local header and checked by CRC."""
    check_size(info.file_size, path, info.filename, limits, what="log entry")
    fh.seek(info.header_offset)
    fixed = fh.read(_LOCAL_HEADER.size)
    if len(fixed) != _LOCAL_HEADER.size or fixed[:4] != _LOCAL_SIGNATURE:
        raise ImportFormatError(path, info.filename, "the zip entry's local header is missing (a damaged log)")
    fields = _LOCAL_HEADER.unpack(fixed)
    fh.seek(fields[9] + fields[10], 1)  # past the entry's name and extra field
    decompress = _decompressor(info, path)
    out = bytearray()
    left = info.compress_size
    try:
        while left > 0:
            chunk = fh.read(min(_CHUNK, left))
            if not chunk:
                raise ImportFormatError(path, info.filename, "the log ends inside this entry (a truncated file)")
            left -= len(chunk)
            out += decompress(chunk)
            if len(out) > limits.max_record_bytes:  # a header that understates the size must not blow memory
                check_size(len(out), path, info.filename, limits, what="log entry (at least)")
        out += decompress(b"")
    except ImportFormatError:
        raise
    except Exception as exc:  # zlib.error, zstandard.ZstdError: the bytes are not what the method says
        raise ImportFormatError(
            path, info.filename, f"the entry cannot be decompressed ({exc}); the log is damaged"
        ) from None
    if zlib.crc32(out) != info.CRC or len(out) != info.file_size:
        raise ImportFormatError(path, info.filename, "the entry does not match its checksum (a damaged log)")
    return bytes(out)


def _decompressor(info: zipfile.ZipInfo, path: "str | Path"):
    """A function feeding compressed chunks (b"" at the end) and returning what they decompress to."""
    method = info.compress_type
    if method == _STORED:
        return lambda chunk: chunk
    if method == _DEFLATED:
        z = zlib.decompressobj(-zlib.MAX_WBITS)
        return lambda chunk: z.decompress(chunk) if chunk else z.flush()
    if method == _ZSTANDARD:
        try:
            import zstandard
        except ImportError:
            raise ImportError("this .eval log is Zstandard-compressed: pip install zstandard") from None
        return _ZstdFrames(zstandard.ZstdDecompressor())
    raise ImportFormatError(
        path, info.filename, f"zip compression method {method} is not one Inspect writes (stored, Deflate or Zstandard)"
    )


class _ZstdFrames:
    """Zstandard decompression across frames: Inspect starts a new frame every 200 MiB of input."""

    def __init__(self, dctx: Any) -> None:
        self._dctx = dctx
        self._obj = dctx.decompressobj()

    def __call__(self, chunk: bytes) -> bytes:
        out = []
        while chunk:
            out.append(self._obj.decompress(chunk))
            if not self._obj.eof:
                break
            chunk, self._obj = self._obj.unused_data, self._dctx.decompressobj()
        return b"".join(out)


def read_eval_log(reading: Reading) -> Iterator[Record]:
    """The samples of an Inspect `.eval` log, one decompressed and parsed at a time."""
    path = reading.path
    log = EvalLogReader(path, reading.limits)
    if not log.samples:
        raise ImportFormatError(
            path,
            "samples/",
            "the log has no samples (it was written with log_samples=False, "
            "or no sample had finished when it was copied)",
        )
    reading.kinds.add("inspect-eval")
    if not log.complete:
        reading.notes.append(
            f"{path.name} is an unfinished Inspect log (no header.json: Inspect was still writing it, or stopped); "
            f"imported the {len(log.samples)} sample(s) it holds"
        )
    meta = {
        "inspect_status": log.header.get("status") or "started",
        "incomplete": not log.complete,
        "compression": log.compressions,
    }
    run = (*inspect_run_info(log.header), meta)
    for entry, sample in log.iter_samples():
        yield sample_record(sample, path, entry.name, run)


register(
    Format(
        name="inspect-eval", title="Inspect .eval log", sniff_rank=0, sniff_bytes=is_eval_zip, read_path=read_eval_log
    )
)
