"""kernels/cpu_rows.py: the CPU product of verify forwards, against F.linear."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from dllm_voice.kernels import cpu_rows, cpu_rows_build

needs_kernel = pytest.mark.skipif(
    not cpu_rows.available(), reason="cpu_rows kernel not built here (no AVX2 or no compiler)"
)


@needs_kernel
@pytest.mark.parametrize("n,k", [(64, 48), (40, 19), (960, 576), (576, 1536), (7, 300)])
@pytest.mark.parametrize("rows", [1, 2, 5, 6, 7, 13, cpu_rows.MAX_ROWS, cpu_rows.MAX_ROWS + 5])
def test_matches_f_linear(n: int, k: int, rows: int) -> None:
    gen = torch.Generator().manual_seed(n * 1000 + k + rows)
    w, x = torch.randn(n, k, generator=gen), torch.randn(1, rows, k, generator=gen)
    bias = torch.randn(n, generator=gen)
    panels = cpu_rows.pack(w)
    assert panels.data.shape == (-(-n // cpu_rows.PANEL), k, cpu_rows.PANEL)
    y = cpu_rows.matmul(x, w, panels, bias)
    assert y.shape == (1, rows, n)
    torch.testing.assert_close(y, F.linear(x, w, bias), atol=1e-4, rtol=1e-4)


@needs_kernel
def test_a_row_is_bit_identical_whatever_shares_the_call() -> None:
    """Verify rows compute exactly what a 1-row forward computes: same summation order for any
    number of rows (register groups of 6, k blocks) and any thread count."""
    gen = torch.Generator().manual_seed(0)
    w, x = torch.randn(96, 700, generator=gen), torch.randn(13, 700, generator=gen)
    panels = cpu_rows.pack(w)
    alone = torch.cat([cpu_rows.matmul(x[i : i + 1], w, panels) for i in range(13)])
    threads = torch.get_num_threads()
    for t in {1, 2, threads}:
        torch.set_num_threads(t)
        try:
            for m in (2, 7, 13):
                assert torch.equal(cpu_rows.matmul(x[:m], w, panels), alone[:m])
        finally:
            torch.set_num_threads(threads)


@pytest.mark.parametrize("fmt", ["q4_1", "q8_0"])
def test_dequantize_matches_gguf(fmt: str) -> None:
    q = cpu_rows.random_quantized(fmt, 24, 96, torch.Generator().manual_seed(0))
    ref = dequantize(q.rows.numpy(), GGMLQuantizationType[fmt.upper()])
    assert torch.equal(cpu_rows.dequantize(q), torch.from_numpy(ref.astype(np.float32)))


@needs_kernel
@pytest.mark.parametrize("fmt", ["q4_1", "q8_0"])
@pytest.mark.parametrize("n,k", [(64, 64), (40, 96), (960, 576), (17, 1536)])
def test_quantized_blocks_give_the_dequantized_weights_outputs_exactly(
    fmt: str, n: int, k: int
) -> None:
    """Products from GGUF blocks equal the fp32 kernel's on the dequantized weight, bit for bit,
    for every row count (1 row: two panels at once; 7+: several groups) and thread count."""
    gen = torch.Generator().manual_seed(n + k)
    q = cpu_rows.random_quantized(fmt, n, k, gen)
    w = cpu_rows.dequantize(q)
    fp32, blocks = cpu_rows.pack(w), cpu_rows.pack_quant(q, vnni=False)
    assert blocks.fmt == fmt and blocks.data.dtype == torch.uint8
    x = torch.randn(20, k, generator=gen)
    threads = torch.get_num_threads()
    for t in {1, threads}:
        torch.set_num_threads(t)
        try:
            for m in (1, 2, 3, 5, 6, 7, 13, 20):
                y = cpu_rows.matmul(x[:m], w, blocks)
                assert torch.equal(y, cpu_rows.matmul(x[:m], w, fp32)), (t, m)
        finally:
            torch.set_num_threads(threads)
    torch.testing.assert_close(y, F.linear(x, w), atol=1e-3, rtol=1e-4)


@needs_kernel
@pytest.mark.parametrize("fmt", ["q4_1", "q8_0", "q8_f", "q4_f"])
@pytest.mark.parametrize("n,k", [(64, 64), (40, 96), (960, 576), (17, 1536)])
def test_integer_products_compute_the_reference_and_each_row_alone(
    fmt: str, n: int, k: int
) -> None:
    """The VNNI layouts (AVX-512 VNNI; Q8_0 and q8_f on AVX2 too): the products `vnni_reference`
    describes (rows rounded to int16 per block but for each block's largest input, exact integer
    sums), and a row gives the same bits alone or with up to 19 others (groups of 5) at any
    thread count; within ~1e-5 of the exact product of the dequantized weight, outliers of 1000x
    included."""
    if not cpu_rows.integer_products(fmt):
        pytest.skip(f"no integer products for {fmt} here (Q4_1, q4_f: AVX-512 VNNI only)")
    gen = torch.Generator().manual_seed(n + k)
    q = cpu_rows.random_quantized(fmt, n, k, gen)
    w = cpu_rows.dequantize(q)
    blocks = cpu_rows.pack_quant(q)
    assert blocks.fmt == f"{fmt}_vnni" and blocks.data.shape[-1] == cpu_rows.QUANT_FORMATS[fmt][1]
    x = torch.randn(20, k, generator=gen)
    x[3, :32] = 0.0  # a block of zeros: scale 0
    x[4, :32] = 0.0
    x[4, 17] = -2.0  # a block with one input: all of it the outlier
    x[5, 7], x[6, k - 1] = 1000.0, -300.0  # outliers, which would coarsen their blocks' scale
    y = cpu_rows.matmul(x, w, blocks)
    ref = cpu_rows.vnni_reference(x, q).float()
    torch.testing.assert_close(y, ref, atol=1e-4 * ref.abs().max().item(), rtol=1e-5)
    alone = torch.cat([cpu_rows.matmul(x[i : i + 1], w, blocks) for i in range(20)])
    threads = torch.get_num_threads()
    for t in {1, 2, threads}:
        torch.set_num_threads(t)
        try:
            for m in (1, 2, 7, 8, 9, 17, 20):
                assert torch.equal(cpu_rows.matmul(x[:m], w, blocks), alone[:m]), (t, m)
        finally:
            torch.set_num_threads(threads)
    exact = F.linear(x.double(), w.double())
    assert ((y - exact).norm(dim=1) / exact.norm(dim=1)).max() < 1e-4
    many = torch.cat([x] * 10)  # a prefill's 200 rows stay on the kernel, more than 512 do not
    assert torch.equal(cpu_rows.matmul(many, w, blocks)[-20:], alone)
    too_many = torch.randn(cpu_rows.MAX_INT_ROWS + 1, k, generator=gen)
    assert torch.equal(cpu_rows.matmul(too_many, w, blocks), F.linear(too_many, w))


def test_q8_0_round_trip() -> None:
    """A weight within half a step of its block's scale of the original; and blocks made from a
    weight that came from Q8_0 blocks are those blocks (the bundled head, the drafter's)."""
    w = torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
    q = cpu_rows.quantize_q8_0(w)
    back = cpu_rows.dequantize(q)
    step = w.view(8, 2, 32).abs().amax(-1, keepdim=True) / 127
    assert ((back - w).view(8, 2, 32).abs() <= step * 0.51).all()
    assert torch.equal(cpu_rows.quantize_q8_0(back).rows, q.rows)
    assert cpu_rows.quantize_q8_0(torch.randn(4, 40)) is None


@needs_kernel
def test_rms_norm_matches_torch_and_each_row_stands_alone() -> None:
    gen = torch.Generator().manual_seed(2)
    x, g = torch.randn(2, 7, 576, generator=gen) * 3, torch.randn(576, generator=gen)
    y = cpu_rows.rms_norm(x, g, 1e-5)
    torch.testing.assert_close(y, F.rms_norm(x, (576,), g, 1e-5), atol=1e-5, rtol=1e-5)
    assert torch.equal(cpu_rows.rms_norm(x[1, 3:4], g, 1e-5), y[1, 3:4])
    odd = torch.randn(3, 21, generator=gen)  # a length that is not a multiple of 8
    torch.testing.assert_close(
        cpu_rows.rms_norm(odd, g[:21], 1e-6), F.rms_norm(odd, (21,), g[:21], 1e-6)
    )


@pytest.mark.parametrize("k", [1, 7, 8, 9, 49152])
def test_argmax_is_torchs_first_largest(k: int) -> None:
    """cpu_rows.argmax gives x.argmax(-1): the first of equal largest values, in the vector
    lanes, between lanes and in the tail; torch's own where the kernel is off."""
    gen = torch.Generator().manual_seed(k)
    x = torch.randn(4, k, generator=gen)
    x[1] = 0.5  # all equal: index 0
    x[2, k // 2 :] = 9.0  # equal maxima spread over lanes and the tail
    x[3, -1] = float("inf")
    assert cpu_rows.argmax(x) == x.argmax(-1).tolist()
    assert cpu_rows.argmax(x[0]) == [int(x[0].argmax())]


@needs_kernel
@pytest.mark.parametrize("n,t", [(1, 1), (50, 1), (200, 5), (600, 13), (300, 300)])
@pytest.mark.parametrize("kind", ["all", "causal", "tree"])
def test_attention_matches_sdpa_and_each_row_stands_alone(n: int, t: int, kind: str) -> None:
    gen = torch.Generator().manual_seed(n + t)
    h, hkv, d = 9, 3, 64
    cache = torch.randn(2, hkv, n + 7, d, generator=gen)  # a cache with room: strided views
    keys, values = cache[0, :, :n], cache[1, :, :n]
    q = torch.randn(t, h + hkv, d, generator=gen)[:, :h]  # a view into fused q/k rows
    mask = None
    if kind != "all":
        mask = torch.ones(t, n, dtype=torch.bool).tril(n - t)
    if kind == "tree":  # each new row sees itself and a random subset of the rows before it
        mask[:, n - t :] &= torch.rand(t, t, generator=gen) < 0.5
        mask[:, n - t :] |= torch.eye(t, dtype=torch.bool)
    out = cpu_rows.attention(q, keys, values, mask, False, d**-0.5)
    ref = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], keys[None], values[None], attn_mask=mask, enable_gqa=True
    )[0].transpose(0, 1)
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)
    if kind == "causal":
        assert torch.equal(cpu_rows.attention(q, keys, values, None, True, d**-0.5), out)
    last = None if mask is None else mask[-1:]
    assert torch.equal(cpu_rows.attention(q[-1:], keys, values, last, False, d**-0.5), out[-1:])
    assert (
        cpu_rows.attention(q[:, :, :60], keys[:, :, :60], values[:, :, :60], None, False, 1.0)
        is None
    )


