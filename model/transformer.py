"""Llama-family decoder-only transformer (Llama 2/3, SmolLM2, Mistral, Qwen2) in one file.

RMSNorm, rotary embeddings (rotate-half convention as in Hugging Face checkpoints, optional
llama3 frequency scaling), grouped-query attention, SwiGLU MLP, tied or untied output head,
optional q/k/v bias (Qwen2). In CPU inference of one sequence the layers are one call into
kernels/cpu_rows.py's C code (`run_layers`; norms, products, rope, attention, SiLU, residuals),
which computes each row on its own: a row's bits do not depend on the rows beside it, so a verify
row is exactly the row `ar` computes. Elsewhere (training, CUDA, batches) the layers are torch
ops: F.rms_norm, F.scaled_dot_product_attention.

The forward pass is built for decoders that do more than plain next-token prediction:
- input token ids or input embeddings for T new rows at explicit positions;
- an explicit visibility mask of the new rows over (cache + new rows);
- only a leading subset of the new rows is written to the KV cache (draft rows are not);
- last hidden states returned alongside the logits on request.
The default path (causal, all rows cached) needs no mask at decode time and is the fast one.

Weights: q/k/v and gate/up are fused into one matrix each (4 matrix products per layer
instead of 7). fp32 on CPU, bf16 on CUDA (see model/loader.py). On CPU, inference models carry a
packed copy of every matrix (`Transformer.pack`, called by the loader) for a kernel built for
decode's few rows: kernels/cpu_rows.py where it builds, from the GGUF file's own Q4_1/Q8_0 blocks
where the loader kept them (`set_quantized`; a fifth of the bytes, outputs bit-identical to the
fp32 weights'), else from the fp32 weights (each weight streamed once for all rows); without that
kernel, oneDNN's prepacked layout. Plain F.linear (MKL sgemm) re-packs the weight on every call:
2 rows cost 1.9x one row (BENCHMARKS.md, "Row cost").
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import NamedTuple, Protocol, TypedDict, Unpack, cast

import torch
import torch.nn.functional as F
from torch import nn

from dllm_voice.kernels import cpu_rows, exact_rows
from dllm_voice.model.kv_cache import KVCache


@dataclass(frozen=True)
class ModelArgs:
    vocab_size: int = 49152
    dim: int = 576
    n_layers: int = 30
    n_heads: int = 9
    n_kv_heads: int = 3
    ffn_dim: int = 1536
    norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    max_seq_len: int = 8192
    tie_embeddings: bool = True
    qkv_bias: bool = False
    head_dim: int = 0  # 0 = dim // n_heads
    # llama3 rope scaling: (factor, low_freq_factor, high_freq_factor, original_max_len); () = none
    rope_llama3: tuple[float, ...] = ()
    arch: str = "llama"

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)
        assert self.n_heads % self.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads"
        assert self.head_dim % 2 == 0, "rotary embeddings need an even head_dim"

    @classmethod
    def preset(cls, name: str, **overrides: Unpack[ArgsOverrides]) -> ModelArgs:
        return replace(PRESETS[name], **overrides)


class ArgsOverrides(TypedDict, total=False):
    """ModelArgs fields to change in a preset."""

    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    norm_eps: float
    rope_theta: float
    max_seq_len: int
    tie_embeddings: bool
    qkv_bias: bool
    head_dim: int
    rope_llama3: tuple[float, ...]
    arch: str


PRESETS: dict[str, ModelArgs] = {
    "smollm2-135m": ModelArgs(),
    "smollm2-360m": ModelArgs(dim=960, n_layers=32, n_heads=15, n_kv_heads=5, ffn_dim=2560),
    # For decoder-logic tests: random weights, same structure, milliseconds per forward.
    "tiny": ModelArgs(
        vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128, max_seq_len=1024
    ),
}


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


def rope_inv_freq(args: ModelArgs) -> torch.Tensor:
    """Inverse frequencies (D/2,), with llama3-style scaling of the low frequencies if set."""
    d = args.head_dim
    inv = 1.0 / (args.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
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


# A weight's inference copy: kernels/cpu_rows.py's panels or a oneDNN-prepacked tensor.
Packed = cpu_rows.Panels | torch.Tensor


@functools.cache
def _packing_works() -> bool:
    """oneDNN's prepacked fp32 linear exists in this torch build and agrees with F.linear."""
    try:
        w, x = torch.randn(24, 16), torch.randn(3, 16)
        y = torch.ops.mkldnn._linear_pointwise(
            x, torch.ops.mkldnn._reorder_linear_weight(w, None), None, "none", [], ""
        )
        return bool(torch.allclose(y, F.linear(x, w), atol=1e-4, rtol=1e-4))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def prepack(
    weight: torch.Tensor, kind: str = "auto", quant: cpu_rows.Quantized | None = None
) -> Packed | None:
    """An inference-only copy of an (N, K) fp32 CPU weight for `linear`: kernels/cpu_rows.py's
    panels ("auto" where that kernel is available: from `quant`, the weight's GGUF blocks, when
    given, with integer products where the CPU has AVX-512 VNNI; "quant": the same blocks with
    fp32 products; "rows": from the fp32 weight) or oneDNN's prepacked layout ("onednn"); None
    where neither applies (other device or dtype, "plain")."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or kind == "plain":
        return None
    if kind in ("auto", "quant", "rows") and cpu_rows.available():
        if kind != "rows" and quant is not None:
            return cpu_rows.pack_quant(quant, vnni=None if kind == "auto" else False)
        return cpu_rows.pack(weight)
    if kind in ("quant", "rows") or not _packing_works():
        return None
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


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
) -> torch.Tensor:
    """Attention of q (B, T, H, D) over keys/values (B, Hkv, N, D) -> (B, T, H * D); mask and
    is_causal as F.scaled_dot_product_attention takes them. In CPU inference with batch 1 it runs
    kernels/cpu_rows.py's, which computes each row on its own: a verify row gets exactly the
    bits `ar` gets for it (with SDPA they could differ in the last bit); on CUDA, kernels/
    exact_rows.py's, which does the same there."""
    bsz, t, h, d = q.shape
    if exact_rows.applies(q):
        return exact_rows.attention(q, keys, values, mask, is_causal)
    cpu = q.device.type == "cpu" and q.dtype == torch.float32 and not q.requires_grad
    if bsz == 1 and cpu and cpu_rows.available():
        m = mask if mask is None or mask.dim() == 2 else mask[0, 0]
        y = cpu_rows.attention(q[0], keys[0], values[0], m, is_causal, d**-0.5)
        if y is not None:  # (T, H, D)
            return y.view(1, t, h * d)
    y = F.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, attn_mask=mask, is_causal=is_causal,
        enable_gqa=keys.shape[1] != h,
    )  # fmt: skip
    return y.transpose(1, 2).reshape(bsz, t, h * d)


