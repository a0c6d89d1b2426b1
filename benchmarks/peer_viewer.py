"""Inspect AI's log viewer and this app side by side, on the same logs, in one run.

    python benchmarks/peer_viewer.py --sizes 1000,10000,100000 --reps 3   # the full record (hours the first time)
    python benchmarks/peer_viewer.py --sizes 1000 --reps 1 --out /tmp/peer_small.json   # a quick look

For each size a log is written by inspect-ai itself (the version pinned in the dev extra; `mockllm/model`
with a calculator tool: each sample asks a sum, calls the tool, answers), in a child process so
Inspect's event loop stays out of this one. Logs are kept under `--log-cache` (default
`~/.cache/evalrx-bench/peer_viewer`, outside the repository) and reused when present; the seconds
inspect-ai took to write each one are kept beside it and recorded (`log_written_s`). The same `.eval` file
is served by `inspect view` and imported into a fresh SQLite store served by this app (`streamlit run
app/main.py`, no worker: the peer has none). The store also gets one demo-model trajectory analysed with
the four white-box analyzers (three model turns, ~12 panels), run by a worker in a child process.

Three servers run side by side on loopback: the peer, this app, and `streamlit_floor`, a two-page
Streamlit app with none of this app's code (what no Streamlit page here can go under). Chromium through
Playwright opens each page in a fresh browser context; the variants of a repeat are interleaved (their
order rotates each repeat) so the machine's load falls on all of them alike, the first repeat is cold
and not counted, and each repeat records the load average:

- `floor_fresh_tab`: the bare app's first page, its heading shown and its script done;
- `peer_list` / `ours_list`: the samples list shows its rows (the peer: a sample row; this app: the run's
  list with its rows' links, the script done); `ours_list_200`: a page of 200 rows, all drawn;
- `peer_click` / `ours_click`: a row clicked in the list, until the sample's tool argument (`expression`)
  and final answer ("The answer is ...") are on the page; `peer_url` / `ours_url`: the same sample by URL
  in a fresh tab;
- `ours_search`: a text search over every trajectory in a fresh tab (the peer has none);
- the analysed trajectory by URL: `ours_panels_steps` until its steps are readable (its last step's text on
  the page), `ours_panels_shown` until the panels it shows without a click are drawn and the script is done,
  `ours_panels_all` until every model turn is opened and all its panels are drawn (from navigation start);
- `*_over_floor_s`: each of this app's fresh-tab times less the floor's of the same repeat (median);
- server memory: each server process's peak RSS (VmHWM) after its phase (the analysed trajectory is served by
  a second server of this app, so that Altair's charts stay out of the figure compared with the peer's); the first page after starting
  the server, and after `make run` itself (its schema check, the server, and the local worker it starts);
- each page's own script time on the server (`server_script_s`: Streamlit's AppTest, no browser, only the
  script's execution timed): the rest of a page's time is Streamlit's own and the browser's.

Also recorded: the import (samples/s). Results go to `benchmarks/results/peer_viewer.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote_plus

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

# A page of either viewer shows an opened sample: its tool call's argument and its final answer.
SAMPLE_READY_JS = """() => {
    const text = document.body ? document.body.innerText : "";
    return text.includes("expression") && text.includes("The answer is");
}"""
PEER_ROWS = "a[role=row][href*='/samples/sample/']"
LIST_READY = "[class*='st-key-row-'] [data-testid='stPageLink-NavLink']"  # this app's list: a row's id link
VIEWPORT = {"width": 1400, "height": 1000}
LOG_CACHE = Path.home() / ".cache" / "evalrx-bench" / "peer_viewer"
# The bare app's page: its heading shown and its script done (as this app's pages are timed).
FLOOR_READY_JS = """() => {
    const app = document.querySelector("[data-testid='stApp']");
    if (!app || app.getAttribute("data-test-script-state") !== "notRunning") return false;
    return [...document.querySelectorAll("h1")].some(h => h.innerText.includes("Page A"));
}"""
# A page of `n` list rows (their id links), the script done.
ROWS_READY_JS = """(n) => {
    const app = document.querySelector("[data-testid='stApp']");
    if (!app || app.getAttribute("data-test-script-state") !== "notRunning") return false;
    return document.querySelectorAll("[class*='st-key-row-'] [data-testid='stPageLink-NavLink']").length >= n;
}"""
# The analysed trajectory's steps readable: its last step's text on the page.
STEPS_READY_JS = """(last) => {
    const box = document.querySelector(`.st-key-step-${last} pre`);
    return !!box && box.innerText.length > 0;
}"""
# Every chart the page holds drawn, at least `n` of them, and the script done.
CHARTS_READY_JS = """(n) => {
    const app = document.querySelector("[data-testid='stApp']");
    if (!app || app.getAttribute("data-test-script-state") !== "notRunning") return false;
    const charts = [...document.querySelectorAll("[data-testid='stVegaLiteChart']")];
    return charts.length >= n && charts.every(c => c.querySelector("canvas.marks, svg.marks"));
}"""
TURNS = "[data-testid='stExpander']:has-text('Model turn at step')"


def write_log(n: int, log_dir: Path) -> Path:
    """In a child process: inspect-ai runs `n` samples and writes its `.eval` log into `log_dir`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, __file__, "--write-log", str(n), str(log_dir)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"inspect-ai could not write the log:\n{done.stderr[-3000:]}")
    (log,) = log_dir.glob("*.eval")
    return log


