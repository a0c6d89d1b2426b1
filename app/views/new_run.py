"""New run: pick a model, a backend, tools and cases; launch it on the worker."""

import streamlit as st
from components.access import ENV_COMMANDS, commands_allowed
from components.data import store
from components.launch import (
    ANSWER_ANALYZERS,
    DEFAULT_SUITE,
    DEMO_SPEC,
    LENS_ANALYZERS,
    brings_own_tools,
    cases_from_upload,
    lens_entries,
    mcp_entry,
    runtime_settings,
    start_api_worker,
    weights_problem,
)
from components.safe import md_escape, md_with_code

from evalrx.config import ModelConfig, RunConfig
from evalrx.core import Capability
from evalrx.models import MAX_RETRIES, MAX_TIMEOUT_S, RuntimeConfig, backends_for
from evalrx.runner import run_tools, tool_list
from evalrx.specs import REGISTRY
from evalrx.store import list_mcp_servers, save_mcp_server
from evalrx.suites import CaseFileError, list_suites, load_cases
from evalrx.tools import TOOLS

S = store()
st.title("New run")


@st.cache_data(show_spinner=False)
def _tool_descriptions() -> dict:
    out = {}
    for name, factory in TOOLS.items():
        try:
            out[name] = factory(None).description
        except Exception:  # a tool that needs a case to describe itself
            out[name] = ""
    return out


@st.cache_data(show_spinner=False)
def _suite_size(name: str) -> int:
    return len(load_cases(name))


@st.cache_data(show_spinner=False)
def _suite_cases(name: str) -> list:
    return load_cases(name)


@st.cache_data(show_spinner=False, ttl=15)  # a hub model costs a network probe: not on every rerun
def _weights_problem(spec_key: str, backend, checkpoint: str):
    return weights_problem(spec_key, backend, checkpoint)


@st.cache_data(show_spinner=False)
def _analyzer_names() -> list:
    from evalrx.analyzers import known_analyzers

    return known_analyzers()


specs = sorted(REGISTRY)
REAL_CASES_HINT = 10  # a real model on CPU takes seconds per turn: more cases than this is a long wait


def _is_real(key: str) -> bool:
    return "real" in REGISTRY[key].tags


