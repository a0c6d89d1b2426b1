"""Every file format evalrx reads or writes, and the bridge that moves them in and out of the store.

One module per format, each registering itself in `registry` (name, suffixes, a content sniffer, a
reader yielding `Record`s, a writer of export rows); `bridge` imports by content and exports by name
or `--format`, through the store's public functions.

    from evalrx.interop import import_file, export_run
    result = import_file("logs/run.eval")          # Inspect .eval/.json, ATIF, evalrx or OpenAI chat JSONL
    export_run(result.run_ids[0], "out.atif.jsonl")  # the format from the name, or fmt="otel"
    import_labels("labels.csv", run_id=result.run_ids[0])  # human labels: our CSV, labels JSONL, AgentRx, TRAIL

Every export reads back: JSONL, Parquet, ATIF and OTLP by `import_file` (an export zipped with its pictures
too), the labels CSV by `import_labels` (`labels_format` tells labels from trajectories).
"""

import importlib

from evalrx.interop.bridge import (
    ImportPreview,
    ImportResult,
    export_run,
    export_trajectories,
    import_file,
    preview_file,
    read_file,
)
from evalrx.interop.errors import (
    EncodingError,
    ImportFormatError,
    NestingTooDeepError,
    RecordTooLargeError,
    UnknownFormatError,
)
from evalrx.interop.labels_csv import export_labels_csv
from evalrx.interop.labels_import import (
    FailureStep,
    LabelImportResult,
    LabelPreview,
    import_labels,
    labels_format,
    preview_labels,
)
from evalrx.interop.limits import ImportLimits
from evalrx.interop.pictures import bundle
from evalrx.interop.records import Reading, Record
from evalrx.interop.registry import ExportOptions, Format, export_format, export_formats, formats, register, title_of

# Each format registers itself on import; this order is the order exports are offered in (ours first).
for _module in (
    "evalrx_jsonl",
    "parquet",
    "atif",
    "otel",
    "openai_chat",
    "tau_bench",
    "team_chat",
    "traces",
    "inspect_log",
    "inspect_eval",
):
    importlib.import_module(f"evalrx.interop.{_module}")

EXPORT_FORMATS = export_formats()

__all__ = [
    "EXPORT_FORMATS",
    "EncodingError",
    "ExportOptions",
    "FailureStep",
    "Format",
    "ImportFormatError",
    "ImportLimits",
    "ImportPreview",
    "ImportResult",
    "LabelImportResult",
    "LabelPreview",
    "NestingTooDeepError",
    "Reading",
    "Record",
    "RecordTooLargeError",
    "UnknownFormatError",
    "bundle",
    "export_format",
    "export_formats",
    "export_labels_csv",
    "export_run",
    "export_trajectories",
    "formats",
    "import_file",
    "import_labels",
    "labels_format",
    "preview_file",
    "preview_labels",
    "read_file",
    "register",
    "title_of",
]
