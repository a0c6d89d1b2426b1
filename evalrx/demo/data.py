"""The demo's held-out case suites, and the command that writes them and the world to disk.

The world is drawn in `evalrx.demo.world`, the wordings live in `evalrx.demo.templates`, and
`evalrx.demo.episodes` draws the episodes of both the suites and the training stream.

Everything is generated from one seed, so `python -m evalrx.demo.data` rewrites `kb.json` and
`suites/*.jsonl` byte for byte, and `evalrx.demo.train` regenerates the same training episodes.

Held-out cases never appear in training: their (entity, attribute) pairs are held out of the
lookup episodes, their prompts are excluded from the training stream, and the harder suites use
longer numbers (6-digit operands; training stops at 5), wordings (paraphrases, distractors) and
task shapes that training does not show. Training shows the words of the paraphrases in other
sentence frames, so those suites test recombination rather than vocabulary nobody taught.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional

from evalrx.demo.episodes import Generator
from evalrx.demo.world import make_world

DEMO_DIR = Path(__file__).resolve().parent
KB_PATH = DEMO_DIR / "kb.json"
SUITES_DIR = DEMO_DIR / "suites"
SUITE_SEED = 4321
DEMO_TOOLS = ["calculator", "lookup"]

# Suite name -> (count, generator method, kwargs, difficulty label).
SUITES: dict[str, tuple] = {
    "arithmetic_easy": (50, "arithmetic", {"digits": (1, 3)}, "easy"),
    "arithmetic_long": (30, "arithmetic", {"digits": (5, 6)}, "long"),
    "arithmetic_paraphrase": (30, "arithmetic", {"digits": (1, 3), "paraphrase": True}, "paraphrase"),
    "arithmetic_distractor": (30, "arithmetic", {"digits": (1, 3), "distractor": True}, "distractor"),
    "lookup_easy": (50, "lookup", {}, "easy"),
    "lookup_paraphrase": (25, "lookup", {"paraphrase": True}, "paraphrase"),
    "lookup_distractor": (25, "lookup", {"distractor": True}, "distractor"),
    "lookup_unanswerable": (25, "unanswerable", {}, "unanswerable"),
    "two_step": (40, "two_step", {}, "two_step"),
    "two_step_paraphrase": (20, "two_step", {"held_templates": True}, "paraphrase"),
    "multi_step": (20, "multi_step", {"held_templates": True}, "multi"),
    "no_tool": (40, "no_tool", {}, "easy"),
}


def make_suites(world: Optional[dict] = None, seed: int = SUITE_SEED) -> dict[str, list[dict]]:
    """Draw every held-out suite: `{suite name: [case dicts]}` in the JSONL line format."""
    world = world or make_world()
    gen = Generator(world, seed=seed, held_out=True)
    seen: set = set()
    suites: dict[str, list[dict]] = {}
    for suite, (count, method, kwargs, difficulty) in SUITES.items():
        episodes = distinct_episodes(partial(getattr(gen, method), **kwargs), count, lambda ep: ep.prompt, seen)
        suites[suite] = [_case(f"{suite}-{i:03d}", ep, difficulty) for i, ep in enumerate(episodes, 1)]
    return suites


def _case(case_id: str, ep: Any, difficulty: str) -> dict:
    grader = dict(ep.grader)
    expected = ep.expected
    if grader["kind"] == "numeric" and isinstance(expected, str):
        expected = float(expected) if "." in expected else int(expected)
    return {
        "id": case_id,
        "prompt": ep.prompt,
        "expected": expected,
        "grader": grader,
        "task_type": ep.task_type,
        "difficulty": difficulty,
        "tools": list(DEMO_TOOLS),
        "reference_calls": [{"name": n, "arguments": a} for n, a in ep.calls],
    }


def distinct_episodes(draw: Callable[[], Any], count: int, key: Callable[[Any], Any], seen: set) -> list:
    """`count` episodes from `draw`, none with the `key` of one in `seen` (which records theirs): no two alike."""
    episodes: list = []
    while len(episodes) < count:
        ep = draw()
        if key(ep) in seen:
            continue
        seen.add(key(ep))
        episodes.append(ep)
    return episodes


def held_out_prompts(suites_dir: Path = SUITES_DIR) -> set:
    """Every prompt of the committed suites (training excludes them)."""
    prompts = set()
    for path in sorted(Path(suites_dir).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                prompts.add(json.loads(line)["prompt"])
    return prompts


def write_all(out_dir: Path = DEMO_DIR) -> dict:
    """Write kb.json and suites/*.jsonl; returns counts per suite."""
    world = make_world()
    (out_dir / "kb.json").write_text(json.dumps(world, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    suites_dir = out_dir / "suites"
    suites_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, cases in make_suites(world).items():
        lines = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
        (suites_dir / f"{name}.jsonl").write_text(lines, encoding="utf-8")
        counts[name] = len(cases)
    return counts


if __name__ == "__main__":
    counts = write_all()
    print(json.dumps(counts, indent=1), "total", sum(counts.values()))