left, right = st.columns([3, 2], gap="large")
with left:
    spec_key = st.selectbox(
        "Model",
        specs,
        index=specs.index(DEMO_SPEC) if DEMO_SPEC in specs else 0,
        key="spec",
        format_func=lambda k: f"{k} · real model, slow" if _is_real(k) else k,
        help="The spec registry (see the Models page). A real model gives white-box "
        "results worth reading; on CPU it is slow, so keep its suites small.",
    )
    spec = REGISTRY[spec_key]
    if spec.notes:
        st.caption(md_with_code(spec.notes))  # its `code` as code, the rest inert
    preference = {"hf_local": 0, "vllm_offline": 1, "api": 2}  # local first: full access to internals
    backends = sorted(backends_for(spec), key=lambda b: preference.get(b.name, 9))
    names = [b.name for b in backends]

    def _provides(name: str) -> str:
        caps = next(b for b in backends if b.name == name).provides(spec)
        return ", ".join(c.value for c in Capability if c in caps)

    backend = (
        st.radio("Backend", names, key="backend", horizontal=True, captions=[_provides(n) for n in names])
        if names
        else None
    )
    if backend is None:
        st.error("No backend can serve this model.")
    # Said before launch, not by the worker after it: the field below (Advanced) is read from its last value.
    model_problem = _weights_problem(spec_key, backend, (st.session_state.get("checkpoint") or "").strip())
    if model_problem:
        st.warning(md_escape(model_problem))

    source = st.segmented_control(
        "Cases", ["Bundled suite", "Upload a case file"], default="Bundled suite", key="source", required=True
    )
    cases, suite, problem = None, None, None
    if source == "Upload a case file":
        up = st.file_uploader("JSONL case file, one case per line", type=["jsonl", "json"], key="upload")
        if up is not None:
            try:
                cases = cases_from_upload(up.name, up.getvalue())
                st.success(f"{len(cases)} cases, all valid.")
            except CaseFileError as exc:  # name the uploaded file, not our temporary copy
                where = f"{up.name}:{exc.line}" if exc.line else up.name
                problem = f"{where}: {exc.problem}. {exc.fix}"
                st.error(md_escape(problem))
            except ValueError as exc:
                problem = str(exc)
                st.error(md_escape(problem))
        else:
            problem = "upload a case file"
    else:
        suites = list_suites()
        suite = st.selectbox(
            "Suite", suites, index=suites.index(DEFAULT_SUITE) if DEFAULT_SUITE in suites else 0, key="suite"
        )
        st.caption(f"{_suite_size(suite)} cases")
    picked_cases = cases if cases is not None else (_suite_cases(suite) if suite else [])
    own = brings_own_tools(picked_cases)
    descriptions = _tool_descriptions()
    default_tools = run_tools(None, picked_cases, spec=spec_key)  # the CLI's default too, in the same order
    tools = st.multiselect(
        "Built-in tools the agent may call",
        sorted(TOOLS),
        default=default_tools,
        key=f"tools-{own}-{'-'.join(default_tools)}",  # another suite's tools: its own defaults
    )
    st.caption("  \n".join(f"**{md_escape(n)}**: {md_escape(descriptions.get(n, ''))}" for n in sorted(TOOLS)))
    if own:
        st.caption("Each case brings its own functions; the model is offered them beside any tools picked here.")
    may_run = commands_allowed()  # naming code for the worker to run: this machine's user, or the operator's say
    py_tools = st.text_input(
        "Python functions as tools",
        key="py_tools",
        placeholder="package.module:function, ...",
        disabled=not may_run,
        help="Importable on the worker; the schema comes from the signature and the docstring, "
        "and every call's arguments are checked against it."
        + ("" if may_run else f" Off: the app is served beyond this machine; the operator can set {ENV_COMMANDS}=1."),
    )
    saved = {entry["name"]: entry for entry in list_mcp_servers(store=S)}
    mcp_names = st.multiselect(
        "MCP servers",
        sorted(saved),
        key="mcp",
        help="Their tools are offered to the agent; each case gets a fresh session unless a server shares one.",
    )
    with st.expander("Add an MCP server"):
        if not may_run:
            st.caption(f"Off: the app is served beyond this machine; the operator can set {ENV_COMMANDS}=1.")
        new_name = st.text_input("Name", key="mcp_new_name", placeholder="time", disabled=not may_run)
        new_entry = st.text_area(
            "Its mcpServers entry (JSON)",
            key="mcp_new_entry",
            disabled=not may_run,
            placeholder='{"command": "python", "args": ["-m", "mcp_server_time"], "env": {"TOKEN": "${MY_TOKEN}"}}',
            help="Write secrets as ${VAR}: the worker reads VAR from its own environment; no value is stored.",
        )
        if st.button("Save server", key="mcp_save", disabled=not may_run):
            try:
                entry = mcp_entry(new_name, new_entry)
                save_mcp_server(entry["name"], entry, store=S)
            except ValueError as exc:
                st.error(md_escape(exc))
            else:
                st.success(f"Saved {entry['name']}; pick it above.")
                st.rerun()
    limit = st.number_input("Run only the first N cases (0 = all)", min_value=0, value=0, step=1, key="limit")
    if _is_real(spec_key):
        n_cases = len(cases) if cases is not None else (_suite_size(suite) if suite else 0)
        n_run = min(n_cases, int(limit)) if limit else n_cases
        if n_run > REAL_CASES_HINT:
            st.info(
                f"{spec_key} is a real model running on CPU (seconds per model turn): {n_run} cases will take "
                f"a while. It is best on small suites: set the first N cases to {REAL_CASES_HINT} or fewer."
            )
    name = st.text_input("Run name", key="name", placeholder="default: model on suite")

