"""Decoder-only transformer (Llama 2/3, SmolLM2, Mistral, Qwen2, Qwen3, Gemma 3): token embeddings,
the decoder layers (model/layers.py, run as a stack by model/layer_stack.py), the final norm and a
tied or untied output head, over a KV cache per sequence (model/kv_cache.py).

The forward pass is built for decoders that do more than plain next-token prediction:
- input token ids or input embeddings for T new rows at explicit positions;
- an explicit visibility mask of the new rows over (cache + new rows);
- only a leading subset of the new rows is written to the KV cache (draft rows are not);
- last hidden states returned alongside the logits on request.
The default path (causal, all rows cached) needs no mask at decode time and is the fast one.
`forward_many` runs several sessions' rows as one forward in CPU inference.

Weights: fp32 on CPU, bf16 on CUDA (see model/loader.py). On CPU, inference models carry a packed
copy of every matrix (`Transformer.pack`, called by the loader; model/packing.py), from the GGUF
file's blocks where the loader kept them (`set_quantized`). Such a matrix is then held once, as
its panels: the loader leaves out its fp32 weight (a `Released` stand-in; the embedding's rows
come from its blocks), and `materialize` dequantizes them back for what needs them (training,
other kernels; `.to()` and state_dict do it themselves).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import NamedTuple, Protocol, cast

import torch
from torch import nn

from dllm_voice.kernels import cpu_layers, cpu_rows
from dllm_voice.model.args import ModelArgs
from dllm_voice.model.kv_cache import KVCache
from dllm_voice.model.layer_stack import Local, c_layers, c_stack, run_layers
from dllm_voice.model.layers import Block, causal_mask, rms_norm, rope_inv_freq, window_mask
from dllm_voice.model.packing import BlockWeight, Linear, Packed, linear


@dataclass
class Call:
    """The arguments of one `Transformer.forward` (batch 1), for `forward_many`."""

    cache: KVCache
    ids: torch.Tensor | None = None
    embeds: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    write: int | None = None
    logits: str | int = "all"
    hidden: bool = False

    def kwargs(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def run(self, forward: Forward) -> ForwardOut:
        """`forward` (the model's) on these arguments."""
        return forward(
            self.ids, cache=self.cache, embeds=self.embeds, positions=self.positions,
            mask=self.mask, write=self.write, logits=self.logits, hidden=self.hidden,
        )  # fmt: skip

    @property
    def rows(self) -> int:
        """T, the new rows: of `embeds`, else of `ids`."""
        x = self.ids if self.embeds is None else self.embeds
        assert x is not None, "a call needs ids or embeds"
        return x.shape[1]

    def check_room(self) -> None:
        """ContextOverflowError, as `forward` raises it, where the cache cannot take the rows."""
        self.cache.check_room(self.rows if self.write is None else self.write)


def _logit_rows(logits: str | int, t: int) -> slice:
    """The rows `logits` asks for: "all", the "last", or every row from an index on."""
    if logits == "last":
        return slice(t - 1, t)
    return slice(0 if logits == "all" else int(logits), t)


class ForwardOut(NamedTuple):
    logits: torch.Tensor | None  # (B, T or 1, vocab) float32, or None when not requested
    hidden: torch.Tensor | None  # (B, T, dim) last block output before the final norm
    hidden_normed: torch.Tensor | None  # (B, T, dim) after the final norm (lm-head input)


class Forward(Protocol):
    """`Transformer.forward`, or what runs it for a decoder (model/batch.py's StepBatcher)."""

    def __call__(
        self,
        ids: torch.Tensor | None = None,
        *,
        cache: KVCache,
        embeds: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        write: int | None = None,
        logits: str | int = "all",
        hidden: bool = False,
    ) -> ForwardOut: ...


class Embedding(BlockWeight, nn.Embedding):
    """nn.Embedding whose rows come out times `scale` (Gemma: sqrt(dim)); a tied head reads the
    unscaled weight. Where the weight was released the rows come from its GGUF blocks."""

    scale: float = 1.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.rows(ids) if self.released else super().forward(ids)
        return x if self.scale == 1.0 else x * self.scale


class HeadSketch:
    """A head's sketch (cpu_rows.pack_sketch) and when to use it. The bound leaves few panels to
    compute where the model is sure of its next token (Gemma 3 answering: a median 4 % of its
    262K-row head) and most of them where it is not (flat logits), where the sketch's pass is
    paid for nothing. Sureness comes in runs, so each step decides from the last: after a
    sketched step that computed over HIGH of the panels the next one takes the whole head, and
    after a whole head the next one is sketched where at most NEAR of the rows came within a
    typical bound of the top logit (an estimate of what the sketch would have computed). On
    Gemma 3's answers this took a head from 9.0 to 7.2 ms a step, against 8.1 always sketched
    (the ids are the same either way)."""

    MIN_VOCAB = 100_000  # vocabularies where the head is a large share of a step (128K-262K)
    HIGH = 0.2
    NEAR = 0.004

    def __init__(self, sketch: cpu_rows.Sketch) -> None:
        self.sketch, self.use = sketch, True
        rn, sn = sketch.bounds[:, 0], sketch.bounds[:, 1]
        real = rn.isfinite()
        # a typical row's bound over its estimate, per unit of |x| (x's rounding: ~1 % of |x|)
        self.slack = float(rn[real].median() + 0.01 * sn[real].median())

    def argmax(self, normed: torch.Tensor, head: Callable[[], torch.Tensor],
               panels: cpu_rows.Panels) -> list[int]:  # fmt: skip
        """`normed`'s argmax ids: sketched, or from `head()`'s logits (R, V)."""
        if self.use:
            ids, share = cpu_rows.head_argmax(normed, panels, self.sketch)
            self.use = share <= self.HIGH
            return ids
        logits = head()
        top = logits.amax(-1, keepdim=True)
        floor = top - self.slack * torch.linalg.vector_norm(normed, dim=-1, keepdim=True)
        near = (logits >= floor).sum(-1).amax()
        self.use = int(near) <= self.NEAR * logits.shape[-1]
        return cpu_rows.argmax(logits)


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        # normal_ on a meta tensor (the loader builds on meta) runs torch._refs, which imports
        # torch._dynamo and with it triton: the loader's weights replace this one anyway.
        weight = torch.empty(args.vocab_size, args.dim)
        weight = weight if weight.is_meta else nn.init.normal_(weight)
        self.embed = Embedding(args.vocab_size, args.dim, _weight=weight)
        self.embed.scale = args.embed_scale
        self.layers = nn.ModuleList(Block(args, i) for i in range(args.n_layers))
        self.norm = nn.Parameter(torch.ones(args.dim))
        self.output = None if args.tie_embeddings else Linear(args.dim, args.vocab_size, False)
        self._rope_len = 0
        self.rope_cos = self.rope_sin = torch.empty(0)
        self.rope_cos_local = self.rope_sin_local = torch.empty(0)  # sliding-window layers'
        self._head_packed: Packed | None = None  # a tied head's (an untied one is `output`)
        self._sketch: HeadSketch | None = None  # greedy steps' head (`head_argmax`)
        self.register_load_state_dict_post_hook(lambda m, _: m._drop_packed())

    @property
    def head_matrix(self) -> BlockWeight:
        """The module holding the output matrix: `output`, or the embedding where tied."""
        return self.embed if self.output is None else self.output

    @property
    def lm_head_weight(self) -> torch.Tensor:
        """The output matrix's parameter (a `Released` stand-in where the loader kept only its
        blocks: `head_matrix.dense()` or `.rows()` for values)."""
        return self.head_matrix.weight

    @property
    def _head_panels(self) -> Packed | None:
        """The output matrix's packed copy: the tied head's, or `output`'s."""
        return self._head_packed if self.output is None else self.output.packed

    @property
    def _head_quant(self) -> cpu_rows.Quantized | None:
        return self.head_matrix.quant

    def head(self, normed: torch.Tensor) -> torch.Tensor:
        """Output logits (..., vocab) in float32 from final-normed hidden states (..., dim)."""
        if self.output is not None:
            return self.output(normed).float()
        return linear(normed, self.embed.weight, self._head_packed).float()

    @property
    def sketched(self) -> bool:
        """`head_argmax` skips most of the head here: decoders that only need the argmax ask
        for the final-normed rows instead of logits."""
        return self._sketch is not None

    def head_argmax(self, normed: torch.Tensor) -> list[int]:
        """Each row's argmax of `head(normed)` (R, dim), ties to the first, as greedy decoding
        takes it: through the head's sketch where it has one (kernels/cpu_rows.py
        `head_argmax`: the same ids from ~0.4 of the head's bytes on Gemma 3), else over the
        logits."""
        sk = self._sketch
        if sk is not None and len(normed) <= cpu_rows.SKETCH_ROWS:
            head = self._head_panels
            assert isinstance(head, cpu_rows.Panels)
            return sk.argmax(normed, lambda: self.head(normed), head)
        return cpu_rows.argmax(self.head(normed))

    def set_quantized(self, quant: dict[str, cpu_rows.Quantized]) -> None:
        """Keep the GGUF blocks each matrix was read from (state-dict name -> blocks; the
        loader's), for `pack` to multiply with; they must stand for the current weights, and
        every released weight needs its blocks."""
        expect = {name: tuple(p.shape) for name, p in self.named_parameters()}
        for name, q in quant.items():
            n, k = q.rows.shape[0], q.cols
            if expect.get(name) != (n, k):
                raise ValueError(f"quantized {name} is ({n}, {k}), the weight {expect.get(name)}")
        for name, m in self.named_modules():
            if isinstance(m, BlockWeight):
                m.quant = quant.get(f"{name}.weight")
                if m.released and m.quant is None:
                    raise ValueError(f"{name}.weight was released and has no blocks")

    def pack(self, kind: str = "auto") -> Transformer:
        """Pack every matrix for CPU inference (a no-op elsewhere; `prepack` kinds). From GGUF
        blocks the panels are the only copy of a released matrix (SmolLM2-135M: 96 MB where
        fp32 weights took 540); kinds made from fp32 weights put those back first."""
        for m in self.modules():
            if isinstance(m, Linear):
                m.pack(kind)
        self._head_packed = self.embed.packed_copy(kind) if self.output is None else None
        head = self._head_panels
        quant, self._sketch = self._head_quant, None
        blocks = isinstance(head, cpu_rows.Panels) and head.fmt != "f32"
        if quant is not None and blocks and quant.rows.shape[0] >= HeadSketch.MIN_VOCAB:
            self._sketch = HeadSketch(cpu_rows.pack_sketch(quant))
        return self

    def materialize(self) -> Transformer:
        """Every released weight's fp32 values back from its blocks (training, state_dict
        users, other kernels); the packing stays as it is."""
        for m in self.modules():
            if isinstance(m, BlockWeight):
                m.materialize()
        return self

    @property
    def cpu_kernel(self) -> str:
        """The kernel of this model's matrix products on CPU, by its layers' (else its head's)
        packing: "vnni", "quant" or "rows" (kernels/cpu_rows.py from GGUF blocks with integer or
        fp32 products, or from fp32 weights), "onednn", or "plain" (unpacked: F.linear)."""
        first = cast(Block, self.layers[0]) if len(self.layers) else None
        packed = self._head_panels if first is None else first.attn.wqkv.packed
        if packed is None:
            return "plain"
        if isinstance(packed, cpu_rows.Panels):
            if packed.fmt == "f32":
                return "rows"
            return "vnni" if packed.integer else "quant"
        return "onednn"

    def unpack(self) -> None:
        """Plain F.linear everywhere, on fp32 weights (released ones put back)."""
        self.materialize()
        self._drop_packed()

    def _drop_packed(self) -> None:
        for m in self.modules():
            if isinstance(m, Linear):
                m.packed = None
        self._head_packed = self._sketch = None

    def _apply(self, fn, recurse=True):  # noqa: ANN001 - nn.Module's signature
        self._head_packed = self._sketch = None
        self._rope_len = 0  # the rope tables follow the weights' dtype and device: rebuilt
        return super()._apply(fn, recurse)

    def new_cache(self, capacity: int, batch: int = 1) -> KVCache:
        a, w = self.args, self.embed.weight
        cap = min(capacity, a.max_seq_len)
        self._ensure_rope(cap)
        return KVCache(
            a.n_layers, a.n_kv_heads, a.head_dim, cap, batch=batch, dtype=w.dtype, device=w.device
        )

    def _ensure_rope(self, n: int) -> None:
        """(Re)build cos/sin tables (n, D) once, in the weight dtype (not per step)."""
        if n <= self._rope_len:
            return
        self.rope_cos, self.rope_sin = self._rope_tables(n, local=False)
        if self.args.sliding_window:
            self.rope_cos_local, self.rope_sin_local = self._rope_tables(n, local=True)
        self._rope_len = n

    def _rope_tables(self, n: int, local: bool) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.embed.weight
        inv = rope_inv_freq(self.args, local)
        angles = torch.outer(torch.arange(n, dtype=torch.float64), inv)  # (n, D/2)
        cos, sin = angles.cos(), angles.sin()
        # (n, D) each; sin carries the rotate-half sign: (-sin, +sin), see layers.apply_rope.
        return (
            torch.cat((cos, cos), dim=-1).to(device=w.device, dtype=w.dtype),
            torch.cat((-sin, sin), dim=-1).to(device=w.device, dtype=w.dtype),
        )

    def forward(
        self,
        ids: torch.Tensor | None = None,
        *,
        cache: KVCache,
        embeds: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        write: int | None = None,
        logits: str | int = "all",
        hidden: bool = False,
    ) -> ForwardOut:
        """Run T new rows against the cache (S valid positions) and append some of them to it.

        ids: (B, T) token ids, or embeds: (B, T, dim) input embeddings instead.
        positions: (T,) or (B, T) rope positions; default S, S+1, ..., S+T-1.
        mask: bool (T, S+T) or (B, T, S+T), True = visible; columns are the S cached positions
            then the T new rows in order. Default: causal (every cached position, new rows <= i).
        write: the first `write` new rows are appended to the cache (default all T); the others
            are attended to by the new rows (as the mask says) but never stored.
        logits: "all" rows, only the "last" row, every row from an index on (an int: a verify
            forward's rows after its prompt rows), or "none".
        hidden: also return the final hidden states of all T rows (pre- and post-norm).
        """
        x = self.embed(ids) if embeds is None else embeds  # (B, T, dim)
        bsz, t, _ = x.shape
        s = cache.length
        write = t if write is None else write
        assert 0 <= write <= t, "write must be within 0..T"
        cache.check_room(write)

        is_causal = False
        if mask is not None:
            mask = mask if mask.dim() == 2 else mask.unsqueeze(1)  # (T, S+T) or (B, 1, T, S+T)
        elif t > 1 and s == 0:
            is_causal = True  # fresh prefill: SDPA's own causal path, no mask tensor
        elif t > 1:
            mask = causal_mask(t, s, x.device)  # (T, S+T)
        cos, sin, local = self.rope_for(s, t, positions, mask, is_causal)
        x = run_layers(self.layers, x, cos, sin, cache, 0, write, mask, is_causal, local)
        cache.length = s + write

        return self._outputs(x, logits, hidden)

    def rope_for(
        self,
        s: int,
        t: int,
        positions: torch.Tensor | None,
        mask: torch.Tensor | None,
        is_causal: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, Local | None]:
        """run_layers' rope rows (cos, sin) for T rows after S cached ones (`positions` as
        `forward` takes them) and, where the model has sliding-window layers, their `local`
        arguments for this `mask` / `is_causal`."""
        top = s + t if positions is None else max(s + t, int(positions.max()) + 1)
        self._ensure_rope(top)
        cos, sin = self._rope_rows(self.rope_cos, self.rope_sin, s, t, positions)
        if not self.args.sliding_window:
            return cos, sin, None
        cl, sl = self._rope_rows(self.rope_cos_local, self.rope_sin_local, s, t, positions)
        device = self.embed.weight.device
        lmask = window_mask(mask, is_causal, t, s, positions, self.args.sliding_window, device)
        return cos, sin, (cl, sl, lmask, is_causal and lmask is None)

    @staticmethod
    def _rope_rows(
        cos: torch.Tensor, sin: torch.Tensor, s: int, t: int, positions: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The tables' rows for T new rows after S cached ones: (B or 1, T, 1, D) each."""
        if positions is None:
            return cos[s : s + t].view(1, t, 1, -1), sin[s : s + t].view(1, t, 1, -1)
        pos = positions.view(-1, t)  # (B or 1, T)
        return cos[pos].unsqueeze(2), sin[pos].unsqueeze(2)

    def _outputs(self, x: torch.Tensor, logits: str | int, hidden: bool) -> ForwardOut:
        """ForwardOut of the last block's output x (B, T, dim), as `forward` documents."""
        if logits == "none" and not hidden:
            return ForwardOut(None, None, None)
        normed = rms_norm(x, self.norm, self.args.norm_eps) if hidden else None
        out = None
        if logits != "none":
            rows = _logit_rows(logits, x.shape[1])
            head_in = (
                rms_norm(x[:, rows], self.norm, self.args.norm_eps)
                if normed is None
                else normed[:, rows]
            )
            out = self.head(head_in)  # (B, rows, vocab)
        return ForwardOut(out, x if hidden else None, normed)

    def forward_many(self, calls: Sequence[Call]) -> list[ForwardOut]:
        """One forward for several sequences' rows (several sessions' decode steps): each call
        as `forward(**call)` would run it, on its own cache, with its own length, positions and
        mask. In CPU inference through kernels/cpu_layers.py's layer stack the rows of all calls
        are one C call and their logits one head product, which read every weight once for all
        of them; a row's bits do not depend on the rows beside it, so each call's outputs equal
        its forward alone. Elsewhere, or past the kernel's row limit, the calls run in turn."""
        stack = c_stack(self.layers) if self._rows_path(calls) else None
        if stack is None or len(calls) == 1:
            return [c.run(self.forward) for c in calls]
        xs, cos, sin, seqs, writes = [], [], [], [], []
        local_cos, local_sin = [], []  # the sliding-window layers' (Block.local)
        for c in calls:
            x = self.embed(c.ids) if c.embeds is None else c.embeds  # (1, T, dim)
            t, s = x.shape[1], c.cache.length
            write = t if c.write is None else c.write
            c.cache.check_room(write)
            pos = torch.arange(s, s + t) if c.positions is None else c.positions.view(t)
            self._ensure_rope(int(pos.max()) + 1)
            xs.append(x[0])
            cos.append(self.rope_cos[pos])
            sin.append(self.rope_sin[pos])
            mask = None if c.mask is None else c.mask.reshape(t, s + t).contiguous()
            lmask = None  # rows at positions s + i: the C stack bounds their window itself
            if stack.window:
                local_cos.append(self.rope_cos_local[pos])
                local_sin.append(self.rope_sin_local[pos])
                if c.positions is not None:
                    w = window_mask(mask, mask is None, t, s, pos, stack.window, x.device)
                    lmask = None if w is None else w.reshape(t, s + t).contiguous()
            k, v = c.cache.k[:, 0], c.cache.v[:, 0]  # (L, Hkv, capacity, D)
            seqs.append(cpu_layers.SeqKV(k, v, s, t, mask, lmask))
            writes.append(write)
        y = torch.cat(xs).contiguous()
        local = (torch.cat(local_cos), torch.cat(local_sin)) if stack.window else None
        c_layers(self.layers, stack, y, (torch.cat(cos), torch.cat(sin)), seqs, True, local)
        normed = rms_norm(y, self.norm, self.args.norm_eps)  # (T, dim), each row on its own
        spans, head_rows, r0 = [], [], 0
        for c, seq, write in zip(calls, seqs, writes, strict=True):
            c.cache.length = seq.past + write
            spans.append(slice(r0, r0 + seq.rows))
            if c.logits != "none":
                rows = _logit_rows(c.logits, seq.rows)
                head_rows.append(normed[r0 + rows.start : r0 + rows.stop])
            r0 += seq.rows
        logits = (
            self.head(torch.cat(head_rows)).split([len(h) for h in head_rows]) if head_rows else ()
        )
        outs, heads = [], iter(logits)
        for c, span in zip(calls, spans, strict=True):
            out = next(heads)[None] if c.logits != "none" else None
            h, hn = (y[None, span], normed[None, span]) if c.hidden else (None, None)
            outs.append(ForwardOut(out, h, hn))
        return outs

    def _rows_path(self, calls: Sequence[Call]) -> bool:
        """Whether `forward_many` can run `calls` as one call of the C layer stack."""
        if not cpu_rows.available() or torch.is_grad_enabled():
            return False
        w = self.embed.weight
        if w.device.type != "cpu" or w.dtype != torch.float32 or self.args.head_dim % 8:
            return False
        if any(m._forward_pre_hooks or m._forward_hooks for m in self.layers):
            return False
        rows = 0
        caps = {(c.cache.capacity, c.cache.batch, c.cache.k.dtype) for c in calls}
        for c in calls:
            t = c.rows
            rows += t
            if c.cache.length + t > c.cache.capacity:
                return False
            if c.mask is not None and c.mask.dtype != torch.bool:
                return False
        stack = c_stack(self.layers)
        return (
            len(caps) == 1
            and next(iter(caps))[1:] == (1, torch.float32)
            and (stack is not None and rows <= stack.max_rows)
        )
