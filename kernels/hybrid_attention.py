"""Decode-step attention for the hybrid decoder: T query rows against the KV cache [0, S).

One step of the hybrid decoder runs T rows through the model at once: the verify rows (pending
token + K drafts, causal) and optionally draft blocks (K mask rows each, bidirectional within the
block, attached to an acceptance length j). Which cache positions each row sees is given by a
compact descriptor per row instead of a dense T x S mask:

    desc[i] = (a_i, b_i, c_i)   row i sees keys [0, a_i) U [b_i, c_i)

Contract with the caller (the decoder):
- The cache already holds this step's own K/V rows at positions [S - T, S) (write them before the
  call; rows are in the same order as the queries), so S = kv_len includes the step's rows.
- q is (B, Hq, T, D); k, v are (B, Hkv, S_max, D) with S_max >= S (a preallocated cache; any
  strides, e.g. a transposed (B, S_max, Hkv, D) buffer). RoPE is already applied.
- desc is int32 (T, 3), shared by the batch, or (B, T, 3). 0 <= a <= S and 0 <= b <= c <= S.
  A row that sees no key at all outputs zeros (both backends).
- The output is a new (B, Hq, T, D) tensor in q's dtype; softmax and accumulation are fp32.

The Triton kernel packs the G = Hq / Hkv query heads that share a KV head into the rows of one
program (rows = G * T), so every K/V tile is loaded once per KV head, not once per query head.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from dllm_voice.kernels import backend
from dllm_voice.kernels.errors import KernelInputError

if TYPE_CHECKING:  # bound at the first launch (_build_kernel), where the kernel's body finds them
    import triton.language as tl

_kernel = None  # the @triton.jit kernel, built on first use


def _build_kernel():
    """Import triton and define the kernel, once (lazily: see ``kernels.backend``)."""
    global _kernel, triton, tl
    if _kernel is not None:
        return _kernel
    import triton
    import triton.language as tl

    @triton.jit
    def _hybrid_attn_fwd(
        Q_ptr, K_ptr, V_ptr, Desc_ptr, Out_ptr,
        stride_qb, stride_qh, stride_qt, stride_qd,
        stride_kb, stride_kh, stride_ks, stride_kd,
        stride_vb, stride_vh, stride_vs, stride_vd,
        stride_db, stride_dt,
        stride_ob, stride_oh, stride_ot, stride_od,
        T, kv_len, n_kv_heads, group, head_dim, qk_scale,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        IEEE_DOT: tl.constexpr,
    ):  # fmt: skip
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        b = pid_bh // n_kv_heads
        kvh = pid_bh % n_kv_heads

        # Packed rows: row r = g * T + t is query head (kvh * group + g), step row t.
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < group * T
        t = rows % T
        qh = kvh * group + rows // T
        d = tl.arange(0, BLOCK_D)
        d_ok = d < head_dim

        q_ptrs = Q_ptr + b * stride_qb + qh[:, None] * stride_qh + t[:, None] * stride_qt
        q = tl.load(
            q_ptrs + d[None, :] * stride_qd, mask=row_ok[:, None] & d_ok[None, :], other=0.0
        )

        desc_row = Desc_ptr + b * stride_db + t * stride_dt
        a = tl.load(desc_row, mask=row_ok, other=0)
        lo2 = tl.load(desc_row + 1, mask=row_ok, other=0)
        hi2 = tl.load(desc_row + 2, mask=row_ok, other=0)
        # Keys past every row's last visible position are never loaded.
        n_end = tl.minimum(tl.maximum(tl.max(a, axis=0), tl.max(hi2, axis=0)), kv_len)

        # Finite start for the running max: a tile fully masked for a row then gives
        # exp2(-inf - (-1e30)) = 0 instead of exp2(-inf + inf) = nan.
        m_i = tl.full((BLOCK_M,), -1.0e30, dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)

        k_base = K_ptr + b * stride_kb + kvh * stride_kh
        v_base = V_ptr + b * stride_vb + kvh * stride_vh
        for start in range(0, n_end, BLOCK_N):
            n = start + tl.arange(0, BLOCK_N)
            n_ok = n < n_end
            k = tl.load(
                k_base + n[None, :] * stride_ks + d[:, None] * stride_kd,
                mask=n_ok[None, :] & d_ok[:, None],
                other=0.0,
            )  # (BLOCK_D, BLOCK_N)
            if IEEE_DOT:
                s = tl.dot(q.to(tl.float32), k.to(tl.float32), input_precision="ieee")
            else:
                s = tl.dot(q, k)
            s = s * qk_scale  # (BLOCK_M, BLOCK_N), log2 domain: qk_scale = scale * log2(e)
            visible = (n[None, :] < a[:, None]) | (
                (n[None, :] >= lo2[:, None]) & (n[None, :] < hi2[:, None])
            )
            s = tl.where(visible & n_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(
                v_base + n[:, None] * stride_vs + d[None, :] * stride_vd,
                mask=n_ok[:, None] & d_ok[None, :],
                other=0.0,
            )  # (BLOCK_N, BLOCK_D)
            if IEEE_DOT:
                pv = tl.dot(p, v.to(tl.float32), input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m_i = m_new

        out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # rows seeing no key stay 0
        o_ptrs = Out_ptr + b * stride_ob + qh[:, None] * stride_oh + t[:, None] * stride_ot
        tl.store(
            o_ptrs + d[None, :] * stride_od,
            out.to(Out_ptr.dtype.element_ty),
            mask=row_ok[:, None] & d_ok[None, :],
        )

    _kernel = _hybrid_attn_fwd
    return _kernel


def _next_pow2(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_TRITON_HEAD_DIM = 128


def causal_desc(T: int, S: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Descriptors for T causal rows that are the last T of S cache positions: (T, 3) int32."""
    if not 1 <= T <= S:
        raise KernelInputError(f"causal_desc needs 1 <= T <= S, got T={T}, S={S}")
    desc = torch.zeros(T, 3, dtype=torch.int32)
    desc[:, 0] = torch.arange(S - T + 1, S + 1, dtype=torch.int32)
    return desc.to(device) if device is not None else desc