def test_switched_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLLM_CPU_ROWS", "0")
    assert cpu_rows_build.unsupported() == "DLLM_CPU_ROWS=0"
    monkeypatch.setenv("DLLM_CPU_ROWS", "1")
    monkeypatch.setenv("CC", "no-such-compiler")
    assert cpu_rows_build.unsupported() is not None  # no compiler (or no AVX2 CPU to begin with)


@needs_kernel
def test_integer_products_where_the_cpu_has_them() -> None:
    """Q8_0 and q8_f take the integer products wherever the kernel runs (VNNI or AVX2), Q4_1 and
    q4_f with VNNI only; pack_quant's default follows."""
    assert cpu_rows.integer_products("q8_0") and cpu_rows.integer_products("q8_f")
    assert cpu_rows.integer_products("q4_1") == cpu_rows.has_vnni()
    assert cpu_rows.integer_products("q4_f") == cpu_rows.has_vnni()
    gen = torch.Generator().manual_seed(4)
    for fmt in ("q8_0", "q4_1", "q8_f", "q4_f"):
        packed = cpu_rows.pack_quant(cpu_rows.random_quantized(fmt, 16, 64, gen))
        assert packed.integer == cpu_rows.integer_products(fmt)


@needs_kernel
@pytest.mark.parametrize("fmt", ["q8_0", "q8_f", "q4_1", "q4_f"])
@pytest.mark.parametrize("n,k", [(300, 64), (1000, 96), (4099, 640)])
def test_head_argmax_is_the_whole_heads(fmt: str, n: int, k: int) -> None:
    """The sketch's argmax equals the whole product's, ties to the first, for rows near one
    head row (few panels computed: the pick path) and for random rows (flat logits: the whole
    head); a picked panel's columns are the whole product's, bit for bit."""
    gen = torch.Generator().manual_seed(n + k)
    q = cpu_rows.random_quantized(fmt, n, k, gen)
    w, panels, sketch = cpu_rows.dequantize(q), cpu_rows.pack_quant(q), cpu_rows.pack_sketch(q)
    assert sketch.data.shape == (-(-n // 16), k // 32, cpu_rows.SKETCH_BYTES)
    targets = torch.randint(0, n, (12,), generator=gen)
    near = w[targets] / w[targets].norm(dim=1, keepdim=True) * 8
    near += 0.05 * torch.randn(near.shape, generator=gen)
    shares = []
    for x in [*near, *torch.randn(4, k, generator=gen)]:
        x = x[None]
        whole = cpu_rows.matmul(x, None, panels)
        ids, share = cpu_rows.head_argmax(x, panels, sketch)
        assert ids == cpu_rows.argmax(whole)
        shares.append(share)
    assert min(shares[:12]) < cpu_rows.SKETCH_WHOLE  # the picked panels decided these
    j = int(w.norm(dim=1).argmax())  # x = its row: no other row's logit is larger
    twin = cpu_rows.Quantized(fmt, torch.cat([q.rows, q.rows[j : j + 1]]))  # row n ties with j
    x = w[j : j + 1]
    assert cpu_rows.argmax(cpu_rows.matmul(x, None, cpu_rows.pack_quant(twin))) == [j]
    assert cpu_rows.head_argmax(x, cpu_rows.pack_quant(twin), cpu_rows.pack_sketch(twin))[0] == [j]
    x = torch.randn(3, k, generator=gen)
    pick = torch.tensor([2, 0, (n - 1) // 16], dtype=torch.int32)
    y = cpu_rows._call(cpu_rows._loaded(), x, panels, pick)
    whole = cpu_rows.matmul(x, None, panels)
    for u, p in enumerate(pick.tolist()):
        cols = min(16, n - 16 * p)
        assert torch.equal(y[:, 16 * u : 16 * u + cols], whole[:, 16 * p : 16 * p + cols])


@needs_kernel
@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_the_wide_sketch_pass_gives_the_narrow_ones_bits(m: int) -> None:
    """With AVX-512 the sketch's pass takes two chunks of codes a 512-bit product: its integer
    sums are exact, so its estimates and bounds are the 256-bit pass's, bit for bit."""
    if not cpu_rows.has_vnni():
        pytest.skip("no AVX-512 here: the 256-bit pass alone")
    gen = torch.Generator().manual_seed(m)
    q = cpu_rows.random_quantized("q8_0", 1000, 640, gen)
    sketch = cpu_rows.pack_sketch(q)
    x = 4 * torch.randn(m, 640, generator=gen)
    x[0, 5] = 300.0  # an outlier: a coarse scale for its 16 inputs
    narrow, wide = cpu_rows.sketch_pass(x, sketch, False), cpu_rows.sketch_pass(x, sketch, True)
    assert torch.equal(narrow[0], wide[0]) and torch.equal(narrow[1], wide[1])
