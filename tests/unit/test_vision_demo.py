"""The demo VLM's world, suites and training episodes: pictures drawn the same everywhere, suites that
load like any other with their pictures, tasks kept out of training, and training messages that are the
messages a run sends."""

from __future__ import annotations

import random

import pytest

from evalrx.demo import vision_world as W
from evalrx.demo.vision_data import (
    LOOKUP_ON_CARD,
    NEW_SHAPES,
    SUITES,
    VISION_DIR,
    VISION_TOOLS,
    VisionGenerator,
    card_countries,
    held_out_facts,
    held_out_keys,
    make_suites,
    training_episodes,
    write_all,
)
from evalrx.suites import list_suites, load_cases

PIL = pytest.importorskip("PIL")


def test_pictures_are_drawn_from_the_seed_alone():
    a, b = random.Random(7), random.Random(7)
    for draw in (
        lambda r: W.card(437, r),
        lambda r: W.two_panels(58, 913, r),
        lambda r: W.small_label(4821, "top left", r),
        lambda r: W.name_card("Gafoude", r),
    ):
        x, y = draw(a), draw(b)
        assert W.pixels_digest(x) == W.pixels_digest(y) and W.png_bytes(x) == W.png_bytes(y)
    assert W.pixels_digest(W.card(437, random.Random(1))) != W.pixels_digest(W.card(437, random.Random(2)))


def test_suites_and_their_pictures_regenerate_byte_for_byte(tmp_path):
    """A training-side change must not move a held-out case or a pixel of its picture."""
    counts = write_all(tmp_path)
    assert counts == {name: n for name, (n, *_) in SUITES.items()} and sum(counts.values()) >= 150
    committed = sorted(p.relative_to(VISION_DIR) for p in VISION_DIR.rglob("*") if p.is_file())
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert committed == fresh
    for rel in committed:
        assert (tmp_path / rel).read_bytes() == (VISION_DIR / rel).read_bytes(), rel


def test_vision_suites_load_with_their_pictures_and_stay_out_of_demo():
    from PIL import Image

    names = list_suites()
    assert {"demo/vision", "demo/vision_read", "demo/vision_compare", "demo/vision_zoom"} <= set(names)
    cases = load_cases("demo/vision")
    assert len(cases) == sum(n for n, *_ in SUITES.values()) >= 150
    assert {c.meta["task_type"] for c in cases} == {
        "vision_read",
        "vision_compare",
        "vision_zoom",
        "vision_read_only",
        "vision_small_card",
        "vision_arith",
        "vision_lookup",
    }
    for c in cases:
        with Image.open(c.inputs.image) as img:
            assert img.size == (W.CANVAS, W.CANVAS)
        assert c.meta["tools"] == ["calculator", "image_zoom", "lookup"]
        assert c.grader["kind"] == ("contains" if isinstance(c.expected, str) else "numeric")
    assert not any(c.inputs.image for c in load_cases("demo"))  # the text model's suites stay text


def test_the_zoom_a_case_needs_shows_its_label_larger():
    """The reference zoom box holds the label's frame (the darkest pixels of the picture)."""
    from evalrx.tools.image_zoom import zoom

    gen = VisionGenerator(3)
    for _ in range(12):
        ep = gen.zoom()
        (name, args), *_ = ep.calls
        out = zoom(ep.image, **args)
        assert name == "image_zoom" and out.images and out.images[0].size == (W.CANVAS, W.CANVAS)
        gray = ep.image.convert("L")
        x0, y0, x1, y1 = (round(v * W.CANVAS) for v in (args["x0"], args["y0"], args["x1"], args["y1"]))
        inside = gray.crop((x0, y0, x1, y1))
        assert inside.getextrema()[0] <= 40  # the frame and the code's type are inside the box


def test_training_never_draws_a_suite_task():
    held = held_out_keys()
    assert len(held) == sum(len(v) for v in make_suites().values())
    drawn = list(training_episodes(2000, seed=0, exclude=held))
    assert not any(ep.key in held for ep in drawn)
    # the long suites ask for a digit more than training ever shows
    assert max(ep.key[1] for ep in drawn if ep.kind in ("read", "compare")) < 1000
    assert max(ep.key[3] for ep in drawn if ep.kind == "compare") < 1000
    assert max(ep.key[1] for ep in drawn if ep.kind == "zoom") < 10_000
    for c in load_cases("demo/vision_read_long"):
        assert len(c.meta["reference_calls"][0]["arguments"]["expression"].split()[0]) == 4
    # The new shapes ask about kinds training never draws: leaving them out changes no training episode.
    shapes = {ep.key for name in NEW_SHAPES for ep in make_suites()[name]}
    assert {k[0] for k in shapes} == {"read_only", "small_card", "arith"}
    assert [ep.key for ep in training_episodes(500, exclude=held - shapes)] == [ep.key for ep in drawn[:500]]
    assert [c.meta["reference_calls"] for c in load_cases("demo/vision_read_only")][0] == []