with right:
    st.markdown("**Loop**")
    max_turns = st.number_input("Max model turns per case", min_value=1, max_value=50, value=4, key="max_turns")
    block = st.toggle("Block repeated identical calls", key="block", help="the model gets a nudge instead")
    force = st.toggle("Force a final answer after the last turn", key="force")
    system = st.text_area("System prompt", key="system", placeholder="optional", height=80)
    st.markdown("**Attempts**")
    rep_col, temp_col, seed_col = st.columns(3)
    repeats = rep_col.number_input(
        "Attempts per case",
        min_value=1,
        max_value=100,
        value=1,
        key="repeats",
        help="Run each case K times: pass@k, pass^k and the flaky cases (Runs → "
        "Reliability). Sample (temperature > 0) so attempts can differ.",
    )
    temperature = temp_col.number_input(
        "Temperature",
        min_value=0.0,
        max_value=5.0,
        value=0.0,
        step=0.1,
        key="temperature",
        help="0 = greedy (every attempt the same on a local model)",
    )
    seed = seed_col.number_input(
        "Seed",
        min_value=0,
        max_value=2**31 - 1,
        value=0,
        step=1,
        key="seed",
        help="Local models: each attempt's sampling seed comes from it, so the run reproduces.",
    )
    local = backend == "hf_local"
    analyzers = st.multiselect(
        "Analyzers",
        _analyzer_names(),
        key="analyzers",
        disabled=not local,
        help="White-box analyzers run on the worker after each case (hf_local only).",
    )
    lens_precision = "exact"
    if local and any(a in LENS_ANALYZERS for a in analyzers):
        lens_precision = st.radio(
            "Logit lens precision",
            ["exact", "bfloat16"],
            horizontal=True,
            key="lens_precision",
            help="bfloat16 is a cheaper setting: every layer's unembedding ~4x faster on CPUs with bf16 "
            "instructions, log-probs approximate (median ~0.02 nats off); the Trajectory page says so.",
        )
    answer_points = "values"
    if local and any(a in ANSWER_ANALYZERS for a in analyzers):
        answer_points = st.radio(
            "Answer tokens the lens reads",
            ["values", "all"],
            horizontal=True,
            key="answer_points",
            help="values: a final answer's numbers, ids, quoted strings and the words it shares with the expected "
            "answer, the observations and the calls' arguments, plus its first token; all: every answer token "
            "(slower). The Trajectory page says which.",
        )
    with st.expander("Advanced"):
        checkpoint = st.text_input(
            "Local weights directory",
            key="checkpoint",
            placeholder="default: the spec's weights",
            help="A directory with config and weights that overrides the spec's (local backends).",
        )
        max_new_tokens = st.number_input(
            "Max new tokens per model turn", min_value=1, max_value=32768, value=256, key="max_new_tokens"
        )
    base_url, api_key, concurrency = None, None, 1
    timeout, retries = RuntimeConfig.timeout, RuntimeConfig.max_retries
    if backend == "api":
        st.markdown("**API**")
        base_url = st.text_input("Base URL", key="base_url", placeholder="default: $OPENAI_BASE_URL or OpenAI")
        api_key = st.text_input(
            "API key",
            key="api_key",
            type="password",
            help="Never stored: held only by a worker started for this run, and sent "
            "only to its base URL. Leave empty to use the workers' OPENAI_API_KEY "
            "(which they send only to hosts in EVALRX_KEY_HOSTS).",
        )
        concurrency = st.number_input("Concurrent cases", min_value=1, max_value=64, value=4, key="concurrency")
        timeout = st.number_input(
            "Time limit per model call (s)",
            min_value=1.0,
            max_value=MAX_TIMEOUT_S,
            value=float(RuntimeConfig.timeout),
            step=5.0,
            key="timeout",
            help="The whole budget of one model call, retries and waits included; "
            "a call that runs out ends its case as an error.",
        )
        retries = st.number_input(
            "Retries per model call",
            min_value=0,
            max_value=MAX_RETRIES,
            value=RuntimeConfig.max_retries,
            step=1,
            key="retries",
            help="Tries after the first (server busy, connection lost), within the time limit.",
        )

    if st.button(
        "Launch run",
        type="primary",
        icon=":material/rocket_launch:",
        disabled=backend is None,
        width="stretch",
        key="launch",
    ):
        from evalrx.runner import enqueue_run

        try:
            if problem or model_problem:
                raise ValueError(model_problem or problem)
            chosen = cases if cases is not None else load_cases(suite)
            if limit:
                chosen = chosen[: int(limit)]
            runtime = runtime_settings(
                max_new_tokens=max_new_tokens,
                backend=backend,
                timeout=timeout,
                retries=retries,
                temperature=temperature,
            )
            run = RunConfig(  # never holds the API key: that goes to the run's own worker
                model=ModelConfig(name=spec_key, backend=backend, checkpoint=checkpoint.strip() or None),
                tools=list(tools) + ((tool_list(py_tools) or []) if may_run else []),
                mcp_servers=[saved[n] for n in mcp_names if n in saved],
                suite=suite,
                case_file=(up.name if source == "Upload a case file" and up is not None else None),
                max_turns=int(max_turns),
                system=system or None,
                block_repeat_calls=block,
                force_final_answer=force,
                concurrency=int(concurrency),
                analyzers=lens_entries(analyzers, lens_precision, answer_points) if local else [],
                base_url=base_url or None,
                runtime=RuntimeConfig(**runtime),
                repeats=int(repeats),
                seed=int(seed),
            )
            run_id = enqueue_run(run, cases=chosen, name=name or None, store=S, key_bound=bool(api_key))
        except (CaseFileError, ValueError) as exc:
            st.error(md_escape(exc))
        else:
            if api_key:
                from components.worker import runtime_dir

                start_api_worker(S, run_id, api_key, str(runtime_dir(S.url) / f"api-worker-{run_id}.log"))
            st.switch_page("views/runs.py", query_params={"run": str(run_id)})
