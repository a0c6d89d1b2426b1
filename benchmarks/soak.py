"""Everything at once on PostgreSQL, with kills, while people browse (issue 43, point 3).

    python benchmarks/soak.py            # 2 runs of 300 demo cases, a 10k-sample import, 20 kills
    python benchmarks/soak.py --quick    # the same mix, smaller: 2 runs of 8 cases, 1k samples, 10 kills

Its length is the runs': a demo case with the four analyzers takes ~2 s on one of this machine's 2
cores when idle, so the full soak is at least 10 minutes; under the browsers it took 88 minutes (2026-12-06). `--quick` with runs
of 12 cases took 9.7 minutes here beside other jobs (load 7-18); runs of 8 are its setting now.

A throwaway PostgreSQL server on loopback (`tests/store/pgserver.py`), migrated; a Streamlit
server on it with its workers off (`tests/e2e/apphelpers.py`); three worker processes
(`python -m evalrx.runner`, as `tests/store/workerhelpers.py` starts them). First a small demo
run is worked through so the pages have failures to show, and one Chromium browses the Trajectories
and Trajectory pages of the idle machine. Then, at once: two demo runs (evalrx-tiny on its suite,
the four white-box analyzers) queued with `evalrx run`, a 10k-sample Inspect `.eval` log imported
with `evalrx import` (one sample written by inspect_ai's mock model, copied, as
`benchmarks/import_eval.py` builds it: inspect_ai takes ~50 ms a sample to write its own), judge jobs
queued with `evalrx diagnose --judge --queue` against a scripted loopback judge
(`tests/store/loopback.py`), a random worker SIGKILLed twenty times at random moments (at random
points of the runs' progress, so they land while cases run; another started each time), the
PostgreSQL server restarted once as a crash does (`-m immediate`, `PostgresServer.restart`), and
three Chromium browsers (Debian's, through Playwright) opening the same pages and labelling
failures through the app's label panel, each label counted once the app's toast confirms it.

Checks at the end (exit 1 when one fails): each run holds each of its cases exactly once and the
store's integrity counts are zero; every import holds its samples once; every label the app
confirmed is in the store; every run and judge job ended (a final `JobStatus`), the runs and
judge jobs done; no process this script started is left. Recorded in
`benchmarks/results/soak.json`: the counts, page latency p50/p95 idle and under load, and the
machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for sub in ("", "benchmarks", "tests/store", "tests/e2e"):
    sys.path.insert(0, str(ROOT / sub))

ANALYZERS = "logit_lens,tool_decision,attention,token_uncertainty"
JUDGE_ANSWER = {
    "kind": "wrong_tool",
    "first_wrong_step": 1,
    "evidence": "the first call",
    "explanation": "The agent called the wrong tool first.",
    "confidence": 0.6,
}
LIST_READY = "[class*='st-key-row-'] [data-testid='stPageLink-NavLink']"  # a row's id link (app_latency.py)
TRAJ_READY = "[class*='st-key-step-']"
SETTINGS = {  # full, quick
    "cases": (300, 8),
    "samples": (10_000, 1_000),
    "seed_cases": (40, 8),
    "kills": (20, 10),
    "idle_visits": (12, 4),
    "judge_limit": (200, 20),
    "deadline_s": (7200, 900),  # the full mix does ~7 cases a minute on 2 cores
}


def evalrx(*args: str, url: str, check: bool = True) -> subprocess.CompletedProcess:
    """The `evalrx` command on the store, as a user runs it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "evalrx", *args, "--url", url]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if check and res.returncode:
        raise RuntimeError(f"evalrx {' '.join(args)} exited {res.returncode}: {res.stderr.strip()[-400:]}")
    return res


def retried(fn, tries: int = 10):
    """`fn()`, tried again every 3 s while it fails (the store restarting under it): a user tries again too."""
    for i in range(tries):
        try:
            return fn()
        except Exception:
            if i == tries - 1:
                raise
            time.sleep(3)


