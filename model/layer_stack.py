"""A stack of decoder layers over new rows (`run_layers`). In CPU inference whose matrices are
packed for kernels/cpu_rows.py the whole stack is one C call (`cpu_layers.layers`: norms, products,
rope, attention, SiLU or GELU, residuals, and the q/k norms, output norms and sliding-window
layers of Qwen3 and Gemma 3), which computes each row on its own: a row's bits do not depend
on the rows beside it, so a verify row is exactly the row `ar` computes, and several sessions'
rows can share the call (`Transformer.forward_many`). Elsewhere (training, CUDA, hooks) each
layer's torch ops.
"""

from __future__ import annotations

import weakref
from typing import cast

import torch
from torch import nn

from dllm_voice.kernels import cpu_layers, cpu_rows, exact_rows
from dllm_voice.model import packing
from dllm_voice.model.kv_cache import KVCache
from dllm_voice.model.layers import Block

# The sliding-window layers' arguments to run_layers: their cos, sin, mask and is_causal.
Local = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]


def c_stack(layers: nn.ModuleList) -> cpu_layers.LayerStack | None:
    """The layers' matrices and norms for cpu_layers.layers, built once per packing (checking
    every matrix took ~0.4 ms a forward, a tenth of one); None unless every layer is packed as
    panels, without q/k/v bias, and the layers alike in what they add to a Llama layer (q/k
    norms, output norms, gate, attention scale, one window for the sliding-window layers)."""
    packings, stack = _C_STACKS.get(layers, (-1, None))
    if packings == packing.packings():
        return stack
    blocks = cast("list[Block]", list(layers))
    mats = [(b.attn.wqkv, b.attn.wo, b.mlp.w_gate_up, b.mlp.w_down) for b in blocks]
    panels = tuple(m.packed for four in mats for m in four)
    stack = None
    first = blocks[0]
    qk, post = first.attn.q_norm is not None, first.attn_post_norm is not None
    kinds = {
        (b.attn.q_norm is not None, b.attn_post_norm is not None, b.mlp.act, b.attn.scale)
        for b in blocks
    }
    windows = {b.window for b in blocks if b.local}
    alike = len(kinds) == 1 and len(windows) <= 1 and mats[0][0].bias is None
    if alike and all(isinstance(p, cpu_rows.Panels) for p in panels):
        norms = tuple(
            g
            for b in blocks
            for g in (
                b.attn_norm, b.mlp_norm,
                *((b.attn.q_norm, b.attn.k_norm) if qk else ()),
                *((b.attn_post_norm, b.mlp_post_norm) if post else ()),
            )
        )  # fmt: skip
        stack = cpu_layers.layer_stack(
            cast("tuple[cpu_rows.Panels, ...]", panels),
            cast("tuple[torch.Tensor, ...]", norms),
            qk_norm=qk,
            post_norms=post,
            gelu=first.mlp.act == "gelu_tanh",
            local=[b.local for b in blocks],
            window=next(iter(windows), 0),
        )
    _C_STACKS[layers] = (packing.packings(), stack)
    return stack


# Each stack with the packing count (model/packing.py `packings`) it was built at.
_C_STACKS: weakref.WeakKeyDictionary[nn.ModuleList, tuple[int, cpu_layers.LayerStack | None]] = (
    weakref.WeakKeyDictionary()
)


