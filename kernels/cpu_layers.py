"""The CPU kernel's layer stack: consecutive decoder layers in one C call and one OpenMP region
(model/layer_stack.py `run_layers`): at one row the torch ops it replaces took as long as the
products themselves. Its layers may carry what Qwen3 and Gemma 3 add (LayerStack: q/k norms,
output norms, the tanh-GELU gate, an attention scale, sliding-window layers with their own rope
rows); Gemma 3 270M's decode step at 1 thread: 55.8 ms instead of 61.3 through the torch layers.
A row's bits do not depend on the rows beside it, as in kernels/cpu_rows.py's products.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Sequence
from typing import NamedTuple

import torch

from dllm_voice import cores
from dllm_voice.kernels.cpu_rows import FORMAT_CODES, MAX_INT_ROWS, MAX_ROWS, PANEL, Panels, _loaded


class _Extras(ctypes.Structure):
    """cpu_rows.c's LayerExtras."""

    _fields_ = [
        ("qk_norm", ctypes.c_int),
        ("post_norms", ctypes.c_int),
        ("gelu", ctypes.c_int),
        ("window", ctypes.c_int),
        ("local", ctypes.c_void_p),
        ("cos_local", ctypes.c_void_p),
        ("sin_local", ctypes.c_void_p),
        ("lmask", ctypes.c_void_p),
    ]


class LayerStack(NamedTuple):
    """Consecutive decoder layers' matrices (q/k/v, o, gate/up, down panels of each layer in turn)
    and norm gains as pointer arrays for `layers`: per layer the attention's and the MLP's gains,
    then with qk_norm the q and k heads' (head_dim), then with post_norms the attention's and the
    MLP's outputs' (Gemma 3). gelu: the tanh-GELU gate; local: the sliding-window layers (window
    positions) by index."""

    panels: tuple[Panels, ...]
    norms: tuple[torch.Tensor, ...]
    ptrs: ctypes.Array
    fmts: ctypes.Array
    norm_ptrs: ctypes.Array
    widths: ctypes.Array  # each matrix's output columns rounded up to 16, alike in every layer
    integer: bool  # every matrix in a VNNI layout (integer products)
    qk_norm: bool = False
    post_norms: bool = False
    gelu: bool = False
    local: tuple[bool, ...] = ()
    window: int = 0
    local_flags: ctypes.Array | None = None  # uint8 per layer

    @property
    def max_rows(self) -> int:
        """The most rows `layers` takes with these matrices (more: the torch layers)."""
        return MAX_INT_ROWS if self.integer else MAX_ROWS


def layer_stack(
    panels: tuple[Panels, ...],
    norms: tuple[torch.Tensor, ...],
    qk_norm: bool = False,
    post_norms: bool = False,
    gelu: bool = False,
    local: Sequence[bool] = (),
    window: int = 0,
) -> LayerStack:
    """Needs every layer alike in widths (the layers of one model are); norms as LayerStack
    orders them."""
    widths = [p.data.shape[0] * PANEL for p in panels]
    if any(widths[i] != widths[i % 4] for i in range(len(widths))):
        raise ValueError("layers of different widths")
    if len(norms) != len(panels) // 4 * (2 + 2 * qk_norm + 2 * post_norms):
        raise ValueError("norm gains do not match the layers' count")
    local = tuple(local) if window else ()
    return LayerStack(
        panels,
        norms,
        (ctypes.c_void_p * len(panels))(*(p.data.data_ptr() for p in panels)),
        (ctypes.c_int * len(panels))(*(FORMAT_CODES[p.fmt] for p in panels)),
        (ctypes.c_void_p * len(norms))(*(g.data_ptr() for g in norms)),
        (ctypes.c_int * 4)(*widths[:4]),
        all(p.integer for p in panels),
        qk_norm,
        post_norms,
        gelu,
        local,
        window if any(local) else 0,
        (ctypes.c_uint8 * len(local))(*local) if any(local) else None,
    )


def layers_scratch(stack: LayerStack, t: int, dim: int, heads: int, d: int, ffn: int) -> int:
    """Floats of scratch `layers` needs for t rows."""
    n = stack.widths
    return t * (max(dim, ffn) + n[0] + heads * d + max(n[1], n[3]) + n[2])


class SeqKV(NamedTuple):
    """One sequence's part of a `layers` call: its rows follow the previous sequence's in x."""

    k: torch.Tensor  # (L, Hkv, capacity, D): its cache keys for the stack's layers (a view)
    v: torch.Tensor  # its values, the same layout
    past: int  # cached positions its rows see before their own
    rows: int
    mask: torch.Tensor | None  # bool (rows, past + rows), True = visible; None: `causal` says
    # The sliding-window layers' visibility, the same shape (model/layers.py window_mask); None:
    # mask / causal less the keys at or before past + i - window for row i (its position).
    local_mask: torch.Tensor | None = None


