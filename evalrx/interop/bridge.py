"""Files in and out of the store: formats told by content on import, by name (or `--format`) on export.

Import streams a file's trajectories one at a time (within `ImportLimits`) and writes them as they
come, all in one transaction: a bad record anywhere names the file, the place and the problem, and
the store is left as it was. The file's sha256 is kept on the run, so the same bytes are not
imported twice unless asked. Export writes the store's export rows in any registered format.
Everything goes through the store's public functions.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field, replace
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from evalrx import store as S
from evalrx.interop.errors import (
    EncodingError,
    ImportFormatError,
    NestingTooDeepError,
    RecordTooLargeError,
    UnknownFormatError,
)
from evalrx.interop.files import existing, file_sha256, file_stem
from evalrx.interop.inspect_json_stream import inspect_header, is_inspect_log, read_inspect_json
from evalrx.interop.limits import UTF8_BOM, ImportLimits, check_size, parse_json, read_lines
from evalrx.interop.pictures import bundled_document, unbundle
from evalrx.interop.records import Reading, Record
from evalrx.interop.registry import (
    ExportOptions,
    Format,
    export_format,
    list_format,
    listed_format,
    readers,
    record_format,
    writer,
)


@dataclass
class ImportResult:
    """What an import did.

    Attributes:
        run_ids: the new runs (or, when `already_imported`, the runs the same bytes made before).
        n_trajectories: trajectories written (0 when nothing was).
        format: the format read ("evalrx", "openai", "atif", "inspect", "inspect-eval"; "+"-joined for a mix).
        already_imported: the file's bytes were imported before and nothing was written.
        notes: things to tell the user (e.g. a log Inspect had not finished writing).
    """

    run_ids: list
    n_trajectories: int
    format: str
    already_imported: bool = False
    notes: list = field(default_factory=list)


@dataclass
class ImportPreview:
    """What a file holds, read without writing: its format, how many trajectories, cases, attempts
    (epochs) and models, notes, and the first few trajectories."""

    format: str
    n_trajectories: int
    n_cases: int
    max_attempt: int
    models: list
    notes: list
    first: list  # [(FailureCase, Trajectory)]
    already_imported_as: list = field(default_factory=list)  # runs the same bytes made before


# ---------------------------------------------------------------- reading


def _records(reading: Reading, *, unpack: bool = True) -> Iterator[Record]:
    """A file's trajectories one at a time, the format told from its first bytes and records (an export
    zipped with its pictures is unpacked first, once: a zip inside it is not)."""
    path, limits = reading.path, reading.limits
    if unpack and (member := bundled_document(path)) is not None:
        yield from _read_bundle(reading, member)
        return
    with path.open("rb") as fh:
        magic = fh.read(4)
    whole_file = next((f for f in readers() if f.sniff_bytes and f.sniff_bytes(magic)), None)
    if whole_file is not None and whole_file.read_path is not None:
        yield from whole_file.read_path(reading)
        return
    with path.open("rb") as fh:
        lines = read_lines(fh, path, limits)
        first = next(((n, raw) for n, raw in lines if raw.strip()), None)
        if first is None:
            raise ImportFormatError(path, 1, "the file holds no trajectories")
        start = first[1].lstrip()
        if start.startswith(b"{") or start.startswith(UTF8_BOM + b"{"):
            try:
                obj = parse_json(first[1], path, first[0], limits, first=first[0] == 1, what="line")
            except (RecordTooLargeError, EncodingError, NestingTooDeepError):
                raise
            except ImportFormatError:  # not a whole JSON value: a document over many lines, or a broken JSONL line
                second = next((raw for _, raw in lines if raw.strip()), None)
                if second is not None and _is_object(second):
                    raise
            else:
                yield from _read_jsonl(chain([(first[0], first[1], obj)], lines), reading)
                return
    yield from _read_document(reading)


def _read_bundle(reading: Reading, member: str) -> Iterator[Record]:
    """The document of a zip `bundle` wrote, read beside its unpacked pictures; errors name the zip and the member."""
    with tempfile.TemporaryDirectory(prefix="evalrx-unzip-") as folder:
        try:
            doc = unbundle(reading.path, Path(folder))
        except ValueError as exc:
            raise ImportFormatError(reading.path, member, str(exc)) from None
        inner = replace(reading, path=doc)  # shares what the reading found (formats, notes, held records)
        try:
            for record in _records(inner, unpack=False):
                record.where = _inside(member, record.where)
                yield record
        except ImportFormatError as exc:
            raise type(exc)(reading.path, _inside(member, exc.line), exc.problem) from None


def _inside(member: str, where: Any) -> str:
    """Where in a zip's document: "run.jsonl, line 3"."""
    return f"{member}, line {where}" if isinstance(where, int) else f"{member}, {where}" if where else member


