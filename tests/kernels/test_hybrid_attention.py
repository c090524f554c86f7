"""hybrid_attention (Triton via the CPU interpreter, and torch) against a float64 reference."""

from __future__ import annotations

import math

import pytest
import torch

from dllm_voice.kernels import backend
from dllm_voice.kernels.errors import KernelBackendError, KernelInputError
from dllm_voice.kernels.hybrid_attention import block_desc, causal_desc, hybrid_attention

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

# Max abs error vs the float64 reference; 16-bit outputs round to 2^-8 (bf16) / 2^-11 (fp16)
# relative, plus the 16-bit P @ V product on GPU tensor cores.
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}


def reference(q, k, v, desc, S, scale):
    """Per-row loops over the visible key list, float64; GQA by head index h // group."""
    B, Hq, T, D = q.shape
    group = Hq // k.shape[1]
    desc = desc.expand(B, T, 3) if desc.dim() == 2 else desc
    out = torch.zeros(B, Hq, T, D, dtype=torch.float64)
    for b in range(B):
        for i in range(T):
            a, lo, hi = (int(x) for x in desc[b, i])
            keys = sorted(set(range(a)) | set(range(lo, hi)))
            if not keys:
                continue
            for h in range(Hq):
                kk = k[b, h // group, keys].double()  # (n, D)
                vv = v[b, h // group, keys].double()
                w = torch.softmax(kk @ q[b, h, i].double() * scale, dim=0)  # (n,)
                out[b, h, i] = w @ vv
    return out


def random_desc(T: int, S: int, gen: torch.Generator, batch: int = 0) -> torch.Tensor:
    """Valid random descriptors with overlapping, empty and full intervals mixed in."""
    shape = (batch, T) if batch else (T,)
    a = torch.randint(0, S + 1, shape, generator=gen)
    lo = torch.randint(0, S + 1, shape, generator=gen)
    hi = torch.minimum(lo + torch.randint(0, S // 2 + 2, shape, generator=gen), torch.tensor(S))
    desc = torch.stack([a, lo, hi], dim=-1).to(torch.int32)
    desc[..., 0, :] = torch.tensor([S, 0, 0])  # one row sees everything
    return desc


def make_qkv(B, Hq, Hkv, T, S_max, D, dtype, gen):
    q = torch.randn(B, Hq, T, D, generator=gen).to(DEVICE, dtype)
    k = torch.randn(B, Hkv, S_max, D, generator=gen).to(DEVICE, dtype)
    v = torch.randn(B, Hkv, S_max, D, generator=gen).to(DEVICE, dtype)
    return q, k, v


CASES = [  # (B, Hq, Hkv, T, S, D, dtype)
    (1, 9, 3, 1, 7, 64, torch.float32),
    (1, 9, 3, 5, 33, 64, torch.float32),
    (1, 9, 3, 13, 130, 64, torch.float32),
    (2, 9, 3, 5, 33, 40, torch.float32),  # head_dim masking (40 -> 64 lanes)
    (1, 2, 2, 13, 33, 128, torch.float32),  # no GQA, largest head_dim
    (1, 9, 3, 5, 33, 64, torch.bfloat16),
    (1, 9, 3, 13, 130, 64, torch.float16),
    (1, 9, 3, 1, 7, 40, torch.bfloat16),
]


@pytest.mark.parametrize("B,Hq,Hkv,T,S,D,dtype", CASES)
def test_matches_reference(backend_name, B, Hq, Hkv, T, S, D, dtype):
    gen = torch.Generator().manual_seed(T * 1000 + S + D)
    q, k, v = make_qkv(B, Hq, Hkv, T, S + 3, D, dtype, gen)  # cache longer than kv_len
    desc = random_desc(T, S, gen, batch=B if B > 1 else 0)
    out = hybrid_attention(q, k, v, desc.to(DEVICE), kv_len=S)
    assert out.shape == q.shape and out.dtype == dtype
    ref = reference(q.cpu(), k.cpu(), v.cpu(), desc, S, 1 / math.sqrt(D))
    torch.testing.assert_close(out.cpu().double(), ref, atol=TOL[dtype], rtol=TOL[dtype])


def test_causal_desc_equals_causal_attention(backend_name):
    gen = torch.Generator().manual_seed(1)
    T, S, D = 5, 33, 64
    q, k, v = make_qkv(1, 9, 3, T, S, D, torch.float32, gen)
    out = hybrid_attention(q, k, v, causal_desc(T, S, DEVICE), scale=0.1)
    # Row i is cache position S - T + i: it sees [0, S - T + i], the lower-right causal mask.
    mask = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T).to(DEVICE)
    kk, vv = (x.repeat_interleave(3, dim=1) for x in (k, v))  # (1, 9, S, D)
    expected = torch.softmax((q @ kk.transpose(-1, -2) * 0.1).masked_fill(~mask, -math.inf), -1)
    torch.testing.assert_close(out, expected @ vv, atol=2e-5, rtol=2e-5)


def test_block_desc_layout():
    # Prefix 10, verify rows at 10..12, blocks (2 rows) for acceptance 0 at 13..14 and 2 at 15..16.
    desc = block_desc(prefix_len=10, n_verify=3, block_len=2, accept_lens=[0, 2])
    expected = [[11, 0, 0], [12, 0, 0], [13, 0, 0], [11, 13, 15], [11, 13, 15], [13, 15, 17],
                [13, 15, 17]]  # fmt: skip
    assert desc.dtype == torch.int32 and desc.tolist() == expected
    assert causal_desc(3, 8).tolist() == [[6, 0, 0], [7, 0, 0], [8, 0, 0]]
    assert block_desc(10, 3, 2, []).tolist() == causal_desc(3, 13).tolist()
    with pytest.raises(KernelInputError, match="accept_lens"):
        block_desc(10, 3, 2, [3])


def test_draft_rows_never_touch_verify_rows(backend_name):
    """Perturbing draft rows' queries, keys and values leaves verify rows bit-identical."""
    gen = torch.Generator().manual_seed(2)
    P, n_verify, K, accept = 20, 5, 4, [0, 2, 4]
    desc = block_desc(P, n_verify, K, accept, DEVICE)
    T = desc.shape[0]
    S = P + T
    q, k, v = make_qkv(1, 9, 3, T, S, 64, torch.float32, gen)
    out = hybrid_attention(q, k, v, desc)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    q2[:, :, n_verify:] += 3.0
    k2[:, :, P + n_verify :] *= -2.0
    v2[:, :, P + n_verify :] += 5.0
    out2 = hybrid_attention(q2, k2, v2, desc)
    assert torch.equal(out[:, :, :n_verify], out2[:, :, :n_verify])
    assert not torch.equal(out[:, :, n_verify:], out2[:, :, n_verify:])


def test_strided_cache_and_stale_tail(backend_name):
    """A transposed (B, S_max, Hkv, D) cache and a strided desc work; slots >= kv_len unread."""
    gen = torch.Generator().manual_seed(3)
    T, S, S_max, D = 5, 33, 50, 64
    q, _, _ = make_qkv(1, 9, 3, T, S_max, D, torch.float32, gen)
    buf = torch.randn(2, 1, S_max, 3, D, generator=gen).to(DEVICE)  # (kv, B, S_max, Hkv, D)
    buf[:, :, S:] = float("nan")  # stale slots past kv_len
    k, v = buf[0].transpose(1, 2), buf[1].transpose(1, 2)  # (B, Hkv, S_max, D) views
    desc = random_desc(T, S, gen)
    desc_t = desc.t().contiguous().t().to(DEVICE)  # column-major (T, 3) view
    out = hybrid_attention(q, k, v, desc_t, kv_len=S)
    ref = reference(q.cpu(), k.cpu(), v.cpu(), desc, S, 1 / math.sqrt(D))
    torch.testing.assert_close(out.cpu().double(), ref, atol=2e-5, rtol=2e-5)


def test_row_without_keys_is_zero(backend_name):
    gen = torch.Generator().manual_seed(4)
    q, k, v = make_qkv(1, 9, 3, 3, 7, 64, torch.float32, gen)
    desc = torch.tensor([[7, 0, 0], [0, 4, 4], [0, 2, 5]], dtype=torch.int32, device=DEVICE)
    out = hybrid_attention(q, k, v, desc)
    assert torch.equal(out[:, :, 1], torch.zeros_like(out[:, :, 1]))
    assert bool(out[:, :, [0, 2]].abs().sum(-1).gt(0).all())


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda q, k, v, d: (q[0], k, v, d), "4-D"),
        (lambda q, k, v, d: (q, k[:, :2], v[:, :2], d), "multiple"),
        (lambda q, k, v, d: (q, k, v.half(), d), "dtype"),
        (lambda q, k, v, d: (q.double(), k.double(), v.double(), d), "dtype"),
        (lambda q, k, v, d: (q, k[..., :32], v[..., :32], d), "D=64"),
        (lambda q, k, v, d: (q, k, v, d[:2]), "desc must be"),
        (lambda q, k, v, d: (q, k, v, d.float()), "integer"),
        (lambda q, k, v, d: (q, k, v, d + torch.tensor([0, 0, 9], dtype=torch.int32)), "bounds"),
        (lambda q, k, v, d: (q, k, v, d - torch.tensor([0, 0, 5], dtype=torch.int32)), "bounds"),
    ],
)
def test_bad_inputs_raise(change, match):
    q = torch.zeros(1, 9, 3, 64)
    k = v = torch.zeros(1, 3, 7, 64)
    d = causal_desc(3, 7)
    with pytest.raises(KernelInputError, match=match):
        hybrid_attention(*change(q, k, v, d))