def layers(
    x: torch.Tensor,
    stack: LayerStack,
    eps: float,
    rope: tuple[torch.Tensor, torch.Tensor],
    seqs: Sequence[SeqKV],
    causal: bool,
    heads: int,
    ffn: int,
    scratch: torch.Tensor,
    scale: float | None = None,
    local_rope: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> None:
    """Pre-norm Llama decoder layers over the rows x (T, dim) of several sequences, in place, in
    one call (cpu_rows.c `layers_rows`), with what the stack adds (LayerStack: q/k norms, output
    norms, GELU gate, sliding-window layers, which take local_rope's rows and each sequence's
    local_mask); attention logits times `scale` (default D ** -0.5); rope rows cos and sin
    (T, D); each sequence's rows are
    written to its own cache at past..past + rows - 1, which must fit, and see its first past
    positions and its own rows as its mask says, or, without one, every key (causal False) or
    the keys up to their own (causal True). Every cache alike in layout (last two dims
    contiguous, one stride per layer and per head: the caches of one model are). scratch: fp32,
    at least `layers_scratch` floats for T rows. Each row is computed on its own, on any number
    of threads, so sessions of different lengths can share a forward. Needs available()."""
    t, dim = x.shape
    n_layers, hkv, _, d = seqs[0].k.shape
    strides = seqs[0].k.stride()
    assert 4 * n_layers == len(stack.panels) and sum(s.rows for s in seqs) == t
    assert all(s.k.stride() == strides == s.v.stride() for s in seqs) and strides[-1] == 1
    assert x.is_contiguous() and rope[0].is_contiguous() and rope[1].is_contiguous()
    assert all(s.mask is None or s.mask.is_contiguous() for s in seqs)
    assert all(s.local_mask is None or s.local_mask.is_contiguous() for s in seqs)
    assert scratch.numel() >= layers_scratch(stack, t, dim, heads, d, ffn)
    assert all(s.past + s.rows <= s.k.shape[2] for s in seqs)
    n = len(seqs)
    row0 = (ctypes.c_int * (n + 1))(0, *itertools.accumulate(s.rows for s in seqs))
    past = (ctypes.c_int * n)(*(s.past for s in seqs))
    kc = (ctypes.c_void_p * n)(*(s.k.data_ptr() for s in seqs))
    vc = (ctypes.c_void_p * n)(*(s.v.data_ptr() for s in seqs))
    masks = None
    if any(s.mask is not None for s in seqs):
        masks = (ctypes.c_void_p * n)(
            *(None if s.mask is None else s.mask.data_ptr() for s in seqs)
        )
    extras = None
    if stack.qk_norm or stack.post_norms or stack.gelu or stack.window:
        lmasks = None
        if stack.window and any(s.local_mask is not None for s in seqs):
            lmasks = (ctypes.c_void_p * n)(
                *(None if s.local_mask is None else s.local_mask.data_ptr() for s in seqs)
            )
        lr = local_rope if stack.window else None
        if stack.window:
            assert lr is not None and all(r.is_contiguous() and r.shape == (t, d) for r in lr)
        extras = _Extras(
            int(stack.qk_norm), int(stack.post_norms), int(stack.gelu), stack.window,
            ctypes.addressof(stack.local_flags) if stack.local_flags else None,
            lr[0].data_ptr() if lr else None, lr[1].data_ptr() if lr else None,
            None if lmasks is None else ctypes.addressof(lmasks),
        )  # fmt: skip
    # Every core that is free (dllm_voice/cores.py): the stack's threads meet at spinning
    # barriers (cpu_rows.c ws_barrier), so a second thread pays from one row on (Zen 4, from the
    # LM's own thread: 1 row 4.5 against 5.6 ms, 3 rows 5.4 against 7.8).
    threads, spin = cores.threads(torch.get_num_threads(), t)
    late = _loaded().layers_rows(
        n_layers, x.data_ptr(), t, dim, stack.ptrs, stack.fmts, stack.widths, stack.norm_ptrs,
        eps, rope[0].data_ptr(), rope[1].data_ptr(), n, row0, past, kc, vc, masks, int(causal),
        strides[0], strides[1], heads, hkv, d, ffn, d**-0.5 if scale is None else scale,
        scratch.data_ptr(), threads, int(spin),
        None if extras is None else ctypes.addressof(extras),
    )  # fmt: skip
    if late:
        cores.crowded()
