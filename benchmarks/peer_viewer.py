"""Inspect AI's log viewer and this app side by side, on the same logs, in one run.

    python benchmarks/peer_viewer.py                         # 1,000 and 10,000 samples, 3 repeats after a cold one
    python benchmarks/peer_viewer.py --sizes 1000 --reps 3 --out /tmp/peer_small.json

For each size a log is written by inspect-ai itself (the version pinned in the dev extra; `mockllm/model`
with a calculator tool: each sample asks a sum, calls the tool, answers), in a child process so
Inspect's event loop stays out of this one. The same `.eval` file is served by `inspect view` and
imported into a fresh SQLite store served by this app (`streamlit run app/main.py`, no worker: the peer
has none). Both on loopback, measured by Chromium through Playwright with the page helpers of
`benchmarks/app_latency.py`, a fresh browser context per repeat, the first repeat cold and not counted:

- list ready: the samples list shows its rows (the peer: the first sample row; this app: the table);
- open a sample from the list (click): until the sample's tool arguments (`expression`) and final
  answer ("The answer is ...") are on the page;
- open a sample by URL in a fresh tab: the same wait;
- server memory: each server process's peak RSS (VmHWM) after its phase;
- this app only (the peer has no search): a text search over every trajectory in a fresh tab; the
  first page after starting the server (process start to the list drawn), and after `make run` itself
  (its schema check, the server, and the local worker it starts beside the first page);
- each page's own script time on the server (Streamlit's AppTest, no browser; `server_script_s`): the
  rest of a page's time is Streamlit's own and the browser's;
- `streamlit_floor`: a two-page Streamlit app with none of this app's code, timed the same way (fresh
  tab, a click to the other page) and its server's peak RSS: what no Streamlit page here can go under.

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


def script_seconds(url: str, reps: int = 5) -> dict:
    """In a child process: each page's own script time (Streamlit's AppTest, no browser) on the store at `url`,
    the median of `reps` warm runs: what of a page's time is the server's."""
    env = dict(os.environ, EVALRX_DATABASE_URL=url, EVALRX_NO_LOCAL_WORKER="1")
    done = subprocess.run(
        [sys.executable, __file__, "--script-times", str(reps)], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"the script timing failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _script_times_here(reps: int) -> None:
    sys.path.insert(0, str(ROOT / "app"))
    from streamlit.testing.v1 import AppTest

    import evalrx.store as S

    url = os.environ["EVALRX_DATABASE_URL"]
    rows = S.list_trajectories(limit=reps + 1, store=url).rows
    out = {}
    for page, params in (
        ("views/trajectories.py", lambda i: {"run": str(rows[0].run_id)}),
        ("views/trajectory.py", lambda i: {"id": str(rows[i].id)}),
    ):
        times = []
        for i in range(reps + 1):
            at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120)
            for key, value in params(i).items():
                at.query_params[key] = value
            at.switch_page(page)
            t = time.perf_counter()
            at.run()
            if at.exception:
                raise SystemExit(f"{page}: {at.exception[0].value}")
            if i:  # the first run imports the page's modules
                times.append(time.perf_counter() - t)
        out[page] = round(statistics.median(times), 3)
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


def streamlit_floor(work: Path, browser, reps: int) -> dict:
    """What Streamlit itself costs, with none of this app's code: a two-page app served the same way, timed
    the same way (a fresh tab until its heading shows; a click on a link to the other page), and its
    server's peak RSS. A goal under these cannot be met by any page of a Streamlit app on this machine."""
    from apphelpers import AppServer, settle

    script = work / "bare_app.py"
    script.write_text(BARE_APP)
    bare_dir = work / "bare"
    bare_dir.mkdir(exist_ok=True)
    server = AppServer(dict(os.environ), bare_dir, script=script)
    fresh, switch = [], []
    try:
        for rep in range(reps + 1):
            ctx = browser.new_context(viewport=VIEWPORT)
            page = ctx.new_page()
            t = time.perf_counter()
            page.goto(f"{server.url}/")
            page.get_by_role("heading", name="Page A").wait_for(timeout=60_000)
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
        peak = round(peak_rss_mb(server.proc.pid), 1)
    finally:
        server.stop()
    return {"fresh_tab": summary(fresh), "page_switch": summary(switch), "server_peak_mb": peak}


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


