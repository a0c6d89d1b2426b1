"""Pass results from the agent's own generation, in place of a teacher-forced pass.

With `chat(..., capture=...)` (hf_local) every model turn keeps what its generate call
computed at the positions that predict its tokens: every layer's hidden states (the
prefill's last position, then each decoding step) and, under eager attention, the
head-averaged attention rows there (`GenerationCapture`). Attention is causal, so these
are the values a teacher-forced pass over the final conversation has at the same
positions whenever the prompt the model saw is a token prefix of the rebuilt
conversation (DESIGN §6). `capture_problem` checks exactly that, turn by turn, against
the planned pass's own ids; `capture_pass` then builds the `PassResult` the teacher-forced
pass would give, in the pass's coordinates, so every analyzer reads it unchanged. The
final logits are the model's unembedding of the captured last layer (the backend checks
once per model that this reproduces its logits), computed only where a pass reads them.

Nothing here imports torch at module level.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from evalrx.internals.passes.planning import PassResult, TrajectoryPlan

__all__ = ["CapturedStates", "capture_pass", "capture_problem"]


class CapturedStates:
    """Every layer's hidden states at the captured positions of one pass, read like a forward's `hidden_states`.

    `len()` is the number of hidden states (L + 1); `rows(layer, positions)` gives
    `[len(positions), D]` (what `hidden_states[layer][0].index_select(0, positions)` gives
    for a forward's tensors). A position that was not captured raises KeyError.

    Attributes:
        tensor: `[L + 1, n, D]` in the model's dtype, on its device.
        positions: the pass position of each of the `n` rows.
    """

    def __init__(self, tensor: Any, positions: Sequence[int], n_tokens: int) -> None:
        import torch

        self.tensor = tensor
        self.positions = [int(p) for p in positions]
        lookup = torch.full((max(n_tokens, 1),), -1, dtype=torch.long)
        if self.positions:
            lookup[torch.tensor(self.positions, dtype=torch.long)] = torch.arange(len(self.positions))
        self._lookup = lookup.to(tensor.device)

    def __len__(self) -> int:
        return int(self.tensor.shape[0])

    @property
    def device(self) -> Any:
        return self.tensor.device

    def _index(self, positions: Any) -> Any:
        index = self._lookup[positions.to(self._lookup.device)]
        if bool((index < 0).any()):
            missing = positions[index < 0].tolist()[:5]
            raise KeyError(f"hidden states at positions {missing} were not captured during generation")
        return index

    def rows(self, layer: int, positions: Any) -> Any:
        """Layer `layer` at `positions` (a LongTensor of pass positions)."""
        return self.tensor[layer].index_select(0, self._index(positions))

    def all_rows(self, positions: Any) -> Any:
        """Every layer at `positions`: `[L + 1, len(positions), D]`."""
        return self.tensor.index_select(1, self._index(positions))


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _covered(pt: Any, capture: Any) -> range:
    """The pass positions a turn's capture gives: those predicting its generated tokens, as far as captured."""
    g0, g1 = pt.gen_tokens
    return range(g0 - 1, g0 - 1 + min(capture.n_positions, g1 - g0))


def capture_problem(
    plan: TrajectoryPlan,
    index: int,
    captures: dict,
    *,
    hidden: bool = False,
    attention: bool = False,
    positions: Sequence[int] = (),
) -> Optional[str]:
    """Why the captures cannot stand in for pass `index` (None: they can).

    Every turn of the pass needs a capture made on this model, holding what is asked
    (`hidden` states, `attention` rows), computed from exactly the pass's tokens (the
    captured prompt ids are the pass's prefix, the tokens fed back are the turn's tokens:
    a template that rewrites history or a re-tokenized turn fails here), at every
    position the turn's generated tokens are predicted from; and every requested
    `positions` must be one of those.
    """
    tf_pass = plan.passes[index]
    ids = tf_pass.ids
    covered: set = set()
    for pt in tf_pass.turns:
        step = pt.step_idx
        cap = captures.get(step)
        if cap is None:
            return f"step {step} has no generation capture"
        if getattr(cap, "model_ref", None) != id(plan.local.hf):
            return f"step {step} was captured on another model"
        for wanted, have, what in ((hidden, cap.hidden, "hidden states"), (attention, cap.attention, "attention")):
            if wanted and have is None:
                return f"step {step}: " + ("; ".join(cap.notes) or f"no {what} were captured")
        g0, g1 = pt.gen_tokens
        if ids[:g0] != list(cap.prompt_ids):
            at = _first_difference(ids[:g0], cap.prompt_ids)
            return (
                f"step {step}: the rebuilt conversation differs from the prompt the model saw "
                f"(token {at} of {len(cap.prompt_ids)})"
            )
        fed = cap.fed_ids
        if ids[g0 : g0 + len(fed)] != fed:
            at = _first_difference(ids[g0 : g0 + len(fed)], fed)
            return f"step {step}: the rebuilt turn differs from the generated tokens (token {at} of {len(fed)})"
        if g1 - g0 > cap.n_positions:
            return f"step {step}: {g1 - g0} generated positions in the pass, {cap.n_positions} captured"
        covered.update(_covered(pt, cap))
    outside = sorted({int(p) for p in positions} - covered)
    if outside:
        return f"positions {outside[:5]} are not generated positions of the pass"
    return None


def _check_shape(parts: Any, tensor: Any) -> None:
    """Raise when captured states are not this model's (`[L + 1, n, D]`): caught where a pass is built,
    which then runs teacher-forced, rather than failing an analyzer that reads them."""
    weight = getattr(parts.unembed, "weight", None)
    width = int(weight.shape[-1]) if weight is not None else int(tensor.shape[-1])
    if int(tensor.shape[0]) != parts.num_layers + 1 or int(tensor.shape[-1]) != width:
        raise ValueError(
            f"captured hidden states are {list(tensor.shape)}; this model's are [{parts.num_layers + 1}, n, {width}]"
        )


def _kept_logits(tf_pass: Any, captures: dict, positions: Sequence[int]) -> Any:
    """``[len(positions), V]``: the logits generation computed at these pass positions, or None when a turn's
    capture kept none (or not that far)."""
    import torch

    rows = []
    for pt in sorted(tf_pass.turns, key=lambda t: t.gen_tokens[0]):  # `positions` are sorted
        cap = captures[pt.step_idx]
        span = _covered(pt, cap)
        wanted = [p for p in positions if p in span]
        if not wanted:
            continue
        if cap.logits is None or span.stop - span.start > cap.logits.shape[0]:
            return None
        first = pt.gen_tokens[0] - 1  # the pass position of the capture's first row
        rows.append(cap.logits.index_select(0, torch.tensor([p - first for p in wanted], dtype=torch.long)))
    if sum(len(r) for r in rows) != len(positions):
        return None
    return torch.cat(rows) if rows else None


def capture_pass(plan: TrajectoryPlan, index: int, requests: Sequence[Any], captures: dict) -> Any:
    """The `PassResult` of pass `index` built from the turns' captures (see `capture_problem`, checked first).

    Like `run_pass`, the logits are taken at every generated position when any are read
    (so an analyzer's numbers do not depend on who shares its pass), here as the model's
    unembedding of the captured last layer.
    """
    import torch

    local = plan.local
    tf_pass = plan.passes[index]
    n_tokens = len(tf_pass.ids)
    logit_positions = sorted({int(p) for r in requests for p in r.logits})
    if logit_positions:
        gen = {i - 1 for pt in tf_pass.turns for i in range(max(1, pt.gen_tokens[0]), pt.gen_tokens[1])}
        logit_positions = sorted(set(logit_positions) | gen)
    att_positions = sorted({int(p) for r in requests for p in r.attention})
    want_states = bool(logit_positions) or any(r.hidden for r in requests)
    device = local.device
    dtype = next(local.hf.parameters()).dtype

    states = logits = rows = None
    if want_states:
        held: list = []
        blocks: list = []
        for pt in tf_pass.turns:
            cap = captures[pt.step_idx]
            span = _covered(pt, cap)
            held.extend(span)
            blocks.append(cap.hidden[:, : len(span)])
        tensor = torch.cat(blocks, dim=1).to(device=device, dtype=dtype)
        _check_shape(local.parts, tensor)
        states = CapturedStates(tensor, held, n_tokens)
    if logit_positions:
        assert states is not None  # want_states holds whenever logit_positions does
        logits = _kept_logits(tf_pass, captures, logit_positions)
        if logits is not None:
            logits = logits.to(device)
        else:  # the capture kept no logits: the model's unembedding of its captured last layer
            parts = local.parts
            with torch.inference_mode():
                final = states.rows(len(states) - 1, torch.tensor(logit_positions, dtype=torch.long, device=device))
                logits = parts.unembed(final)
                if parts.logit_softcap:
                    logits = torch.tanh(logits / parts.logit_softcap) * parts.logit_softcap
    if att_positions:
        n_layers = int(next(captures[pt.step_idx] for pt in tf_pass.turns).attention.shape[0])
        rows = torch.zeros(n_layers, len(att_positions), n_tokens, dtype=torch.float32)
        owner = {p: pt for pt in tf_pass.turns for p in _covered(pt, captures[pt.step_idx])}
        by_step: dict = {}  # step -> [(k, its captured row)]: each capture's rows are read in one go
        for k, p in enumerate(att_positions):
            pt = owner[p]
            by_step.setdefault(pt.step_idx, []).append((k, p - (pt.gen_tokens[0] - 1)))
        for step, wanted in by_step.items():
            got = captures[step].attention[:, [j for _, j in wanted]]  # [L, k, P + n - 1]
            width = min(got.shape[-1], n_tokens)
            rows[:, [k for k, _ in wanted], :width] = got[..., :width]
        rows = rows.to(device)
    result = PassResult(plan, index, logit_positions, logits, states, att_positions, rows)
    result.source = result.attention_source = "generation"
    return result
