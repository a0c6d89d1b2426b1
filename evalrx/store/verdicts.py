"""A judge's verdicts, cached by the digest of what it was asked (`evalrx.diagnosis.judge.verdict_key`).

Asking the same judge about the same trajectory with the same prompt reads the verdict here instead of
calling the model: a checked diagnosis, or the one-line reason the answer was refused. A call that failed
(server down, deadline) is not a verdict and is never kept. The diagnosis itself is also stored with the
trajectory's other candidates (`evalrx.store.diagnoses`); this table is the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from evalrx.core.failures import Diagnosis
from evalrx.store import convert
from evalrx.store import schema as t
from evalrx.store.engine import Store, resolve

MAX_ANSWER_CHARS = 4000  # the judge's own words, kept to read a refusal by; a long one is cut


@dataclass
class JudgeVerdict:
    """A cached verdict: the checked diagnosis or the refusal, what the judge wrote, and its meta
    (spec, backend, prompt version and variant, tokens, latency)."""

    digest: str
    spec: str
    backend: str
    prompt_version: int
    diagnosis: Optional[Diagnosis] = None
    refusal: Optional[str] = None
    answer: str = ""
    meta: dict = field(default_factory=dict)


def cached_verdict(digest: str, *, store: "Store | str | None" = None) -> Optional[JudgeVerdict]:
    """The verdict stored under `digest`, or None."""
    with resolve(store).read() as s:
        row = s.get(t.JudgeVerdictRow, digest)
        if row is None:
            return None
        return JudgeVerdict(
            digest=row.digest,
            spec=row.spec,
            backend=row.backend,
            prompt_version=row.prompt_version,
            diagnosis=Diagnosis.from_dict(row.diagnosis) if row.diagnosis else None,
            refusal=row.refusal,
            answer=row.answer or "",
            meta=dict(row.meta or {}),
        )


def save_verdict(verdict: JudgeVerdict, *, store: "Store | str | None" = None) -> None:
    """Keep a verdict under its digest (replacing one already there). Raises ValueError for a verdict that
    has neither a diagnosis nor a refusal."""
    if verdict.diagnosis is None and not verdict.refusal:
        raise ValueError("a judge verdict is a diagnosis or the reason it was refused")
    with resolve(store).write() as s:
        row = s.get(t.JudgeVerdictRow, verdict.digest)
        if row is None:
            row = t.JudgeVerdictRow(digest=verdict.digest)
            s.add(row)
        row.spec = verdict.spec[:200]
        row.backend = verdict.backend[:32]
        row.prompt_version = int(verdict.prompt_version)
        row.diagnosis = convert.jsonable(verdict.diagnosis.to_dict()) if verdict.diagnosis else None
        row.refusal = " ".join(verdict.refusal.split())[:1000] if verdict.refusal else None
        row.answer = verdict.answer[:MAX_ANSWER_CHARS]
        row.meta = convert.jsonable(verdict.meta)
        row.created_at = t.utcnow()


__all__ = ["JudgeVerdict", "cached_verdict", "save_verdict"]