def cached_log(n: int, cache: Path) -> tuple[Path, dict]:
    """The `.eval` log of `n` samples under `cache`, written once (the seconds inspect-ai took kept beside it)."""
    log_dir, note = cache / f"logs-{n}", cache / f"logs-{n}.written.json"  # the note outside the viewer's folder
    logs = sorted(log_dir.glob("*.eval"))
    if len(logs) == 1 and note.exists():
        return logs[0], {**json.loads(note.read_text()), "reused": True}
    shutil.rmtree(log_dir, ignore_errors=True)
    print(f"  writing a log of {n:,} samples with inspect-ai into {log_dir} ...", file=sys.stderr, flush=True)
    t = time.perf_counter()
    log = write_log(n, log_dir)
    from importlib.metadata import version

    info = {"log_written_s": round(time.perf_counter() - t, 1), "inspect_ai": version("inspect-ai")}
    note.write_text(json.dumps(info) + "\n")
    return log, {**info, "reused": False}


def analysed_trajectory(url: str) -> tuple[int, int, int]:
    """In a child process (torch stays out of this one): the demo model runs one two-step case with the four
    white-box analyzers into the store at `url`. Returns its trajectory id, last step and model turns."""
    done = subprocess.run(
        [sys.executable, __file__, "--analyse-demo", url], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"the demo model's analysed run failed:\n{done.stderr[-3000:]}")
    tid, last, turns = done.stdout.strip().splitlines()[-1].split()
    return int(tid), int(last), int(turns)


def _analyse_demo_here(url: str) -> None:
    import evalrx.store as S
    from evalrx.config import ModelConfig, RunConfig
    from evalrx.runner import Worker, enqueue_run
    from evalrx.suites import load_cases

    store = S.connect(url)
    case = next(c for c in load_cases("demo/two_step") if c.id == "two_step-001")  # lookup, calculate, answer
    analyzers = ["logit_lens", "tool_decision", "attention", "token_uncertainty"]
    cfg = RunConfig(model=ModelConfig("evalrx-tiny"), tools=["calculator", "lookup"], analyzers=analyzers)
    run_id = enqueue_run(cfg, [case], name="analysed demo", store=store)
    Worker(store, exit_when_idle=True, poll_s=0.05, heartbeat_s=0.5).run()
    row = S.list_trajectories(run_id=run_id, store=store).rows[0]
    steps = S.get_trajectory(row.id, store=store).trajectory.steps
    print(row.id, steps[-1].idx, sum(1 for st in steps if st.role.value == "actor"))


