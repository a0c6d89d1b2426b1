"""The demo VLM's episodes and its held-out image suites: `python -m evalrx.demo.vision_data`.

Four task kinds over the pictures of `evalrx.demo.vision_world`:

- `read`: read the number on a card, then compute with it (`calculator`);
- `compare`: combine the numbers of the left and the right panel (`calculator`);
- `zoom`: the code on a small label is too small to read; zoom into its corner (`image_zoom`),
  read the code from the zoomed picture, and answer it (or compute with it first);
- `lookup`: read a country's name from a card and `lookup` the fact the question asks about it.

Training also draws (`TRAIN_MIX`) the text demo's own episodes, with no picture (`text`), as LLaVA
mixes text-only turns into its tuning, so the language model keeps what it knew: copying a looked-up
fact, computing numbers stated in the question, answering without a tool. Most of its `lookup`
episodes name a country of a freshly drawn world, whose facts no weight can hold, so copying the
tool's answer is what pays (the bundled world has only twelve names that fit on a card).

The suites (`demo/vision_read`, `demo/vision_compare`, `demo/vision_zoom`, and harder ones training
never shows: `vision_lookup`'s (country, fact) pairs, a digit more, `*_long`, new wordings,
`vision_read_paraphrase`, and task shapes of their own, designed before the model was run on them: a
question the card answers with no tool, `vision_read_only`; a read-and-compute question about a picture
whose number is a small label that needs zooming first, `vision_small_card`; an arithmetic question
whose numbers are in the text beside an unrelated card, `vision_arith_distractor`; `demo/vision` is all
of them) are drawn from one seed and written with their pictures as case files, so the command rewrites
them byte for byte; the training stream draws from other seeds and skips every (kind, numbers) a suite
asks about.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Iterator, Optional

from evalrx.demo import vision_world as W
from evalrx.demo.data import distinct_episodes, held_out_prompts
from evalrx.demo.episodes import run_tool
from evalrx.demo.episodes import training_episodes as text_episodes
from evalrx.demo.world import make_world, world_names
from evalrx.tools.calculator import calculator
from evalrx.tools.lookup import load_kb

VISION_DIR = Path(__file__).resolve().parent / "vision_suites"
SUITE_SEED = 8765
VISION_TOOLS = ["calculator", "image_zoom", "lookup"]
OPS = {"+": "plus", "-": "minus", "*": "times"}

READ_TEMPLATES = [
    "What is the number on the card {word} {k}?",
    "Read the number on the card. What is it {word} {k}?",
    "Take the number shown on the card; what is that {word} {k}?",
]
COMPARE_TEMPLATES = [
    "What is the left number {word} the right number?",
    "Look at both panels. What is the number on the left {word} the number on the right?",
]
ZOOM_TEMPLATES = [
    "What is the code on the small label?",
    "Read the code written on the small label in the picture.",
]
ZOOM_COMPUTE_TEMPLATES = [
    "What is the code on the small label {word} {k}?",
]
# Wordings training never shows (the paraphrase suite).
READ_HELD_OUT = [
    "Use the figure printed on the card: {word} {k} gives what?",
    "The card shows a number. Compute that number {word} {k}.",
]

# Suite name -> (count, kind, arguments). The first three are the kinds as trained; the rest are
# harder than anything in training: a digit more than training ever shows, a new wording, or a new shape.
SUITES: dict[str, tuple[int, str, dict]] = {
    "vision_read": (60, "read", {}),
    "vision_compare": (50, "compare", {}),
    "vision_zoom": (50, "zoom", {}),
    "vision_read_long": (30, "read", {"digits": 4}),
    "vision_compare_long": (30, "compare", {"digits": 4}),
    "vision_zoom_long": (30, "zoom", {"digits": 5}),
    "vision_read_paraphrase": (30, "read", {"templates": READ_HELD_OUT}),
    # New shapes (their keys are kinds training never draws, so the training stream is unchanged).
    "vision_read_only": (20, "read_only", {}),
    "vision_small_card": (20, "small_card", {}),
    "vision_arith_distractor": (20, "arith", {}),
    # Read a name, then look it up: every (country, fact) pair asked here is one training never shows.
    "vision_lookup": (24, "lookup", {"held_out": True}),
}
NEW_SHAPES = ("vision_read_only", "vision_small_card", "vision_arith_distractor")
# A fact about the country named on a card (the lookup tool's attribute words are in each).
LOOKUP_ON_CARD = {
    "capital": [
        "What is the capital of the country on the card?",
        "Which city is the capital of the country named on the card?",
    ],
    "population": [
        "What is the population of the country on the card?",
        "How many people live in the country named on the card?",
    ],
    "currency": [
        "What is the currency of the country on the card?",
        "Which currency does the country named on the card use?",
    ],
    "founding year": [
        "When was the country on the card founded?",
        "In what year was the country named on the card founded?",
    ],
}
READ_ONLY_TEMPLATES = ["What number is on the card?", "Which number does the card show?"]
ARITH_TEMPLATES = ["What is {a} {word} {b}?", "Compute {a} {word} {b}."]


@dataclass
class VisionEpisode:
    """One scripted VLM agent run: a picture, a prompt, the calls a good agent makes and its answer."""

    prompt: str
    image: Any  # a PIL image
    calls: list = field(default_factory=list)  # [(tool name, arguments dict)]
    answer: str = ""
    kind: str = ""
    expected: Any = None
    key: tuple = ()  # (kind, numbers...): what the task asks about, for keeping suites out of training
    grader: dict = field(default_factory=lambda: {"kind": "numeric", "rel_tol": 1e-4, "abs_tol": 1e-6})
    kb: Optional[dict] = field(default=None, repr=False, compare=False)  # the lookups' world (None: the bundled kb)


def _num(value: str) -> Any:
    return float(value) if "." in value else int(value)


def _computed(prompt: str, picture: Any, calls: list, expr: str, key: tuple) -> "VisionEpisode":
    """An episode that ends with one calculator call on `expr` (after `calls`) and answers its result."""
    result = calculator(expr)
    calls = [*calls, ("calculator", {"expression": expr})]
    return VisionEpisode(prompt, picture, calls, f"The answer is {result}.", key[0], _num(result), key)


def _fits_card(entity: dict) -> bool:
    """A country whose name fits on a card: at most 8 plain letters, one a patch column."""
    name = entity["name"]
    return entity["type"] == "country" and len(name) <= W.CANVAS // W.CELL and name.isascii() and name.isalpha()


@lru_cache(maxsize=1)
def card_countries() -> tuple:
    """The knowledge base's countries whose names fit on a card, in its order."""
    return tuple(e for e in load_kb()["entities"] if _fits_card(e))