def _is_object(raw: bytes) -> bool:
    """Whether one line alone is a JSON object (then the file is JSONL, not one document over many lines)."""
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, RecursionError):
        return False


def _read_object(
    obj: dict, where: Any, reading: Reading, *, whole: bool = False, fmt: Optional[Format] = None
) -> Iterator[Record]:
    """The trajectories of one JSON object, read by `fmt` or the first format whose sniffer claims it."""
    fmt = fmt or record_format(obj, whole)
    if fmt is None:
        raise ImportFormatError(
            reading.path,
            where,
            "neither an evalrx trajectory (no `steps`), OpenAI chat messages (no `messages`) nor an ATIF "
            "document (no `schema_version`)",
        )
    assert fmt.read_record is not None  # record_format returns readers only
    reading.kinds.add(fmt.name)
    try:
        for record in fmt.read_record(obj, where, reading):
            yield record
    except ImportFormatError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise ImportFormatError(reading.path, where, str(exc)) from None


def _read_jsonl(lines: Iterable, reading: Reading) -> Iterator[Record]:
    """JSONL whose lines may each be of any record format (evalrx rows, OpenAI chat, ATIF, one-line logs)."""
    found = False
    for entry in lines:
        lineno, raw, obj = entry if len(entry) == 3 else (*entry, None)
        if obj is None:
            if not raw.strip():
                continue
            obj = parse_json(raw, reading.path, lineno, reading.limits, first=lineno == 1, what="line")
        if not isinstance(obj, dict):
            raise ImportFormatError(reading.path, lineno, f"expected a JSON object, got {type(obj).__name__}")
        for record in _read_object(obj, lineno, reading):
            found = True
            yield record
    for record in _finish(reading):
        found = True
        yield record
    if not found:
        raise ImportFormatError(reading.path, 1, "the file holds no trajectories")


def _finish(reading: Reading) -> Iterator[Record]:
    """What the formats read held back until the file's end (a trace's spans), each problem one line."""
    for fmt in readers():
        if fmt.finish is None or fmt.name not in reading.kinds:
            continue
        try:
            yield from fmt.finish(reading)
        except ImportFormatError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise ImportFormatError(reading.path, "end of file", str(exc)) from None


def _read_document(reading: Reading) -> Iterator[Record]:
    """A file that is one JSON document: one record (a log, an ATIF document, a pretty-printed row) or a list of them."""
    path = reading.path
    if is_inspect_log(path):  # an Inspect log of any size streams: the limits apply to each sample
        header = inspect_header(path)
        if isinstance(header.get("eval"), dict):
            yield from read_inspect_json(reading, header)
            return
    check_size(path.stat().st_size, path, 1, reading.limits, what="file (one JSON document)")
    doc = parse_json(path.read_bytes(), path, None, reading.limits, first=True, what="file")
    if isinstance(doc, dict) and record_format(doc, whole=True) is not None:
        yield from _read_object(doc, 1, reading, whole=True)
        yield from _finish(reading)
    elif isinstance(doc, list) and doc and all(listed_format(d) is not None for d in doc):
        for i, d in enumerate(doc):
            yield from _read_object(d, f"document {i}", reading, whole=True, fmt=listed_format(d))
    elif isinstance(doc, list) and doc and (whole_list := list_format(doc)) is not None:
        assert whole_list.read_list is not None  # list_format returns list readers only
        try:
            for record in whole_list.read_list(doc, reading):
                reading.kinds.add(whole_list.name)
                yield record
        except ImportFormatError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise ImportFormatError(path, 1, str(exc)) from None
    else:
        raise UnknownFormatError(
            path,
            1,
            "not a format evalrx reads: expected evalrx or OpenAI chat JSONL, ATIF (JSON or JSONL), tau-bench results, "
            "a multi-agent log (Who&When, Magentic-One), OpenInference or OTLP spans, or an Inspect AI log (.json or .eval)",
        )


def read_file(path: "str | Path", *, limits: Optional[ImportLimits] = None) -> tuple[str, list]:
    """Parse and check a whole file without writing it; returns (format, records). Raises ImportFormatError.

    Holds every record in memory: `import_file` streams instead.
    """
    path = existing(path)
    reading = Reading(path, limits or ImportLimits())
    records = list(_records(reading))
    return reading.format, records