def test_kv_len_bounds():
    q, k = torch.zeros(1, 3, 4, 16), torch.zeros(1, 3, 6, 16)
    for kv_len in (3, 7):
        with pytest.raises(KernelInputError, match="kv_len"):
            hybrid_attention(q, k, k, causal_desc(4, 6), kv_len=kv_len)


def test_backend_switch(monkeypatch):
    with pytest.raises(KernelBackendError, match="unknown"):
        backend.set_backend("cuda")
    previous = backend.set_backend("torch")
    try:
        assert backend.get_backend() == "torch" and not backend.use_triton(torch.zeros(1))
        backend.set_backend("auto")
        monkeypatch.setattr(backend, "INTERPRET", False)
        assert not backend.use_triton(torch.zeros(1))  # auto: CPU tensors take torch
        monkeypatch.setattr(backend, "HAS_TRITON", False)
        backend.set_backend("triton")
        with pytest.raises(KernelBackendError, match="not installed"):
            backend.use_triton(torch.zeros(1))
    finally:
        backend.set_backend(previous)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_full_hybrid_step_shape(backend_name, dtype):
    """SmolLM2 shapes: 600 cached tokens, 5 verify rows + 5 draft blocks of 4 (T = 25)."""
    gen = torch.Generator().manual_seed(7)
    desc = block_desc(600, 5, 4, range(5))
    T = desc.shape[0]
    q, k, v = make_qkv(1, 9, 3, T, 600 + T + 40, 64, dtype, gen)
    out = hybrid_attention(q, k, v, desc.to(DEVICE), kv_len=600 + T)
    ref = reference(q.cpu(), k.cpu(), v.cpu(), desc, 600 + T, 1 / 8)
    torch.testing.assert_close(out.cpu().double(), ref, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_compiled_triton_matches_torch_on_gpu(dtype):
    gen = torch.Generator().manual_seed(8)
    for T, S in [(1, 1), (5, 700), (25, 2048)]:
        desc = causal_desc(T, S) if T < 25 else block_desc(S - T, 5, 4, range(5))
        q, k, v = make_qkv(1, 9, 3, T, S + 64, 64, dtype, gen)
        previous = backend.set_backend("triton")
        try:
            out = hybrid_attention(q, k, v, desc.cuda(), kv_len=S)
        finally:
            backend.set_backend(previous)
        ref = reference(q.cpu(), k.cpu(), v.cpu(), desc, S, 1 / 8)
        torch.testing.assert_close(out.cpu().double(), ref, atol=TOL[dtype], rtol=TOL[dtype])