def run_layers(
    layers: nn.ModuleList,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    cache: KVCache,
    first: int,
    write: int,
    mask: torch.Tensor | None,
    is_causal: bool,
    local: Local | None = None,
) -> torch.Tensor:
    """x (B, T, dim) through `layers`, layer i on cache layer first + i (Block.forward's other
    arguments; `local`: cos, sin, mask and is_causal of the sliding-window layers, Block.local).
    In CPU inference whose layers are packed for kernels/cpu_rows.py the whole stack
    is one C call for up to LayerStack.max_rows rows of all B sequences together
    (cpu_layers.layers: ~0.45 ms of Python and torch dispatch per layer saved, OpenMP wakes its
    worker once, not 5 times a layer, and a batch's rows share each weight read); its rows past
    `write` go to the cache slots after the written ones - free slots, past cache.length - so it
    needs room for all T rows. Layers with hooks (gen_data's feature capture) keep the torch
    ops."""
    bsz, t, dim = x.shape
    s, c_path = cache.length, cpu_rows.available() and not torch.is_grad_enabled()
    c_path = c_path and x.device.type == "cpu" and x.dtype == torch.float32
    c_path = c_path and cache.k.dtype == torch.float32 and s + t <= cache.capacity
    c_path = c_path and cos.shape[0] in (1, bsz)
    c_path = c_path and cos.shape[-1] % 8 == 0 and cos.shape[-1] <= 256  # attend_rows' head dims
    c_path = c_path and (mask is None or mask.dtype == torch.bool)
    c_path = c_path and not any(m._forward_pre_hooks or m._forward_hooks for m in layers)
    stack = c_stack(layers) if c_path else None
    if stack is not None and bsz * t > stack.max_rows:
        stack = None
    if stack is None:
        with exact_rows.one_forward():
            for i, layer in enumerate(layers):
                own = local if local is not None and layer.local else (cos, sin, mask, is_causal)
                x = layer(x, own[0], own[1], cache, first + i, write, own[2], own[3])
        return x
    d = cos.shape[-1]

    def rows(c: torch.Tensor) -> torch.Tensor:
        return c.reshape(-1, t, d).expand(bsz, t, d).reshape(bsz * t, d)

    def per_seq(m: torch.Tensor | None) -> list[torch.Tensor | None]:
        m = None if m is None else m.reshape(-1, t, s + t).expand(bsz, t, s + t).contiguous()
        return [None if m is None else m[b] for b in range(bsz)]

    rope = (rows(cos), rows(sin))
    local_rope, lmasks = None, per_seq(None)
    if stack.window:  # the sliding-window layers' rope rows and visibility (Block.local)
        assert local is not None, "sliding-window layers need their rope rows"
        local_rope = (rows(local[0]), rows(local[1]))
        lmasks = per_seq(local[2])
    k, v = cache.k[first : first + len(layers)], cache.v[first : first + len(layers)]
    seqs = [
        cpu_layers.SeqKV(k[:, b], v[:, b], s, t, m, lm)
        for b, (m, lm) in enumerate(zip(per_seq(mask), lmasks, strict=True))
    ]
    y = x.reshape(bsz * t, dim).clone(memory_format=torch.contiguous_format)
    c_layers(layers, stack, y, rope, seqs, is_causal, local_rope)
    return y.view(bsz, t, dim)


def c_layers(
    layers: nn.ModuleList,
    stack: cpu_layers.LayerStack,
    y: torch.Tensor,
    rope: tuple[torch.Tensor, ...],
    seqs: list[cpu_layers.SeqKV],
    causal: bool,
    local_rope: tuple[torch.Tensor, ...] | None = None,
) -> None:
    """y (T, dim) through the C layer stack, in place (cpu_layers.layers); local_rope: the
    sliding-window layers' rope rows (T, D), where the stack has such layers."""
    first = cast(Block, layers[0])
    heads, ffn, d = first.attn.n_heads, first.mlp.ffn_dim, rope[0].shape[-1]
    scratch = torch.empty(cpu_layers.layers_scratch(stack, y.shape[0], y.shape[1], heads, d, ffn))
    cos, sin = (r.contiguous() for r in rope)
    lr = None if local_rope is None else (local_rope[0].contiguous(), local_rope[1].contiguous())
    cpu_layers.layers(
        y, stack, first.eps, (cos, sin), seqs, causal, heads, ffn, scratch, first.attn.scale, lr
    )
