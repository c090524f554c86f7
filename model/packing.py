"""Matrix products of inference through a packed copy of each weight (`prepack`, `linear`,
`Linear`).

On CPU, inference models carry a packed copy of every matrix (`Transformer.pack`, called by the
loader) for a kernel built for decode's few rows: kernels/cpu_rows.py where it builds, from the
GGUF file's own Q4_1/Q8_0 blocks where the loader kept them (`Linear.quant`; a fifth of the
bytes, outputs bit-identical to the fp32 weights'), else from the fp32 weights (each weight
streamed once for all rows); without that kernel, oneDNN's prepacked layout. Plain F.linear (MKL
sgemm) re-packs the weight on every call: 2 rows cost 1.9x one row (BENCHMARKS.md, "Row cost").
Training, CUDA and other dtypes use the plain weight.
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


# Linear.packed assignments so far: a change to any invalidates every cached layer stack
# (model/layer_stack.py).
_PACKINGS = 0


def packings() -> int:
    """How many times a Linear's packed copy was set so far: a cache keyed by it is stale once
    it moves."""
    return _PACKINGS
