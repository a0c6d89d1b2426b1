"""Runtime discovery of decoder layers, final norm and unembedding on tiny random models of 7 families."""

from __future__ import annotations

import pytest
import torch  # noqa: E402  (the local extra is part of `make test`; a missing torch must fail)

nn = torch.nn

from tiny_models import ARCHS, make_tiny_model, make_tiny_vlm  # noqa: E402

from evalrx.internals import (  # noqa: E402
    DiscoveryError,
    ModelParts,
    discover,
    find_decoder_layers,
    get_final_norm,
    get_unembed,
    resolve,
)

EXPECTED_PATH = {arch: "model.layers" for arch in ARCHS} | {"gpt2": "transformer.h"}


def _randomize_norms(model) -> None:
    """Give every norm distinct random weights, so a wrongly discovered norm cannot compute the same function."""
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, mod in model.named_modules():
            if "norm" in type(mod).__name__.lower():
                for p in mod.parameters(recurse=False):
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.5 + 1.0)


def _run_with_last_layer_output(model, parts: ModelParts):
    captured = {}

    def hook(_mod, _inp, out):
        captured["h"] = out[0] if isinstance(out, tuple) else out

    handle = parts.layers[-1].register_forward_hook(hook)
    try:
        with torch.no_grad():
            out = model(torch.tensor([[5, 17, 42, 99, 7, 300]]), output_hidden_states=True)
    finally:
        handle.remove()
    return out, captured["h"]


@pytest.mark.parametrize("arch", ARCHS)
def test_discover_finds_layers_norm_and_unembed_that_the_model_applies(arch):
    model = make_tiny_model(arch)
    _randomize_norms(model)
    parts = discover(model)

    assert parts.layers_path == EXPECTED_PATH[arch]
    assert parts.num_layers == len(parts.layers) == 2
    assert resolve(model, parts.layers_path) is parts.layers

    out, last = _run_with_last_layer_output(model, parts)
    with torch.no_grad():
        normed = parts.final_norm(last)
        # transformers 5: hidden_states[-1] is already after the final norm.
        assert torch.allclose(out.hidden_states[-1], normed, atol=1e-5)
        assert not torch.allclose(last, normed, atol=1e-3)  # the norm is not a no-op here
        assert torch.allclose(parts.lens_logits(last), out.logits, atol=1e-4)
        raw = parts.unembed(out.hidden_states[-1])
        if parts.logit_softcap:
            raw = torch.tanh(raw / parts.logit_softcap) * parts.logit_softcap
        assert torch.allclose(raw, out.logits, atol=1e-4)


def test_discover_on_a_vlm_finds_the_language_tower():
    model, _ = make_tiny_vlm()
    _randomize_norms(model)
    parts = discover(model)
    # The CLIP encoder also has 2 layers with `self_attn`; the language tower must win.
    assert parts.layers_path == "model.language_model.layers"
    out, last = _run_with_last_layer_output(model, parts)
    with torch.no_grad():
        assert torch.allclose(out.hidden_states[-1], parts.final_norm(last), atol=1e-5)
        assert torch.allclose(parts.lens_logits(last), out.logits, atol=1e-4)


def test_gemma2_softcap_is_reported_and_needed():
    model = make_tiny_model("gemma2")
    parts = discover(model)
    assert parts.logit_softcap == pytest.approx(model.config.final_logit_softcapping)
    out, last = _run_with_last_layer_output(model, parts)
    with torch.no_grad():
        uncapped = parts.unembed(parts.final_norm(last))
    # Tiny random logits are small, so scale the check to the softcap's effect on them.
    assert torch.allclose(parts.lens_logits(last), out.logits, atol=1e-5)
    assert (uncapped - out.logits).abs().max() > 1e-6


@pytest.mark.parametrize("arch", ["qwen2", "gpt2"])
def test_discover_follows_the_configured_layer_count(arch):
    overrides = {"n_layer": 3} if arch == "gpt2" else {"num_hidden_layers": 3}
    parts = discover(make_tiny_model(arch, **overrides))
    assert parts.num_layers == 3


def test_wrong_layer_count_gives_clear_error():
    model = make_tiny_model("qwen2")
    with pytest.raises(DiscoveryError) as err:
        find_decoder_layers(model, num_hidden_layers=5)
    msg = str(err.value)
    assert "length 5" in msg and "model.layers[2]" in msg and "Qwen2ForCausalLM" in msg


def test_model_without_blocks_gives_clear_error():
    with pytest.raises(DiscoveryError, match="Could not find the decoder-layer ModuleList"):
        discover(nn.Sequential(nn.Linear(4, 4), nn.ModuleList([nn.Linear(4, 4)])))


def test_resolve_names_where_the_path_broke():
    model = make_tiny_model("llama")
    assert resolve(model, "model.layers.1") is model.model.layers[1]
    with pytest.raises(AttributeError, match=r"'model.decoder.layers' broke at 'decoder'"):
        resolve(model, "model.decoder.layers")


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.self_attn = nn.Linear(4, 4)


class _FakeVLM(nn.Module):
    """A vision tower listed before the language tower, both with 2 blocks."""

    class config:  # noqa: N801 - mimics a transformers config object
        num_hidden_layers = 2

    def __init__(self, extra_norm: bool = False) -> None:
        super().__init__()
        self.visual = nn.Module()
        self.visual.blocks = nn.ModuleList([_Block(), _Block()])
        self.visual.post_norm = nn.LayerNorm(4)
        self.lm = nn.Module()
        self.lm.layers = nn.ModuleList([_Block(), _Block()])
        self.lm.out_norm = nn.LayerNorm(4)
        if extra_norm:
            self.lm.other_norm = nn.LayerNorm(4)
        self.embed = nn.Embedding(10, 4)

    def get_output_embeddings(self):
        return None

    def get_input_embeddings(self):
        return self.embed


def test_language_tower_wins_over_vision_tower_and_unknown_norm_name_is_found():
    model = _FakeVLM()
    layers, path = find_decoder_layers(model)
    assert path == "lm.layers" and layers is model.lm.layers
    assert get_final_norm(model) is model.lm.out_norm


def test_ambiguous_final_norm_is_an_error():
    with pytest.raises(DiscoveryError, match="out_norm, other_norm"):
        get_final_norm(_FakeVLM(extra_norm=True))


def test_tied_unembed_fallback_uses_input_embeddings():
    model = _FakeVLM()
    unembed = get_unembed(model)
    h = torch.randn(3, 4)
    assert torch.allclose(unembed(h), h @ model.embed.weight.T)


def test_discover_module_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, evalrx.internals.discover; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
