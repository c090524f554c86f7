"""Row-invariant ops for CUDA decoding: every output row's bits depend on that row's inputs
alone, never on how many rows share the call or where in the call the row sits.

That is what makes `hybrid` commit exactly `ar`'s greedy text off the CPU. A verify forward
runs the pending token and the draft tree as T rows; `ar` runs one. cuBLAS picks its GEMM
(tiles, split-K) by shape and a flash attention blocks its keys by slot, so the same logical
row gets different roundings in the two, and a near-tie in the logits can flip a token. On the
CPU, kernels/cpu_rows.c computes each row on its own; these three Triton kernels do the same on
the GPU:

- `linear`: x @ W.T in tiles of BM rows, each output element an fp32 sum over fixed BK-wide
  chunks in a fixed order (elementwise products, `tl.sum` along K): no tensor-core MMA and no
  shape-dependent tiling, so a row's result does not depend on the other rows of its tile.
- `rms_norm`: one program per row.
- `attention`: one program per (row, query head) over that row's *visible* keys gathered in
  position order and taken in fixed BLOCK_N chunks of that list, so a tree node that sees the
  prefix and its ancestors computes exactly what `ar` computes at that depth over a contiguous
  cache (the K/V rows being equal bits, by induction over the layers and steps).

The rest of a layer (rope, SiLU, residuals, the embedding gather, KV copies) is elementwise
and already row-invariant. Inference only (no backward), batch 1; the model uses these where
`applies` says so (CUDA with Triton; the CPU only in the interpreter, for tests).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from dllm_voice.kernels import backend

_kernels = None
FORCE = False  # tests: run them on CPU tensors too (needs TRITON_INTERPRET=1)
BM, BN, BK = 8, 32, 32  # linear's tile: BM rows x BN outputs, K in BK chunks
BLOCK_N = 32  # attention: visible keys per chunk
MAX_ROWS = 128  # a decode step verifies at most refine_len + 1 = 65 rows (model/config.py)
_shared: dict | None = None  # inside one_forward(): visible_keys per (mask, T, N, causal)


@contextmanager
def one_forward() -> Iterator[None]:
    """The layers of one forward share its mask: gather each row's visible keys once, not per
    layer (4 small launches a layer). The mask must not change inside."""
    global _shared
    outer, _shared = _shared, {}
    try:
        yield
    finally:
        _shared = outer


def applies(x: torch.Tensor) -> bool:
    """Whether a decoding input x (1, T, ...) should take the row-invariant kernels: not in
    batches, training or autocast regions (the drafter's training and evaluation), where
    torch's dtype rules and cuBLAS's speed matter and exactness does not; nor for a prefill of
    more than MAX_ROWS rows, which both decoders run alike, on tensor cores."""
    if not (x.is_cuda or FORCE):
        return False
    if x.dim() < 3 or x.shape[0] != 1 or x.shape[1] > MAX_ROWS or x.requires_grad:
        return False
    if torch.is_autocast_enabled(x.device.type):
        return False
    return backend.use_triton(x)


def _build():
    global _kernels
    if _kernels is not None:
        return _kernels
    import triton
    import triton.language as tl

    @triton.jit
    def linear_rows(
        X, W, Bias, Y, M, N, K, sxm, sxk, swn, swk, sym, syn,
        HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    ):  # fmt: skip
        m = tl.program_id(0) * BM + tl.arange(0, BM)
        n = tl.program_id(1) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            k = k0 + tl.arange(0, BK)
            x = tl.load(X + m[:, None] * sxm + k[None, :] * sxk,
                        mask=(m[:, None] < M) & (k[None, :] < K), other=0.0)  # fmt: skip
            w = tl.load(W + n[:, None] * swn + k[None, :] * swk,
                        mask=(n[:, None] < N) & (k[None, :] < K), other=0.0)  # fmt: skip
            prod = x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]  # (BM, BN, BK)
            acc += tl.sum(prod, axis=2)
        if HAS_BIAS:
            acc += tl.load(Bias + n, mask=n < N, other=0.0).to(tl.float32)[None, :]
        tl.store(Y + m[:, None] * sym + n[None, :] * syn, acc.to(Y.dtype.element_ty),
                 mask=(m[:, None] < M) & (n[None, :] < N))  # fmt: skip

    @triton.jit
    def rms_rows(X, W, Y, N, sx, sy, eps, BLOCK: tl.constexpr):
        r = tl.program_id(0)
        c = tl.arange(0, BLOCK)
        ok = c < N
        x = tl.load(X + r * sx + c, mask=ok, other=0.0).to(tl.float32)
        inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        w = tl.load(W + c, mask=ok, other=0.0).to(tl.float32)
        tl.store(Y + r * sy + c, (x * inv * w).to(Y.dtype.element_ty), mask=ok)

    @triton.jit
    def attention_rows(
        Q, K, V, Idx, Len, Out, sqt, sqh, skh, sks, svh, svs, sit, sot, soh, group, D, scale,
        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    ):  # fmt: skip
        t = tl.program_id(0)
        h = tl.program_id(1)
        kvh = h // group
        d = tl.arange(0, BLOCK_D)
        d_ok = d < D
        q = tl.load(Q + t * sqt + h * sqh + d, mask=d_ok, other=0.0).to(tl.float32)
        n_vis = tl.load(Len + t)
        m_i = tl.max(tl.full((BLOCK_N,), -1.0e30, tl.float32), axis=0)
        l_i = tl.sum(tl.zeros((BLOCK_N,), tl.float32), axis=0)
        acc = tl.zeros((BLOCK_D,), tl.float32)
        for start in range(0, n_vis, BLOCK_N):
            j = start + tl.arange(0, BLOCK_N)
            ok = j < n_vis
            pos = tl.load(Idx + t * sit + j, mask=ok, other=0)
            kv_ok = ok[:, None] & d_ok[None, :]
            k = tl.load(K + kvh * skh + pos[:, None] * sks + d[None, :], mask=kv_ok, other=0.0)
            s = tl.sum(k.to(tl.float32) * q[None, :], axis=1) * scale
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=0))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new)
            l_i = l_i * alpha + tl.sum(p, axis=0)
            v = tl.load(V + kvh * svh + pos[:, None] * svs + d[None, :], mask=kv_ok, other=0.0)
            acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
            m_i = m_new
        tl.store(Out + t * sot + h * soh + d, (acc / l_i).to(Out.dtype.element_ty), mask=d_ok)

    _kernels = (triton, linear_rows, rms_rows, attention_rows)
    return _kernels


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (..., K) @ weight (N, K).T (+ bias), row-invariant."""
    triton, kernel, _, _ = _build()
    x2 = x.reshape(-1, x.shape[-1])
    (m, k), n = x2.shape, weight.shape[0]
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, BM), triton.cdiv(n, BN))
    kernel[grid](x2, weight, weight if bias is None else bias, y, m, n, k,
                 x2.stride(0), x2.stride(1), weight.stride(0), weight.stride(1), y.stride(0),
                 y.stride(1), HAS_BIAS=bias is not None, BM=BM, BN=BN, BK=BK)  # fmt: skip
    return y.view(*x.shape[:-1], n)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim, one program per row."""
    triton, _, kernel, _ = _build()
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    n = x2.shape[1]
    kernel[(x2.shape[0],)](x2, weight, y, n, x2.stride(0), y.stride(0), eps,
                           BLOCK=triton.next_power_of_2(n))  # fmt: skip
    return y.view(x.shape)


def visible_keys(mask: torch.Tensor | None, t: int, n: int, causal: bool, device: torch.device):
    """Per query row, its visible key positions in increasing order (int32 (T, N), the first
    len[i] valid) and len (int32 (T,)). mask: bool (T, N), True = visible; None: every key, or
    with `causal` row i sees keys [0, N - T + i]."""
    if mask is None:
        cols = torch.arange(n, device=device)
        last = n - t + torch.arange(t, device=device) if causal else cols.new_full((t,), n - 1)
        mask = cols[None, :] <= last[:, None]
    order = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True)  # visible first
    return order.to(torch.int32).contiguous(), mask.sum(-1).to(torch.int32)


def attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
) -> torch.Tensor:
    """q (1, T, H, D) over keys/values (1, Hkv, N, D); mask bool (T, N) or (1, 1, T, N), or
    None (+ is_causal). Returns (1, T, H * D)."""
    triton, _, _, kernel = _build()
    _, t, h, d = q.shape
    hkv, n = keys.shape[1], keys.shape[2]
    key = (id(mask), t, n, is_causal)
    if _shared is not None and key in _shared:
        idx, count = _shared[key]
    else:
        plain = mask if mask is None or mask.dim() == 2 else mask[0, 0]
        idx, count = visible_keys(plain, t, n, is_causal, q.device)
        if _shared is not None:
            _shared[key] = (idx, count)
    out = torch.empty(t, h, d, dtype=q.dtype, device=q.device)
    qq, kk, vv = q[0], keys[0], values[0]
    if kk.stride(-1) != 1 or vv.stride(-1) != 1 or qq.stride(-1) != 1:
        qq, kk, vv = qq.contiguous(), kk.contiguous(), vv.contiguous()
    kernel[(t, h)](qq, kk, vv, idx, count, out, qq.stride(0), qq.stride(1), kk.stride(0),
                   kk.stride(1), vv.stride(0), vv.stride(1), idx.stride(0), out.stride(0),
                   out.stride(1), h // hkv, d, d**-0.5, BLOCK_N=BLOCK_N,
                   BLOCK_D=triton.next_power_of_2(d))  # fmt: skip
    return out.view(1, t, h * d)
