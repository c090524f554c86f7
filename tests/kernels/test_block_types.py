"""kernels/cpu_rows.py's GGUF block types beyond Q4_1 / Q8_0 (`from_gguf`, `fuse`, formats q4_f
and q8_f): the weights gguf.quants gives, and products equal to the dequantized weight's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize, quantize

from dllm_voice.kernels import cpu_layers, cpu_rows, gguf_blocks

needs_kernel = pytest.mark.skipif(
    not cpu_rows.available(), reason="cpu_rows kernel not built here (no AVX2 or no compiler)"
)

# Each type's fp16 fields (byte offsets in its block) and the kernel's format for it.
TYPES = {
    "Q4_0": ([0], "q4_1"),
    "Q4_1": ([0, 2], "q4_1"),
    "Q5_0": ([0], "q8_0"),
    "Q5_1": ([0, 2], "q8_f"),
    "Q8_0": ([0], "q8_0"),
    "Q4_K": ([0, 2], "q4_f"),
    "Q5_K": ([0, 2], "q8_f"),
    "Q6_K": ([208], "q8_f"),
}
QUANTIZABLE = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")  # gguf.quants.quantize has them


def gguf_rows(name: str, n: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """Well-formed GGUF rows uint8 (n, bytes per row): random bytes, finite fp16 scales (every
    code and 6-bit scale combination occurs); half the rows from gguf's own quantize where it
    has the type."""
    qtype = GGMLQuantizationType[name]
    per, size = GGML_QUANT_SIZES[qtype]
    rows = torch.randint(0, 256, (n, k // per, size), dtype=torch.uint8, generator=gen)
    for at in TYPES[name][0]:
        scale = (torch.rand(n, k // per, 1, generator=gen) - 0.5) * 0.1
        rows[..., at : at + 2] = scale.half().view(torch.uint8)
    rows = rows.reshape(n, -1)
    if name in QUANTIZABLE:
        w = torch.randn(n // 2, k, generator=gen) * torch.rand(n // 2, 1, generator=gen)
        rows[: n // 2] = torch.from_numpy(quantize(w.numpy(), qtype))
    return rows


def reference(name: str, rows: torch.Tensor) -> torch.Tensor:
    ref = dequantize(rows.numpy(), GGMLQuantizationType[name])
    return torch.from_numpy(ref.astype(np.float32))


@pytest.mark.parametrize("name", TYPES)
def test_from_gguf_gives_ggufs_weights(name: str) -> None:
    """Every conversion is exact: the same weights as gguf.quants.dequantize (up to the sign of
    a zero: Q4_0's d q - 8 d is +0 where d (q - 8) can be -0)."""
    rows = gguf_rows(name, 24, 512, torch.Generator().manual_seed(len(name) + ord(name[1])))
    q = gguf_blocks.from_gguf(GGMLQuantizationType[name], rows)
    assert q is not None and q.fmt == TYPES[name][1] and q.cols == 512
    assert q.rows.shape == (24, 512 // cpu_rows.QK * cpu_rows.QUANT_FORMATS[q.fmt][0])
    assert torch.equal(cpu_rows.dequantize(q), reference(name, rows))


def test_q4_0_scales_too_large_for_fp16_offsets_go_to_q8_f() -> None:
    rows = gguf_rows("Q4_0", 4, 64, torch.Generator().manual_seed(3))
    rows[1, :2] = torch.tensor([9000.0]).half().view(torch.uint8)  # -8 d overflows fp16
    q = gguf_blocks.from_gguf(GGMLQuantizationType.Q4_0, rows)
    assert q is not None and q.fmt == "q8_f"
    assert torch.equal(cpu_rows.dequantize(q), reference("Q4_0", rows))


@pytest.mark.parametrize("name", ["F32", "F16", "BF16", "Q2_K", "Q3_K", "IQ4_XS", "IQ2_XXS"])
def test_types_the_kernel_does_not_take(name: str) -> None:
    assert (
        gguf_blocks.from_gguf(GGMLQuantizationType[name], torch.zeros(2, 8, dtype=torch.uint8))
        is None
    )


@needs_kernel
@pytest.mark.parametrize("name", TYPES)
def test_products_from_the_blocks_equal_the_dequantized_weights(name: str) -> None:
    """Bit for bit, at every row count (1: two panels at once; 13+: expanded into a buffer) and
    thread count; pack_quant gives q4_f and q8_f the integer products where `integer_products`
    says, and those compute `vnni_reference` from the same blocks."""
    gen = torch.Generator().manual_seed(7 + ord(name[1]))
    rows = gguf_rows(name, 40, 512, gen)
    q = gguf_blocks.from_gguf(GGMLQuantizationType[name], rows)
    assert q is not None
    w = cpu_rows.dequantize(q)
    blocks, fp32 = cpu_rows.pack_quant(q, vnni=False), cpu_rows.pack(w)
    assert blocks.fmt == q.fmt and blocks.data.shape[-1] == cpu_rows.QUANT_FORMATS[q.fmt][1]
    packed = cpu_rows.pack_quant(q)
    assert packed.integer == cpu_rows.integer_products(q.fmt)
    x = torch.randn(40, 512, generator=gen)
    if packed.integer:
        ref = cpu_rows.vnni_reference(x, q).float()
        got = cpu_rows.matmul(x, w, packed)
        torch.testing.assert_close(got, ref, atol=1e-4 * ref.abs().max().item(), rtol=1e-5)
    threads = torch.get_num_threads()
    for t in {1, threads}:
        torch.set_num_threads(t)
        try:
            for m in (1, 2, 5, 13, 40):
                y = cpu_rows.matmul(x[:m], w, blocks)
                assert torch.equal(y, cpu_rows.matmul(x[:m], w, fp32)), (t, m)
        finally:
            torch.set_num_threads(threads)
    torch.testing.assert_close(y, x @ reference(name, rows).T, atol=1e-3, rtol=1e-4)


@needs_kernel
@pytest.mark.parametrize("fmt", ["q4_f", "q8_f"])
@pytest.mark.parametrize("n,k", [(64, 64), (17, 96), (960, 576)])
def test_random_blocks_of_the_new_formats(fmt: str, n: int, k: int) -> None:
    gen = torch.Generator().manual_seed(n + k)
    q = cpu_rows.random_quantized(fmt, n, k, gen)
    assert q.cols == k
    w = cpu_rows.dequantize(q)
    blocks, fp32 = cpu_rows.pack_quant(q, vnni=False), cpu_rows.pack(w)
    x = torch.randn(14, k, generator=gen)
    for m in (1, 3, 7, 14):
        assert torch.equal(cpu_rows.matmul(x[:m], w, blocks), cpu_rows.matmul(x[:m], w, fp32))


def test_fuse() -> None:
    """Parts of one format: rows concatenated; of mixed formats (Q4_K_M's q|k|v: Q4_K and Q6_K):
    all in q8_f, every part's weights kept exactly."""
    gen = torch.Generator().manual_seed(11)
    names = ("Q4_K", "Q6_K", "Q8_0", "Q4_0", "Q5_1")
    parts = [
        gguf_blocks.from_gguf(GGMLQuantizationType[name], gguf_rows(name, 8 * (i + 1), 256, gen))
        for i, name in enumerate(names)
    ]
    assert all(p is not None for p in parts)
    fused = gguf_blocks.fuse(parts)
    assert fused.fmt == "q8_f" and fused.cols == 256 and fused.rows.shape[0] == 8 * 15
    whole = torch.cat([cpu_rows.dequantize(p) for p in parts])
    assert torch.equal(cpu_rows.dequantize(fused), whole)
    same = gguf_blocks.fuse(parts[:1] * 3)
    assert same.fmt == "q4_f" and torch.equal(same.rows, torch.cat([parts[0].rows] * 3))
    with pytest.raises(ValueError):
        gguf_blocks.fuse([parts[0], cpu_rows.random_quantized("q4_f", 8, 512, gen)])
    if cpu_rows.available():
        x = torch.randn(5, 256, generator=gen)
        y = cpu_rows.matmul(x, whole, cpu_rows.pack_quant(fused, vnni=False))
        assert torch.equal(y, cpu_rows.matmul(x, whole, cpu_rows.pack(whole)))


@needs_kernel
@pytest.mark.parametrize("t", [1, 5, 13])
def test_layers_run_the_new_formats(t: int) -> None:
    """`layers` over q8_f / q4_f (and q4_1) matrices computes what it computes over the fp32
    panels of their weights, bit for bit."""
    gen = torch.Generator().manual_seed(t)
    dim, heads, kv_heads, d, ffn, n_layers = 64, 2, 1, 32, 96, 2
    shapes = [((heads + 2 * kv_heads) * d, dim), (dim, heads * d), (2 * ffn, dim), (dim, ffn)]
    fmts = ["q8_f", "q4_f", "q4_1", "q8_f", "q4_f", "q8_f", "q8_f", "q4_f"]
    quant = [cpu_rows.random_quantized(fmts[i], *shapes[i % 4], gen) for i in range(4 * n_layers)]
    weights = [cpu_rows.dequantize(q) for q in quant]
    norms = tuple(1 + 0.1 * torch.randn(dim, generator=gen) for _ in range(2 * n_layers))
    angle = torch.randn(t, d // 2, generator=gen)
    cos = torch.cat([angle.cos()] * 2, dim=-1).contiguous()
    sin = torch.cat([-angle.sin(), angle.sin()], dim=-1).contiguous()
    x = torch.randn(t, dim, generator=gen)
    outs = []
    for panels in (
        tuple(cpu_rows.pack_quant(q, vnni=False) for q in quant),
        tuple(cpu_rows.pack(w) for w in weights),
    ):
        stack = cpu_layers.layer_stack(panels, norms)
        cache = torch.zeros(2, n_layers, kv_heads, 16, d)
        seqs = [cpu_layers.SeqKV(cache[0], cache[1], 0, t, None)]
        scratch = torch.empty(cpu_layers.layers_scratch(stack, t, dim, heads, d, ffn))
        y = x.clone()
        cpu_layers.layers(y, stack, 1e-5, (cos, sin), seqs, True, heads, ffn, scratch)
        outs.append(y)
    assert torch.isfinite(outs[0]).all() and not torch.equal(outs[0], x)
    assert torch.equal(outs[0], outs[1])


@needs_kernel
@pytest.mark.parametrize("t", [1, 6, 11])
def test_layers_with_integer_q8_0_and_q8_f_matrices(t: int) -> None:
    """`layers` over q8_0 and q8_f matrices in the integer layouts (VNNI or AVX2; q4_f's integer
    products with VNNI, its fp32 ones elsewhere, beside them): close to the fp32 panels of the
    same weights, and a row computes the same bits in a prefill of t rows as on its own after the
    others are cached."""
    if not (cpu_rows.integer_products("q8_0") and cpu_rows.integer_products("q8_f")):
        pytest.skip("no integer products for q8_0 / q8_f here")
    gen = torch.Generator().manual_seed(20 + t)
    dim, heads, kv_heads, d, ffn, n_layers = 64, 2, 1, 32, 96, 2
    shapes = [((heads + 2 * kv_heads) * d, dim), (dim, heads * d), (2 * ffn, dim), (dim, ffn)]
    fmts = ["q8_0", "q4_f", "q8_0", "q8_f"] * n_layers
    quant = [cpu_rows.random_quantized(fmts[i], *shapes[i % 4], gen) for i in range(4 * n_layers)]
    norms = tuple(1 + 0.1 * torch.randn(dim, generator=gen) for _ in range(2 * n_layers))
    angle = torch.randn(t, d // 2, generator=gen)
    cos = torch.cat([angle.cos()] * 2, dim=-1).contiguous()
    sin = torch.cat([-angle.sin(), angle.sin()], dim=-1).contiguous()
    x = torch.randn(t, dim, generator=gen)

    def run(panels, rows: slice, past: int, cache: torch.Tensor) -> torch.Tensor:
        stack = cpu_layers.layer_stack(panels, norms)
        n = rows.stop - rows.start
        seqs = [cpu_layers.SeqKV(cache[0], cache[1], past, n, None)]
        scratch = torch.empty(cpu_layers.layers_scratch(stack, n, dim, heads, d, ffn))
        y = x[rows].clone()
        rope = (cos[rows].contiguous(), sin[rows].contiguous())
        cpu_layers.layers(y, stack, 1e-5, rope, seqs, True, heads, ffn, scratch)
        return y

    integer = tuple(cpu_rows.pack_quant(q) for q in quant)
    q4_f = cpu_rows.integer_products("q4_f")
    assert [p.integer for p in integer] == [True, q4_f, True, True] * n_layers
    fp32 = tuple(cpu_rows.pack(cpu_rows.dequantize(q)) for q in quant)
    cache = torch.zeros(2, n_layers, kv_heads, 16, d)
    y = run(integer, slice(0, t), 0, cache)
    ref = run(fp32, slice(0, t), 0, torch.zeros_like(cache))
    torch.testing.assert_close(y, ref, rtol=1e-3, atol=1e-3 * ref.abs().max().item())
    last = run(integer, slice(t - 1, t), t - 1, cache)  # rows 0..t-2 cached by the first call
    assert torch.equal(last, y[-1:])
