"""The store and queue commands of `evalrx`: db, worker, runs, import, export, labels, diagnose.

Each `*_main(argv)` parses its own flags and returns an exit status; `evalrx.cli`
dispatches to them. A store on an old schema is a one-line error naming `evalrx db upgrade`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional, Sequence

from evalrx.core import counted
from evalrx.core.failures import NOT_AGENT_KINDS
from evalrx.runner.argtypes import call_timeout, env_var_name, retries, whole


def _url_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="store URL (default: $EVALRX_DATABASE_URL or db/evalrx.sqlite)")


def _guard(fn: Callable[[], int], prog: str) -> int:
    from evalrx.store import SchemaError

    try:
        return fn()
    except SchemaError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2


def db_main(argv: Optional[Sequence[str]] = None) -> int:
    """`evalrx db upgrade|current`: migrate the store to this evalrx's schema, or show where it is."""
    p = argparse.ArgumentParser(prog="evalrx db", description="Manage the store's schema.")
    p.add_argument("action", choices=["upgrade", "current"], help="upgrade: migrate to the latest schema")
    _url_arg(p)
    args = p.parse_args(argv)
    return _guard(lambda: _db(args), "evalrx db")


def _db(args: argparse.Namespace) -> int:
    import evalrx.store as S

    store = S.connect(args.url, check=False)
    if args.action == "upgrade":
        before = store.schema_revision()
        after = S.upgrade(args.url)
        verb = "already at" if before == after else f"upgraded from {before or 'empty'} to"
        print(f"{store.display_url}: {verb} schema {after}")
        return 0
    rev = store.schema_revision()
    state = "current" if rev == S.SCHEMA_VERSION else f"needs `evalrx db upgrade` (code is at {S.SCHEMA_VERSION})"
    print(f"{store.display_url}: schema {rev or 'none'} ({state})")
    return 0 if rev == S.SCHEMA_VERSION else 1


