"""The demo's episodes: one scripted agent run each (prompt, tool calls, final answer), drawn
by `Generator` from the training or the held-out side of the world, and the training stream.

In training, a single lookup's query is the question's last sentence copied verbatim (the tool
matches names and keywords), which a tiny model can generalise to new wordings; two-entity
questions use `"<attribute> of <name>"` queries. The suites' reference calls are canonical; the
benchmark compares observations, not query strings.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from evalrx.demo.templates import (
    ABOUT_HELD_OUT,
    ABOUT_REPLY,
    ABOUT_TRAIN,
    ARITH3_TRAIN,
    ARITH_HELD_OUT,
    ARITH_TRAIN,
    ARITH_TRAIN_EXTRA,
    ARITH_UNARY_TRAIN,
    DISTRACTORS_HELD_OUT,
    DISTRACTORS_TRAIN,
    ECHO_HELD_OUT,
    ECHO_TRAIN,
    GREETING_REPLY,
    GREETINGS_HELD_OUT,
    GREETINGS_TRAIN,
    LOOKUP_TEMPLATES,
    MULTI_HELD_OUT,
    MULTI_TRAIN,
    NAME_HELD_OUT,
    NAME_TRAIN,
    STORY_HELD_OUT,
    STORY_TRAIN,
    THANKS_HELD_OUT,
    THANKS_TRAIN,
    THINGS,
    TWO_STEP_HELD_OUT,
    TWO_STEP_SPECIAL_HELD_OUT,
    TWO_STEP_SPECIAL_TRAIN,
    TWO_STEP_TRAIN,
    TWO_STEP_TRAIN_EXTRA,
    UNKNOWN_ANSWER,
    UNKNOWN_REGEX,
    WORDS,
)
from evalrx.demo.world import NUMERIC_ATTRS, Names, make_world, split_pairs, world_names
from evalrx.tools.calculator import calculator
from evalrx.tools.lookup import fact_sentence, search

_SENTENCE_BREAK = re.compile(r"(?<=[.!?]) +")


@dataclass
class Episode:
    """One scripted agent run: a prompt, the calls a good agent makes and its final answer."""

    prompt: str
    calls: list = field(default_factory=list)  # [(tool name, arguments dict)]
    answer: str = ""
    task_type: str = ""
    difficulty: str = "easy"
    expected: Any = None
    grader: dict = field(default_factory=dict)
    kb: Optional[dict] = field(default=None, repr=False, compare=False)  # the world lookups run against

    def messages(self) -> list[dict]:
        """OpenAI-style messages as the Agent builds them with QwenToolCodec (raw call text as content)."""
        msgs: list[dict] = [{"role": "user", "content": self.prompt}]
        for name, args in self.calls:
            msgs.append({"role": "assistant", "content": call_text(name, args)})
            msgs.append({"role": "tool", "tool_call_id": f"call_{len(msgs)}", "content": run_tool(name, args, self.kb)})
        msgs.append({"role": "assistant", "content": self.answer})
        return msgs


def call_text(name: str, args: dict) -> str:
    """The exact Hermes text the model is trained to generate for one call."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


_KB_CACHE: dict = {}


def run_tool(name: str, args: dict, kb: Optional[dict] = None) -> str:
    """Run a demo tool against `kb` (default: the bundled world): what the agent will observe."""
    if name == "calculator":
        return calculator(**args)
    if kb is None:
        kb = _KB_CACHE.setdefault("kb", make_world())
    return search(args["query"], kb)


def _num_grader(value: Any) -> dict:
    return {"kind": "numeric", "rel_tol": 1e-4, "abs_tol": 1e-6}


