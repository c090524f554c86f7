"""Matrix products of inference through a packed copy of each weight (`prepack`, `linear`,
`Linear`), and weights held only as GGUF blocks (`Released`, `BlockWeight`).

On CPU, inference models carry a packed copy of every matrix (`Transformer.pack`, called by the
loader) for a kernel built for decode's few rows: kernels/cpu_rows.py where it builds, from the
GGUF file's own blocks where the loader kept them (`Linear.quant`; a fifth of the bytes, outputs
bit-identical to the fp32 weights'), else from the fp32 weights (each weight streamed once for
all rows); without that kernel, oneDNN's prepacked layout. Plain F.linear (MKL sgemm) re-packs
the weight on every call: 2 rows cost 1.9x one row (BENCHMARKS.md, "Row cost"). Training, CUDA
and other dtypes use the plain weight.

A matrix packed from its blocks needs no fp32 copy: the loader leaves it out (model/loader.py,
unless keep_float), and the weight parameter is a `Released` stand-in with the weight's shape,
dtype and device but no values, on which every op raises. Products from block panels take any
number of rows, so nothing falls back to the missing weight; what needs the fp32 values
(`BlockWeight.dense`, `materialize`, state_dict, `.to()`, repacking to another kind) dequantizes
them from the blocks, bit-identical to what the loader would have kept.
"""

from __future__ import annotations

import functools
from typing import TypeAlias

import torch
import torch.nn.functional as F
from torch import nn

from dllm_voice.kernels import cpu_rows, exact_rows

# A weight's inference copy: kernels/cpu_rows.py's panels or a oneDNN-prepacked tensor. Declared
# an alias: with torch unfollowed by mypy (pyproject.toml) the union alone reads as a variable.
Packed: TypeAlias = cpu_rows.Panels | torch.Tensor


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


def gemv_wins(x: torch.Tensor) -> bool:
    """oneDNN layout, a single row on one thread: MKL's gemv (F.linear) beats the packed op
    there (~1.2x faster), and loses at 2 threads, which gemv does not use."""
    return x.numel() == x.shape[-1] and torch.get_num_threads() == 1


class ReleasedWeightError(RuntimeError):
    """An op on a `Released` weight."""