def runs_main(argv: Optional[Sequence[str]] = None) -> int:
    """`evalrx runs [show ID | cancel ID | retry ID [--keep-errors]]`: list runs, show one's stats, cancel or
    retry one (errored cases run again unless `--keep-errors`)."""
    p = argparse.ArgumentParser(prog="evalrx runs", description="List and manage runs.")
    p.add_argument("action", nargs="?", choices=["list", "show", "cancel", "retry"], default="list")
    p.add_argument("run_id", nargs="?", type=int)
    from evalrx.store import JobStatus  # the store is what this command reads anyway

    p.add_argument(
        "--status",
        action="append",
        choices=[status.value for status in JobStatus],  # a misspelled status is an error, not an empty list
        help="only runs with this status (repeatable)",
    )
    p.add_argument("--limit", type=int, default=50)
    p.add_argument(
        "--keep-errors",
        action="store_true",
        help="retry: run only the cases without a trajectory (by default errored cases run again too)",
    )
    p.add_argument("--json", action="store_true", help="show: print the run's figures as JSON")
    _url_arg(p)
    args = p.parse_args(argv)

    def go() -> int:
        import evalrx.store as S
        from evalrx import reports

        store = S.connect(args.url)
        if args.action != "list" and args.run_id is None:
            p.error(f"`evalrx runs {args.action}` needs a run id")
        if args.action == "list":
            runs = S.list_runs(status=args.status, limit=args.limit, store=store)
            print(f"{'id':>5}  {'status':10} {'done':>9}  {'pass':>5} {'fail':>5} {'err':>4}  {'model':24} name")
            for r in runs:
                flag = " (cancelling)" if r.cancel_requested and r.status == S.JobStatus.RUNNING else ""
                print(
                    f"{r.id:>5}  {r.status + flag:10} {f'{r.n_done}/{r.n_cases}':>9}  {r.n_pass:>5} {r.n_fail:>5} "
                    f"{r.n_error:>4}  {(r.spec_key or '-')[:24]:24} {r.name}"
                )
            if not runs:
                print("(no runs)")
            return 0
        if args.action == "show":
            info = S.get_run(args.run_id, store=store)
            if info is None:
                raise ValueError(f"no run with id {args.run_id}")
            st = S.run_stats(args.run_id, store=store)
            rel = reports.run_reliability(args.run_id, store=store)
            agree = reports.label_agreement(run_id=args.run_id, store=store)
            if args.json:
                import dataclasses
                import json

                print(
                    json.dumps(
                        {
                            "run": dataclasses.asdict(info),
                            "stats": dataclasses.asdict(st),
                            **rel.to_dict(),
                            "agreement": agree,
                        },
                        default=str,
                        indent=1,
                    )
                )
                return 0
            rate = f"{st.success_rate:.1%}" if st.success_rate is not None else "-"
            lat = f"{st.latency_p50_ms:.0f} / {st.latency_p95_ms:.0f} ms" if st.latency_p50_ms is not None else "-"
            print(
                f"run {info.id}: {info.name}\n  status {info.status}, {info.n_done}/{info.n_cases} cases, "
                f"worker {info.worker_id or '-'}\n  success {rate}  outcomes {st.outcomes}\n"
                f"  terminated {st.terminated}\n  latency p50/p95 {lat}\n"
                f"  tokens {st.prompt_tokens} prompt, {st.completion_tokens} completion\n"
                f"  tool calls {st.tool_calls}  labels {st.labels}"
            )
            errors = st.outcomes.get("error", 0)
            kinds = {k: v for k, v in st.diagnosis_kinds.items() if k not in NOT_AGENT_KINDS}
            users = st.diagnosis_kinds.get("user_error", 0)
            apart = [f"{errors} errored"] * bool(errors) + [f"{users} the user's error"] * bool(users)
            print(f"  failures by kind {kinds or '{}'}" + (f"  ({', '.join(apart)}, counted apart)" if apart else ""))
            _print_reliability(rel)
            if agree["annotators"][1:]:
                pairs = ", ".join(
                    f"{q['a']}/{q['b']} {_num(q['kappa'])} (n={q['n']})" for q in agree["outcome"]["pairs"]
                )
                print(f"  agreement on outcome (Cohen's kappa): {pairs or '-'}")
            if info.error:
                print(f"  error: {info.error}")
            return 0
        from evalrx.runner import cancel_run, retry_run

        if args.action == "cancel":
            print(f"run {args.run_id}: {cancel_run(args.run_id, store=store)}")
        else:
            job = retry_run(args.run_id, errors=not args.keep_errors, store=store)
            print(f"run {args.run_id}: queued again as job {job}")
        return 0

    return _guard(go, "evalrx runs")


