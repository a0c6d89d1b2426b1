"""The evalrx store: runs, jobs, cases, trajectories, steps, analyses, labels and tags.

SQLite by default (`db/evalrx.sqlite`), PostgreSQL for scale-out; the URL comes from
`EVALRX_DATABASE_URL`. Every function takes an optional `store=` (a `Store`, a URL, or
None for the default store) and returns plain dataclasses, never live ORM objects.

    evalrx.store.upgrade()                      # `evalrx db upgrade`
    page = evalrx.store.list_trajectories(run_id=3, outcome="fail", text="timeout")
    detail = evalrx.store.get_trajectory(page.rows[0].id)
    evalrx.store.set_label(detail.row.id, "fail", failure_kind="wrong_tool", annotator="ana")
"""

from evalrx.core.secrets import is_secret_name  # re-exported: the store is where callers found it
from evalrx.store.analyses import default_replay_model, get_request, request_analysis, requests_for
from evalrx.store.convert import canonical_json, jsonable, observation_text
from evalrx.store.diagnoses import failure_kind_counts, get_diagnoses, save_diagnoses, undiagnosed
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
from evalrx.store.exports import LABEL_COLUMNS, current_label_rows, export_diagnosis, iter_export_rows
from evalrx.store.imports import ImportedRun, ImportTransaction, importing, runs_from_source
from evalrx.store.jobs import LeaseLost, alive_workers, get_job, jobs_of_run, request_cancel
from evalrx.store.judge_jobs import JudgeJobInfo, cancel_judge_job, get_judge_job, list_judge_jobs
from evalrx.store.labels import (
    LabelTarget,
    add_tag,
    all_tags,
    current_labels,
    label_history,
    label_kinds,
    label_targets,
    remove_tag,
    set_label,
    set_labels,
    tags_of,
)
from evalrx.store.marks import mark_tool, tool_marks
from evalrx.store.mcp_servers import delete_mcp_server, list_mcp_servers, save_mcp_server
from evalrx.store.queries import (
    SORTS,
    blamed_agents,
    count_trajectories,
    encode_cursor,
    find_trajectory,
    get_run,
    get_trajectory,
    label_counts_by_annotator,
    list_runs,
    list_trajectories,
    matching_ids,
    run_agents,
    run_stats,
    runs_with_label_kinds,
    shown_pictures,
    step_latency_sample,
    step_media,
    trajectory_agents,
)
from evalrx.store.records import (
    AgentShare,
    JobInfo,
    LabelInfo,
    Page,
    RunInfo,
    RunStats,
    TrajectoryDetail,
    TrajectoryRow,
)
from evalrx.store.runlevel import (
    ADJUDICATOR,
    AUTO,
    annotator_labels,
    attempts_of,
    attempts_of_runs,
    disagreements,
    other_runs_of_case,
    predictor_rows,
    second_opinion_queue,
    trajectories_of_case,
)
from evalrx.store.runs import delete_run, get_blob, load_analyses, rename_run
from evalrx.store.schema import SCHEMA_VERSION
from evalrx.store.taxonomy import KindInfo, delete_kind, list_kinds, save_kind
from evalrx.store.verdicts import JudgeVerdict, cached_verdict, save_verdict

__all__ = [
    "JudgeJobInfo",
    "cancel_judge_job",
    "get_judge_job",
    "list_judge_jobs",
    "JudgeVerdict",
    "cached_verdict",
    "save_verdict",
    "delete_mcp_server",
    "list_mcp_servers",
    "mark_tool",
    "save_mcp_server",
    "is_secret_name",
    "default_replay_model",
    "get_request",
    "request_analysis",
    "requests_for",
    "LABEL_COLUMNS",
    "ImportedRun",
    "ImportTransaction",
    "canonical_json",
    "current_label_rows",
    "export_diagnosis",
    "importing",
    "jsonable",
    "observation_text",
    "runs_from_source",
    "ADJUDICATOR",
    "AUTO",
    "predictor_rows",
    "attempts_of_runs",
    "ENV_URL",
    "SCHEMA_VERSION",
    "SORTS",
    "add_tag",
    "alive_workers",
    "all_tags",
    "annotator_labels",
    "attempts_of",
    "blamed_agents",
    "disagreements",
    "other_runs_of_case",
    "second_opinion_queue",
    "trajectories_of_case",
    "connect",
    "count_trajectories",
    "current_labels",
    "default_url",
    "delete_kind",
    "delete_run",
    "encode_cursor",
    "failure_kind_counts",
    "label_kinds",
    "find_trajectory",
    "forget",
    "get_blob",
    "get_diagnoses",
    "get_job",
    "get_run",
    "get_trajectory",
    "iter_export_rows",
    "JobInfo",
    "jobs_of_run",
    "KindInfo",
    "label_counts_by_annotator",
    "runs_with_label_kinds",
    "label_history",
    "label_targets",
    "LabelTarget",
    "LabelInfo",
    "LeaseLost",
    "list_kinds",
    "list_runs",
    "list_trajectories",
    "matching_ids",
    "load_analyses",
    "make_engine",
    "Page",
    "remove_tag",
    "rename_run",
    "request_cancel",
    "resolve",
    "run_stats",
    "run_agents",
    "trajectory_agents",
    "AgentShare",
    "RunInfo",
    "RunStats",
    "save_diagnoses",
    "save_kind",
    "SchemaError",
    "set_label",
    "set_labels",
    "step_latency_sample",
    "shown_pictures",
    "step_media",
    "Store",
    "tags_of",
    "tool_marks",
    "TrajectoryDetail",
    "TrajectoryRow",
    "undiagnosed",
    "upgrade",
]
