"""The decoder layer of a Llama-family model and its math: RMSNorm, rotary embeddings
(rotate-half convention as in Hugging Face checkpoints, optional llama3 frequency scaling), the
causal mask, grouped-query attention, SwiGLU MLP, optional q/k/v bias (Qwen2); and what later
families add (ModelArgs): q/k norms (Qwen3, Gemma 3), norms of each sublayer's output, a GELU gate
and sliding-window layers with their own rope base (Gemma 3). q/k/v and gate/up are fused into
one matrix each (4 matrix products per layer instead of 7).

Norm and attention run kernels/cpu_rows.py's C code in CPU inference and kernels/exact_rows.py's
in batch-1 CUDA decoding, each computing a row on its own (a verify row gets the bits `ar` gets
for it); elsewhere (training, CUDA batches) torch's F.rms_norm and F.scaled_dot_product_attention.
A stack of these layers runs through model/layer_stack.py.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from dllm_voice.kernels import cpu_rows, exact_rows
from dllm_voice.model.args import ModelArgs
from dllm_voice.model.kv_cache import KVCache
from dllm_voice.model.packing import Linear


def rope_inv_freq(args: ModelArgs, local: bool = False) -> torch.Tensor:
    """Inverse frequencies (D/2,), with llama3-style scaling of the low frequencies, a file's
    frequency factors and linear scaling where set; `local`: a sliding-window layer's (its own
    base, never scaled)."""
    d = args.head_dim
    theta = args.rope_local_theta if local else args.rope_theta
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    if local:
        return inv
    if args.rope_factors:
        inv = inv / torch.tensor(args.rope_factors, dtype=torch.float64)
    if args.rope_scale != 1.0:
        inv = inv / args.rope_scale
    if args.rope_llama3:
        factor, low, high, orig = args.rope_llama3
        wavelen = 2 * math.pi / inv
        low_wavelen, high_wavelen = orig / low, orig / high
        smooth = (orig / wavelen - low) / (high - low)
        mid = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where(wavelen > low_wavelen, inv / factor, inv)
        is_mid = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv = torch.where(is_mid, mid, inv)
    return inv


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, T, H, D); cos/sin: (B or 1, T, 1, D) rows of Transformer.rope_cos/rope_sin.

    Rotate-half convention, x * cos + (-x2, x1) * sin, with the minus sign folded into the
    first half of the sin table so the rotation is one roll: 3 ops, 11 us vs 20 us (cat/neg).
    """
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), sin)


def window_mask(
    mask: torch.Tensor | None,
    is_causal: bool,
    t: int,
    s: int,
    positions: torch.Tensor | None,
    window: int,
    device: torch.device,
) -> torch.Tensor | None:
    """The visibility of a sliding-window layer: `mask` / `is_causal` (as the forward takes them)
    and each row seeing only keys less than `window` positions behind its own, as (T, S + T) or
    (B, 1, T, S + T); None where every visible key is within the window anyway. Cached key i sits
    at position i (draft paths are moved contiguous before they are kept), new row j at
    positions[j] (default S + j)."""
    if s + t <= window:
        return mask
    pos = torch.arange(s, s + t, device=device) if positions is None else positions.view(-1, t)
    keys = torch.cat((torch.arange(s, device=device).expand(*pos.shape[:-1], s), pos), dim=-1)
    near = keys[..., None, :] > pos[..., :, None] - window  # (B or -, T, S + T)
    if mask is None:
        mask = causal_mask(t, s, device) if is_causal else None
    if near.dim() == 3:
        near = near[:, None]  # (B, 1, T, S + T)
    return near if mask is None else mask & near


def causal_mask(t: int, s: int, device: torch.device) -> torch.Tensor:
    """(T, S + T) bool, True = visible: T new rows after S cached positions, each seeing the
    cache and the new rows up to itself. Compared from two aranges: `ones(...).tril(s)` runs a
    parallel loop that wakes OpenMP's sleeping worker (8 vs 83 us for a 4-row verify step)."""
    return (
        torch.arange(s + t, device=device)[None, :]
        <= torch.arange(s, s + t, device=device)[:, None]
    )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim: kernels/cpu_rows.py's in CPU inference (one C call instead of
    torch's ~8 small ops: 61 norms took ~3.5 ms of a ~35 ms decode forward), kernels/
    exact_rows.py's in batch-1 CUDA decoding, else F.rms_norm."""
    if exact_rows.applies(x):
        return exact_rows.rms_norm(x, weight, eps)
    cpu = x.device.type == "cpu" and x.dtype == torch.float32
    if cpu and not (x.requires_grad or weight.requires_grad) and cpu_rows.available():
        return cpu_rows.rms_norm(x, weight, eps)
    return F.rms_norm(x, weight.shape, weight, eps)