def _num(value: Optional[float], fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _print_reliability(rel) -> None:
    """pass@k and pass^k for every k the run's attempts allow, and the flaky cases."""
    if not rel.case_rates:
        return
    ks = sorted(rel.pass_at_k, key=int)
    print("  pass@k  " + "  ".join(f"k={k} {_num(rel.pass_at_k[k])}" for k in ks))
    if rel.k_max > 1:
        print("  pass^k  " + "  ".join(f"k={k} {_num(rel.pass_hat_k[k])}" for k in ks))
        flaky = ", ".join(
            f"{cid} ({'/'.join(k or '?' for k in rel.flaky_kinds.get(cid, [])) or '-'})" for cid in rel.flaky_cases[:20]
        )
        more = f" and {len(rel.flaky_cases) - 20} more" if len(rel.flaky_cases) > 20 else ""
        print(f"  flaky cases {len(rel.flaky_cases)}: {flaky or '-'}{more}")


def compare_main(argv: Optional[Sequence[str]] = None) -> int:
    """`evalrx compare A B [--json]`: two runs paired case by case (B minus A)."""
    p = argparse.ArgumentParser(prog="evalrx compare", description="Compare two runs case by case (B minus A).")
    p.add_argument("run_a", type=int)
    p.add_argument("run_b", type=int)
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000, at least 2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    _url_arg(p)
    args = p.parse_args(argv)
    if args.resamples < 2000:
        p.error("--resamples must be at least 2000")

    def go() -> int:
        import json

        import evalrx.store as S
        from evalrx import reports

        c = reports.compare_runs(
            args.run_a, args.run_b, resamples=args.resamples, seed=args.seed, store=S.connect(args.url)
        )
        if args.json:
            print(json.dumps(c, default=str))
            return 0
        print(
            f"run {args.run_a} (A) vs run {args.run_b} (B): {c['n_paired']} cases in both"
            f" ({c['only_a']} only in A, {c['only_b']} only in B)"
        )
        print(
            f"  both pass {c['both_pass']}  both fail {c['both_fail']}  regressions (A pass, B fail) "
            f"{c['regressions']}  fixes (A fail, B pass) {c['fixes']}" + (f"  mixed {c['mixed']}" if c["mixed"] else "")
        )
        print(f"  McNemar exact p = {_num(c['mcnemar_p'], '.4g')}")
        print(
            f"  success rate B - A = {_num(c['diff'], '+.3f')}  95% CI [{_num(c['diff_ci_low'], '+.3f')}, "
            f"{_num(c['diff_ci_high'], '+.3f')}] (paired bootstrap, {args.resamples} resamples)"
        )
        shift = [f"{k} {v['a']}->{v['b']}" for k, v in c["kind_shift"].items() if v["change"]]
        print(f"  failure kinds A->B: {', '.join(shift) or 'no change'}")
        return 0

    return _guard(go, "evalrx compare")


def import_main(argv: Optional[Sequence[str]] = None) -> int:
    """`evalrx import FILE`: trajectories from an Inspect `.eval`/`.json` log, ATIF, evalrx or OpenAI chat JSONL,
    tau-bench results, a multi-agent log (Who&When, Magentic-One) or a trace file (OpenInference, OTLP JSON)."""
    p = argparse.ArgumentParser(
        prog="evalrx import",
        description="Import trajectories into the store as new run(s). "
        "The format is told from the content: an Inspect AI .eval or .json log, ATIF (JSON "
        "or JSONL), an evalrx export or `evalrx run --out` JSONL, OpenAI chat JSONL, tau-bench results, a "
        "multi-agent log (Who&When JSON, a Magentic-One message list), or spans (OpenInference / Phoenix span "
        "JSON, TRAIL traces, OTLP JSON, the OpenTelemetry SDK's span JSON lines; one trajectory a trace).",
    )
    p.add_argument("path", help="the file to import")
    p.add_argument(
        "--name", help="name of the new run (default: the exported run's name, the log's task, or the file name)"
    )
    p.add_argument(
        "--again", action="store_true", help="import a file whose exact bytes were imported before (refused by default)"
    )
    p.add_argument(
        "--max-record-mb",
        type=float,
        metavar="MB",
        help="largest record (a JSONL line, a log sample, a whole JSON document) to read; default 64",
    )
    p.add_argument("--max-depth", type=int, metavar="N", help="deepest JSON nesting to read; default 200")
    _url_arg(p)
    args = p.parse_args(argv)

    def go() -> int:
        import evalrx.interop as X
        import evalrx.store as S

        try:
            limits = X.ImportLimits.from_options(args.max_record_mb, args.max_depth)
            store = S.connect(args.url)  # a missing schema is named before the file is looked at
            labels = X.labels_format(args.path)
            if labels is not None:
                raise ValueError(
                    f"{args.path} holds human labels ({labels}), not trajectories; import them with "
                    f"`evalrx labels import {args.path} [--run RUN]`"
                )
            res = X.import_file(args.path, run_name=args.name, store=store, again=args.again, limits=limits)
        except S.SchemaError:
            raise
        except (ValueError, FileNotFoundError, ImportError) as exc:  # one line, never a traceback
            print(f"evalrx import: error: {exc}", file=sys.stderr)
            return 2
        runs = ", ".join(map(str, res.run_ids))
        if res.already_imported:
            print(
                f"{args.path}: already imported as run{'s' if len(res.run_ids) > 1 else ''} {runs}; nothing "
                "written (--again imports it again)"
            )
            return 0
        for note in res.notes:
            print(f"evalrx import: note: {note}", file=sys.stderr)
        print(f"imported {counted(res.n_trajectories, 'trajectory', 'trajectories')} ({res.format}) as run(s) {runs}")
        return 0

    return _guard(go, "evalrx import")


def export_main(argv: Optional[Sequence[str]] = None) -> int:
    """`evalrx export RUN_ID OUT`: a run as JSONL, Parquet, ATIF or OpenTelemetry GenAI traces (OTLP JSON)."""
    from evalrx.interop import EXPORT_FORMATS

    p = argparse.ArgumentParser(prog="evalrx export", description="Export a run's trajectories.")
    p.add_argument("run_id", type=int)
    p.add_argument(
        "out",
        nargs="?",
        help="output file; the name implies the format: .jsonl, .parquet (needs "
        "pyarrow), .atif.jsonl / .atif.json, .otlp.json (needs opentelemetry-proto)",
    )
    p.add_argument("--format", choices=EXPORT_FORMATS, help="the format, when the file name does not say it")
    p.add_argument(
        "--otel-content",
        action="store_true",
        help="otel: put tool arguments and results and model output on the spans (off: they may be sensitive)",
    )
    p.add_argument(
        "--otel-endpoint",
        metavar="URL",
        help="otel: also POST the traces as OTLP/HTTP protobuf to URL, e.g. http://localhost:4318/v1/traces "
        "(OUT may then be left out)",
    )
    _url_arg(p)
    args = p.parse_args(argv)
    fmt = args.format or ("otel" if args.otel_endpoint and args.out is None else None)

    def go() -> int:
        import evalrx.interop as X
        import evalrx.store as S

        try:
            n = X.export_run(
                args.run_id,
                args.out,
                fmt=fmt,
                store=S.connect(args.url),
                otel_content=args.otel_content,
                otel_endpoint=args.otel_endpoint,
            )
        except S.SchemaError:
            raise
        except (ValueError, FileNotFoundError, ImportError) as exc:
            print(f"evalrx export: error: {exc}", file=sys.stderr)
            return 2
        where = " and ".join(x for x in (args.out, args.otel_endpoint) if x)
        print(f"wrote {counted(n, 'trajectory', 'trajectories')} of run {args.run_id} to {where}")
        return 0

    return _guard(go, "evalrx export")


def labels_main(argv: Optional[Sequence[str]] = None) -> int:
    """`evalrx labels import FILE [--run ID] [--annotator NAME]`: human labels from a labels CSV (what the
    app's label export writes), labels JSONL, AgentRx ground truth, or a TRAIL annotation (errors by span)."""
    p = argparse.ArgumentParser(prog="evalrx labels", description="Bring human labels in from a file.")
    p.add_argument("action", choices=["import"])
    p.add_argument("path", help="a labels CSV, labels JSONL, AgentRx ground-truth JSON, or a TRAIL annotation JSON")
    p.add_argument("--run", type=int, metavar="RUN_ID", help="find the cases in this run only")
    p.add_argument("--annotator", metavar="NAME", help="who the labels are from (default: the file's own names)")
    _url_arg(p)
    args = p.parse_args(argv)

    def go() -> int:
        import evalrx.interop as X
        import evalrx.store as S

        try:
            res = X.import_labels(args.path, run_id=args.run, annotator=args.annotator, store=S.connect(args.url))
        except S.SchemaError:
            raise
        except (ValueError, FileNotFoundError) as exc:
            print(f"evalrx labels: error: {exc}", file=sys.stderr)
            return 2
        same = f", {res.n_unchanged} already there" if res.n_unchanged else ""
        print(
            f"stored {res.n_labels} labels and {res.n_step_labels} step labels ({res.format}) "
            f"from {', '.join(res.annotators) or 'no annotator'}{same}"
        )
        if res.kinds_created:
            print(f"  new custom kinds: {', '.join(res.kinds_created)}")
        if res.unmatched:
            shown = "; ".join(res.unmatched[:20]) + (
                f" and {len(res.unmatched) - 20} more" if len(res.unmatched) > 20 else ""
            )
            print(f"  {len(res.unmatched)} not matched to a stored trajectory: {shown}")
        return 0

    return _guard(go, "evalrx labels")


def diagnose_main(argv: Optional[Sequence[str]] = None) -> int:
    """`evalrx diagnose [RUN_ID] [--trajectory ID]`: diagnose stored trajectories again (all of a run, or some);
    with `--judge SPEC`, ask a judge model about a run's failed trajectories (`_judge`)."""
    p = argparse.ArgumentParser(
        prog="evalrx diagnose",
        description="Recompute stored trajectories' diagnoses; with --judge, ask a judge model why each one failed.",
    )
    p.add_argument("run_id", nargs="?", type=int, help="only this run (default: every run)")
    p.add_argument("--trajectory", type=int, action="append", help="only this trajectory (repeatable)")
    judging = p.add_argument_group("a judge model (a diagnosis source of its own, kept when the rules run again)")
    judging.add_argument("--judge", metavar="SPEC", help="the judge's model spec, e.g. gpt-4o-mini")
    judging.add_argument(
        "--backend", choices=["api", "hf_local"], help="default: api for API-only specs, else hf_local"
    )
    judging.add_argument("--base-url", help="the judge's OpenAI-compatible server (api backend)")
    judging.add_argument(
        "--api-key-env",
        type=env_var_name,
        metavar="VAR",
        help="api backend: the name of an environment variable holding the judge's key; sent only to --base-url",
    )
    judging.add_argument("--timeout", type=call_timeout, metavar="SECONDS", help="api backend: budget of one call")
    judging.add_argument("--retries", type=retries, metavar="N", help="api backend: tries after the first")
    judging.add_argument("--limit", type=whole(1), metavar="N", help="judge at most N trajectories")
    from evalrx.runner.judge_jobs import JUDGE_BUDGET  # the form's fields read the same ranges and defaults

    budget_help = {
        "max_new_tokens": "the judge's answer limit",
        "max_steps": "steps of a trajectory the prompt shows",
        "max_step_chars": "characters of each step's text the prompt shows; smaller for a small local judge",
    }
    for name, (low, high, default) in JUDGE_BUDGET.items():
        judging.add_argument(
            "--" + name.replace("_", "-"),
            type=whole(low, high),
            metavar="N",
            help=f"{budget_help[name]} ({low}-{high}, default {default})",
        )
    judging.add_argument("--all", action="store_true", help="judge the passing trajectories too (false alarms)")
    judging.add_argument(
        "--judge-strategy",
        choices=["all_at_once", "step_by_step", "binary_search"],
        help="how the judge reads each log (Who&When's strategies): all_at_once (default: the whole log, one "
        "answer), step_by_step (one step at a time from the start until it names the decisive mistake: up to one "
        "call per step), binary_search (which half holds it, halved to one step: about log2(steps) + 1 calls)",
    )
    judging.add_argument(
        "--with-findings", action="store_true", help="show the judge what the other sources found (a prompt variant)"
    )
    judging.add_argument(
        "--queue",
        action="store_true",
        help="hand the work to the workers instead of judging here (`evalrx worker`; the key is read from "
        "--api-key-env in the worker's environment)",
    )
    judging.add_argument(
        "--concurrency",
        type=whole(1, 64),
        metavar="N",
        help="with --queue, api backend: calls in flight at once (default: the run's concurrency)",
    )
    judging.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    _url_arg(p)
    args = p.parse_args(argv)
    if args.judge is None:
        judge_only = ("backend", *_API_ONLY, "limit", "all", "with_findings", "judge_strategy", "queue", "concurrency")
        given = _given(args, judge_only)
        if given:
            p.error(f"{', '.join(given)} need --judge SPEC")

    def go() -> int:
        import evalrx.store as S

        store = S.connect(args.url)
        if args.judge is not None:
            return _judge(p, args, store)
        from evalrx.runner.diagnose import rediagnose

        n = rediagnose(args.trajectory, run_id=args.run_id, store=store)
        counts = S.failure_kind_counts(args.run_id, store=store)
        print(
            f"diagnosed {counted(n, 'trajectory', 'trajectories')}; by kind: "
            + (", ".join(f"{k} {v}" for k, v in counts.items()) or "none")
        )
        return 0

    return _guard(go, "evalrx diagnose")


# The judge's options that only the api backend reads (argparse's names).
_API_ONLY = ("base_url", "api_key_env", "timeout", "retries")


def _given(args: argparse.Namespace, names: "tuple[str, ...]") -> "list[str]":
    """The flags among `names` given on the command line (a value other than their None or False default)."""
    return [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) is not None and getattr(args, n) is not False]