def _write_log_here(n: int, log_dir: Path) -> None:
    os.environ.setdefault("INSPECT_DISPLAY", "none")
    os.environ["XDG_DATA_HOME"] = str(log_dir.parent / "xdg-data")
    os.environ["XDG_CACHE_HOME"] = str(log_dir.parent / "xdg-cache")
    from concurrent.futures import ThreadPoolExecutor

    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import tool

    @tool
    def calculator():
        async def execute(expression: str) -> str:
            """Add two whole numbers.

            Args:
                expression: Two whole numbers joined by "+".

            Returns:
                Their sum.
            """
            a, b = expression.split("+")
            return str(int(a) + int(b))

        return execute

    def model(messages, tools, tool_choice, config):
        question = next(m.text for m in messages if m.role == "user")
        if not any(m.role == "tool" for m in messages):
            expr = question.split(":", 1)[1].strip()
            out = ModelOutput.for_tool_call("mockllm/model", "calculator", {"expression": expr}, content="Computing.")
        else:
            out = ModelOutput.from_content("mockllm/model", f"The answer is {messages[-1].text}.")
        out.usage = ModelUsage(input_tokens=60, output_tokens=10, total_tokens=70)
        return out

    # Every fifth target is off by one, so the log has failures to look at.
    samples = [
        Sample(id=f"q{i:06d}", input=f"What is: {i} + {i % 7}", target=str(i + i % 7 + (i % 5 == 0))) for i in range(n)
    ]
    task = Task(dataset=samples, solver=[use_tools(calculator()), generate()], scorer=includes(), name="calc_bench")
    with ThreadPoolExecutor(1) as pool:
        logs = pool.submit(
            inspect_eval,
            task,
            model="mockllm/model",
            model_args={"custom_outputs": model},
            log_dir=str(log_dir),
            display="none",
            max_samples=64,
        ).result()
    assert logs[0].status == "success", logs[0].error