def attend(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention of q (B, T, H, D) over keys/values (B, Hkv, N, D) -> (B, T, H * D); mask and
    is_causal as F.scaled_dot_product_attention takes them. In CPU inference with batch 1 it runs
    kernels/cpu_rows.py's, which computes each row on its own: a verify row gets exactly the
    bits `ar` gets for it (with SDPA they could differ in the last bit); on CUDA, kernels/
    exact_rows.py's, which does the same there."""
    bsz, t, h, d = q.shape
    scale = d**-0.5 if scale is None else scale
    if exact_rows.applies(q) and scale == d**-0.5:
        return exact_rows.attention(q, keys, values, mask, is_causal)
    cpu = q.device.type == "cpu" and q.dtype == torch.float32 and not q.requires_grad
    if bsz == 1 and cpu and cpu_rows.available():
        m = mask if mask is None or mask.dim() == 2 else mask[0, 0]
        y = cpu_rows.attention(q[0], keys[0], values[0], m, is_causal, scale)
        if y is not None:  # (T, H, D)
            return y.view(1, t, h * d)
    y = F.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, attn_mask=mask, is_causal=is_causal,
        enable_gqa=keys.shape[1] != h, scale=scale,
    )  # fmt: skip
    return y.transpose(1, 2).reshape(bsz, t, h * d)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        self.scale, self.eps = args.scale, args.norm_eps
        qkv_dim = (args.n_heads + 2 * args.n_kv_heads) * args.head_dim
        self.wqkv = Linear(args.dim, qkv_dim, bias=args.qkv_bias)
        self.wo = Linear(args.n_heads * args.head_dim, args.dim, bias=False)
        norm = args.qk_norm
        self.q_norm = nn.Parameter(torch.ones(args.head_dim)) if norm else None
        self.k_norm = nn.Parameter(torch.ones(args.head_dim)) if norm else None

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KVCache,
        layer: int,
        write: int,
        mask: torch.Tensor | None,
        is_causal: bool,
    ) -> torch.Tensor:
        bsz, t, _ = x.shape
        h, hkv, d = self.n_heads, self.n_kv_heads, self.head_dim
        qkv = self.wqkv(x)  # (B, T, (H + 2 Hkv) D)
        qk = qkv[..., : (h + hkv) * d].view(bsz, t, h + hkv, d)
        if self.q_norm is not None and self.k_norm is not None:
            qk = torch.cat(
                (
                    rms_norm(qk[:, :, :h], self.q_norm, self.eps),
                    rms_norm(qk[:, :, h:], self.k_norm, self.eps),
                ),
                dim=2,
            )
        # Rotate q and k together: one rope pass for both.
        qk = apply_rope(qk, cos, sin)
        k = qk[:, :, h:].transpose(1, 2)  # (B, Hkv, T, D)
        v = qkv[..., (h + hkv) * d :].view(bsz, t, hkv, d).transpose(1, 2)  # (B, Hkv, T, D)

        start = cache.length
        if write:
            cache.write(layer, k[:, :, :write], v[:, :, :write])
        keys, values = cache.view(layer, start + write)  # (B, Hkv, S + write, D)
        if write < t:  # uncached rows still see themselves (and each other, per mask)
            keys = torch.cat((keys, k[:, :, write:]), dim=2)  # (B, Hkv, S + T, D)
            values = torch.cat((values, v[:, :, write:]), dim=2)
        return self.wo(attend(qk[:, :, :h], keys, values, mask, is_causal, self.scale))


class MLP(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.ffn_dim, self.act = args.ffn_dim, args.act
        self.w_gate_up = Linear(args.dim, 2 * args.ffn_dim, bias=False)
        self.w_down = Linear(args.ffn_dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w_gate_up(x).split(self.ffn_dim, dim=-1)  # 2 x (B, T, F)
        if self.act == "gelu_tanh":
            return self.w_down(F.gelu(gate, approximate="tanh") * up)
        return self.w_down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, args: ModelArgs, index: int = 0) -> None:
        super().__init__()
        self.eps = args.norm_eps
        self.local = args.local(index)  # attends through the sliding window
        self.window = args.sliding_window if self.local else 0  # its width (positions)
        self.attn_norm = nn.Parameter(torch.ones(args.dim))
        self.attn = Attention(args)
        self.mlp_norm = nn.Parameter(torch.ones(args.dim))
        self.mlp = MLP(args)
        post = args.post_norms
        self.attn_post_norm = nn.Parameter(torch.ones(args.dim)) if post else None
        self.mlp_post_norm = nn.Parameter(torch.ones(args.dim)) if post else None

    def forward(self, x: torch.Tensor, *attn_args: object) -> torch.Tensor:
        a = self.attn(rms_norm(x, self.attn_norm, self.eps), *attn_args)
        if self.attn_post_norm is not None:
            a = rms_norm(a, self.attn_post_norm, self.eps)
        x = x + a
        m = self.mlp(rms_norm(x, self.mlp_norm, self.eps))
        if self.mlp_post_norm is not None:
            m = rms_norm(m, self.mlp_post_norm, self.eps)
        return x + m