def block_desc(
    prefix_len: int,
    n_verify: int,
    block_len: int,
    accept_lens: Sequence[int],
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Descriptors for one hybrid step: n_verify causal rows, then one draft block per j.

    Layout of the step's rows (and of cache positions [prefix_len, S)): verify rows 0..n_verify-1,
    then for each j in accept_lens a block of block_len draft rows. The block for acceptance
    length j sees the cache prefix plus verify rows 0..j (the pending token and j accepted drafts),
    and itself bidirectionally, never the other blocks. Returns (T, 3) int32 with
    T = n_verify + len(accept_lens) * block_len and S = prefix_len + T.
    """
    if prefix_len < 0 or n_verify < 1 or block_len < 0:
        raise KernelInputError(
            f"block_desc needs prefix_len >= 0, n_verify >= 1, block_len >= 0; got "
            f"{prefix_len}, {n_verify}, {block_len}"
        )
    bad = [j for j in accept_lens if not 0 <= j < n_verify]
    if bad:
        raise KernelInputError(f"accept_lens {bad} outside [0, n_verify={n_verify})")
    T = n_verify + len(accept_lens) * block_len
    desc = torch.zeros(T, 3, dtype=torch.int32)
    desc[:n_verify, 0] = torch.arange(prefix_len + 1, prefix_len + n_verify + 1)
    for k, j in enumerate(accept_lens):
        lo = prefix_len + n_verify + k * block_len
        desc[lo - prefix_len : lo - prefix_len + block_len] = torch.tensor(
            [prefix_len + j + 1, lo, lo + block_len], dtype=torch.int32
        )
    return desc.to(device) if device is not None else desc


def _check(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, desc: torch.Tensor, kv_len: int | None,
    check_desc: bool,
) -> tuple[torch.Tensor, int]:  # fmt: skip
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise KernelInputError(
            f"q, k, v must be 4-D (B, H, T|S_max, D); got {tuple(q.shape)}, {tuple(k.shape)}, "
            f"{tuple(v.shape)}"
        )
    B, Hq, T, D = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D:
        raise KernelInputError(
            f"k and v must both be (B={B}, Hkv, S_max, D={D}); got {tuple(k.shape)}, "
            f"{tuple(v.shape)}"
        )
    Hkv, S_max = k.shape[1], k.shape[2]
    if Hkv == 0 or Hq % Hkv:
        raise KernelInputError(f"query heads {Hq} must be a multiple of kv heads {Hkv} (GQA)")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise KernelInputError(
            f"q, k, v must share one dtype of {DTYPES}; got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if k.device != q.device or v.device != q.device:
        raise KernelInputError(f"q, k, v on different devices: {q.device}, {k.device}, {v.device}")
    S = S_max if kv_len is None else int(kv_len)
    if not 1 <= T <= S <= S_max:
        raise KernelInputError(
            f"need 1 <= T ({T}) <= kv_len ({S}) <= cache length ({S_max}); the cache must hold "
            "this step's T rows at [kv_len - T, kv_len)"
        )
    if desc.dtype.is_floating_point or desc.dtype == torch.bool or desc.dtype.is_complex:
        raise KernelInputError(f"desc must be an integer tensor (int32), got {desc.dtype}")
    if desc.shape not in ((T, 3), (B, T, 3)):
        raise KernelInputError(
            f"desc must be (T={T}, 3) or (B={B}, T={T}, 3); got {tuple(desc.shape)}"
        )
    desc = desc.to(device=q.device, dtype=torch.int32).contiguous()  # kernel reads rows of 3
    if check_desc:  # one device sync; pass check_desc=False in a hot loop with trusted desc
        a, lo, hi = desc.unbind(-1)
        bad = (a < 0) | (a > S) | (lo < 0) | (lo > hi) | (hi > S)
        if bool(bad.any()):
            row = tuple(int(x) for x in bad.nonzero()[0])
            raise KernelInputError(
                f"desc row {row} = {desc[row].tolist()} out of bounds: need 0 <= a <= S and "
                f"0 <= b <= c <= S with S = kv_len = {S}"
            )
    return desc, S


def visibility_mask(desc: torch.Tensor, S: int) -> torch.Tensor:
    """Dense boolean mask (..., T, S) from descriptors (..., T, 3); for the torch fallback."""
    n = torch.arange(S, device=desc.device)
    a, lo, hi = (x.unsqueeze(-1) for x in desc.unbind(-1))  # each (..., T, 1)
    return (n < a) | ((n >= lo) & (n < hi))


def hybrid_attention_torch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, desc: torch.Tensor, S: int, scale: float
) -> torch.Tensor:
    """Torch fallback: dense mask from desc + scaled_dot_product_attention (no input checks)."""
    mask = visibility_mask(desc, S)  # (T, S) or (B, T, S)
    mask = mask.unsqueeze(-3) if mask.dim() == 3 else mask  # (B, 1, T, S) broadcasts over heads
    out = F.scaled_dot_product_attention(
        q,
        k[:, :, :S],
        v[:, :, :S],
        attn_mask=mask,
        scale=scale,
        enable_gqa=k.shape[1] != q.shape[1],
    )  # (B, Hq, T, D)
    seen = mask.any(-1, keepdim=True)  # (..., T, 1); SDPA gives nan for rows that see nothing
    return torch.where(seen, out, torch.zeros((), dtype=out.dtype, device=out.device))


def hybrid_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, desc: torch.Tensor, S: int, scale: float
) -> torch.Tensor:
    """Triton path (no input checks; ``hybrid_attention`` does them)."""
    B, Hq, T, D = q.shape
    Hkv = k.shape[1]
    if D > MAX_TRITON_HEAD_DIM:
        raise KernelInputError(
            f"Triton hybrid_attention supports head_dim <= {MAX_TRITON_HEAD_DIM}, got {D}; "
            "use dllm_voice.kernels.backend.set_backend('torch')"
        )
    group = Hq // Hkv
    out = torch.empty_like(q, memory_format=torch.contiguous_format)  # (B, Hq, T, D)
    block_d = max(16, _next_pow2(D))  # tl.dot needs every dim >= 16
    block_m = max(16, min(64, _next_pow2(group * T)))
    block_n = 64 if block_d <= 64 else 32
    stride_db = desc.stride(0) if desc.dim() == 3 else 0
    grid = (-(-group * T // block_m), B * Hkv)
    _build_kernel()[grid](
        q, k, v, desc, out,
        *q.stride(), *k.stride(), *v.stride(),
        stride_db, desc.stride(-2),
        *out.stride(),
        T, S, Hkv, group, D, scale * math.log2(math.e),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
        # fp32 inputs: exact fp32 dots, not tf32. On CPU (the interpreter) 16-bit operands are
        # upcast too: triton 3.9's interpreter computes tl.dot on bf16 as integers (max error
        # 2.7e10 on a 16x16 product), fp16 would be fine but one rule is simpler.
        IEEE_DOT=q.dtype == torch.float32 or not q.is_cuda,
    )  # fmt: skip
    return out


def hybrid_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    desc: torch.Tensor,
    *,
    kv_len: int | None = None,
    scale: float | None = None,
    check_desc: bool = True,
) -> torch.Tensor:
    """Attention of this step's rows over cache positions [0, kv_len) with per-row visibility.

    q (B, Hq, T, D); k, v (B, Hkv, S_max, D) already holding this step's K/V at
    [kv_len - T, kv_len); desc (T, 3) or (B, T, 3) int32, row i sees [0, a_i) U [b_i, c_i).
    kv_len defaults to S_max, scale to 1 / sqrt(D). check_desc validates descriptor bounds at the
    cost of one device sync. Returns (B, Hq, T, D) in q's dtype.
    """
    desc, S = _check(q, k, v, desc, kv_len, check_desc)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    # "auto" keeps head dims the kernel does not tile (> 128) on torch; a forced "triton" raises.
    fits = q.shape[-1] <= MAX_TRITON_HEAD_DIM or backend.get_backend() == "triton"
    if fits and backend.use_triton(q):
        return hybrid_attention_triton(q, k, v, desc, S, scale)
    return hybrid_attention_torch(q, k, v, desc, S, scale)