class Released(torch.Tensor):
    """An fp32 CPU weight of `shape` that the model holds only as GGUF blocks (and the panels
    made from them): shape, dtype and device without values. Every op on it raises
    ReleasedWeightError (nn.Parameter's detach makes another stand-in), so nothing computes with
    a placeholder; `BlockWeight.materialize` puts the values back."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, shape: tuple[int, ...] | torch.Size) -> Released:
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=torch.float32, device="cpu")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        if func is torch.ops.aten.detach.default:
            return Released(args[0].shape)
        raise ReleasedWeightError(
            f"{func}: this weight is held only as its GGUF blocks; load(..., keep_float=True) "
            "or call materialize() for the fp32 weight"
        )

    def __reduce_ex__(self, protocol):  # noqa: ANN001, ANN204 - torch.save must not write it
        raise ReleasedWeightError("a released weight has no values to save: use state_dict()")

    def __repr__(self, *args, **kwargs) -> str:  # noqa: ANN002, ANN003
        return f"Released({tuple(self.shape)})"


def from_blocks(packed: Packed | None) -> bool:
    """Panels made from GGUF blocks (not from an fp32 weight, not oneDNN's)."""
    return isinstance(packed, cpu_rows.Panels) and packed.fmt != "f32"


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    packed: Packed | None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """x @ weight.T (+ bias), through the packed copy when there is one and no gradient is
    wanted (the packed ops have no backward: training paths use the plain weight, which raises
    where it was `Released`). Batch-1 decoding on CUDA takes kernels/exact_rows.py's
    row-invariant product."""
    if exact_rows.applies(x):
        return exact_rows.linear(x, weight, bias)
    if packed is None or x.requires_grad:
        return F.linear(x, weight, bias)
    if isinstance(packed, cpu_rows.Panels):
        # Block panels take every row count: the same bits whether or not the fp32 weight was
        # kept (a 256-row prefill chunk costs about what MKL's sgemm takes for it).
        return cpu_rows.matmul(x, None if from_blocks(packed) else weight, packed, bias)
    if gemv_wins(x):
        return F.linear(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class BlockWeight(nn.Module):
    """What Linear and the model's Embedding share: the GGUF blocks their weight was read from
    (`quant`), which can stand in for a released fp32 weight (`materialize`, `dense`,
    `rows`). The blocks are dropped whenever the weight may change under them (load_state_dict,
    .to(), which first put a released weight's values back)."""

    weight: nn.Parameter
    quant: cpu_rows.Quantized | None = None

    @property
    def released(self) -> bool:
        return isinstance(self.weight, Released)

    def dense(self) -> torch.Tensor:
        """The fp32 weight: the parameter, or a new tensor dequantized from the blocks."""
        if not self.released:
            return self.weight
        assert self.quant is not None, "released weights keep their blocks"
        return cpu_rows.dequantize(self.quant)

    def materialize(self) -> None:
        """Put a released weight's fp32 values back (no-op otherwise)."""
        if self.released:
            self.weight = nn.Parameter(self.dense(), requires_grad=False)

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """weight[ids] (..., k) in fp32: from the blocks where the weight was released."""
        if not self.released:
            return self.weight[ids]
        assert self.quant is not None, "released weights keep their blocks"
        return cpu_rows.dequantize_rows(self.quant, ids)

    def packed_copy(self, kind: str = "auto") -> Packed | None:
        """`prepack` of the weight (None while it trains); kinds not made from the blocks put a
        released weight's fp32 values back first (F.linear, oneDNN and f32 panels read them)."""
        if self.weight.requires_grad:
            return None
        if self.released and not (kind in ("auto", "quant") and cpu_rows.available()):
            self.materialize()
        return prepack(self.weight, kind, self.quant)

    def _apply(self, fn, recurse=True):  # noqa: ANN001 - nn.Module's signature
        self.materialize()
        self.quant = None
        return super()._apply(fn, recurse)

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:  # noqa: ANN001
        if not self.released:
            return super()._save_to_state_dict(destination, prefix, keep_vars)
        with torch.inference_mode(False):  # the stand-in's detach sets a version counter
            super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + "weight"] = self.dense()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        self.quant = None
        if self.released and not isinstance(state_dict.get(prefix + "weight"), Released):
            # values are copied into the parameter: give it storage first
            self.weight = nn.Parameter(torch.empty(self.weight.shape), requires_grad=False)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class Linear(BlockWeight, nn.Linear):
    """nn.Linear that can carry a prepacked copy of its weight for CPU inference (`pack`), and
    the GGUF blocks the weight was read from (`quant`) to pack from, and then no fp32 weight
    (`BlockWeight`).

    Both are dropped whenever the weight may change under them: load_state_dict, .to(), and
    the copy is never used while the weight trains."""

    _packed: Packed | None = None

    @property
    def packed(self) -> Packed | None:
        return self._packed

    @packed.setter
    def packed(self, value: Packed | None) -> None:
        global _PACKINGS
        self._packed = value
        _PACKINGS += 1

    def pack(self, kind: str = "auto") -> None:
        self.packed = self.packed_copy(kind)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.packed, self.bias)

    def _apply(self, fn, recurse=True):  # noqa: ANN001 - nn.Module's signature
        self.packed = None
        return super()._apply(fn, recurse)

    def _load_from_state_dict(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        self.packed = None
        super()._load_from_state_dict(*args, **kwargs)


# Linear.packed assignments so far: a change to any invalidates every cached layer stack
# (model/layer_stack.py).
_PACKINGS = 0


def packings() -> int:
    """How many times a Linear's packed copy was set so far: a cache keyed by it is stale once
    it moves."""
    return _PACKINGS