def test_lookup_cases_ask_pairs_training_never_shows_about_names_it_reads():
    """Every country on a card is read in training, and every fact asked, but never a pair the suite asks;
    the suite's reference lookup answers with the expected value, and a name card says which letter is where."""
    from evalrx.demo.train_vision import NOTHING, cell_class, cell_targets
    from evalrx.tools import get_tools

    held = held_out_facts()
    names = {e["name"] for e in card_countries()}
    assert len(names) >= 10 and all(len(n) <= W.CANVAS // W.CELL for n in names)
    drawn = [ep for ep in training_episodes(3000, seed=0) if ep.kind == "lookup"]
    pairs = {ep.key[1:] for ep in drawn}
    bundled = {(n, a) for n, a in pairs if n in names}
    assert not pairs & held and {n for n, _ in bundled} == names and {a for _, a in bundled} == set(LOOKUP_ON_CARD)
    cases = load_cases("demo/vision_lookup")
    assert {(c.meta["reference_calls"][0]["arguments"]["query"]) for c in cases} == {f"{a} of {n}" for n, a in held}
    lookup = get_tools(["lookup"])[0]
    for c in cases:
        answer = lookup.fn(**c.meta["reference_calls"][0]["arguments"])
        assert str(c.expected) in answer and "no results" not in answer
    ep = next(ep for ep in drawn if ep.key[1] in names)
    (grid,) = cell_targets(ep, 1, 8)
    letters = [cell_class(ch) for ch in ep.key[1]]
    row = next(r for r in range(8) if grid[r * 8 : r * 8 + 8].count(NOTHING) < 8)
    assert [v for v in grid[row * 8 : row * 8 + 8] if v != NOTHING] == letters
    assert grid[(row + 1) * 8 : (row + 2) * 8] == grid[row * 8 : row * 8 + 8]  # two cells tall


def test_training_messages_are_the_messages_a_run_sends():
    """An episode's conversation, rendered, is the agent's prompt for that case plus the reference turns."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from evalrx.demo.train import render
    from evalrx.demo.train_vision import TEXT_MODEL_DIR, episode_messages
    from evalrx.models.conversation import ConversationBuilder
    from evalrx.models.toolcodec import CODECS
    from evalrx.tools import get_tools

    tok = AutoTokenizer.from_pretrained(str(TEXT_MODEL_DIR))
    codec = CODECS["hermes"]()
    tools = [t.to_openai() for t in get_tools(VISION_TOOLS)]
    ep = VisionGenerator(5).zoom()
    messages, images = episode_messages(ep, codec)
    assert len(images) == 2 and messages[0]["content"][0]["image"] is ep.image
    first = ConversationBuilder(codec)
    first.prompt(ep.prompt, ep.image)
    prompt = render(tok, first.messages, tools, add_generation_prompt=True)
    assert render(tok, messages, tools).startswith(prompt)
    assert render(tok, messages, tools).count("<|image_pad|>") == 2
    assert "returned by the 'image_zoom' tool call" in render(tok, messages, tools)
    looked_up, _ = episode_messages(VisionGenerator(5).lookup(), codec)
    assert looked_up[-2]["content"].startswith("The ") and looked_up[-1]["content"] == looked_up[-2]["content"]


def test_most_training_lookups_name_a_fresh_worlds_country_whose_fact_only_its_tool_knows():
    """Copying the tool's answer is what pays: the fact asked is in no other world, and the answer the
    episode trains is the sentence its own world's lookup returns."""
    from evalrx.demo.world import world_names
    from evalrx.tools.lookup import load_kb, search

    bundled_names = world_names(load_kb())
    drawn = [ep for ep in training_episodes(3000, seed=0) if ep.kind == "lookup"]
    fresh = [ep for ep in drawn if ep.key[1].lower() not in bundled_names]
    assert 0.6 < len(fresh) / len(drawn) < 0.9 and len({ep.key[1] for ep in fresh}) > 100
    for ep in fresh[:50]:
        ((name, args),) = ep.calls
        assert ep.answer == search(args["query"], ep.kb) and str(ep.expected) in ep.answer
        assert "no results" in search(args["query"], load_kb())  # the bundled world does not know it


def test_text_episodes_are_the_text_demos_with_no_picture_and_no_held_out_fact():
    """A share of training is the text demo's own episodes, each from a fresh world (no bundled fact, no
    held-out text prompt), encoded as a run sends them: no image block, no patch targets."""
    from evalrx.demo.data import held_out_prompts
    from evalrx.demo.episodes import run_tool
    from evalrx.demo.train_vision import cell_targets, episode_messages
    from evalrx.models.toolcodec import CODECS
    from evalrx.tools.lookup import load_kb

    drawn = list(training_episodes(1000, seed=0))
    text = [ep for ep in drawn if ep.kind == "text"]
    assert 0.1 < len(text) / len(drawn) < 0.2
    assert {name for ep in text for name, _ in ep.calls} == {"calculator", "lookup"}
    assert not {ep.prompt for ep in text} & held_out_prompts()
    bundled = load_kb()
    assert all(ep.image is None and ep.kb is not None and ep.kb != bundled for ep in text)
    ep = next(ep for ep in text if ep.calls and ep.calls[0][0] == "lookup")
    messages, images = episode_messages(ep, CODECS["hermes"]())
    assert images == [] and messages[0]["content"] == ep.prompt
    assert messages[2]["content"] == run_tool("lookup", ep.calls[0][1], ep.kb) and cell_targets(ep, 0, 8) == []
