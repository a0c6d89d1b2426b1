"""The format registry: every file format evalrx reads or writes, each registered by its own module.

A format says how to tell it from content (`sniff_bytes` on a file's first bytes, `sniff_record` on
one JSON object: a JSONL line or a whole document), how to read it into `Record`s, and how to write
export rows (`write`), with the file suffixes an export name implies. The import bridge tries
readers in `sniff_rank` order; export formats are listed in registration order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from evalrx.interop.records import Reading, Record


@dataclass(frozen=True)
class ExportOptions:
    """What an export writer may need beyond the rows: the run, and the OTLP span content and endpoint."""

    run_id: Optional[int] = None
    otel_content: bool = False
    otel_endpoint: Optional[str] = None


@dataclass(frozen=True)
class Format:
    """One file format.

    Attributes:
        name: its key (`ImportResult.format` for readers; `--format` for writers, with `export_name`).
        title: how it is named to people.
        sniff_rank: readers are tried lowest first (an ATIF document also has `steps`, so it goes before ours).
        sniff_bytes: whether a file's first four bytes are this format (whole-file formats such as a zip).
        read_path: reads a whole file told by `sniff_bytes` (the `Reading` names the file and its limits).
        sniff_record: whether one JSON object is this format (`whole`: the object is the whole file).
        read_record: reads one such object (it may hold many trajectories, as a log does).
        write: writes export rows to a path (None: to no file, where the format allows it); returns how many.
        export_name: the `--format` value, when it differs from `name` (ours: "jsonl").
        suffixes: file name endings that imply this export format (the first names new files).
        mime: the media type of an exported file.
        export_ids: the writer needs each row's store ids and times (OTLP trace and span ids).
        export_title: how the export is named to people, when it differs from `title` (ours: "JSONL").
        listable: a whole file may be a JSON array of these documents (ATIF).
        sniff_list: whether a whole-file JSON array is one record of this format (a team's message list).
        read_list: reads such an array.
        finish: yields what the format held back once the whole file is read (a trace spread over many lines).
    """

    name: str
    title: str
    sniff_rank: int = 100
    sniff_bytes: Optional[Callable[[bytes], bool]] = None
    read_path: Optional[Callable[[Reading], Iterator[Record]]] = None
    sniff_record: Optional[Callable[[dict, bool], bool]] = None
    read_record: Optional[Callable[[dict, Any, Reading], Iterator[Record]]] = None
    write: Optional[Callable[[Iterator[dict], Optional[Path], ExportOptions], int]] = None
    export_name: Optional[str] = None
    suffixes: tuple = ()
    mime: str = "application/octet-stream"
    export_ids: bool = False
    export_title: Optional[str] = None
    listable: bool = False
    sniff_list: Optional[Callable[[list], bool]] = None
    read_list: Optional[Callable[[list, Reading], Iterator[Record]]] = None
    finish: Optional[Callable[[Reading], Iterator[Record]]] = None

    @property
    def exports_as(self) -> str:
        return self.export_name or self.name

    @property
    def export_label(self) -> str:
        return self.export_title or self.title


_FORMATS: dict = {}
_READERS: list = []  # the reading formats in sniffing order, kept by `register` (tried on every record)


def register(fmt: Format) -> Format:
    """Add a format (a module registers its own when it is imported); a name is registered once."""
    if fmt.name in _FORMATS and _FORMATS[fmt.name] != fmt:
        raise ValueError(f"format {fmt.name!r} is registered twice")
    _FORMATS[fmt.name] = fmt
    _READERS[:] = sorted(
        (f for f in _FORMATS.values() if f.read_path or f.read_record or f.read_list), key=lambda f: f.sniff_rank
    )
    return fmt


def formats() -> list:
    """Every registered format, in registration order."""
    return list(_FORMATS.values())


def readers() -> list:
    """The formats that read, in the order content is tried against them."""
    return list(_READERS)


def record_format(obj: Any, whole: bool = False) -> Optional[Format]:
    """The format one JSON object is, or None."""
    if not isinstance(obj, dict):
        return None
    return next((f for f in _READERS if f.sniff_record and f.sniff_record(obj, whole)), None)


def listed_format(obj: Any) -> Optional[Format]:
    """The format of one element of a whole-file JSON array, among the formats that may be listed, or None."""
    if not isinstance(obj, dict):
        return None
    return next((f for f in _READERS if f.listable and f.sniff_record and f.sniff_record(obj, True)), None)


def list_format(doc: list) -> Optional[Format]:
    """The format that reads a whole-file JSON array as one record (not a list of documents), or None."""
    return next((f for f in _READERS if f.sniff_list and f.read_list and f.sniff_list(doc)), None)


def title_of(name: str) -> str:
    """How a format key is named to people ("+"-joined keys for a mix)."""
    return " + ".join(_FORMATS[n].title if n in _FORMATS else n for n in name.split("+"))


def export_formats() -> tuple:
    """The `--format` values of the formats that write, in registration order."""
    return tuple(f.exports_as for f in _FORMATS.values() if f.write)


def writer(name: str) -> Format:
    """The format that writes `--format name`, or a ValueError naming the choices."""
    found = next((f for f in _FORMATS.values() if f.write and f.exports_as == name), None)
    if found is None:
        raise ValueError(f"unknown export format {name!r}; use one of {', '.join(export_formats())}")
    return found


def export_format(path: Any) -> str:
    """The export format a file name implies (the longest matching suffix), or a ValueError asking for --format."""
    name = Path(path).name.lower()
    best = max(
        ((len(s), f.exports_as) for f in _FORMATS.values() if f.write for s in f.suffixes if name.endswith(s)),
        default=None,
    )
    if best is not None:
        return best[1]
    named = [s for f in _FORMATS.values() if f.write for s in f.suffixes[:1]]
    raise ValueError(
        f"{path}: cannot tell the export format from the name; add --format "
        f"{'|'.join(export_formats())}, or name it {', '.join(named[:-1])} or {named[-1]}"
    )