def queue_run(url: str, n: int, name: str, analyzers: str = ANALYZERS) -> int:
    out = evalrx(
        "run", "--spec", "evalrx-tiny", "--suite", "demo", "--limit", str(n), "--analyzers", analyzers,
        "--name", name, "--no-progress", url=url,
    ).stdout  # fmt: skip
    return int(re.search(r"queued run (\d+)", out).group(1))


def stats(xs: list) -> dict:
    if not xs:
        return {"reps": 0}
    xs = sorted(xs)
    return {
        "p50_s": round(statistics.median(xs), 3),
        "p95_s": round(xs[int(0.95 * (len(xs) - 1))], 3),
        "max_s": round(xs[-1], 3),
        "reps": len(xs),
    }


class Workers:
    """Three worker processes; `kill_one` SIGKILLs a random one, reaps it and starts another."""

    def __init__(self, url: str, logdir: Path, n: int = 3) -> None:
        from workerhelpers import start_worker

        self.start = lambda: start_worker(url, "--poll", "0.2", log=logdir / "workers.log", plugin=None)
        self.procs = [self.start() for _ in range(n)]
        self.lock = threading.Lock()
        self.kills = 0
        self.exited_on_their_own: list = []

    def kill_one(self, rng: random.Random) -> None:
        with self.lock:
            i = rng.randrange(len(self.procs))
            proc = self.procs[i]
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                self.kills += 1
            else:
                self.exited_on_their_own.append(proc.returncode)
            proc.wait()
            self.procs[i] = self.start()

    def replace_exited(self) -> None:
        """A worker that stopped by itself (not killed here) is noted and replaced."""
        with self.lock:
            for i, proc in enumerate(self.procs):
                if proc.poll() is not None:
                    self.exited_on_their_own.append(proc.returncode)
                    self.procs[i] = self.start()

    def stop(self) -> None:
        with self.lock:
            for proc in self.procs:
                proc.terminate()
            for proc in self.procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


class User:
    """One person in a Chromium of their own: opens a run's failures, then a trajectory, and labels it."""

    def __init__(self, name: str, app_url: str, store_url: str, rng: random.Random, label: bool = True) -> None:
        self.name, self.app, self.url, self.rng, self.label = name, app_url, store_url, rng, label
        self.latency: dict = {"trajectories": [], "trajectory": []}
        self.confirmed: list = []  # (trajectory id, annotator, outcome, failure kind) the app's toast confirmed
        self.tried = 0
        self.errors: list = []

    def open(self, page, path: str, title: str, selector: str) -> float:
        from app_latency import READY_JS

        t0 = time.perf_counter()
        page.goto(self.app + path)
        page.wait_for_function(READY_JS, arg=[title, selector], polling=20, timeout=60_000)
        return time.perf_counter() - t0

    def visit(self, ctx, runs: list, record: bool) -> None:
        import evalrx.store as S

        run = self.rng.choice(runs)
        page = ctx.new_page()
        try:
            dt = self.open(page, f"/trajectories?run={run}&outcome=fail", "Trajectories", LIST_READY)
            if record:
                self.latency["trajectories"].append(dt)
            fails = S.list_trajectories(run_id=run, outcome="fail", limit=100, store=self.url).rows
            tid = self.rng.choice(fails).id
            dt = self.open(page, f"/trajectory?id={tid}", f"Trajectory {tid}", TRAJ_READY)
            if record:
                self.latency["trajectory"].append(dt)
            if self.label:
                self.label_failure(page, tid)
        finally:
            page.close()

    def label_failure(self, page, tid: int) -> None:
        from apphelpers import settle

        name = page.get_by_label("Annotator")
        name.fill(self.name)
        name.evaluate("e => e.blur()")  # a text field commits on blur
        settle(page)
        import evalrx.store as S

        hotkey, kind = self.rng.choice([(k.hotkey, k.key) for k in S.list_kinds(store=self.url) if k.hotkey])
        self.tried += 1
        page.locator(f".st-key-tl-mode-{hotkey} button").first.click()  # "3 · wrong_tool": fail with that kind
        page.get_by_text(f"#{tid} labelled fail · {kind}").first.wait_for(timeout=30_000)
        self.confirmed.append((tid, self.name, "fail", kind))

    def browse(self, runs, until, visits: "int | None" = None, warm: int = 1) -> None:
        """Visit until `until()` says stop (or `visits` visits); the first `warm` visits are not timed."""
        from apphelpers import CHROMIUM_ARGS
        from playwright.sync_api import sync_playwright

        exe = shutil.which("chromium") or "/usr/bin/chromium"
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
            ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
            done = 0
            while not until() and (visits is None or done < visits + warm):
                try:
                    self.visit(ctx, runs(), record=done >= warm)
                except Exception as exc:  # a page that failed under load is counted, the person goes on
                    self.errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                done += 1
                time.sleep(self.rng.uniform(1, 3))  # a person reads the page before the next one
            ctx.close()
            browser.close()