def measure_size(n: int, work: Path, browser, reps: int) -> dict:
    from app_latency import READY_JS
    from apphelpers import AppServer, settle

    import evalrx.interop as X
    import evalrx.store as S

    log = write_log(n, work / f"logs-{n}")
    url = f"sqlite:///{work / f'store-{n}.sqlite'}"
    S.upgrade(url)
    t0 = time.perf_counter()
    imported = X.import_file(log, store=url)
    import_s = time.perf_counter() - t0
    (run_id,) = imported.run_ids
    some = S.list_trajectories(run_id=run_id, limit=200, store=url).rows
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
    times: dict = {
        k: [] for k in ("peer_list", "peer_click", "peer_url", "ours_list", "ours_click", "ours_url", "ours_search")
    }
    try:
        for rep in range(reps + 1):
            keep = rep > 0  # the first repeat warms both servers and is not counted
            k = 1 + rep  # a different row each repeat
            # -- the peer: its list, a click on a row, a sample by URL in a fresh context
            ctx = browser.new_context(viewport=VIEWPORT)
            page = ctx.new_page()
            t = time.perf_counter()
            page.goto(f"{peer.url}/#/tasks/{log.name}")
            rows = page.locator(PEER_ROWS)
            rows.nth(k).wait_for(timeout=120_000)
            times["peer_list"].append(time.perf_counter() - t)
            href = rows.nth(k).get_attribute("href")
            t = time.perf_counter()
            rows.nth(k).click()
            page.wait_for_function(SAMPLE_READY_JS, polling=20, timeout=120_000)
            times["peer_click"].append(time.perf_counter() - t)
            ctx.close()
            times["peer_url"].append(open_fresh(browser, href, SAMPLE_READY_JS))
            # -- this app: the run's list, a click on a row, a trajectory by URL in a fresh context
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
            times["ours_url"].append(open_fresh(browser, f"{ours.url}/trajectory?id={some[k].id}", SAMPLE_READY_JS))
            # a text search over every trajectory of the store (the peer has none), in a fresh tab
            i = 37 * k + 3
            term = quote_plus(f"What is: {i} + {i % 7}")  # one sample's question
            times["ours_search"].append(
                open_fresh(browser, f"{ours.url}/trajectories?q={term}", READY_JS, ["Trajectories", LIST_READY])
            )
            if not keep:
                for v in times.values():
                    v.pop()
            print(f"  {n}: repeat {rep} done", file=sys.stderr, flush=True)
        memory = {"peer_server_peak_mb": round(peak_rss_mb(peer.proc.pid), 1)}
        memory["ours_server_peak_mb"] = round(peak_rss_mb(ours.proc.pid), 1)
    finally:
        ours.stop()
        peer.stop()
    out = {name: summary(v) for name, v in times.items()}
    out["ours_first_page_after_start_s"] = round(started_s, 3)
    # three times: the local worker `make run` starts imports torch beside the first page, on the same cores
    out["ours_first_page_after_make_run"] = summary([make_run_first_page(url, run_id, work, browser) for _ in range(3)])
    for what in ("list", "click", "url"):
        out[f"ratio_{what}"] = round(out[f"ours_{what}"]["median_s"] / out[f"peer_{what}"]["median_s"], 2)
    return {
        **out,
        **memory,
        "server_script_s": script_seconds(url),
        "import_samples_per_s": round(n / import_s, 1),
        "log_mb": round(log.stat().st_size / 2**20, 2),
    }


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--write-log":
        _write_log_here(int(sys.argv[2]), Path(sys.argv[3]))
        return 0
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--script-times":
        _script_times_here(int(sys.argv[2]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    p.add_argument("--reps", type=int, default=3, help="counted repeats (after one cold repeat)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "peer_viewer.json"))
    args = p.parse_args(argv)
    from apphelpers import CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    load_start = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory(prefix="evalrx-peer-") as tmp, sync_playwright() as pw:
        exe = shutil.which("chromium") or "/usr/bin/chromium"
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        try:
            for n in args.sizes:
                results[str(n)] = measure_size(n, Path(tmp), browser, args.reps)
                print(json.dumps({n: results[str(n)]}), file=sys.stderr, flush=True)
            floor = streamlit_floor(Path(tmp), browser, args.reps)
            print(json.dumps({"streamlit_floor": floor}), file=sys.stderr, flush=True)
        finally:
            browser.close()
    import inspect_ai

    report = {
        "benchmark": "peer_viewer",
        "peer": f"inspect view (inspect-ai {inspect_ai.__version__})",
        "reps": args.reps,
        "results": results,
        "streamlit_floor": floor,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_at_start": load_start,
            "load_avg_at_end": os.getloadavg(),
        },
        "note": "medians over the counted repeats; each server's memory is its process's peak RSS",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