def script_seconds(url: str, analysed: int, reps: int = 5) -> dict:
    """In a child process: each page's own script time (Streamlit's AppTest, no browser) on the store at `url`,
    the median of `reps` warm runs: what of a page's time is the server's."""
    env = dict(os.environ, EVALRX_DATABASE_URL=url, EVALRX_NO_LOCAL_WORKER="1")
    done = subprocess.run(
        [sys.executable, __file__, "--script-times", str(reps), str(analysed)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the script timing failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _script_times_here(reps: int, analysed: int) -> None:
    sys.path.insert(0, str(ROOT / "app"))
    import streamlit.runtime.scriptrunner.script_runner as runner
    from streamlit.testing.v1 import AppTest

    import evalrx.store as S

    # Only the script's own execution: AppTest's set-up (it scans installed packages each run) is not a page's.
    spent: list = []
    run_script = runner.exec_func_with_error_handling

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return run_script(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t)

    runner.exec_func_with_error_handling = timed
    url = os.environ["EVALRX_DATABASE_URL"]
    rows = S.list_trajectories(limit=reps + 2, store=url).rows
    run_id = next(r.run_id for r in rows if r.id != analysed)
    out = {}
    for name, page, params in (
        ("views/trajectories.py", "views/trajectories.py", lambda i: {"run": str(run_id)}),
        ("views/trajectories.py 200 rows", "views/trajectories.py", lambda i: {"run": str(run_id), "per": "200"}),
        ("views/trajectory.py", "views/trajectory.py", lambda i: {"id": str(rows[i + 1].id)}),
        ("views/trajectory.py analysed", "views/trajectory.py", lambda i: {"id": str(analysed)}),
    ):
        times = []
        for i in range(reps + 1):
            at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120)
            for key, value in params(i).items():
                at.query_params[key] = value
            at.switch_page(page)
            spent.clear()
            at.run()
            if at.exception:
                raise SystemExit(f"{page}: {at.exception[0].value}")
            if i:  # the first run imports the page's modules
                times.append(sum(spent))
        out[name] = round(statistics.median(times), 3)
    print(json.dumps(out))


BARE_APP = """import streamlit as st

def a():
    st.title("Page A")
    st.page_link(b_page, label="to B")

def b():
    st.title("Page B")
    st.write("Nothing else.")

b_page = st.Page(b, title="B", url_path="b")
st.navigation([st.Page(a, title="A", url_path="a", default=True), b_page]).run()
"""


class BareServer:
    """The bare two-page Streamlit app (`BARE_APP`), served as this app is."""

    def __init__(self, work: Path) -> None:
        from apphelpers import AppServer

        script = work / "bare_app.py"
        script.write_text(BARE_APP)
        bare_dir = work / "bare"
        bare_dir.mkdir(exist_ok=True)
        self.server = AppServer(dict(os.environ), bare_dir, script=script)
        self.url = self.server.url

    def fresh_tab(self, browser) -> float:
        return open_fresh(browser, f"{self.url}/", FLOOR_READY_JS)

    def stop(self) -> None:
        self.server.stop()


def streamlit_floor(bare: BareServer, browser, reps: int) -> dict:
    """What Streamlit itself costs, with none of this app's code: the bare app's fresh tab, a click on a link
    to its other page, and its server's peak RSS. A goal under these cannot be met by any page of a Streamlit
    app on this machine (the fresh tab is also timed inside every size's repeats, beside this app's pages)."""
    from apphelpers import settle

    fresh, switch = [], []
    for rep in range(reps + 1):
        ctx = browser.new_context(viewport=VIEWPORT)
        page = ctx.new_page()
        t = time.perf_counter()
        page.goto(f"{bare.url}/")
        page.wait_for_function(FLOOR_READY_JS, polling=20, timeout=60_000)
        dt_fresh = time.perf_counter() - t
        settle(page)
        t = time.perf_counter()
        page.get_by_role("link", name="to B").click()
        page.get_by_role("heading", name="Page B").wait_for(timeout=60_000)
        dt_switch = time.perf_counter() - t
        ctx.close()
        if rep:
            fresh.append(dt_fresh)
            switch.append(dt_switch)
    return {
        "fresh_tab": summary(fresh),
        "page_switch": summary(switch),
        "server_peak_mb": round(peak_rss_mb(bare.server.proc.pid), 1),
    }


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM:"))


class PeerServer:
    """`inspect view` on one log folder, on loopback."""

    def __init__(self, log_dir: Path, work: Path) -> None:
        from apphelpers import free_port, wait_http_ok

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, INSPECT_DISPLAY="none", XDG_DATA_HOME=str(work / "xdg-data"))
        env["XDG_CACHE_HOME"] = str(work / "xdg-cache")
        self.log = open(work / "inspect-view.log", "w")
        inspect = Path(sys.executable).with_name("inspect")
        cmd = [str(inspect), "view", "--log-dir", str(log_dir), "--port", str(self.port), "--host", "127.0.0.1"]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_http_ok(self.url + "/", proc=self.proc)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        from apphelpers import stop_server

        stop_server(self.proc, self.log)


def summary(xs: list) -> dict:
    return {
        "median_s": round(statistics.median(xs), 3),
        "min_s": round(min(xs), 3),
        "max_s": round(max(xs), 3),
        "values_s": [round(x, 3) for x in xs],
    }


def open_fresh(browser, url: str, ready_js: str, arg=None) -> float:
    """Seconds from opening `url` in a fresh browser context until `ready_js` holds."""
    ctx = browser.new_context(viewport=VIEWPORT)
    page = ctx.new_page()
    t = time.perf_counter()
    page.goto(url)
    page.wait_for_function(ready_js, arg=arg, polling=20, timeout=120_000)
    seconds = time.perf_counter() - t
    ctx.close()
    return seconds