def gemv_wins(x: torch.Tensor) -> bool:
    """oneDNN layout, a single row on one thread: MKL's gemv (F.linear) beats the packed op
    there (~1.2x faster), and loses at 2 threads, which gemv does not use."""
    return x.numel() == x.shape[-1] and torch.get_num_threads() == 1


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    packed: Packed | None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """x @ weight.T (+ bias), through the packed copy when there is one and no gradient is
    wanted (the packed ops have no backward: training paths use the plain weight). Batch-1
    decoding on CUDA takes kernels/exact_rows.py's row-invariant product."""
    if exact_rows.applies(x):
        return exact_rows.linear(x, weight, bias)
    if packed is None or x.requires_grad:
        return F.linear(x, weight, bias)
    if isinstance(packed, cpu_rows.Panels):
        return cpu_rows.matmul(x, weight, packed, bias)
    if gemv_wins(x):
        return F.linear(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class Linear(nn.Linear):
    """nn.Linear that can carry a prepacked copy of its weight for CPU inference (`pack`), and
    the GGUF blocks the weight was read from (`quant`) to pack from.

    Both are dropped whenever the weight may change under them: load_state_dict, .to(), and
    the copy is never used while the weight trains."""

    _packed: Packed | None = None
    quant: cpu_rows.Quantized | None = None

    @property
    def packed(self) -> Packed | None:
        return self._packed

    @packed.setter
    def packed(self, value: Packed | None) -> None:
        global _PACKINGS
        self._packed = value
        _PACKINGS += 1

    def pack(self, kind: str = "auto") -> None:
        self.packed = None if self.weight.requires_grad else prepack(self.weight, kind, self.quant)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.packed, self.bias)

    def _apply(self, fn, recurse=True):  # noqa: ANN001 - nn.Module's signature
        self.packed = self.quant = None
        return super()._apply(fn, recurse)

    def _load_from_state_dict(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        self.packed = self.quant = None
        super()._load_from_state_dict(*args, **kwargs)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        qkv_dim = (args.n_heads + 2 * args.n_kv_heads) * args.head_dim
        self.wqkv = Linear(args.dim, qkv_dim, bias=args.qkv_bias)
        self.wo = Linear(args.n_heads * args.head_dim, args.dim, bias=False)

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
        # Rotate q and k together: one rope pass for both.
        qk = apply_rope(qkv[..., : (h + hkv) * d].view(bsz, t, h + hkv, d), cos, sin)
        k = qk[:, :, h:].transpose(1, 2)  # (B, Hkv, T, D)
        v = qkv[..., (h + hkv) * d :].view(bsz, t, hkv, d).transpose(1, 2)  # (B, Hkv, T, D)

        start = cache.length
        if write:
            cache.write(layer, k[:, :, :write], v[:, :, :write])
        keys, values = cache.view(layer, start + write)  # (B, Hkv, S + write, D)
        if write < t:  # uncached rows still see themselves (and each other, per mask)
            keys = torch.cat((keys, k[:, :, write:]), dim=2)  # (B, Hkv, S + T, D)
            values = torch.cat((values, v[:, :, write:]), dim=2)
        return self.wo(attend(qk[:, :, :h], keys, values, mask, is_causal))


class MLP(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.ffn_dim = args.ffn_dim
        self.w_gate_up = Linear(args.dim, 2 * args.ffn_dim, bias=False)
        self.w_down = Linear(args.ffn_dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w_gate_up(x).split(self.ffn_dim, dim=-1)  # 2 x (B, T, F)
        return self.w_down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.eps = args.norm_eps
        self.attn_norm = nn.Parameter(torch.ones(args.dim))
        self.attn = Attention(args)
        self.mlp_norm = nn.Parameter(torch.ones(args.dim))
        self.mlp = MLP(args)

    def forward(self, x: torch.Tensor, *attn_args: object) -> torch.Tensor:
        x = x + self.attn(rms_norm(x, self.attn_norm, self.eps), *attn_args)
        return x + self.mlp(rms_norm(x, self.mlp_norm, self.eps))


def _c_stack(layers: nn.ModuleList) -> cpu_rows.LayerStack | None:
    """The layers' matrices and norms for cpu_rows.layers, built once per packing (checking
    every matrix took ~0.4 ms a forward, a tenth of one); None unless every matrix is packed as
    panels and there is no q/k/v bias."""
    packings, stack = _C_STACKS.get(layers, (-1, None))
    if packings == _PACKINGS:
        return stack
    blocks = cast("list[Block]", list(layers))
    mats = [(b.attn.wqkv, b.attn.wo, b.mlp.w_gate_up, b.mlp.w_down) for b in blocks]
    panels = tuple(m.packed for four in mats for m in four)
    stack = None
    if all(isinstance(p, cpu_rows.Panels) for p in panels) and mats[0][0].bias is None:
        norms = tuple(g for b in blocks for g in (b.attn_norm, b.mlp_norm))
        stack = cpu_rows.layer_stack(cast("tuple[cpu_rows.Panels, ...]", panels), norms)
    _C_STACKS[layers] = (_PACKINGS, stack)
    return stack


# Linear.packed assignments so far: a change to any invalidates every cached stack.
_PACKINGS = 0
_C_STACKS: weakref.WeakKeyDictionary[nn.ModuleList, tuple[int, cpu_rows.LayerStack | None]] = (
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
) -> torch.Tensor:
    """x (B, T, dim) through `layers`, layer i on cache layer first + i (Block.forward's other
    arguments). In CPU inference whose layers are packed for kernels/cpu_rows.py the whole stack
    is one C call for up to LayerStack.max_rows rows of all B sequences together
    (cpu_rows.layers: ~0.45 ms of Python and torch dispatch per layer saved, OpenMP wakes its
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
    stack = _c_stack(layers) if c_path else None
    if stack is not None and bsz * t > stack.max_rows:
        stack = None
    if stack is None:
        with exact_rows.one_forward():
            for i, layer in enumerate(layers):
                x = layer(x, cos, sin, cache, first + i, write, mask, is_causal)
        return x
    d = cos.shape[-1]
    rope = tuple(c.reshape(-1, t, d).expand(bsz, t, d).reshape(bsz * t, d) for c in (cos, sin))
    if mask is not None:
        mask = mask.reshape(-1, t, s + t).expand(bsz, t, s + t).contiguous()
    k, v = cache.k[first : first + len(layers)], cache.v[first : first + len(layers)]
    seqs = [
        cpu_rows.SeqKV(k[:, b], v[:, b], s, t, None if mask is None else mask[b])
        for b in range(bsz)
    ]
    y = x.reshape(bsz * t, dim).clone(memory_format=torch.contiguous_format)
    _c_layers(layers, stack, y, rope, seqs, is_causal)
    return y.view(bsz, t, dim)


def _c_layers(
    layers: nn.ModuleList,
    stack: cpu_rows.LayerStack,
    y: torch.Tensor,
    rope: tuple[torch.Tensor, ...],
    seqs: list[cpu_rows.SeqKV],
    causal: bool,
) -> None:
    """y (T, dim) through the C layer stack, in place (cpu_rows.layers)."""
    first = cast(Block, layers[0])
    heads, ffn, d = first.attn.n_heads, first.mlp.ffn_dim, rope[0].shape[-1]
    scratch = torch.empty(cpu_rows.layers_scratch(stack, y.shape[0], y.shape[1], heads, d, ffn))
    cos, sin = (r.contiguous() for r in rope)
    cpu_rows.layers(y, stack, first.eps, (cos, sin), seqs, causal, heads, ffn, scratch)


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        # normal_ on a meta tensor (the loader builds on meta) runs torch._refs, which imports
        # torch._dynamo and with it triton: the loader's weights replace this one anyway.
        weight = torch.empty(args.vocab_size, args.dim)
        weight = weight if weight.is_meta else nn.init.normal_(weight)
        self.embed = nn.Embedding(args.vocab_size, args.dim, _weight=weight)
        self.layers = nn.ModuleList(Block(args) for _ in range(args.n_layers))
        self.norm = nn.Parameter(torch.ones(args.dim))
        self.output = None if args.tie_embeddings else Linear(args.dim, args.vocab_size, False)
        self._rope_len = 0
        self.rope_cos = self.rope_sin = torch.empty(0)
        self._head_packed: Packed | None = None
        self._head_quant: cpu_rows.Quantized | None = None
        self.register_load_state_dict_post_hook(lambda m, _: m._weights_changed())

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.embed.weight if self.output is None else self.output.weight

    def head(self, normed: torch.Tensor) -> torch.Tensor:
        """Output logits (..., vocab) in float32 from final-normed hidden states (..., dim)."""
        return linear(normed, self.lm_head_weight, self._head_packed).float()

    def set_quantized(self, quant: dict[str, cpu_rows.Quantized]) -> None:
        """Keep the GGUF blocks each matrix was read from (state-dict name -> blocks; the
        loader's), for `pack` to multiply with; they must stand for the current weights."""
        expect = {name: tuple(p.shape) for name, p in self.named_parameters()}
        for name, q in quant.items():
            n, k = q.rows.shape[0], q.rows.shape[1] // cpu_rows.QUANT_FORMATS[q.fmt][0] * 32
            if expect.get(name) != (n, k):
                raise ValueError(f"quantized {name} is ({n}, {k}), the weight {expect.get(name)}")
        for name, m in self.named_modules():
            if isinstance(m, Linear):
                m.quant = quant.get(f"{name}.weight")
        self._head_quant = quant.get("embed.weight" if self.output is None else "output.weight")

    def pack(self, kind: str = "auto") -> Transformer:
        """Pack every matrix for CPU inference (a no-op elsewhere; `prepack` kinds); costs a
        second copy of the weights in memory (540 MB for SmolLM2-135M in fp32, 96 MB from its
        GGUF blocks)."""
        for m in self.modules():
            if isinstance(m, Linear):
                m.pack(kind)
        w = self.lm_head_weight
        self._head_packed = None if w.requires_grad else prepack(w, kind, self._head_quant)
        return self

    @property
    def cpu_kernel(self) -> str:
        """The kernel of this model's matrix products on CPU, by its layers' (else its head's)
        packing: "vnni", "quant" or "rows" (kernels/cpu_rows.py from GGUF blocks with integer or
        fp32 products, or from fp32 weights), "onednn", or "plain" (unpacked: F.linear)."""
        first = cast(Block, self.layers[0]) if len(self.layers) else None
        packed = self._head_packed if first is None else first.attn.wqkv.packed
        if packed is None:
            return "plain"
        if isinstance(packed, cpu_rows.Panels):
            if packed.fmt == "f32":
                return "rows"
            return "vnni" if packed.integer else "quant"
        return "onednn"

    def unpack(self) -> None:
        for m in self.modules():
            if isinstance(m, Linear):
                m.packed = None
        self._head_packed = None

    def _weights_changed(self) -> None:
        self.unpack()
        self._head_quant = None

    def _apply(self, fn, recurse=True):  # noqa: ANN001 - nn.Module's signature
        self._head_packed = self._head_quant = None
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
        w = self.embed.weight
        inv = rope_inv_freq(self.args)
        angles = torch.outer(torch.arange(n, dtype=torch.float64), inv)  # (n, D/2)
        cos, sin = angles.cos(), angles.sin()
        # (n, D) each; sin carries the rotate-half sign: (-sin, +sin), see apply_rope.
        self.rope_cos = torch.cat((cos, cos), dim=-1).to(device=w.device, dtype=w.dtype)
        self.rope_sin = torch.cat((-sin, sin), dim=-1).to(device=w.device, dtype=w.dtype)
        self._rope_len = n

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
        self._ensure_rope(s + t)

        if positions is None:
            cos = self.rope_cos[s : s + t].view(1, t, 1, -1)  # (1, T, 1, D)
            sin = self.rope_sin[s : s + t].view(1, t, 1, -1)
        else:
            self._ensure_rope(int(positions.max()) + 1)
            pos = positions.view(-1, t)  # (B or 1, T)
            cos = self.rope_cos[pos].unsqueeze(2)  # (B or 1, T, 1, D)
            sin = self.rope_sin[pos].unsqueeze(2)

        is_causal = False
        if mask is not None:
            mask = mask if mask.dim() == 2 else mask.unsqueeze(1)  # (T, S+T) or (B, 1, T, S+T)
        elif t > 1 and s == 0:
            is_causal = True  # fresh prefill: SDPA's own causal path, no mask tensor
        elif t > 1:
            mask = causal_mask(t, s, x.device)  # (T, S+T)

        x = run_layers(self.layers, x, cos, sin, cache, 0, write, mask, is_causal)
        cache.length = s + write

        return self._outputs(x, logits, hidden)

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
        mask. In CPU inference through kernels/cpu_rows.py's layer stack the rows of all calls
        are one C call and their logits one head product, which read every weight once for all
        of them; a row's bits do not depend on the rows beside it, so each call's outputs equal
        its forward alone. Elsewhere, or past the kernel's row limit, the calls run in turn."""
        stack = _c_stack(self.layers) if self._rows_path(calls) else None
        if stack is None or len(calls) == 1:
            return [c.run(self.forward) for c in calls]
        xs, cos, sin, seqs, writes = [], [], [], [], []
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
            k, v = c.cache.k[:, 0], c.cache.v[:, 0]  # (L, Hkv, capacity, D)
            seqs.append(cpu_rows.SeqKV(k, v, s, t, mask))
            writes.append(write)
        y = torch.cat(xs).contiguous()
        _c_layers(self.layers, stack, y, (torch.cat(cos), torch.cat(sin)), seqs, True)
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
        stack = _c_stack(self.layers)
        return (
            len(caps) == 1
            and next(iter(caps))[1:] == (1, torch.float32)
            and (stack is not None and rows <= stack.max_rows)
        )