def _judge_targets(args: argparse.Namespace, store) -> "list[int]":
    """The trajectories `evalrx diagnose --judge` judges, here or queued; when there are none, a line says so."""
    from evalrx.runner.judging import judge_targets

    ids = judge_targets(
        args.run_id, trajectory_ids=args.trajectory, include_passing=args.all, limit=args.limit, store=store
    )
    if not ids:
        which = "trajectories" if args.all else "failed trajectories"
        print(f"no {which} to judge" + ("" if args.all else " (--all adds the passing ones)"))
    return ids


def _judge(p: argparse.ArgumentParser, args: argparse.Namespace, store) -> int:
    """`evalrx diagnose RUN --judge SPEC`: judge in this process, a line per trajectory, then a summary;
    1 when a call failed (nothing stored for it), else 0."""
    import os

    import evalrx.store as S
    from evalrx.diagnosis.judge import MAX_ANSWER_TOKENS
    from evalrx.models import load, resolve_spec_key
    from evalrx.models.backends.api_secrets import redact_url
    from evalrx.runner.judging import judge_trajectories
    from evalrx.specs import get_spec

    if args.run_id is None and not args.trajectory:
        p.error("--judge needs a run id or --trajectory ID")
    if args.run_id is not None and S.get_run(args.run_id, store=store) is None:
        raise ValueError(f"no run with id {args.run_id}")
    spec = get_spec(resolve_spec_key(args.judge))
    backend = args.backend or ("api" if spec.api_only else "hf_local")
    if spec.api_only and backend != "api":
        p.error(f"{spec.key} is API-only: use --backend api (with --base-url for your server), not {backend!r}")
    if backend != "api":
        for flag in _given(args, _API_ONLY):
            p.error(f"{flag} applies to the api backend only, not {backend!r}")
    if args.concurrency is not None and not args.queue:
        p.error("--concurrency applies with --queue only")
    if args.queue:
        return _queue_judge(args, spec.key, backend, store)
    runtime: dict = {"max_new_tokens": args.max_new_tokens or MAX_ANSWER_TOKENS}
    if backend == "api":
        runtime["base_url"] = args.base_url
        if args.api_key_env:
            key = os.environ.get(args.api_key_env)  # read here, held by the judge's client only, never stored
            if not key:
                raise ValueError(f"--api-key-env {args.api_key_env}: that environment variable is empty or unset")
            runtime["api_key"] = key
        runtime.update({k: v for k, v in (("timeout", args.timeout), ("max_retries", args.retries)) if v is not None})
    ids = _judge_targets(args, store)
    if not ids:
        return 0
    model = load(spec.key, backend=backend, **runtime)
    # Where the judge runs is part of who it is; a URL's user:password and query never leave this process.
    server = redact_url(getattr(model, "base_url", None)).split("?")[0].split("#")[0] or None
    how = f", {args.judge_strategy}" if args.judge_strategy else ""
    print(
        f"judging {counted(len(ids), 'trajectory', 'trajectories')} with {spec.key} ({backend}{', ' + server if server else ''}{how})"
    )
    from tqdm import tqdm

    bar = tqdm(total=len(ids), unit="trajectory", disable=args.no_progress, file=sys.stderr)

    def shown(done) -> None:
        bar.update(1)
        tqdm.write(done.line(), file=sys.stdout)

    try:
        results = judge_trajectories(
            ids,
            model,
            server=server,
            with_findings=args.with_findings,
            store=store,
            on_result=shown,
            max_new_tokens=args.max_new_tokens,
            max_steps=args.max_steps,
            max_step_chars=args.max_step_chars,
            strategy=args.judge_strategy,
        )
    finally:
        bar.close()
        close = getattr(model, "close", None)
        if close is not None:
            close()
    verdicts = sum(r.diagnosis is not None for r in results)
    refused = sum(r.diagnosis is None and not r.failed for r in results)
    failed = sum(r.failed for r in results)
    cached = sum(r.cached for r in results)
    print(
        f"judged {counted(len(results), 'trajectory', 'trajectories')}: {counted(verdicts, 'verdict')}, {refused} refused, {cached} from the cache"
        + (f", {failed} failed calls (nothing stored for them; run again to retry)" if failed else "")
    )
    return 1 if failed else 0