def chaos_plan(rng: random.Random, cases: int, kills: int) -> list:
    """When to kill a worker and when to restart the server, as (cases stored by then, what), in order: at
    random points of the runs' progress, so the kills land while cases run however fast the machine is."""
    plan = [(rng.uniform(0.02, 0.9) * cases, "kill") for _ in range(kills)]
    return sorted(plan + [(rng.uniform(0.3, 0.7) * cases, "restart")])


def failing_runs(url: str, ids: list) -> list:
    import evalrx.store as S

    return [r for r in ids if S.list_trajectories(run_id=r, outcome="fail", limit=1, store=url).rows]


def all_final(url: str, run_ids: list) -> bool:
    import evalrx.store as S

    runs_final = all(S.get_run(r, store=url).status in S.FINAL_STATUSES for r in run_ids)
    judges_final = all(j.status in S.FINAL_STATUSES for j in S.list_judge_jobs(store=url))
    return runs_final and judges_final


def check_store(url: str, runs: dict, imports: dict, confirmed: list) -> dict:
    """Every case once, every import's samples once, every confirmed label stored, every job ended."""
    from workerhelpers import integrity_report

    import evalrx.store as S

    checks: dict = {}
    for run_id, n in {**runs, **imports}.items():
        page = S.list_trajectories(run_id=run_id, limit=n + 10, with_total=True, store=url)
        seen = [(r.sample_id, r.attempt) for r in page.rows]
        checks[f"run {run_id}: {n} cases, each once"] = page.total == len(seen) == len(set(seen)) == n
    report = integrity_report(S.connect(url))
    checks[f"store integrity counts all zero {report}"] = not any(report.values())
    missing = [
        c
        for c in confirmed
        if not any((h.annotator, h.outcome, h.failure_kind) == c[1:] for h in S.label_history(c[0], store=url))
    ]
    checks[f"every confirmed label stored (missing: {missing[:5]})"] = not missing
    for run_id in runs:
        run = S.get_run(run_id, store=url)
        jobs = S.jobs_of_run(run_id, store=url)
        checks[f"run {run_id} done, its jobs ended ({run.status}; {[j.status for j in jobs]})"] = (
            run.status == S.JobStatus.DONE and all(j.status in S.FINAL_STATUSES for j in jobs)
        )
    judges = S.list_judge_jobs(store=url)
    checks[f"judge jobs done ({[(j.id, j.status, j.error) for j in judges if j.status != 'done']})"] = all(
        j.status == S.JobStatus.DONE for j in judges
    )
    return checks