MAX_ATTEMPT = 2**31 - 1  # the store's attempt is a 32-bit INTEGER on PostgreSQL


def attempt_of(record: Record, path: Path) -> int:
    """A record's attempt (1 when it has none); one past what the store keeps is one line naming the record."""
    attempt = max(1, int(record.traj.attempt or 1))
    if attempt > MAX_ATTEMPT:
        raise ImportFormatError(
            path, record.where, f"attempt {attempt} is past the largest the store keeps ({MAX_ATTEMPT:,})"
        )
    return attempt


def preview_file(
    path: "str | Path", *, n_first: int = 5, limits: Optional[ImportLimits] = None, store: "S.Store | str | None" = None
) -> ImportPreview:
    """Read a whole file as `import_file` would (streaming, every record checked) and say what it holds.

    Raises:
        ImportFormatError: as `import_file` would, naming the file and the record.
    """
    path = existing(path)
    reading = Reading(path, limits or ImportLimits())
    first: list = []
    cases: set = set()
    models: set = set()
    n = top = 0
    for record in _records(reading):
        n += 1
        cases.add(record.case.id)
        top = max(top, attempt_of(record, path))
        model = (record.run_config or {}).get("model")
        name = model.get("name") if isinstance(model, dict) else model
        if name:
            models.add(str(name))
        if len(first) < n_first:
            first.append((record.case, record.traj))
    return ImportPreview(
        format=reading.format,
        n_trajectories=n,
        n_cases=len(cases),
        max_attempt=top,
        models=sorted(models),
        notes=list(reading.notes),
        first=first,
        already_imported_as=S.runs_from_source(file_sha256(path), store=store),
    )


# ---------------------------------------------------------------- writing to the store


class _RunFiller:
    """One imported run: refuses a case attempt seen twice, diagnoses what came undiagnosed, stores the rest."""

    def __init__(self, run: Any, path: Path, marks: Optional[dict] = None) -> None:
        self.run, self.path = run, path
        self.marks = marks or {}  # people's marks of what tools do (`evalrx.store.tool_marks`)
        self.seen: dict = {}  # (case key, attempt) -> where it was

    def add(self, record: Record) -> None:
        from evalrx.diagnosis import diagnose

        attempt = attempt_of(record, self.path)
        key = (record.case.id, attempt)
        if key in self.seen:
            which = f" attempt {attempt}" if attempt > 1 else ""
            before = self.seen[key]
            raise ImportFormatError(
                self.path,
                record.where,
                f"case {record.case.id!r}{which} appears twice in one run "
                f"(also at {f'line {before}' if isinstance(before, int) else before})",
            )
        self.seen[key] = record.where
        found = (
            record.diagnoses
            if record.diagnoses is not None
            else diagnose(record.traj, case=record.case, tool_marks=self.marks)
        )
        try:
            self.run.add(
                record.case,
                record.traj,
                labels=record.labels,
                tags=record.tags,
                diagnoses=found,
                pictures=record.pictures,
            )
        except ValueError as exc:
            raise ImportFormatError(self.path, record.where, str(exc)) from None


