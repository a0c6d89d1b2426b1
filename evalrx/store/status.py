"""Where a piece of queued work stands: one vocabulary for runs, their jobs, judge jobs and analysis requests."""

from __future__ import annotations

import enum


class JobStatus(enum.StrEnum):
    """A run's, a job's, a judge job's or an analysis request's status, stored as its value.

    Members equal their strings, so rows written before the enum (and exports) read the same.
    An analysis request is never cancelled; the other three use every member.
    """

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobKind(enum.StrEnum):
    """What a queued job does (`jobs.kind`): a run's cases, a judge job, an analysis request."""

    RUN = "run"
    JUDGE = "judge"
    ANALYSIS = "analysis"


# Waiting or under way: what the pages poll and what a cancel can still stop.
ACTIVE_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING)
# Over: a worker finished it, it failed, or it was cancelled.
FINAL_STATUSES = (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)