class Generator:
    """Draws episodes of every task type; `held_out=True` draws from the held-out side."""

    def __init__(self, world: dict, seed: int, held_out: bool, all_pairs: bool = False) -> None:
        self.world = world
        self.rng = random.Random(seed)
        self.held_out = held_out
        self.by_name = {e["name"]: e for e in world["entities"]}
        train_pairs, test_pairs = split_pairs(world)
        self.pairs = test_pairs if held_out else train_pairs
        if all_pairs:  # a throw-away training world: nothing in it is held out
            self.pairs = sorted(train_pairs + test_pairs)
        self.numeric_pairs = [p for p in self.pairs if p[1] in NUMERIC_ATTRS]
        # Fresh names for unknown entities and people in no-tool prompts, disjoint between sides.
        pool_rng = random.Random(seed * 7 + (1 if held_out else 2))
        self.names = Names(pool_rng, taken=set(world_names(world)))
        self.places = [e["name"] for e in world["entities"] if e["type"] == "city"]

    # -- helpers
    def _pick(self, items: list) -> Any:
        return self.rng.choice(items)

    def _templates(self, options: list, held: list) -> list:
        return held if self.held_out else options

    def _fresh_person(self) -> str:
        return self.names.new((2,))

    def _number(self, digits: tuple) -> int:
        d = self.rng.randint(*digits)
        return self.rng.randint(10 ** (d - 1) if d > 1 else 1, 10**d - 1)

    def _query(self, prompt: str, attr: str, name: str) -> str:
        """The lookup query a good agent sends: canonical on the held-out side (the suites' reference
        calls); in training, the question's last sentence verbatim whenever the tool answers that
        with the same fact, since copying a question generalises to wordings training never shows."""
        canonical = f"{attr} of {name}"
        if self.held_out:
            return canonical
        last = _SENTENCE_BREAK.split(prompt.strip())[-1]
        got, want = search(last, self.world), search(canonical, self.world)
        same = got == want or (got.startswith("no results") and want.startswith("no results"))
        return last if same else canonical

    def _distractor(self, pool: list) -> str:
        return self._pick(pool).format(
            age=self.rng.randint(8, 90),
            p=self._fresh_person(),
            k=self.rng.randint(2, 60),
            place=self._pick(self.places),
        )

    # -- arithmetic
    def arithmetic(
        self, digits: tuple = (1, 4), paraphrase: bool = False, distractor: bool = False, three: float = 0.0
    ) -> Episode:
        if three and self.rng.random() < three:
            small = (digits[0], min(3, digits[1]))
            a, b, c = (self._number(small) for _ in range(3))
            o1, o2 = self._pick(["+", "-", "*"]), self._pick(["+", "-", "*"])
            prompt = self._pick(ARITH3_TRAIN).format(a=a, b=b, c=c, o1=o1, o2=o2)
            expr = f"{a} {o1} {b} {o2} {c}"
        elif not self.held_out and self.rng.random() < 0.12:
            template, expr_t = self._pick(ARITH_UNARY_TRAIN)
            a, b = self._number(digits), self._number((1, 3))
            prompt, expr = template.format(a=a, b=b), expr_t.format(a=a, b=b)
        else:
            pool = ARITH_HELD_OUT if paraphrase else ARITH_TRAIN
            if not self.held_out and self.rng.random() < 0.4:
                pool = ARITH_TRAIN_EXTRA
            template, op = self._pick(pool)
            a, b = self._number(digits), self._number(digits)
            if op == "/" and self.rng.random() < 0.6:
                b = self._number((1, max(1, min(2, digits[1]))))
                a = b * self._number((1, max(1, digits[1] - 1)))
            prompt = template.format(a=a, b=b)
            expr = f"{a} {op} {b}"
        if distractor:
            prompt = self._distractor(DISTRACTORS_HELD_OUT if self.held_out else DISTRACTORS_TRAIN) + prompt
        result = calculator(expr)
        return Episode(
            prompt,
            [("calculator", {"expression": expr})],
            f"The answer is {result}.",
            "arithmetic",
            "easy",
            result,
            _num_grader(result),
        )

    # -- lookup
    def _fact(self, name: str, attr: str) -> tuple[Any, str]:
        e = self.by_name[name]
        return e["attributes"][attr], fact_sentence(name, attr, e["attributes"][attr], e.get("units", {}).get(attr, ""))

    def lookup(self, paraphrase: bool = False, distractor: bool = False) -> Episode:
        name, attr = self._pick(self.pairs)
        templates = LOOKUP_TEMPLATES[attr]
        template = templates[-1] if paraphrase else self._pick(templates[:-1])
        prompt = template.format(n=name)
        if distractor:
            prompt = self._distractor(DISTRACTORS_HELD_OUT if self.held_out else DISTRACTORS_TRAIN) + prompt
        value, sentence = self._fact(name, attr)
        grader = _num_grader(value) if isinstance(value, int) else {"kind": "contains"}
        return Episode(
            prompt, [("lookup", {"query": self._query(prompt, attr, name)})], sentence, "lookup", "easy", value, grader
        )

    def unanswerable(self) -> Episode:
        attr = self._pick(list(LOOKUP_TEMPLATES))
        name = self.names.new()
        templates = LOOKUP_TEMPLATES[attr]
        prompt = self._pick(templates if self.held_out else templates[:-1]).format(n=name)
        return Episode(
            prompt,
            [("lookup", {"query": self._query(prompt, attr, name)})],
            UNKNOWN_ANSWER,
            "lookup",
            "unanswerable",
            "unknown",
            {"kind": "regex", "pattern": UNKNOWN_REGEX},
        )

    # -- two steps: lookup then calculator
    def two_step(self, held_templates: bool = False) -> Episode:
        name, attr = self._pick(self.numeric_pairs)
        value, _ = self._fact(name, attr)
        special = (TWO_STEP_SPECIAL_HELD_OUT if held_templates else TWO_STEP_SPECIAL_TRAIN).get(attr, [])
        if attr in ("founding year", "birth year"):
            options = list(special)  # "the founding year plus 12" reads oddly; ask for years between
        else:
            options = list(TWO_STEP_HELD_OUT if held_templates else TWO_STEP_TRAIN) + special
            if not self.held_out:
                options += TWO_STEP_TRAIN_EXTRA
        template, expr_t = self._pick(options)
        k = self.rng.randint(2, 9) if ("times" in template or "divided" in template) else self.rng.randint(10, 999)
        y = self.rng.randint(value + 1, value + 400) if "{y}" in template else 0
        prompt = template.format(attr=attr, n=name, k=k, y=y)
        expr = expr_t.format(v=value, k=k, y=y)
        result = calculator(expr)
        calls = [("lookup", {"query": self._query(prompt, attr, name)}), ("calculator", {"expression": expr})]
        return Episode(prompt, calls, f"The answer is {result}.", "two_step", "easy", result, _num_grader(result))

    def multi_step(self, held_templates: bool = False) -> Episode:
        attr = self._pick(["population", "height", "length", "population"])
        same = [p for p in self.pairs if p[1] == attr]
        (n, _), (m, _) = self.rng.sample(same, 2)
        template = self._pick(MULTI_HELD_OUT if held_templates else MULTI_TRAIN)
        prompt = template.format(attr=attr, n=n, m=m)
        vn, vm = self._fact(n, attr)[0], self._fact(m, attr)[0]
        expr = f"{vn} - {vm}" if "bigger" in template else f"{vn} + {vm}"
        result = calculator(expr)
        calls = [
            ("lookup", {"query": f"{attr} of {n}"}),
            ("lookup", {"query": f"{attr} of {m}"}),
            ("calculator", {"expression": expr}),
        ]
        return Episode(prompt, calls, f"The answer is {result}.", "two_step", "multi", result, _num_grader(result))

    # -- no tool
    def no_tool(self) -> Episode:
        kind = self._pick(["greeting", "greeting", "thanks", "name", "echo", "echo", "story", "story", "about"])
        held = self.held_out
        if kind == "greeting":
            prompt = self._pick(GREETINGS_HELD_OUT if held else GREETINGS_TRAIN)
            return Episode(
                prompt,
                [],
                GREETING_REPLY,
                "no_tool",
                "easy",
                "hello",
                {"kind": "regex", "pattern": r"(?i)\b(hello|hi|hey|greetings)\b"},
            )
        if kind == "thanks":
            prompt = self._pick(THANKS_HELD_OUT if held else THANKS_TRAIN)
            return Episode(prompt, [], "You're welcome!", "no_tool", "easy", "welcome", {"kind": "contains"})
        if kind == "about":
            prompt = self._pick(ABOUT_HELD_OUT if held else ABOUT_TRAIN)
            return Episode(prompt, [], ABOUT_REPLY, "no_tool", "easy", "assistant", {"kind": "contains"})
        if kind == "name":
            p = self._fresh_person()
            prompt = self._pick(NAME_HELD_OUT if held else NAME_TRAIN).format(p=p)
            return Episode(prompt, [], f"Your name is {p}.", "no_tool", "easy", p, {"kind": "contains"})
        if kind == "echo":
            words = " ".join(self.rng.sample(WORDS, self.rng.randint(1, 3)))
            prompt = self._pick(ECHO_HELD_OUT if held else ECHO_TRAIN).format(w=words)
            return Episode(prompt, [], words, "no_tool", "easy", words, {"kind": "normalized"})
        p, k, thing = self._fresh_person(), self.rng.randint(2, 999), self._pick(THINGS)
        prompt = self._pick(STORY_HELD_OUT if held else STORY_TRAIN).format(p=p, k=k, thing=thing)
        return Episode(prompt, [], f"{p} has {k} {thing}.", "no_tool", "easy", k, _num_grader(k))