def make_run_first_page(url: str, run_id: int, work: Path, browser) -> float:
    """Seconds from `make run` (on this existing store, with its local worker) to the run's list drawn."""
    import signal

    from app_latency import READY_JS
    from apphelpers import free_port, wait_http_ok

    import evalrx.store as S

    port = free_port()
    env = dict(os.environ, EVALRX_DATABASE_URL=url, STREAMLIT_SERVER_HEADLESS="true")
    env.pop("EVALRX_NO_LOCAL_WORKER", None)
    log = open(work / "make-run.log", "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        ["make", "run", f"PORT={port}"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/_stcore/health", timeout=120, proc=proc)
        ctx = browser.new_context(viewport=VIEWPORT)
        page = ctx.new_page()
        page.goto(f"http://127.0.0.1:{port}/trajectories?run={run_id}")
        page.wait_for_function(READY_JS, arg=["Trajectories", LIST_READY], polling=20, timeout=120_000)
        seconds = time.perf_counter() - t0
        ctx.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # make, and the Streamlit server it started
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        # the worker the app started leaves with its parent; one still beating is stopped here
        for w in S.alive_workers(within_s=60, store=url):
            try:
                os.kill(int(w["pid"]), signal.SIGTERM)
            except (ProcessLookupError, KeyError, TypeError, ValueError):
                pass
    return seconds


def open_analysed(browser, url: str, last_step: int) -> tuple[float, float, float, int]:
    """The analysed trajectory by URL in a fresh tab: seconds until its steps are readable, until the panels it
    shows unasked are drawn (script done), and until every model turn is opened and drawn; and the panels."""
    ctx = browser.new_context(viewport=VIEWPORT)
    page = ctx.new_page()
    t = time.perf_counter()
    page.goto(url)
    page.wait_for_function(STEPS_READY_JS, arg=last_step, polling=20, timeout=120_000)
    steps = time.perf_counter() - t
    page.wait_for_function(CHARTS_READY_JS, arg=1, polling=20, timeout=120_000)
    shown = time.perf_counter() - t
    turns = page.locator(TURNS)
    for i in range(turns.count()):
        details = turns.nth(i).locator("details").first
        if details.get_attribute("open") is None:  # a closed turn: its panels are built when it opens
            details.locator("summary").click()
            body = details.locator("[data-testid='stExpanderDetails']")
            page.wait_for_function(
                "(el) => el && el.innerText.trim().length > 0", arg=body.element_handle(timeout=60_000), timeout=120_000
            )
    n_charts = page.locator("[data-testid='stVegaLiteChart']").count()
    page.wait_for_function(CHARTS_READY_JS, arg=n_charts, polling=20, timeout=120_000)
    every = time.perf_counter() - t
    panels = n_charts + page.locator(".evalrx-uncertainty").count()
    ctx.close()
    return steps, shown, every, panels


