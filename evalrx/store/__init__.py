"""The evalrx store: runs, jobs, cases, trajectories, steps, analyses, labels and tags.

SQLite by default (`db/evalrx.sqlite`), PostgreSQL for scale-out; the URL comes from
`EVALRX_DATABASE_URL`. Every function takes an optional `store=` (a `Store`, a URL, or
None for the default store) and returns plain dataclasses, never live ORM objects.

    evalrx.store.upgrade()                      # `evalrx db upgrade`
    page = evalrx.store.list_trajectories(run_id=3, outcome="fail", text="timeout")
    detail = evalrx.store.get_trajectory(page.rows[0].id)
    evalrx.store.set_label(detail.row.id, "fail", failure_mode="wrong_tool", annotator="ana")
"""

from evalrx.store.engine import (
    ENV_URL,
    SchemaError,
    Store,
    connect,
    default_url,
    forget,
    make_engine,
    resolve,
    upgrade,
)
from evalrx.store.diagnoses import failure_kind_counts, get_diagnoses, save_diagnoses, undiagnosed
from evalrx.store.import_errors import EncodingError, NestingTooDeepError, RecordTooLargeError, UnknownFormatError
from evalrx.store.io import (
    EXPORT_FORMATS,
    ImportFormatError,
    ImportPreview,
    ImportResult,
    export_format,
    export_labels_csv,
    export_run,
    export_trajectories,
    import_file,
    iter_export_rows,
    preview_file,
    read_file,
)
from evalrx.store.jobs import LeaseLost, alive_workers, get_job, jobs_of_run, request_cancel
from evalrx.store.limits import ImportLimits
from evalrx.store.labels import (
    add_tag,
    all_tags,
    current_labels,
    failure_modes,
    label_history,
    remove_tag,
    set_label,
    tags_of,
)
from evalrx.store.queries import (
    SORTS,
    count_trajectories,
    encode_cursor,
    find_trajectory,
    get_run,
    get_trajectory,
    label_counts_by_annotator,
    list_runs,
    list_trajectories,
    run_stats,
    step_latency_sample,
    step_media,
)
from evalrx.store.records import (
    JobInfo,
    LabelInfo,
    Page,
    RunInfo,
    RunStats,
    TrajectoryDetail,
    TrajectoryRow,
)
from evalrx.store.runlevel import (
    annotator_labels,
    attempts_of,
    compare_runs,
    disagreements,
    label_agreement,
    other_runs_of_case,
    predictor_table,
    run_reliability,
    second_opinion_queue,
    trajectories_of_case,
)
from evalrx.store.runs import delete_run, get_blob, load_analyses, rename_run
from evalrx.store.schema import SCHEMA_VERSION
from evalrx.store.taxonomy import KindInfo, delete_kind, list_kinds, save_kind

__all__ = [
    "ENV_URL",
    "EXPORT_FORMATS",
    "EncodingError",
    "SCHEMA_VERSION",
    "SORTS",
    "add_tag",
    "alive_workers",
    "all_tags",
    "annotator_labels",
    "attempts_of",
    "compare_runs",
    "disagreements",
    "label_agreement",
    "other_runs_of_case",
    "predictor_table",
    "run_reliability",
    "second_opinion_queue",
    "trajectories_of_case",
    "connect",
    "count_trajectories",
    "current_labels",
    "default_url",
    "delete_kind",
    "delete_run",
    "encode_cursor",
    "export_format",
    "export_run",
    "failure_kind_counts",
    "failure_modes",
    "find_trajectory",
    "forget",
    "get_blob",
    "get_diagnoses",
    "get_job",
    "get_run",
    "get_trajectory",
    "import_file",
    "export_labels_csv",
    "export_trajectories",
    "preview_file",
    "ImportPreview",
    "ImportFormatError",
    "ImportLimits",
    "ImportResult",
    "iter_export_rows",
    "JobInfo",
    "jobs_of_run",
    "KindInfo",
    "label_counts_by_annotator",
    "label_history",
    "LabelInfo",
    "LeaseLost",
    "list_kinds",
    "list_runs",
    "list_trajectories",
    "load_analyses",
    "make_engine",
    "NestingTooDeepError",
    "Page",
    "read_file",
    "RecordTooLargeError",
    "remove_tag",
    "rename_run",
    "request_cancel",
    "resolve",
    "run_stats",
    "RunInfo",
    "RunStats",
    "save_diagnoses",
    "save_kind",
    "SchemaError",
    "set_label",
    "step_latency_sample",
    "step_media",
    "Store",
    "tags_of",
    "TrajectoryDetail",
    "TrajectoryRow",
    "undiagnosed",
    "UnknownFormatError",
    "upgrade",
]