FRESH_WORLD_SEED = 80_000  # the seeds of the fresh worlds training's lookups draw from


@lru_cache(maxsize=4)
def fresh_countries(pool: int) -> tuple:
    """(country, its world) for every card-fitting country of `pool` freshly drawn worlds whose name is
    none of the bundled world's: facts that exist only in training, so they cannot be held in weights."""
    bundled = world_names(load_kb())
    out: "list[tuple[dict, dict]]" = []
    for i in range(pool):
        world = make_world(seed=FRESH_WORLD_SEED + i)
        out.extend((e, world) for e in world["entities"] if _fits_card(e) and e["name"].lower() not in bundled)
    return tuple(out)


@lru_cache(maxsize=1)
def held_out_facts() -> frozenset:
    """The (country, fact) pairs `vision_lookup` asks about: two of the four facts of each country, so
    training reads every name and asks every fact, never these pairs."""
    facts = list(LOOKUP_ON_CARD)
    return frozenset((e["name"], facts[(i + j) % len(facts)]) for i, e in enumerate(card_countries()) for j in (0, 1))


class VisionGenerator:
    """Draws vision episodes from one seed."""

    def __init__(self, seed: int, world_pool: int = 64) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.world_pool = world_pool
        self._text: Optional[Iterator] = None

    def _op(self) -> tuple[str, str]:
        op = self.rng.choice(list(OPS))
        return op, OPS[op]

    def _n(self, digits: int) -> int:
        """A number of `digits` digits, or of 2-3 (as training) when 0."""
        return self.rng.randint(10, 999) if not digits else self.rng.randint(10 ** (digits - 1), 10**digits - 1)

    def read(self, digits: int = 0, templates: Optional[list] = None) -> VisionEpisode:
        n = self._n(digits)
        op, word = self._op()
        k = self.rng.randint(2, 99)
        prompt = self.rng.choice(templates or READ_TEMPLATES).format(word=word, k=k)
        return _computed(prompt, W.card(n, self.rng), [], f"{n} {op} {k}", ("read", n, op, k))

    def compare(self, digits: int = 0) -> VisionEpisode:
        a, b = self._n(digits), self._n(digits)
        op, word = self._op()
        prompt = self.rng.choice(COMPARE_TEMPLATES).format(word=word)
        return _computed(prompt, W.two_panels(a, b, self.rng), [], f"{a} {op} {b}", ("compare", a, op, b))

    def zoom(self, digits: int = 4) -> VisionEpisode:
        code = self.rng.randint(10 ** (digits - 1), 10**digits - 1)
        corner = self.rng.choice(list(W.CORNERS))
        x0, y0, x1, y1 = W.CORNERS[corner]
        image = W.small_label(code, corner, self.rng)
        calls: list = [("image_zoom", {"x0": x0, "y0": y0, "x1": x1, "y1": y1, "scale": 2})]
        if self.rng.random() < 0.3:
            op, word = self._op()
            k = self.rng.randint(2, 99)
            prompt = self.rng.choice(ZOOM_COMPUTE_TEMPLATES).format(word=word, k=k)
            return _computed(prompt, image, calls, f"{code} {op} {k}", ("zoom", code, op, k))
        prompt = self.rng.choice(ZOOM_TEMPLATES)
        return VisionEpisode(prompt, image, calls, f"The code is {code}.", "zoom", code, ("zoom", code))

    def lookup(self, held_out: bool = False, fresh: float = 0.0) -> VisionEpisode:
        """Read the country's name on the card, look up the fact asked about it, answer with the tool's sentence.

        `fresh`: the share of episodes whose country is one of a fresh world's (`fresh_countries`).
        """
        if fresh and self.rng.random() < fresh:
            entity, kb = self.rng.choice(fresh_countries(self.world_pool))
            name, attr = entity["name"], self.rng.choice(list(LOOKUP_ON_CARD))
        else:
            held = held_out_facts()
            every = [(e["name"], attr) for e in card_countries() for attr in LOOKUP_ON_CARD]
            name, attr = self.rng.choice(sorted(held) if held_out else [p for p in every if p not in held])
            kb = None  # the bundled world
            entity = next(e for e in card_countries() if e["name"] == name)
        query = f"{attr} of {name}"
        sentence = run_tool("lookup", {"query": query}, kb)
        value = entity["attributes"][attr]
        grader = (
            {"kind": "numeric", "rel_tol": 1e-4, "abs_tol": 1e-6} if isinstance(value, int) else {"kind": "contains"}
        )
        return VisionEpisode(
            self.rng.choice(LOOKUP_ON_CARD[attr]),
            W.name_card(name, self.rng),
            [("lookup", {"query": query})],
            sentence,
            "lookup",
            value,
            ("lookup", name, attr),
            grader,
            kb,
        )

    def text(self) -> VisionEpisode:
        """The next of the text demo's training episodes (no picture; every one from a fresh world,
        none a held-out text suite's prompt)."""
        if self._text is None:
            self._text = text_episodes(10**12, seed=self.seed, exclude=held_out_prompts(), world_pool=self.world_pool)
        ep = next(self._text)
        return VisionEpisode(
            ep.prompt, None, list(ep.calls), ep.answer, "text", ep.expected, ("text", ep.prompt), ep.grader, ep.kb
        )

    def read_only(self) -> VisionEpisode:
        """The card's number is the answer: no tool is needed."""
        n = self._n(0)
        prompt = self.rng.choice(READ_ONLY_TEMPLATES)
        return VisionEpisode(prompt, W.card(n, self.rng), [], f"The number is {n}.", "read_only", n, ("read_only", n))

    def small_card(self) -> VisionEpisode:
        """A read-and-compute question about a picture whose number is a small label: zoom, then compute."""
        code = self.rng.randint(1000, 9999)
        corner = self.rng.choice(list(W.CORNERS))
        x0, y0, x1, y1 = W.CORNERS[corner]
        op, word = self._op()
        k = self.rng.randint(2, 99)
        prompt = self.rng.choice(READ_TEMPLATES).format(word=word, k=k)
        zoom = ("image_zoom", {"x0": x0, "y0": y0, "x1": x1, "y1": y1, "scale": 2})
        image = W.small_label(code, corner, self.rng)
        return _computed(prompt, image, [zoom], f"{code} {op} {k}", ("small_card", code, op, k))

    def arith(self) -> VisionEpisode:
        """The question states both numbers; the card beside it shows another one."""
        a, b, shown = self._n(0), self._n(0), self._n(0)
        op, word = self._op()
        prompt = self.rng.choice(ARITH_TEMPLATES).format(a=a, word=word, b=b)
        return _computed(prompt, W.card(shown, self.rng), [], f"{a} {op} {b}", ("arith", a, op, b, shown))


