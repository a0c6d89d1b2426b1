"""The demo's fictional world: invented names, and the countries, cities, people, rivers and
mountains of `kb.json`, drawn from one seed; and the split of its (entity, attribute) pairs into
a training side and a held-out side.
"""

from __future__ import annotations

import random
from typing import Optional

WORLD_SEED = 1234

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


class Names:
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
    names = Names(rng)
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