def _queue_judge(args: argparse.Namespace, spec: str, backend: str, store) -> int:
    """`evalrx diagnose RUN --judge SPEC --queue`: the same work as a judge job for the workers; prints its id.
    The key's value is never read here: the job names the variable, the worker reads it from its own environment."""
    from evalrx.runner.judge_jobs import JudgeConfig, queue_judge, run_concurrency

    config = JudgeConfig(
        spec,
        backend=backend,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        timeout=args.timeout,
        retries=args.retries,
        with_findings=args.with_findings,
        concurrency=args.concurrency or run_concurrency(args.run_id, store=store),
        max_new_tokens=args.max_new_tokens,
        max_steps=args.max_steps,
        max_step_chars=args.max_step_chars,
        strategy=args.judge_strategy,
    ).checked()
    ids = _judge_targets(args, store)
    if not ids:
        return 0
    scope = (f"run {args.run_id}: " if args.run_id is not None else "") + (
        "failed and passing trajectories" if args.all else "failed trajectories"
    )
    job = queue_judge(config, ids, run_id=args.run_id, scope=scope, store=store)
    where = f"{backend}, {config.base_url}" if config.base_url else backend
    key = f"; its key from ${config.api_key_env} in the worker's environment" if config.api_key_env else ""
    print(
        f"queued judge job {job}: {counted(len(ids), 'trajectory', 'trajectories')} with {spec} ({where}){key}; `evalrx worker` runs it"
    )
    return 0


def worker_command(argv: Optional[Sequence[str]] = None) -> int:
    """`evalrx worker`: see `evalrx.runner.worker.worker_main`."""
    from evalrx.runner.worker import worker_main

    return worker_main(argv)


COMMANDS: dict = {
    "db": (db_main, "manage the store's schema (`evalrx db upgrade`)"),
    "worker": (worker_command, "run queued jobs from the store"),
    "runs": (runs_main, "list runs; show, cancel or retry one"),
    "compare": (compare_main, "compare two runs case by case (fixes, regressions, McNemar, bootstrap CI)"),
    "import": (import_main, "import trajectories (evalrx/OpenAI JSONL, Inspect, ATIF, tau-bench, Who&When, spans)"),
    "export": (export_main, "export a run as JSONL, Parquet, ATIF or OpenTelemetry (OTLP JSON)"),
    "labels": (labels_main, "import human labels (labels CSV or JSONL, AgentRx ground truth)"),
    "diagnose": (diagnose_main, "diagnose stored trajectories again, or with a judge model (why each one failed)"),
}