def make_suites(seed: int = SUITE_SEED) -> dict[str, list[VisionEpisode]]:
    """Draw every held-out vision suite: `{suite name: [episodes]}` (no two ask the same thing)."""
    gen = VisionGenerator(seed)
    seen: set = set()
    suites: dict[str, list[VisionEpisode]] = {}
    for name, (count, kind, kwargs) in SUITES.items():
        suites[name] = distinct_episodes(partial(getattr(gen, kind), **kwargs), count, lambda ep: ep.key, seen)
    return suites


def case_record(ep: VisionEpisode, case_id: str, image_path: str, difficulty: str = "easy") -> dict:
    """The JSONL line of one suite case (the picture is a file beside the suite)."""
    return {
        "id": case_id,
        "prompt": ep.prompt,
        "image": image_path,
        "expected": ep.expected,
        "grader": ep.grader,
        "task_type": f"vision_{ep.kind}",
        "difficulty": difficulty,
        "tools": list(VISION_TOOLS),
        "reference_calls": [{"name": n, "arguments": a} for n, a in ep.calls],
    }


def write_all(out_dir: Path = VISION_DIR) -> dict[str, int]:
    """Write `<suite>.jsonl` and `images/<case id>.png` for every vision suite; returns counts."""
    images = out_dir / "images"
    images.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, episodes in make_suites().items():
        lines = []
        for i, ep in enumerate(episodes, start=1):
            case_id = f"{name}-{i:03d}"
            (images / f"{case_id}.png").write_bytes(W.png_bytes(ep.image))
            difficulty = (
                "new_shape" if name in NEW_SHAPES else name.rsplit("_", 1)[1] if name.count("_") > 1 else "easy"
            )
            lines.append(
                json.dumps(case_record(ep, case_id, f"images/{case_id}.png", difficulty), ensure_ascii=False) + "\n"
            )
        (out_dir / f"{name}.jsonl").write_text("".join(lines), encoding="utf-8")
        counts[name] = len(episodes)
    return counts


def held_out_keys(seed: int = SUITE_SEED) -> set:
    """What every suite case asks about: training skips these."""
    return {ep.key for episodes in make_suites(seed).values() for ep in episodes}


# Training mix: (weight, kind, arguments).
TRAIN_MIX = [
    (0.2, "read", {}),
    (0.2, "compare", {}),
    (0.25, "zoom", {}),
    (0.2, "lookup", {"fresh": 0.75}),
    (0.15, "text", {}),
]


def training_episodes(n: int, seed: int = 0, exclude: Optional[set] = None) -> Iterator[VisionEpisode]:
    """Yield `n` training episodes from the training seed, skipping what the suites ask (`exclude`)."""
    gen = VisionGenerator(60_000 + seed)
    exclude = held_out_keys() if exclude is None else exclude
    weights = [w for w, _, _ in TRAIN_MIX]
    made = 0
    while made < n:
        _, kind, kwargs = gen.rng.choices(TRAIN_MIX, weights=weights)[0]
        ep = getattr(gen, kind)(**kwargs)
        if ep.key in exclude:
            continue
        made += 1
        yield ep


if __name__ == "__main__":
    counts = write_all()
    print(json.dumps(counts, indent=1), "total", sum(counts.values()))
