"""The demo's fictional world, its training episodes and its held-out case suites.

Everything is generated from one seed, so `python -m evalrx.demo.data` rewrites `kb.json` and
`suites/*.jsonl` byte for byte, and `evalrx.demo.train` regenerates the same training episodes.

Held-out cases never appear in training: their (entity, attribute) pairs are held out of the
lookup episodes, their prompts are excluded from the training stream, and the harder suites use
longer numbers (6-digit operands; training stops at 5), wordings (paraphrases, distractors) and
task shapes that training does not show. Training shows the words of the paraphrases in other
sentence frames, so those suites test recombination rather than vocabulary nobody taught.

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
from pathlib import Path
from typing import Any, Iterator, Optional

from evalrx.tools.calculator import calculator
from evalrx.tools.lookup import fact_sentence, search

DEMO_DIR = Path(__file__).resolve().parent
KB_PATH = DEMO_DIR / "kb.json"
SUITES_DIR = DEMO_DIR / "suites"
WORLD_SEED = 1234
SUITE_SEED = 4321
DEMO_TOOLS = ["calculator", "lookup"]
_SENTENCE_BREAK = re.compile(r"(?<=[.!?]) +")

UNKNOWN_ANSWER = "Sorry, I could not find that information."
UNKNOWN_REGEX = r"(?i)(could not find|couldn't find|don't know|do not know|unknown|no information|not find)"
GREETING_REPLY = "Hello! How can I help you today?"

# ----------------------------------------------------------------------------- the world

_ONSETS = [
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "kr",
    "tr",
    "st",
    "th",
    "sh",
]
_VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou"]
_CODAS = ["", "", "", "n", "r", "l", "s", "m"]
CURRENCIES = [
    "lumen",
    "crown",
    "shell",
    "mark",
    "petal",
    "florin",
    "quill",
    "tallow",
    "bead",
    "dram",
    "stiver",
    "gleam",
]
PROFESSIONS = [
    "baker",
    "sailor",
    "painter",
    "weaver",
    "miner",
    "teacher",
    "doctor",
    "farmer",
    "potter",
    "poet",
    "smith",
    "gardener",
    "scribe",
    "cartographer",
    "brewer",
    "mason",
]
NUMERIC_ATTRS = ["population", "founding year", "birth year", "length", "height"]
UNITS = {"length": "km", "height": "m"}


def _name(rng: random.Random, syllables: int) -> str:
    parts = [rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)]
    return ("".join(parts) + rng.choice(_CODAS)).capitalize()


class _Names:
    """Unique invented names; `taken` also keeps them apart from other name pools."""

    def __init__(self, rng: random.Random, taken: Optional[set] = None) -> None:
        self.rng = rng
        self.taken = taken if taken is not None else set()

    def new(self, syllables: tuple = (2, 3)) -> str:
        while True:
            name = _name(self.rng, self.rng.choice(syllables))
            if name.lower() not in self.taken and 4 <= len(name) <= 10:
                self.taken.add(name.lower())
                return name


def make_world(seed: int = WORLD_SEED) -> dict:
    """Generate the fictional world: countries, cities, people, rivers and mountains.

    Returns:
        `{"seed", "entities": [{"name", "type", "attributes", "units"?}]}` (the kb.json format).
    """
    rng = random.Random(seed)
    names = _Names(rng)
    entities: list[dict] = []
    countries, cities = [], []
    for _ in range(16):
        country = {"name": names.new(), "type": "country", "attributes": {}}
        own = []
        for _ in range(3):
            city = {
                "name": names.new(),
                "type": "city",
                "attributes": {
                    "country": country["name"],
                    "population": rng.randint(2000, 999999),
                    "founding year": rng.randint(600, 1900),
                },
            }
            own.append(city)
        country["attributes"] = {
            "capital": own[0]["name"],
            "population": rng.randint(200000, 9999999),
            "currency": rng.choice(CURRENCIES),
            "founding year": rng.randint(600, 1900),
        }
        countries.append(country)
        cities.extend(own)
    entities.extend(countries)
    entities.extend(cities)
    for _ in range(48):
        entities.append(
            {
                "name": f"{names.new((2,))} {names.new((2, 3))}",
                "type": "person",
                "attributes": {
                    "birth year": rng.randint(1700, 1995),
                    "profession": rng.choice(PROFESSIONS),
                    "home city": rng.choice(cities)["name"],
                },
            }
        )
    for kind, attr, lo, hi in (("river", "length", 40, 4000), ("mountain", "height", 300, 8800)):
        for _ in range(16):
            entities.append(
                {
                    "name": names.new(),
                    "type": kind,
                    "attributes": {attr: rng.randint(lo, hi), "country": rng.choice(countries)["name"]},
                    "units": {attr: UNITS[attr]},
                }
            )
    return {"seed": seed, "entities": entities}


def world_names(world: dict) -> set:
    """Lower-cased words of every entity name (fresh invented names must avoid them)."""
    return {w.lower() for e in world["entities"] for w in e["name"].split()}


def split_pairs(world: dict, seed: int = WORLD_SEED, held_out: float = 0.25) -> tuple[list, list]:
    """Split (entity, attribute) pairs into training and held-out lists, deterministically."""
    rng = random.Random(seed + 1)
    pairs = [(e["name"], a) for e in world["entities"] for a in e["attributes"]]
    rng.shuffle(pairs)
    n_held = int(len(pairs) * held_out)
    return sorted(pairs[n_held:]), sorted(pairs[:n_held])


# ----------------------------------------------------------------------------- templates

# Lookup questions per attribute. The last template of each list is held out of training.
LOOKUP_TEMPLATES: dict[str, list[str]] = {
    "population": [
        "What is the population of {n}?",
        "How many people live in {n}?",
        "Tell me the population of {n}.",
        "Could you find out how many inhabitants {n} has?",
    ],
    "capital": [
        "What is the capital of {n}?",
        "Which city is the capital of {n}?",
        "Name the capital of {n}.",
        "I need to know the capital city of {n}.",
    ],
    "currency": [
        "What is the currency of {n}?",
        "What money is used in {n}?",
        "Which currency does {n} use?",
        "What coin do people pay with in {n}?",
    ],
    "founding year": [
        "When was {n} founded?",
        "In what year was {n} founded?",
        "What is the founding year of {n}?",
        "Find the year {n} was established.",
    ],
    "birth year": [
        "When was {n} born?",
        "In which year was {n} born?",
        "What is the birth year of {n}?",
        "Look up the year of birth of {n}.",
    ],
    "profession": [
        "What is the profession of {n}?",
        "What does {n} do for a living?",
        "What is the job of {n}?",
        "Tell me the occupation of {n}, please.",
    ],
    "home city": [
        "Where does {n} live?",
        "What is the home city of {n}?",
        "In which city does {n} live?",
        "Which town is {n} living in?",
    ],
    "length": [
        "How long is the {n} river?",
        "What is the length of {n}?",
        "What is the length of the river {n}?",
        "Please look up how long {n} is.",
    ],
    "height": [
        "How tall is {n}?",
        "What is the height of {n}?",
        "How high is the mountain {n}?",
        "What is the elevation of {n}?",
    ],
    "country": [
        "In which country is {n}?",
        "Which country is {n} in?",
        "What country is {n} located in?",
        "Where is {n}? Give the country.",
    ],
}

# (question template, expression template, operator symbol); the expression keeps the question's order.
ARITH_TRAIN = [
    ("What is {a} + {b}?", "+"),
    ("What is {a} plus {b}?", "+"),
    ("How much is {a} + {b}?", "+"),
    ("Add {a} and {b}.", "+"),
    ("Calculate {a} + {b}.", "+"),
    ("What is {a} - {b}?", "-"),
    ("What is {a} minus {b}?", "-"),
    ("Compute {a} - {b}.", "-"),
    ("How much is {a} minus {b}?", "-"),
    ("What is {a} * {b}?", "*"),
    ("What is {a} times {b}?", "*"),
    ("Multiply {a} by {b}.", "*"),
    ("Calculate {a} * {b}.", "*"),
    ("What is {a} / {b}?", "/"),
    ("What is {a} divided by {b}?", "/"),
    ("Divide {a} by {b}.", "/"),
]
ARITH_HELD_OUT = [
    ("What is the sum of {a} and {b}?", "+"),
    ("Please work out {a} plus {b} for me.", "+"),
    ("What is the product of {a} and {b}?", "*"),
    ("{a} multiplied by {b} equals what?", "*"),
    ("Take {b} away from {a}. What is left?", "-"),
    ("What do you get when you divide {a} by {b}?", "/"),
    ("Find the difference {a} minus {b}.", "-"),
    ("What is {a} times {b}, exactly?", "*"),
]
ARITH3_TRAIN = ["What is {a} {o1} {b} {o2} {c}?", "Calculate {a} {o1} {b} {o2} {c}."]
# Training-only wordings: the operator words of the held-out paraphrases appear here in other
# sentence frames, so a paraphrase suite tests recombination, not unseen vocabulary.
ARITH_TRAIN_EXTRA = [
    ("Find the sum of {a} and {b}.", "+"),
    ("The sum of {a} and {b} is what?", "+"),
    ("What do you get if you add {a} and {b}?", "+"),
    ("Work out {a} + {b}.", "+"),
    ("Give me the product of {a} and {b}.", "*"),
    ("What is {a} multiplied by {b}?", "*"),
    ("Find the product of {a} and {b}.", "*"),
    ("Tell me {a} times {b}.", "*"),
    ("Subtract {b} from {a}.", "-"),
    ("What is the difference {a} minus {b}?", "-"),
    ("What is left if you take {b} from {a}?", "-"),
    ("Divide {a} by {b}, please.", "/"),
    ("Work out {a} divided by {b}.", "/"),
    ("What is {a} divided by {b} exactly?", "/"),
]
# One-operand wordings (the expression template names its constant).
ARITH_UNARY_TRAIN = [
    ("What is half of {a}?", "{a} / 2"),
    ("What is twice {a}?", "{a} * 2"),
    ("What is three times {a}?", "{a} * 3"),
    ("What is a third of {a}?", "{a} / 3"),
    ("Add {b} to {a}.", "{a} + {b}"),
    ("If you add {b} to {a}, what do you get?", "{a} + {b}"),
    ("What is double {a}?", "{a} * 2"),
]

TWO_STEP_TRAIN = [
    ("What is the {attr} of {n} plus {k}?", "{v} + {k}"),
    ("What is the {attr} of {n} minus {k}?", "{v} - {k}"),
    ("What is the {attr} of {n} times {k}?", "{v} * {k}"),
    ("What is the {attr} of {n} divided by {k}?", "{v} / {k}"),
    ("What is twice the {attr} of {n}?", "{v} * 2"),
]
TWO_STEP_SPECIAL_TRAIN = {
    "founding year": [("How many years before {y} was {n} founded?", "{y} - {v}")],
    "birth year": [("How old would {n} be in {y}?", "{y} - {v}")],
    "height": [("What is the height of {n} in kilometres?", "{v} / 1000")],
    "length": [("What is the length of {n} in metres?", "{v} * 1000")],
}
TWO_STEP_TRAIN_EXTRA = [
    ("What is a third of the {attr} of {n}?", "{v} / 3"),
    ("What is double the {attr} of {n}?", "{v} * 2"),
    ("Add {k} to the {attr} of {n}.", "{v} + {k}"),
    ("What is the {attr} of {n} minus {k}, exactly?", "{v} - {k}"),
    ("Take the {attr} of {n} and add {k}.", "{v} + {k}"),
    ("Divide the {attr} of {n} by 2.", "{v} / 2"),
]
TWO_STEP_HELD_OUT = [
    ("What is half the {attr} of {n}?", "{v} / 2"),
    ("If you add {k} to the {attr} of {n}, what do you get?", "{v} + {k}"),
    ("What is three times the {attr} of {n}?", "{v} * 3"),
]
TWO_STEP_SPECIAL_HELD_OUT = {
    "founding year": [("How many years after {n} was founded did the year {y} come?", "{y} - {v}")],
    "birth year": [("How many years old was {n} in {y}?", "{y} - {v}")],
    "height": [("How many kilometres high is {n}?", "{v} / 1000")],
    "length": [("If you add {k} to the {attr} of {n}, what do you get?", "{v} + {k}")],
}
MULTI_TRAIN = [
    "What is the total {attr} of {n} and {m}?",
    "What is the {attr} of {n} plus the {attr} of {m}?",
    "How much bigger is the {attr} of {n} than the {attr} of {m}?",
    "What is the {attr} of {n} and {m} together?",
    "Add the {attr} of {n} to the {attr} of {m}.",
    "What is the sum of the {attr} of {n} and the {attr} of {m}?",
]
MULTI_HELD_OUT = ["Add up the {attr} of {n} and the {attr} of {m}.", "What is the combined {attr} of {n} and {m}?"]

DISTRACTORS_TRAIN = [
    "I am {age} years old. ",
    "My friend {p} asked me this. ",
    "I have {k} apples. ",
    "It is a sunny day in {place}. ",
    "My cousin {p} has {k} sheep. ",
    "I live in {place}. ",
    "Last week I drove {k} km. ",
    "{p} says hello from {place}. ",
    "I bought {k} pens today. ",
    "My sister {p} lives in {place} and has {k} cats. ",
]
DISTRACTORS_HELD_OUT = [
    "My neighbour {p} has {k} goats and lives in {place}. ",
    "Yesterday I walked {k} km near {place}. ",
    "{p} told me that {place} is lovely. ",
    "I paid {k} coins for lunch. ",
]

GREETINGS_TRAIN = [
    "Hello!",
    "Hi there!",
    "Good morning!",
    "Hi!",
    "Hello, how are you?",
    "Hey!",
    "Good afternoon!",
    "Greetings!",
    "Good evening!",
    "Hey, how are you?",
    "Hello, assistant!",
    "Nice to meet you!",
    "Hi, good morning!",
    "Hey there!",
    "Good day!",
    "Hello there!",
    "Hi, how is it going?",
    "Hey, nice to see you!",
    "Hello friend!",
    "Morning!",
]
GREETINGS_HELD_OUT = [
    "Hey, good evening!",
    "Hello there, assistant!",
    "Hi, nice to meet you!",
    "Good day to you!",
    "Hey there, how is it going?",
]
THANKS_TRAIN = [
    "Thank you!",
    "Thanks!",
    "Thanks a lot!",
    "Thank you very much.",
    "Thanks for your help!",
    "Many thanks!",
    "Thank you, that was useful.",
    "Thanks so much!",
    "That was helpful, thank you.",
]
THANKS_HELD_OUT = ["Many thanks for your help!", "Thank you so much, that was useful."]
NAME_TRAIN = [
    "My name is {p}. What is my name?",
    "I am {p}. Do you remember my name?",
    "Call me {p}. What should you call me?",
    "Hi, my name is {p}. Can you say my name?",
    "Everyone calls me {p}. What is my name?",
    "I'm {p}. Tell me my name.",
    "Hello, I am {p}! What is my name?",
]
NAME_HELD_OUT = ["Hi, I'm {p}! Can you tell me my name?", "People call me {p}. What is my name?"]
ECHO_TRAIN = [
    "Repeat after me: {w}",
    "Say this back to me: {w}",
    "Please repeat: {w}",
    "Echo this: {w}",
    "Copy these words: {w}",
    "Repeat these words exactly: {w}",
    "Say exactly this: {w}",
]
ECHO_HELD_OUT = ["Echo these words exactly: {w}", "Copy this text: {w}"]
STORY_TRAIN = [
    "In my story, {p} has {k} {thing}. How many {thing} does {p} have?",
    "{p} owns {k} {thing}. How many {thing} does {p} own?",
    "Imagine {p} keeps {k} {thing}. How many {thing} does {p} keep?",
    "Suppose {p} has {k} {thing}. How many {thing} does {p} have?",
    "{p} keeps {k} {thing} in a box. How many {thing} are in the box?",
    "{p} collected {k} {thing} at home. How many {thing} did {p} collect?",
]
STORY_HELD_OUT = ["Suppose {p} keeps {k} {thing} at home. How many {thing} does {p} keep?"]
THINGS = ["books", "cats", "boats", "lamps", "keys", "hats", "coins", "shells", "maps", "drums"]
WORDS = [
    "lantern",
    "river",
    "blue",
    "quiet",
    "stone",
    "apple",
    "window",
    "silver",
    "garden",
    "cloud",
    "paper",
    "bridge",
    "orange",
    "tiger",
    "candle",
    "morning",
    "violet",
    "harbor",
    "pebble",
    "forest",
    "mirror",
    "honey",
    "thunder",
    "meadow",
    "copper",
    "feather",
    "island",
    "rocket",
    "velvet",
    "maple",
]

ABOUT_TRAIN = [
    "Who are you?",
    "What can you do?",
    "What are you?",
    "Tell me who you are.",
    "What can you help me with?",
    "Can you tell me what you can do?",
]
ABOUT_HELD_OUT = ["Can you tell me who you are?", "Tell me what you can do."]
ABOUT_REPLY = "I am a small assistant. I can use a calculator and look up facts."


# ----------------------------------------------------------------------------- episodes


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
        self.names = _Names(pool_rng, taken=set(world_names(world)))
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
TRAIN_MIX = [
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


# ----------------------------------------------------------------------------- suites

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
        cases: list[dict] = []
        while len(cases) < count:
            ep = getattr(gen, method)(**kwargs)
            if ep.prompt in seen:
                continue
            seen.add(ep.prompt)
            grader = dict(ep.grader)
            expected = ep.expected
            if grader["kind"] == "numeric" and isinstance(expected, str):
                expected = float(expected) if "." in expected else int(expected)
            cases.append(
                {
                    "id": f"{suite}-{len(cases) + 1:03d}",
                    "prompt": ep.prompt,
                    "expected": expected,
                    "grader": grader,
                    "task_type": ep.task_type,
                    "difficulty": difficulty,
                    "tools": list(DEMO_TOOLS),
                    "reference_calls": [{"name": n, "arguments": a} for n, a in ep.calls],
                }
            )
        suites[suite] = cases
    return suites


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
