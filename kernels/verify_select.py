"""One pass over the verify rows' logits: argmax, confidence and the accepted draft prefix.

The hybrid decoder's verify step yields N = K + 1 logits rows: row i predicts the token after
verify row i, so row i checks draft i (i < K) and row K gives the bonus token. Per row the kernel
streams the vocabulary in tiles keeping an online max, arg-max and sum of exponentials (the
flash-softmax recurrence), so softmax is never materialized.

``verify_select(logits, drafts, temperature=0.0, uniforms=None) -> VerifyResult``:

- greedy (temperature == 0): draft i is accepted iff argmax(row i) == drafts[i], argmax taking the
  FIRST index among ties (as ``torch.argmax``, so verification agrees with greedy AR decoding on
  the same logits). Probabilities are at temperature 1.
- sampling (temperature > 0, uniforms (K,) in [0, 1)): p_i = softmax(logits_i / temperature);
  draft i is accepted iff uniforms[i] < p_i(drafts[i]) (speculative sampling for a deterministic,
  one-hot drafter). This kernel applies temperature only; top-p/top-k filtering is not supported.
- accepted = length of the accepted prefix, in [0, K] (index of the first rejected draft).

What the caller does next, in torch (one row of V, cheap):
- accepted == K: the bonus token comes from row K: greedy ``argmax[K]``; sampling draws from
  p_K = exp(logits[K] / temperature - lse[K]).
- accepted == j < K: greedy takes ``argmax[j]``; sampling draws from the residual of row j, p_j
  with drafts[j] zeroed and renormalized (``residual_probs``). Together this samples exactly from
  p, whatever the drafts were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from dllm_voice.kernels import backend
from dllm_voice.kernels.errors import KernelInputError

if TYPE_CHECKING:  # bound at the first launch (_build_kernel), where the kernel's body finds them
    import triton.language as tl

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# 4096-wide tiles: 12 iterations for SmolLM2's 49152-token vocabulary, 16 KiB of fp32 per tile.
BLOCK_V = 4096


@dataclass(frozen=True)
class VerifyResult:
    """Per-row statistics (tensors on the logits' device; probabilities at the temperature)."""

    argmax: torch.Tensor  # (N,) int64, first index among ties
    max_prob: torch.Tensor  # (N,) float32, max_v p(v) = 1 / sum exp(x - max)
    lse: torch.Tensor  # (N,) float32, logsumexp(logits / temperature) in fp32
    draft_prob: torch.Tensor  # (K,) float32, p_i(drafts[i])
    accepted: torch.Tensor  # () int64, accepted prefix length in [0, K]


_kernel = None  # the @triton.jit kernel, built on first use


def _build_kernel():
    """Import triton and define the kernel, once (lazily: see ``kernels.backend``)."""
    global _kernel, triton, tl
    if _kernel is not None:
        return _kernel
    import triton
    import triton.language as tl

    @triton.jit
    def _verify_select_fwd(
        L_ptr, Drafts_ptr, U_ptr,
        Argmax_ptr, MaxProb_ptr, Lse_ptr, DraftProb_ptr, Accepted_ptr,
        stride_ln, stride_lv, V, K, inv_temp,
        SAMPLE: tl.constexpr, BLOCK_V: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0)
        row_ptr = L_ptr + row * stride_ln
        # Finite start: an all -inf tile then adds exp(-inf - (-1e30)) = 0, not nan.
        m = tl.full((), -1.0e30, dtype=tl.float32)
        s = tl.full((), 0.0, dtype=tl.float32)
        idx = tl.full((), 0, dtype=tl.int32)
        for start in range(0, V, BLOCK_V):
            offs = start + tl.arange(0, BLOCK_V)
            x = tl.load(row_ptr + offs * stride_lv, mask=offs < V, other=float("-inf"))
            x = x.to(tl.float32) * inv_temp
            tile_max = tl.max(x, axis=0)
            tile_arg = tl.argmax(x, axis=0, tie_break_left=True) + start
            m_new = tl.maximum(m, tile_max)
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            idx = tl.where(tile_max > m, tile_arg, idx)  # strict: earlier tiles win ties
            m = m_new
        tl.store(Argmax_ptr + row, idx.to(tl.int64))
        tl.store(MaxProb_ptr + row, 1.0 / s)
        tl.store(Lse_ptr + row, m + tl.log(s))
        if row < K:
            d = tl.load(Drafts_ptr + row)
            xd = tl.load(row_ptr + d * stride_lv).to(tl.float32) * inv_temp
            p_d = tl.exp(xd - m) / s
            tl.store(DraftProb_ptr + row, p_d)
            if SAMPLE:  # noqa: SIM108 - a constexpr branch reads clearer as a statement
                reject = tl.load(U_ptr + row) >= p_d
            else:
                reject = idx.to(tl.int64) != d.to(tl.int64)
            # accepted = first rejected row; initialised to K by the launcher.
            tl.atomic_min(Accepted_ptr, row.to(tl.int64), mask=reject)

    _kernel = _verify_select_fwd
    return _kernel


def _check(
    logits: torch.Tensor,
    drafts: torch.Tensor,
    temperature: float,
    uniforms: torch.Tensor | None,
    check_drafts: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if logits.dim() != 2 or logits.shape[0] < 1 or logits.shape[1] < 1:
        raise KernelInputError(f"logits must be (N, V) with N, V >= 1; got {tuple(logits.shape)}")
    if logits.dtype not in DTYPES:
        raise KernelInputError(f"logits dtype must be one of {DTYPES}, got {logits.dtype}")
    N, V = logits.shape
    if drafts.shape != (N - 1,) or drafts.dtype.is_floating_point or drafts.dtype == torch.bool:
        raise KernelInputError(
            f"drafts must be an integer tensor of shape (N - 1,) = ({N - 1},) for {N} logits rows; "
            f"got {drafts.dtype} {tuple(drafts.shape)}"
        )
    drafts = drafts.to(device=logits.device, dtype=torch.int64)
    if not temperature >= 0.0:
        raise KernelInputError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if temperature == 0.0:
        if uniforms is not None:
            raise KernelInputError("uniforms are for sampling; pass temperature > 0 or drop them")
    else:
        if uniforms is None or uniforms.shape != (N - 1,) or not uniforms.dtype.is_floating_point:
            got = None if uniforms is None else (uniforms.dtype, tuple(uniforms.shape))
            raise KernelInputError(
                f"sampling needs uniforms: a float tensor of shape ({N - 1},) in [0, 1); got {got}"
            )
        uniforms = uniforms.to(device=logits.device, dtype=torch.float32)
    if check_drafts and N > 1:  # one device sync; skip in a hot loop with trusted ids
        bad = (drafts < 0) | (drafts >= V)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise KernelInputError(f"drafts[{i}] = {int(drafts[i])} is not a token id in [0, {V})")
    return drafts, uniforms


def verify_select_torch(
    logits: torch.Tensor, drafts: torch.Tensor, temperature: float, uniforms: torch.Tensor | None
) -> VerifyResult:
    """Torch fallback (no input checks): same outputs from fp32 reductions.

    It does materialize the softmax: torch.softmax is one fused CPU pass, ~1.7x faster than
    logsumexp on 5 vocabulary rows.
    """
    K = drafts.shape[0]
    x = logits.float()  # (N, V)
    if temperature > 0.0:
        x = x * (1.0 / temperature)  # same rounding as the kernel's multiply
    m, argmax = x.max(dim=-1)  # (N,) each; first index among ties
    p = torch.softmax(x, dim=-1)  # (N, V)
    max_prob = p.gather(-1, argmax[:, None])[:, 0]  # = 1 / sum exp(x - m)
    lse = m - torch.log(max_prob)
    draft_prob = p[:K].gather(-1, drafts[:, None])[:, 0]  # (K,)
    if temperature > 0.0:
        assert uniforms is not None, "sampling needs uniforms (verify_select checks)"
        ok = uniforms < draft_prob
    else:
        ok = argmax[:K] == drafts
    accepted = torch.cumprod(ok.long(), dim=0).sum()
    return VerifyResult(argmax, max_prob, lse, draft_prob, accepted)


def verify_select_triton(
    logits: torch.Tensor, drafts: torch.Tensor, temperature: float, uniforms: torch.Tensor | None
) -> VerifyResult:
    """Triton path (no input checks; ``verify_select`` does them): one program per row."""
    N, V = logits.shape
    K = N - 1
    dev = logits.device
    argmax = torch.empty(N, dtype=torch.int64, device=dev)
    max_prob = torch.empty(N, dtype=torch.float32, device=dev)
    lse = torch.empty(N, dtype=torch.float32, device=dev)
    draft_prob = torch.empty(K, dtype=torch.float32, device=dev)
    accepted = torch.full((), K, dtype=torch.int64, device=dev)
    sample = temperature > 0.0
    _build_kernel()[(N,)](
        logits, drafts, uniforms if sample else draft_prob,  # U_ptr is unread when greedy
        argmax, max_prob, lse, draft_prob, accepted,
        logits.stride(0), logits.stride(1), V, K, 1.0 / temperature if sample else 1.0,
        SAMPLE=sample, BLOCK_V=min(BLOCK_V, 1 << max(0, V - 1).bit_length()),
    )  # fmt: skip
    return VerifyResult(argmax, max_prob, lse, draft_prob, accepted)


def verify_select(
    logits: torch.Tensor,
    drafts: torch.Tensor,
    temperature: float = 0.0,
    uniforms: torch.Tensor | None = None,
    *,
    check_drafts: bool = True,
) -> VerifyResult:
    """Argmax, max probability, logsumexp and accepted draft prefix of (K + 1, V) logits.

    drafts (K,) token ids; temperature 0 = greedy, > 0 = speculative sampling with uniforms (K,)
    drawn by the caller. check_drafts validates the ids at the cost of one device sync. See the
    module docstring for what the caller does with the result.
    """
    drafts, uniforms = _check(logits, drafts, float(temperature), uniforms, check_drafts)
    if backend.use_triton(logits):
        return verify_select_triton(logits, drafts, float(temperature), uniforms)
    return verify_select_torch(logits, drafts, float(temperature), uniforms)


def residual_probs(
    logits_row: torch.Tensor, lse: torch.Tensor, draft: int, temperature: float
) -> torch.Tensor:
    """p = softmax(logits_row / temperature) with p[draft] zeroed and renormalized: (V,) fp32.

    The distribution to resample from after draft ``draft`` was rejected at this row; ``lse`` is
    the row's ``VerifyResult.lse``. If the draft held all the mass (p[draft] ~ 1, so it is
    rejected with probability ~0) the plain p is returned. No device sync.
    """
    if not temperature > 0.0:
        raise KernelInputError(
            f"residual_probs is for sampling: temperature > 0, got {temperature}"
        )
    p = torch.exp(logits_row.float() * (1.0 / temperature) - lse)  # (V,)
    residual = p.clone()
    residual[draft] = 0.0
    total = residual.sum()
    return torch.where(total > 1e-12, residual / total, p)
