"""Generation capture: what one `chat(..., capture=...)` call keeps of its own forward passes.

`CaptureRecorder` wraps one transformers `generate` call and builds the `GenerationCapture`
the white-box analyzers read in place of a teacher-forced pass (`evalrx.internals.passes.capture`).
torch is imported inside functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from evalrx.internals.attention import (
    LAST_ROW_ATTENTION,
    attention_implementation_of,
    attention_modules,
    cached_keys,
    rebuilt_attention_rows,
    register_last_row_attention,
    using_attention_implementation,
)
from evalrx.internals.forward import cache_argument, output_cache
from evalrx.internals.hidden_states import recording_hidden_states

CAPTURE_KINDS = ("hidden_states", "attention")


@dataclass
class GenerationCapture:
    """What one `chat(..., capture=...)` call kept of its own forward passes, for the white-box analyzers.

    Positions are the turn's own: the prompt holds positions ``0 .. P-1``, generated token ``j``
    sits at ``P + j``. The captured positions are those that predict a generated token:
    ``P - 1`` (the prefill's last position) and each position fed back by a decoding step,
    ``n_positions`` in all (one more when the turn ran out of tokens: the last generated
    token is then run once more, for the end-of-turn token a rebuilt conversation adds).
    Nothing else is kept: no prompt positions. With the hidden states, the model's own logits at
    the captured positions are kept too (generate computes them anyway): a pass built from the
    capture reads them instead of unembedding ``hidden[-1]`` again, which is the same numbers
    (checked once per handle) at a vocabulary-sized matrix product a position.

    Attributes:
        prompt_ids: the token ids the model was given.
        generated_ids: the ids it generated (its end-of-turn token included when it stopped).
        hidden: ``[L + 1, n, D]`` fp32 on CPU: every layer's residual stream at the captured
            positions (layer 0 the embeddings, layer L after the final norm, as
            ``output_hidden_states`` gives them); None when not captured.
        logits: ``[n, V]`` fp32 on CPU: the model's own logits at the captured positions, as generate
            gave them (and the extra step of a cut turn); None where the hidden states are not kept.
        attention: ``[L, n, P + n - 1]`` fp32 on CPU: each layer's attention row at the captured
            positions, averaged over heads, zero past the row's own length (a tensor, or a
            `RebuiltAttention` that computes the rows a pass reads); None when not captured.
        attn_implementation: the attention kernel generation ran with.
        notes: why something asked for was not captured.
        model_ref: ``id`` of the transformers model that generated (a capture is read only on it).
    """

    prompt_ids: list
    generated_ids: list
    hidden: Any = None
    attention: Any = None
    attn_implementation: Optional[str] = None
    notes: list = field(default_factory=list)
    model_ref: int = 0
    logits: Any = None

    @property
    def first_position(self) -> int:
        """The position of the first captured row (the prompt's last token)."""
        return len(self.prompt_ids) - 1

    @property
    def n_positions(self) -> int:
        """Captured positions (rows of `hidden` / `attention`)."""
        for rows in (self.hidden, self.attention):
            if rows is not None:
                return int(rows.shape[1])
        return 0

    @property
    def fed_ids(self) -> list:
        """The generated ids the captured positions were computed from (each row's own token is fed)."""
        return list(self.generated_ids[: max(0, self.n_positions - 1)])

    @property
    def nbytes(self) -> int:
        return sum(int(t.nbytes) for t in (self.hidden, self.attention) if t is not None)


class RebuiltAttention:
    """A capture's attention rows ``[L, n, P + n - 1]``, rebuilt (`rebuilt_attention_rows`) only at the rows a
    pass reads: most analyses read a few of a turn's positions, and every row costs a query per layer.

    Holds the captured positions' residual streams and a copy of the call's cached keys (the cache object may
    be kept and extended by the next turn). `rows` and `[:, index]` give fp32 CPU rows, as a tensor would.
    """

    def __init__(self, model: Any, layers: Any, states: Any, keys: list, first: int) -> None:
        self._model, self._layers, self._states, self.first = model, layers, states, first
        self._keys = [k.clone() for k in keys]
        self.shape = (len(layers), int(states.shape[1]), int(keys[0].shape[-2]))

    def rows(self, index: Any) -> Any:
        """``[L, k, P + n - 1]`` fp32 on CPU: the rows of the captured positions `index` (0 = the first)."""
        import torch

        at = torch.as_tensor(index, dtype=torch.long, device=self._states.device).reshape(-1)
        states = self._states.index_select(1, at)
        return rebuilt_attention_rows(self._model, self._layers, states, self._keys, at + self.first).cpu()

    def full(self) -> Any:
        """Every row, ``[L, n, P + n - 1]``."""
        return self.rows(list(range(self.shape[1])))

    def __getitem__(self, key: Any) -> Any:
        if not (isinstance(key, tuple) and len(key) == 2 and key[0] == slice(None)):
            raise TypeError("rebuilt attention rows are read as [:, index]")
        one = isinstance(key[1], int)
        got = self.rows([key[1]] if one else key[1])
        return got[:, 0] if one else got

    @property
    def nbytes(self) -> int:
        return sum(int(k.nbytes) for k in self._keys)  # the states are the capture's `hidden`, counted there


def capture_kinds(capture: Any) -> frozenset:
    """The kinds `chat(capture=...)` asks for: True (all), False/None (none), a kind or kinds."""
    if capture is None or capture is False:
        return frozenset()
    if capture is True:
        return frozenset(CAPTURE_KINDS)
    kinds = frozenset([capture] if isinstance(capture, str) else capture)
    unknown = kinds - set(CAPTURE_KINDS)
    if unknown:
        raise ValueError(f"capture= takes True, False or kinds from {list(CAPTURE_KINDS)}; got {sorted(unknown)}")
    return kinds


class CaptureRecorder:
    """One capturing generate call: what it records of each forward and the `GenerationCapture` built from it.

    Hidden states are what `output_hidden_states` gives, recorded for the call by
    `recording_hidden_states`; each forward's last position is kept at the end. Attention rows
    come from hooks on each layer's attention module that keep the last query row averaged over
    heads (eager), from a kernel that adds that row to sdpa's output, or are rebuilt after
    generation (`_rows_after`).

    Args:
        owner: the local handle that generates, read only where needed: `owner.model` (the transformers
            model), `owner.parts` (its `ModelParts`), `owner.processor` (None for a text model) and
            `owner.attention_rows_rebuildable` (`rows_rebuildable`, checked once by the handle).
        kinds: what to capture (`capture_kinds`).
        head_reproduces_logits: whether the model's logits are known to be the unembedding of its last
            hidden state (None: not checked yet, this call checks it). After `finish` the attribute
            of that name holds the answer, for the owner to keep.
    """

    def __init__(self, owner: Any, kinds: frozenset, *, head_reproduces_logits: Optional[bool] = None) -> None:
        self.owner = owner
        self.model = owner.model
        self.head_reproduces_logits = head_reproduces_logits
        self.impl = attention_implementation_of(self.model)
        self.hidden = "hidden_states" in kinds
        # Under sdpa the newest position's row is computed beside sdpa's output (`LAST_ROW_ATTENTION`):
        # the same weights eager gives, without eager's [heads, P, P] prefill maps.
        # With the hidden states captured too, a Llama-shaped model's rows are computed once per layer after
        # generation from those states and the KV cache (`_rows_after`): no per-step work at all.
        self.after = "attention" in kinds and self.hidden and self.impl == "sdpa" and owner.attention_rows_rebuildable
        self.kernel = LAST_ROW_ATTENTION if "attention" in kinds and self.impl == "sdpa" and not self.after else None
        self.attention = "attention" in kinds and (self.impl == "eager" or self.kernel is not None or self.after)
        self.notes: list = []
        if "attention" in kinds and not self.attention:
            self.notes.append(f"attention needs eager or sdpa attention; generation ran with {self.impl!r}")
        self._kernel_ctx: Any = None
        # Whether the final layer's logits are the unembedding of hidden[-1] is checked once per handle.
        self.check_head = self.hidden and head_reproduces_logits is None
        self.rows: list = []
        self._last_logits: Any = None  # the extra step's logits (`_run_last_token`)
        self._hooks: list = []
        self._states: list = []  # per hidden state (L + 1), what each forward gave
        self._recording: Any = None

    def __enter__(self) -> "CaptureRecorder":
        if self.hidden:
            self._recording = recording_hidden_states(self.owner.parts)
            self._states = self._recording.__enter__()
        if self.kernel is not None:
            register_last_row_attention()
            self._kernel_ctx = using_attention_implementation(self.model, self.kernel, checked=False)
            self._kernel_ctx.__enter__()
        if self.attention and not self.after:
            try:
                modules = attention_modules(self.owner.parts.layers)
            except RuntimeError as exc:
                self.notes.append(str(exc))
                self.attention = False
                modules = []
            for module in modules:
                self.rows.append([])
                self._hooks.append(module.register_forward_hook(self._keep_last_row(self.rows[-1])))
        return self

    def __exit__(self, *exc: Any) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        if self._recording is not None:
            self._recording.__exit__(*exc)
            self._recording = None
        if self._kernel_ctx is not None:
            self._kernel_ctx.__exit__(*exc)
            self._kernel_ctx = None

    @staticmethod
    def _keep_last_row(rows: list) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if weights is None:
                return
            # [1, heads, q, kv]: the last query is this forward's newest position. The prefill's row is
            # copied out of its [heads, P, P] weights; a decoding step's is its only row. Averaging over
            # heads waits for the end of the call (one operation per layer, not one per step).
            rows.append(weights[0, :, -1, :].clone() if weights.shape[2] > 1 else weights[0, :, 0, :])

        return hook

    def _run_last_token(self, out: Any) -> bool:
        """One more decoding step on the last generated token (a turn cut by the token limit), recorded as
        generation's steps are; False (with a note) when it cannot run."""
        model = self.model
        cache = output_cache(out)
        if cache is None or self.owner.processor is not None:
            self.notes.append("the last token of a turn cut by the token limit was not run (no cache to extend)")
            return False
        kwargs = {cache_argument(model): cache}
        try:
            step = model(input_ids=out.sequences[:, -1:], use_cache=True, return_dict=True, **kwargs)
            self._last_logits = getattr(step, "logits", None)
        except Exception as exc:  # a model that cannot extend its cache: the analysis falls back, the turn stands
            self.notes.append(
                f"the last token of a turn cut by the token limit was not run: {type(exc).__name__}: {exc}"
            )
            return False
        return True

    def finish(self, enc: dict, out: Any, new_ids: list, finish: str) -> GenerationCapture:
        import torch

        prompt_ids = enc["input_ids"][0].tolist()
        extra = self._run_last_token(out) if finish == "length" and new_ids else False
        n = len(new_ids) + extra
        hidden = attention = None
        if self.hidden:
            steps = list(zip(*self._states))  # per forward, its L + 1 hidden states
            if len(steps) != n or not n or any(len(kept) != len(steps) for kept in self._states):
                self.notes.append(f"generation recorded hidden states for {len(steps)} of {n} positions")
            else:
                # The prefill's layers are [1, P, D]: only the last position is kept, before anything is stacked.
                first = torch.stack([layer[0, -1] for layer in steps[0]]).unsqueeze(1)  # [L + 1, 1, D]
                if n > 1:  # every decoding step's layers are [1, 1, D]: one concatenation for all of them
                    rest = torch.cat([layer for step in steps[1:] for layer in step]).view(n - 1, len(steps[0]), -1)
                    states = torch.cat([first, rest.transpose(0, 1)], dim=1)  # [L + 1, n, D]
                else:
                    states = first
                hidden = states.float().cpu()
                if self.after:
                    attention = self._rows_after(states, out, len(prompt_ids), n)
                if self.check_head:
                    self.head_reproduces_logits = self._head_matches(steps, out)
                if not self.head_reproduces_logits:
                    self.notes.append(
                        "the model's logits are not the unembedding of its last hidden state; "
                        "hidden states were not captured"
                    )
                    hidden = None
        if self.attention and not self.after:
            attention = self._attention_rows(len(prompt_ids), n)
        logits = self._logits(out, n) if hidden is not None else None
        return GenerationCapture(
            prompt_ids, list(new_ids), hidden, attention, self.impl, list(self.notes), id(self.model), logits
        )

    @property
    def wants_logits(self) -> bool:
        """Whether generate must return its logits (`output_logits`): kept beside the hidden states."""
        return self.hidden

    def _logits(self, out: Any, n: int) -> Any:
        """``[n, V]`` fp32 on CPU: generate's logits at the `n` captured positions, then the extra step's;
        None when they do not line up (a pass then unembeds the captured last layer)."""
        import torch

        steps = list(getattr(out, "logits", None) or ())
        if self._last_logits is not None:
            steps.append(self._last_logits[:, -1])
        if len(steps) != n or not n:
            return None
        return torch.cat([s.reshape(1, -1) for s in steps]).float().cpu()

    def _rows_after(self, states: Any, out: Any, n_prompt: int, n: int) -> Any:
        """``[L, n, P + n - 1]`` attention rows of the captured positions (`rebuilt_attention_rows`) from their
        residual streams (`states`, ``[L + 1, n, D]``) and the call's KV cache, rebuilt when read."""
        keys = cached_keys(output_cache(out), n_prompt + n - 1)
        if keys is None:
            self.notes.append("attention rows were not captured: the cache does not hold every position")
            return None
        return RebuiltAttention(self.model, self.owner.parts.layers, states, keys, n_prompt - 1)

    def _head_matches(self, steps: list, out: Any) -> bool:
        """Whether the model's own logits at its last generate step equal unembed(hidden[-1]) (softcap included)."""
        import torch

        logits = getattr(out, "logits", None)
        if not logits:
            return False
        parts = self.owner.parts
        last = steps[len(logits) - 1][-1][0, -1:]
        ours = parts.unembed(last)
        if parts.logit_softcap:
            ours = torch.tanh(ours / parts.logit_softcap) * parts.logit_softcap
        theirs = logits[-1].to(ours.device)
        return bool(torch.allclose(ours.float(), theirs.float(), rtol=1e-3, atol=1e-3))

    def _attention_rows(self, n_prompt: int, n: int) -> Any:
        """``[L, n, P + n - 1]`` rows from the hooks; None (with a note) when they do not line up with the positions."""
        import torch

        for layer, rows in enumerate(self.rows):
            lengths = [int(r.shape[-1]) for r in rows]
            if lengths != [n_prompt + j for j in range(n)]:
                # A sliding-window cache (or a layer that returned no weights) breaks the position mapping.
                self.notes.append(
                    f"layer {layer} returned attention rows of lengths {lengths[:3]}... for {n} positions"
                )
                return None
        out = []
        for rows in self.rows:  # [heads, kv] per position -> [n, P + n - 1] averaged over heads, zero-padded
            padded = torch.nn.utils.rnn.pad_sequence([r.transpose(0, 1) for r in rows], batch_first=True)
            out.append(padded.float().mean(-1))
        return torch.stack(out).cpu()


__all__ = ["CAPTURE_KINDS", "CaptureRecorder", "GenerationCapture", "RebuiltAttention", "capture_kinds"]