def measure_size(n: int, work: Path, browser, reps: int, bare: BareServer, cache: Path, make_run: bool = True) -> dict:
    from app_latency import READY_JS
    from apphelpers import AppServer, settle

    import evalrx.interop as X
    import evalrx.store as S

    log, written = cached_log(n, cache)
    url = f"sqlite:///{work / f'store-{n}.sqlite'}"
    S.upgrade(url)
    t0 = time.perf_counter()
    imported = X.import_file(log, store=url)
    import_s = time.perf_counter() - t0
    (run_id,) = imported.run_ids
    some = S.list_trajectories(run_id=run_id, limit=200, store=url).rows
    analysed, last_step, n_turns = analysed_trajectory(url)
    env = dict(os.environ, EVALRX_DATABASE_URL=url, EVALRX_NO_LOCAL_WORKER="1")
    t0 = time.perf_counter()
    ours = AppServer(env, work)
    # From starting the server to its first page drawn: what a user waits after `make run` on this store.
    started_s = (
        time.perf_counter()
        - t0
        + open_fresh(browser, f"{ours.url}/trajectories?run={run_id}", READY_JS, ["Trajectories", LIST_READY])
    )
    peer = PeerServer(log.parent, work)
    # The analysed trajectory on a server of its own: Altair's charts would raise the list server's peak RSS,
    # which is compared with the peer's (whose samples have no such panels).
    (work / "panels").mkdir(exist_ok=True)
    panels_server = AppServer(env, work / "panels")
    times: dict = {
        k: []
        for k in (
            "floor_fresh_tab",
            "peer_list",
            "peer_click",
            "peer_url",
            "ours_list",
            "ours_click",
            "ours_url",
            "ours_list_200",
            "ours_search",
            "ours_panels_steps",
            "ours_panels_shown",
            "ours_panels_all",
        )
    }
    loads, panels = [], 0

    def peer_list_click(k: int) -> None:
        ctx = browser.new_context(viewport=VIEWPORT)
        page = ctx.new_page()
        t = time.perf_counter()
        page.goto(f"{peer.url}/#/tasks/{log.name}")
        rows = page.locator(PEER_ROWS)
        rows.nth(k).wait_for(timeout=300_000)
        times["peer_list"].append(time.perf_counter() - t)
        href = rows.nth(k).get_attribute("href")
        t = time.perf_counter()
        rows.nth(k).click()
        page.wait_for_function(SAMPLE_READY_JS, polling=20, timeout=120_000)
        times["peer_click"].append(time.perf_counter() - t)
        ctx.close()
        times["peer_url"].append(open_fresh(browser, href, SAMPLE_READY_JS))

    def ours_list_click(k: int) -> None:
        ctx = browser.new_context(viewport=VIEWPORT)
        page = ctx.new_page()
        t = time.perf_counter()
        page.goto(f"{ours.url}/trajectories?run={run_id}")
        page.wait_for_function(READY_JS, arg=["Trajectories", LIST_READY], polling=20, timeout=120_000)
        times["ours_list"].append(time.perf_counter() - t)
        settle(page)
        t = time.perf_counter()
        page.locator(f".st-key-row-{some[k].id} [data-testid='stPageLink-NavLink']").first.click()
        page.wait_for_url("**/trajectory?**", timeout=120_000)
        page.wait_for_function(SAMPLE_READY_JS, polling=20, timeout=120_000)
        times["ours_click"].append(time.perf_counter() - t)
        ctx.close()

    def ours_url(k: int) -> None:
        times["ours_url"].append(open_fresh(browser, f"{ours.url}/trajectory?id={some[k].id}", SAMPLE_READY_JS))

    def ours_200(k: int) -> None:
        page_url = f"{ours.url}/trajectories?run={run_id}&per=200&page={1 + k % max(1, n // 200)}"
        times["ours_list_200"].append(open_fresh(browser, page_url, ROWS_READY_JS, min(200, n)))

    def ours_search(k: int) -> None:
        i = 37 * k + 3
        term = quote_plus(f"What is: {i} + {i % 7}")  # one sample's question
        times["ours_search"].append(
            open_fresh(browser, f"{ours.url}/trajectories?q={term}", READY_JS, ["Trajectories", LIST_READY])
        )

    def ours_panels(k: int) -> None:
        nonlocal panels
        steps, shown, every, panels = open_analysed(browser, f"{panels_server.url}/trajectory?id={analysed}", last_step)
        times["ours_panels_steps"].append(steps)
        times["ours_panels_shown"].append(shown)
        times["ours_panels_all"].append(every)

    def floor(k: int) -> None:
        times["floor_fresh_tab"].append(bare.fresh_tab(browser))

    variants = [floor, peer_list_click, ours_list_click, ours_url, ours_200, ours_search, ours_panels]
    try:
        for rep in range(reps + 1):
            k = 1 + rep  # a different row each repeat
            lengths = {name: len(v) for name, v in times.items()}
            loads.append(os.getloadavg()[0])
            for variant in variants[rep % len(variants) :] + variants[: rep % len(variants)]:  # rotated
                variant(k)
            if rep == 0:  # the first repeat warms every server and is not counted
                for name, v in times.items():
                    del v[lengths[name] :]
                loads.pop()
            print(f"  {n}: repeat {rep} done (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        memory = {"peer_server_peak_mb": round(peak_rss_mb(peer.proc.pid), 1)}
        memory["ours_server_peak_mb"] = round(peak_rss_mb(ours.proc.pid), 1)
        memory["ours_panels_server_peak_mb"] = round(peak_rss_mb(panels_server.proc.pid), 1)
    finally:
        ours.stop()
        panels_server.stop()
        peer.stop()
    out: dict = {name: summary(v) for name, v in times.items()}
    for name in ("ours_list", "ours_url", "ours_list_200", "ours_search", "ours_panels_steps", "peer_list", "peer_url"):
        over = [a - b for a, b in zip(times[name], times["floor_fresh_tab"])]  # the same repeat's floor
        out[f"{name}_over_floor_s"] = round(statistics.median(over), 3)
    out["analysed_trajectory"] = {"model_turns": n_turns, "panels": panels}
    out["ours_first_page_after_start_s"] = round(started_s, 3)
    # three times: the local worker `make run` starts imports torch beside the first page, on the same cores
    if make_run:  # `make run` needs the checkout's .venv (it creates one when missing)
        out["ours_first_page_after_make_run"] = summary(
            [make_run_first_page(url, run_id, work, browser) for _ in range(3)]
        )
    for what in ("list", "click", "url"):
        out[f"ratio_{what}"] = round(out[f"ours_{what}"]["median_s"] / out[f"peer_{what}"]["median_s"], 2)
    return {
        **out,
        **memory,
        "load_avg_1min": {"min": round(min(loads), 2), "max": round(max(loads), 2)},
        "server_script_s": script_seconds(url, analysed),
        "import_samples_per_s": round(n / import_s, 1),
        "log_mb": round(log.stat().st_size / 2**20, 2),
        "log": written,
    }


def sizes(text: str) -> list[int]:
    """`1000,10000,100000` (or `10k,100k`) as numbers of samples."""
    try:
        return [int(float(x.strip().lower().replace("k", "e3"))) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes takes numbers joined by commas (1000,10000,100000), not {text!r}")


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--write-log":
        _write_log_here(int(sys.argv[2]), Path(sys.argv[3]))
        return 0
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--script-times":
        _script_times_here(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--analyse-demo":
        _analyse_demo_here(sys.argv[2])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=sizes, default=[1000, 10_000, 100_000], help="samples a log, e.g. 1000,10000")
    p.add_argument("--reps", type=int, default=3, help="counted repeats (after one cold repeat)")
    p.add_argument("--log-cache", type=Path, default=LOG_CACHE, help="where inspect-ai's logs are kept and reused")
    p.add_argument("--no-make-run", action="store_true", help="skip the first page after `make run` (no .venv here)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "peer_viewer.json"))
    args = p.parse_args(argv)
    from apphelpers import CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    load_start = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory(prefix="evalrx-peer-") as tmp, sync_playwright() as pw:
        exe = shutil.which("chromium") or "/usr/bin/chromium"
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        bare = BareServer(Path(tmp))
        try:
            for n in args.sizes:
                work = Path(tmp) / f"size-{n}"
                work.mkdir()
                results[str(n)] = measure_size(
                    n, work, browser, args.reps, bare, args.log_cache, make_run=not args.no_make_run
                )
                print(json.dumps({n: results[str(n)]}), file=sys.stderr, flush=True)
            floor = streamlit_floor(bare, browser, args.reps)
            print(json.dumps({"streamlit_floor": floor}), file=sys.stderr, flush=True)
        finally:
            bare.stop()
            browser.close()
    import inspect_ai

    report = {
        "benchmark": "peer_viewer",
        "command": "python benchmarks/peer_viewer.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "peer": f"inspect view (inspect-ai {inspect_ai.__version__})",
        "reps": args.reps,
        "results": results,
        "streamlit_floor": floor,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_at_start": [round(x, 2) for x in load_start],
            "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "note": "medians over the counted repeats (min, max and every value beside); the variants of a repeat are "
        "interleaved, their order rotated each repeat; *_over_floor_s: the median of (this time - the bare app's "
        "fresh tab in the same repeat); each server's memory is its process's peak RSS",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
