"""The fuzz tier's settings: a short profile for `make test`, a long one for `make fuzz`.

`EVALRX_FUZZ_PROFILE=long` (what `make fuzz` sets) runs 20,000 examples a target (`EVALRX_FUZZ_EXAMPLES`)
and writes `benchmarks/results/fuzz.json` (`EVALRX_FUZZ_RESULTS`: another file, or a record of the short
profile): examples run per target, the tests that failed, and the crashers kept in tests/fixtures/fuzz/.
With `EVALRX_FUZZ_MERGE=1` a run adds its targets to the record there (made with the same profile), so the long
profile can be recorded in pieces, e.g. one `-k` selection per core; each piece's selection and count is listed.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # mutate.py
sys.path.insert(0, str(ROOT / "app"))  # the pages' `components`, found as Streamlit finds them

from mutate import EXAMPLES  # noqa: E402

CRASHERS = ROOT / "tests" / "fixtures" / "fuzz"
PROFILE = os.environ.get("EVALRX_FUZZ_PROFILE", "ci")
_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
# Short: 60 examples a target keeps the tier near a minute; the deadline bounds one example's time.
_COMMON = dict(deadline=5000, suppress_health_check=_SLOW, database=None)  # failures are kept as fixtures instead
settings.register_profile("ci", max_examples=60, derandomize=True, **_COMMON)
LONG_EXAMPLES = int(os.environ.get("EVALRX_FUZZ_EXAMPLES") or 20000)
settings.register_profile("long", max_examples=LONG_EXAMPLES, **_COMMON)
settings.load_profile(PROFILE)


@pytest.fixture(scope="session", autouse=True)
def _no_default_store(tmp_path_factory):
    """Nothing here touches the developer's db/evalrx.sqlite (session-wide: hypothesis refuses per-test fixtures)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVALRX_DATABASE_URL", f"sqlite:///{tmp_path_factory.mktemp('default') / 'unused.sqlite'}")
        yield


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome == "failed":
        _outcome_log[report.nodeid] = report.outcome


_outcome_log: dict = {}
_STARTED = time.time()


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("EVALRX_FUZZ_RESULTS") or (
        str(ROOT / "benchmarks" / "results" / "fuzz.json") if PROFILE == "long" else None
    )
    if not out or not EXAMPLES:
        return
    crashers = sorted(p.name for p in CRASHERS.iterdir() if p.is_file() and p.suffix != ".md")
    piece = {
        "selection": session.config.option.keyword or "all",
        "max_examples_per_target": settings().max_examples,
        "seconds": round(time.time() - _STARTED, 1),
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(Path(out).with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # pieces run side by side: one read-and-write at a time
        _write_record(Path(out), piece, crashers)


def _write_record(out: Path, piece: dict, crashers: list) -> None:
    examples, tests, pieces = dict(EXAMPLES), dict(_outcome_log), [piece]
    earlier = _earlier_record(out)
    if earlier:  # a record made in pieces (`make fuzz` with pytest's -k): this piece's targets replace theirs
        examples = {**earlier["examples"], **examples}
        tests = {**earlier["tests"], **tests}
        pieces = [p for p in earlier["pieces"] if p["selection"] != piece["selection"]] + pieces
    result = {
        "profile": PROFILE,
        "pieces": pieces,
        "seconds": round(sum(p["seconds"] for p in pieces), 1),
        "examples": dict(sorted(examples.items())),
        "tests": dict(sorted(tests.items())),
        "failures": sorted(k for k, v in tests.items() if v == "failed"),
        "crashers_found_and_fixed": crashers,
    }
    out.write_text(json.dumps(result, indent=1) + "\n")


def _earlier_record(out: Path) -> dict:
    """The record at `out` when `EVALRX_FUZZ_MERGE` is set and it was made with this profile."""
    if not os.environ.get("EVALRX_FUZZ_MERGE") or not out.exists():
        return {}
    earlier = json.loads(out.read_text())
    return earlier if earlier.get("profile") == PROFILE and "pieces" in earlier else {}