# Training mix: (weight, generator method, kwargs).
TRAIN_MIX: "list[tuple[float, str, dict[str, Any]]]" = [
    (0.23, "arithmetic", {"digits": (1, 4), "three": 0.15}),
    (0.04, "arithmetic", {"digits": (4, 5)}),
    (0.04, "arithmetic", {"digits": (1, 4), "distractor": True}),
    (0.24, "lookup", {}),
    (0.03, "lookup", {"distractor": True}),
    (0.06, "unanswerable", {}),
    (0.18, "two_step", {}),
    (0.05, "multi_step", {}),
    (0.14, "no_tool", {}),
]


def training_episodes(
    n: int, seed: int = 0, exclude: Optional[set] = None, world: Optional[dict] = None, world_pool: int = 0
) -> Iterator[Episode]:
    """Yield `n` training episodes drawn from the training side, skipping excluded prompts.

    Args:
        n: how many episodes.
        seed: training seed.
        exclude: prompts never to yield (the held-out suites).
        world: the bundled world (default: `make_world()`).
        world_pool: 0 draws every episode from the bundled world's training pairs. N > 0 draws
            each episode from one of N freshly generated worlds (new names and values), so
            facts cannot be memorised and the model must copy them from the observation.
    """
    world = world or make_world()
    gen = Generator(world, seed=10_000 + seed, held_out=False)
    pool = [
        Generator(
            make_world(seed=50_000 + 1_000 * seed + i), seed=20_000 + 1_000 * seed + i, held_out=False, all_pairs=True
        )
        for i in range(world_pool)
    ]
    picker = random.Random(30_000 + seed)
    exclude = exclude or set()
    weights = [w for w, _, _ in TRAIN_MIX]
    made = 0
    while made < n:
        source = picker.choice(pool) if pool else gen
        _, method, kwargs = source.rng.choices(TRAIN_MIX, weights=weights)[0]
        ep = getattr(source, method)(**kwargs)
        if ep.prompt in exclude:
            continue
        ep.kb = source.world
        made += 1
        yield ep