def leftovers(pg_data: Path) -> list:
    """Processes this script started that are still alive: children, and the PostgreSQL server (a daemon)."""
    import psutil

    me = psutil.Process()
    left = [f"{p.pid} {' '.join(p.cmdline()[:3])}" for p in me.children(recursive=True) if p.is_running()]
    for p in psutil.process_iter(["cmdline"]):
        if str(pg_data) in " ".join(p.info["cmdline"] or []):
            left.append(f"{p.pid} postgres")
    return left


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="the same mix, smaller: about 2 minutes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="default: benchmarks/results/soak.json (soak_quick.json with --quick)")
    args = p.parse_args(argv)
    cfg = {k: v[1 if args.quick else 0] for k, v in SETTINGS.items()}
    out = Path(args.out or ROOT / "benchmarks" / "results" / ("soak_quick.json" if args.quick else "soak.json"))

    from apphelpers import AppServer
    from import_eval import build_log, template_sample
    from loopback import ScriptedChatServer, completion
    from pgserver import PostgresServer

    import evalrx.store as S

    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="evalrx-soak-"))
    t_start = time.monotonic()
    load = {"before": os.getloadavg()}
    log = lambda msg: print(f"[{time.monotonic() - t_start:6.1f}s] {msg}", file=sys.stderr, flush=True)  # noqa: E731

    pg = PostgresServer().start()
    url = pg.create_database()
    S.upgrade(url)
    env = dict(os.environ, EVALRX_DATABASE_URL=url, EVALRX_NO_LOCAL_WORKER="1", HF_HUB_OFFLINE="1")
    app = AppServer(env, work)
    workers = None
    stop = threading.Event()  # set: the browsers and the killer stop
    threads: list = []
    judge = ScriptedChatServer([completion(json.dumps(JUDGE_ANSWER))] * 100_000).__enter__()
    checks: dict = {}
    result: dict = {}
    try:
        t0 = time.perf_counter()
        sample, start = template_sample(work)
        log_path = work / "soak.eval"
        sizes = build_log(log_path, sample, start, cfg["samples"], "zstd", 0)
        log(f"{cfg['samples']}-sample .eval log built in {time.perf_counter() - t0:.1f} s ({sizes})")

        # Something to browse on the idle machine: a small demo run, worked through by one worker.
        seed_run = queue_run(url, cfg["seed_cases"], "soak: pages")
        from workerhelpers import start_worker

        assert start_worker(url, "--once", "--poll", "0.2", plugin=None).wait(600) == 0
        assert failing_runs(url, [seed_run]), "the seed run has no failure to browse"
        log(f"seed run {seed_run} done; idle pages")
        idle = User("idle", app.url, url, random.Random(args.seed), label=False)
        idle.browse(lambda: [seed_run], lambda: False, visits=cfg["idle_visits"])
        load["idle_end"] = os.getloadavg()

        # Load: everything at once.
        workers = Workers(url, work)
        runs = {queue_run(url, cfg["cases"], f"soak {i}"): cfg["cases"] for i in (1, 2)}
        imports: dict = {}
        browse_runs = [seed_run]
        judge_jobs = [evalrx("diagnose", str(seed_run), "--judge", "gpt-4o-mini", "--base-url", judge.url, "--queue",
                             "--all", url=url).stdout.strip()]  # fmt: skip
        log(f"queued runs {list(runs)}, a judge job; {cfg['kills']} kills as they run")

        def do_import() -> None:
            for attempt in (1, 2):  # a PostgreSQL restart mid-import fails it whole: the user imports again
                res = evalrx("import", str(log_path), url=url, check=False)
                if res.returncode == 0:
                    rid = int(re.search(r"as run\(s\) (\d+)", res.stdout).group(1))
                    imports[rid] = cfg["samples"]
                    judge_jobs.append(retried(lambda: evalrx(
                        "diagnose", str(rid), "--judge", "gpt-4o-mini", "--base-url", judge.url, "--queue",
                        "--all", "--limit", str(cfg["judge_limit"]), url=url).stdout.strip()
                    ))  # fmt: skip
                    log(f"imported run {rid} (try {attempt}); judge job queued")
                    return
                result.setdefault("import_failures", []).append(res.stderr.strip()[-300:])
                log(f"import try {attempt} failed: {res.stderr.strip()[-200:]}")

        def cases_done() -> int:
            try:
                return sum(S.get_run(r, store=url).n_done for r in runs)
            except Exception:  # the store is restarting
                return -1

        def chaos() -> None:
            for mark, what in chaos_plan(rng, sum(runs.values()), cfg["kills"]):
                while cases_done() < mark and not stop.wait(0.5):
                    pass
                if stop.wait(rng.uniform(0, 3)):  # a moment inside the case under way
                    return
                if what == "restart":
                    log("restarting PostgreSQL (-m immediate)")
                    pg.restart()
                    result["pg_restarts"] = 1
                else:
                    workers.kill_one(rng)
                    log(f"kill {workers.kills}")

        users = [User(f"soak-{i}", app.url, url, random.Random(args.seed + i)) for i in (1, 2, 3)]
        threads += [threading.Thread(target=do_import, daemon=True), threading.Thread(target=chaos, daemon=True)]
        threads += [
            threading.Thread(target=u.browse, args=(lambda: browse_runs, stop.is_set), daemon=True) for u in users
        ]
        for th in threads:
            th.start()
        deadline = time.monotonic() + cfg["deadline_s"]
        while time.monotonic() < deadline:
            time.sleep(2)
            workers.replace_exited()
            try:
                browse_runs[:] = failing_runs(url, [seed_run, *runs, *imports])
                ended = all_final(url, [*runs]) and not threads[0].is_alive() and not threads[1].is_alive()
            except Exception as exc:  # the store is restarting
                log(f"store not answering: {str(exc).splitlines()[0][:120]}")
                continue
            if ended:
                break
        timed_out = time.monotonic() >= deadline
        load["under_load_end"] = os.getloadavg()
        stop.set()
        for th in threads:
            th.join(120)
        log("load over; checking")
        checks[f"everything ended within {cfg['deadline_s']} s"] = not timed_out
        checks["browsers stopped"] = not any(th.is_alive() for th in threads[2:])
        checks.update(check_store(url, runs, imports, [c for u in users for c in u.confirmed]))
        checks[f"{cfg['kills']} workers killed"] = workers.kills == cfg["kills"]
        checks["PostgreSQL restarted once"] = result.get("pg_restarts") == 1
        checks["the import ended with its samples stored"] = len(imports) == 1
        result.update(
            {
                "cases": sum(runs.values()),
                "runs": runs,
                "imported_samples": sum(imports.values()),
                "labels_confirmed_and_checked": sum(len(u.confirmed) for u in users),
                "labels_tried": sum(u.tried for u in users),
                "kills_survived": workers.kills,
                "runs_at_end": {
                    r: f"{(i := S.get_run(r, store=url)).status}, {i.n_done}/{i.n_cases} cases"
                    for r in [seed_run, *runs, *imports]
                },
                "workers_exited_on_their_own": workers.exited_on_their_own,
                "judge_jobs": judge_jobs,
                "judge_requests": len(judge.requests),
                "page_errors_under_load": [e for u in users for e in u.errors][:30],
                "page_errors_count": sum(len(u.errors) for u in users),
                "page_errors_idle": idle.errors,
                "latency": {
                    page: {
                        "idle": stats(idle.latency[page]),
                        "under_load": stats([x for u in users for x in u.latency[page]]),
                    }
                    for page in ("trajectories", "trajectory")
                },
            }
        )
    finally:
        stop.set()
        for th in threads:
            th.join(120)
        if workers is not None:
            workers.stop()
        app.stop()
        judge.__exit__(None, None, None)
        pg.stop()
    left = leftovers(pg.data)
    checks[f"no process left ({left})"] = not left
    failed = [k for k, ok in checks.items() if not ok]
    if failed:  # the workers' and the app's logs, for whoever looks into it
        record_logs = {"logs_kept_in": str(work)}
    else:
        shutil.rmtree(work, ignore_errors=True)
        record_logs = {}
    record = {
        "settings": {"quick": args.quick, "seed": args.seed, **cfg, "analyzers": ANALYZERS},
        **result,
        "seconds": round(time.monotonic() - t_start, 1),
        "checks": checks,
        "failed_checks": failed,
        **record_logs,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_avg": load,
        },
        "latency_means": "from navigation start until the script finished and rows (list) or steps (trajectory) "
        "show; a fresh tab per visit; idle measured first, on the same pages",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2, default=str) + "\n")
    for k in failed:
        print(f"soak: check failed: {k}", file=sys.stderr)
    print(f"soak: {len(checks) - len(failed)}/{len(checks)} checks passed -> {out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
