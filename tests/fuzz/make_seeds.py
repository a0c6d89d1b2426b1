"""Writes the fuzz seeds in tests/fixtures/fuzz/seeds/ (committed; rerun only to refresh them).

    PYTHONPATH=. python tests/fuzz/make_seeds.py

Real files, each small: an Inspect `.eval` and `.json` log written by inspect_ai's mock model
(tests/inspect_logs.py); that log exported by evalrx as JSONL, ATIF (also zipped with its pictures), OTLP and
Parquet; the autogen OpenInference fixture's team root span and three model calls; a tau-bench result and a
Who&When log cut to two messages; AgentRx ground truth (one record); labels files in each accepted format;
a case file (prompt, turns, function documents) and an MCP config.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "tests" / "fixtures" / "fuzz" / "seeds"
DATA = ROOT.parent / "shared" / "data"


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from inspect_logs import inspect_env, write_eval_log

    import evalrx.store as S
    from evalrx.interop import bundle, export_run, import_file

    SEEDS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        with inspect_env(tmp_path):
            (SEEDS / "inspect.eval").write_bytes(write_eval_log(tmp_path / "e", "eval").read_bytes())
            (SEEDS / "inspect.json").write_bytes(write_eval_log(tmp_path / "j", "json").read_bytes())
        url = f"sqlite:///{tmp_path / 'seed.sqlite'}"
        S.upgrade(url)
        run_id = import_file(SEEDS / "inspect.eval", store=url).run_ids[0]
        for name in ("run.jsonl", "run.atif.jsonl", "run.otlp.jsonl", "run.parquet"):
            export_run(run_id, SEEDS / name, store=url)
        bundle(SEEDS / "run.atif.jsonl")  # run.atif.jsonl.zip: the ATIF export zipped with its pictures
        S.forget(url)
    shutil.rmtree(SEEDS / "images", ignore_errors=True)  # the exports' pictures: an import without them still reads

    spans = (ROOT / "tests" / "fixtures" / "interop" / "autogen_team.spans.jsonl").read_text().splitlines()
    team = [s for s in spans if json.loads(s)["name"] == "RoundRobinGroupChat.run_stream"]
    trace = json.loads(team[0])["context"]["trace_id"]
    llm = [s for s in spans if json.loads(s)["context"]["trace_id"] == trace and "OpenAI" in json.loads(s)["name"]]
    (SEEDS / "autogen.spans.jsonl").write_text("\n".join(llm[:3] + team) + "\n")  # the team's root and 3 model calls

    tau = json.loads((DATA / "agentrx_tau_retail" / "tau_dataset_failed.json").read_text())
    first = tau[0]
    if isinstance(first.get("traj"), list):
        first = dict(first, traj=first["traj"][:4])
    (SEEDS / "tau_bench.json").write_text(json.dumps([first], ensure_ascii=False))
    ww = json.loads((DATA / "whowhen_algorithm_generated" / "1.json").read_text())
    if isinstance(ww.get("history"), list):
        ww["history"] = ww["history"][:2]
    (SEEDS / "whowhen.json").write_text(json.dumps(ww, ensure_ascii=False))
    gt = json.loads((DATA / "agentrx_tau_retail" / "tau_ground_truth.json").read_text())
    (SEEDS / "agentrx.labels.json").write_text(json.dumps(gt[:1], ensure_ascii=False))

    chat = {
        "messages": [
            {"role": "user", "content": "What is 3 + 4?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expr": "3+4"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "7"},
            {"role": "assistant", "content": "7"},
        ]
    }
    (SEEDS / "openai_chat.jsonl").write_text(json.dumps(chat) + "\n")
    (SEEDS / "labels.csv").write_text(
        "case_id,attempt,outcome,failure_kind,first_wrong_step,step_idx,note,annotator,created_at,agent\n"
        "look,1,fail,wrong_tool,1,,picked the wrong key,ann,2026-01-02T03:04:05,\n"
        "missing,2,pass,,,,,ann,,\n"
    )
    (SEEDS / "labels.jsonl").write_text(
        json.dumps({"case_id": "look", "attempt": 1, "outcome": "fail", "kind": "wrong_tool", "step": 1})
        + "\n"
        + json.dumps({"sample_id": "missing", "outcome": "pass", "note": "ok", "annotator": "bo"})
        + "\n"
    )
    (SEEDS / "trail.labels.json").write_text(
        json.dumps(
            {
                "trace_id": "0af7651916cd43dd8448eb211c80319c",
                "errors": [
                    {
                        "category": "Tool Selection Errors",
                        "location": "b7ad6b7169203331",
                        "evidence": "called the wrong tool",
                        "description": "wrong tool",
                        "impact": "HIGH",
                    }
                ],
                "scores": [{"overall": 2}],
            }
        )
    )
    demo = (ROOT / "evalrx" / "demo" / "suites" / "multi_step.jsonl").read_text().splitlines()[:2]
    own = [  # a conversation (`turns`) and a case with its own function document
        '{"id": "conv-1", "turns": [{"prompt": "What is 3 + 4?", "expected": 7, "grader": {"kind": "numeric"}}, {"prompt": "And times 2?", "expected": 14}], "tools": ["calculator"]}',
        '{"id": "fn-1", "prompt": "Weather in Paris?", "expected": [{"get_weather": {"city": ["Paris"]}}], "grader": {"kind": "calls"}, "tools": [{"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]}',
    ]
    (SEEDS / "cases.jsonl").write_text("\n".join(demo + own) + "\n")
    (SEEDS / "mcp.json").write_text(
        '{"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC", "API_KEY": "${API_KEY}"}, "timeout": 20, "shareSession": true}, "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}, "type": "http"}, "off": {"command": "x", "disabled": true}}}'
        + "\n"
    )
    for p in sorted(SEEDS.iterdir()):
        print(f"{p.name:28} {p.stat().st_size:>8}")


if __name__ == "__main__":
    main()