def import_file(
    path: "str | Path",
    *,
    run_name: Optional[str] = None,
    store: "S.Store | str | None" = None,
    again: bool = False,
    limits: Optional[ImportLimits] = None,
    on_progress: Optional[Callable[[int], None]] = None,
) -> ImportResult:
    """Import trajectories from a file into new run(s), streaming, all in one transaction.

    Rows that name a run (our exports) go into one new run per distinct run; other records go
    into one run named `run_name`, after the log's task and model, or after the file.

    Args:
        path: an Inspect `.eval` or `.json` log, ATIF (JSON or JSONL), evalrx or OpenAI chat JSONL, our
            Parquet, OTLP or any other format `readers()` lists; an export zipped with its pictures too.
        run_name: name for the new run(s) (default: the exported run's name, the log's task, or the file's
            name without its format suffixes).
        store: the store (default when None).
        again: import even if a run already came from a file with these exact bytes.
        limits: size and nesting limits of one record (default `ImportLimits()`).
        on_progress: called with the number of trajectories read so far, after each one.

    Returns:
        The new run ids, the number of trajectories and the detected format; with nothing written
        and `already_imported` set when the same bytes were imported before (and not `again`).

    Raises:
        ImportFormatError: naming the file, the line (or sample) and the problem; nothing is written.
    """
    path = existing(path)
    reading = Reading(path, limits or ImportLimits())
    sha = file_sha256(path)
    fillers: dict = {}
    marks = S.tool_marks(store=store)
    with S.importing(store) as tx:
        if not again:
            before = tx.runs_from_source(sha)
            if before:
                return ImportResult(
                    run_ids=[run_id for run_id, _ in before],
                    n_trajectories=0,
                    already_imported=True,
                    format=str(before[0][1].get("format") or ""),
                )
        for record in _records(reading):
            name = run_name or record.run_name or file_stem(path)
            key = (name, S.canonical_json(record.run_config or {}))
            filler = fillers.get(key)
            if filler is None:
                meta = {"format": None, "file": path.name, **(record.run_meta or {})}
                config = record.run_config or {"source_file": path.name}
                run = tx.new_run(name=name, config=config, meta=meta, sha256=sha)
                filler = fillers[key] = _RunFiller(run, path, marks)
            try:
                filler.add(record)
                if on_progress is not None:
                    on_progress(sum(f.run.n for f in fillers.values()))
            except RecursionError:  # only past a raised --max-depth: Python's own limit, as one line
                raise NestingTooDeepError(
                    path, record.where, "JSON nested too deeply to store; flatten the record or lower --max-depth"
                ) from None
        for filler in fillers.values():
            filler.run.finish(reading.format)
    return ImportResult(
        run_ids=[f.run.run_id for f in fillers.values()],
        n_trajectories=sum(f.run.n for f in fillers.values()),
        format=reading.format,
        notes=list(reading.notes),
    )


# ---------------------------------------------------------------- writing files


def export_run(
    run_id: int,
    path: "str | Path | None",
    *,
    fmt: Optional[str] = None,
    store: "S.Store | str | None" = None,
    otel_content: bool = False,
    otel_endpoint: Optional[str] = None,
) -> int:
    """Write a run's trajectories, grades, labels and tags to a file (or, for OTLP, a collector).

    Args:
        run_id: the run.
        path: output file; its name implies the format (`export_format`) unless `fmt` is given.
            May be None for `otel` with an `otel_endpoint`.
        fmt: "jsonl", "parquet" (needs pyarrow), "atif" (ATIF documents, one a line) or "otel"
            (OTLP JSON lines of GenAI spans; needs opentelemetry-proto).
        store: the store (default when None).
        otel_content: put tool arguments and results (and model output) on the OTLP spans.
        otel_endpoint: also POST the traces to this OTLP/HTTP URL (e.g. http://localhost:4318/v1/traces).

    Returns:
        The number of trajectories written.
    """
    if S.get_run(run_id, store=store) is None:
        raise ValueError(f"no run with id {run_id}")
    return _export(
        lambda ids: S.iter_export_rows(run_id, store=store, with_ids=ids),
        path,
        fmt=fmt,
        options=ExportOptions(run_id=run_id, otel_content=otel_content, otel_endpoint=otel_endpoint),
    )


def export_trajectories(
    trajectory_ids: Sequence[int],
    path: "str | Path",
    *,
    fmt: Optional[str] = None,
    store: "S.Store | str | None" = None,
    otel_content: bool = False,
) -> int:
    """Write chosen trajectories (a filtered list; any runs) in any export format; returns how many."""
    ids = list(trajectory_ids)
    return _export(
        lambda with_ids: S.iter_export_rows(None, store=store, with_ids=with_ids, trajectory_ids=ids),
        path,
        fmt=fmt,
        options=ExportOptions(otel_content=otel_content),
    )


def _export(
    rows_of: Callable[[bool], Iterator[dict]], path: "str | Path | None", *, fmt: Optional[str], options: ExportOptions
) -> int:
    if path is None and not (fmt == "otel" and options.otel_endpoint):
        raise ValueError("give an output file (only --format otel with --otel-endpoint may go without one)")
    path = Path(path) if path is not None else None
    if path is not None and path.is_dir():
        raise ValueError(f"{path} is a directory; give a file path such as {path / f'run{options.run_id or 1}.jsonl'}")
    chosen = writer(fmt or export_format(path))
    if options.otel_endpoint and chosen.name != "otel":
        raise ValueError("--otel-endpoint goes with --format otel")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    assert chosen.write is not None  # writer() returns writers only
    return chosen.write(rows_of(chosen.export_ids), path, options)
