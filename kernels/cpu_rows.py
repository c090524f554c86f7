"""CPU kernels for verify forwards: x @ w.T over a few rows at the cost of one, and the norm and
attention around it, each computing a row on its own.

A decode forward reads every weight once and multiplies it with the pending token's row plus
the draft rows. That is bound by memory bandwidth only if each weight is read once for all rows;
oneDNN's prepacked kernel and MKL's gemm are not built for 2-16 rows (5 rows cost 1.3-1.4x one
row through oneDNN). `kernels/cpu_rows.c` streams each weight panel
once for up to 6 rows held in registers (BENCHMARKS.md, "Row cost"); every row is summed in the
same order however many rows share the call, so verify rows compute bit for bit what `ar`
computes for the same row.

Weights read from a GGUF file in Q4_1 or Q8_0 can stay in those block formats (`Quantized`,
`pack_quant`): the kernel expands each 32 x 16 block in registers and gives exactly the outputs
it gives for the dequantized fp32 weight, reading 0.625 (Q4_1) or 1.06 (Q8_0) bytes per weight
instead of 4 - from fp32 decoding is bound by those reads. On CPUs with AVX-512 VNNI (`has_vnni`)
the blocks are multiplied as integers instead: each row of x rounded to int16 per 32 inputs
(each block's largest input kept in fp32), exact int32 sums of code products (vpdpbusd on
Q4_1's byte codes, vpdpwssd on Q8_0's), finished per block in fp32 (`vnni_reference` states
the arithmetic). The expansion's arithmetic is gone: a whole SmolLM2-135M forward of 1 row takes
about half the time, and the logits stay within 0.01 of the fp32 products' (BENCHMARKS.md,
"Integer products"). Without VNNI, Q8_0 takes the same integer products on AVX2 (vpmaddwd on
codes widened to int16; the same results bit for bit): a 1-row 2048 x 2048 product 0.57 ms
instead of 0.97 on Zen 1, Gemma 3 270M's 262144-row head 21 ms instead of 35; Q4_1 keeps the
fp32 products there (`integer_products` says which formats take them here).

The other block types of llama.cpp's K-quant files reach the kernel as "q4_f" and "q8_f"
blocks, converted exactly by kernels/gguf_blocks.py; with VNNI, q4_f (Q4_K) takes Q4_1's
integer products with its fp32 scales (1-row products 2.0-2.4x faster than its expansion), and
q8_f Q8_0's with its three fp32 scales (on AVX2 too, there as vpmaddwd).

`rms_norm` and `attention` replace torch's composite ops for decode's rows (one C call each
instead of several small ones), and like the product they give a row the same bits whatever
rows share the call: together they make a verify row exactly the row `ar` computes. The
whole stack of decoder layers runs as one call too (kernels/cpu_layers.py).

The C file is compiled on first use and loaded with ctypes (kernels/cpu_rows_build.py).
`available()` is False - and model/packing.py keeps oneDNN's kernel - on CPUs without AVX2/FMA,
without a compiler, or when the build or its self-test fails (one log line says why).
DLLM_CPU_ROWS=0 turns it off.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import subprocess
from typing import NamedTuple

import torch
import torch.nn.functional as F

from dllm_voice.kernels import cpu_rows_build

log = logging.getLogger(__name__)

PANEL = 16  # output columns per panel (cpu_rows.c)
QK = 32  # inputs per quantization block
# Block formats: (bytes of a block of 32 inputs in a row, bytes of a 32 x 16 panel block).
QUANT_FORMATS = {
    "q4_1": (20, 4 * PANEL + QK * PANEL // 2),
    "q8_0": (34, 2 * PANEL + QK * PANEL),
    "q4_f": (24, 8 * PANEL + QK * PANEL // 2),
    "q8_f": (44, 12 * PANEL + QK * PANEL),
}
# The scales that open each format's blocks: (how many, bytes each: fp16 or fp32); codes follow.
_SCALES = {"q4_1": (2, 2), "q8_0": (1, 2), "q4_f": (2, 4), "q8_f": (3, 4)}
# The formats with an integer-product layout ("_vnni"; `integer_products`: where they run).
VNNI_FORMATS = ("q4_1", "q8_0", "q8_f", "q4_f")
# Up to this many rows the kernel beats oneDNN and MKL on whole forwards (they tie at 128 rows);
# above it the product is compute-bound and MKL's blocked gemm on the plain weight takes over.
MAX_ROWS = 128
# With the integer products (VNNI layouts) the kernel stays ahead as far as measured (a whole
# 512-row prefill forward of SmolLM2-135M: 336 vs 684 ms through MKL at 2 threads).
MAX_INT_ROWS = 512


class Panels(NamedTuple):
    """A weight (n, k) in the kernel's layout. fmt "f32": (ceil(n / 16), k, 16) floats; a block
    format: (ceil(n / 16), k / 32, bytes) uint8 blocks (`pack_quant`). Zero-padded columns."""

    data: torch.Tensor
    n: int
    fmt: str = "f32"

    @property
    def integer(self) -> bool:
        """In a VNNI layout: multiplied by the integer products."""
        return self.fmt.endswith("_vnni")

    @property
    def max_rows(self) -> int:
        """The most rows a product from these panels takes (more: F.linear)."""
        return MAX_INT_ROWS if self.integer else MAX_ROWS


class Quantized(NamedTuple):
    """A weight (n, k) in blocks of 32 inputs: rows uint8 (n, bytes per row), k / 32 blocks a row,
    in fmt (`from_gguf` makes them from any block type the kernel takes):
    "q4_1": GGUF's Q4_1, fp16 d, fp16 m, 16 bytes of 4-bit codes q (input i in the low nibble of
    byte i, input i + 16 in its high nibble), w = d q + m;
    "q8_0": GGUF's Q8_0, fp16 d, 32 int8 q, w = d q;
    "q4_f": fp32 d, fp32 m, 16 bytes of codes as Q4_1's, w = d q + m (Q4_K);
    "q8_f": fp32 d_lo, d_hi, m, 32 int8 q, w = d q + m with d_lo for inputs 0-15, d_hi for
    16-31 (Q5_K, Q6_K, Q5_1, and the rows of mixed formats `fuse` stacks).
    In q4_f and q8_f, d q is exact in fp32 (d = an fp16 times a small integer), so the kernel's
    fma(q, d, m) gives exactly the dequantized weight."""

    fmt: str
    rows: torch.Tensor

    @property
    def cols(self) -> int:
        """k: the inputs of each row."""
        return self.rows.shape[1] // QUANT_FORMATS[self.fmt][0] * QK


@functools.cache
def _library() -> ctypes.CDLL | None:
    why = cpu_rows_build.unsupported()
    if why is None:
        try:
            lib = cpu_rows_build.load()
            if _self_test(lib):
                return lib
            why = "its self-test disagreed with F.linear"
        except (OSError, subprocess.CalledProcessError) as e:
            lines = (getattr(e, "stderr", None) or str(e)).strip().splitlines()
            why = f"build failed: {lines[-1] if lines else type(e).__name__}"
    log.info("cpu_rows kernel off (%s): CPU matrix products use oneDNN", why)
    return None


def _loaded() -> ctypes.CDLL:
    """The library, for the functions that need available()."""
    lib = _library()
    if lib is None:
        raise RuntimeError("the cpu_rows kernel is not available here: check available() first")
    return lib


def _call(
    lib: ctypes.CDLL, x: torch.Tensor, w: Panels, pick: torch.Tensor | None = None
) -> torch.Tensor:
    """x @ w.T, or with `pick` (int32 panel indices, block formats only) those panels' 16
    columns each, side by side, computed as in the whole product (padding columns included)."""
    m, k = x.shape
    y = torch.empty(m, (w.data.shape[0] if pick is None else len(pick)) * PANEL)
    threads = torch.get_num_threads()
    args = (x.data_ptr(), w.data.data_ptr(), y.data_ptr(), m, y.shape[1], k, threads)
    if w.fmt == "f32":
        assert pick is None, "the fp32 panels take no pick"
        lib.rows_matmul(*args)
    else:
        lib.quant_matmul(*args, FORMAT_CODES[w.fmt], None if pick is None else pick.data_ptr())
    return y if pick is not None or y.shape[1] == w.n else y[:, : w.n]


def random_quantized(fmt: str, n: int, k: int, gen: torch.Generator) -> Quantized:
    """Random well-formed blocks of an (n, k) weight: tests. Finite fp16 scales; q4_f / q8_f
    scales d as from_gguf makes them (an fp16 times an integer below 64, so d q is exact), m any
    fp32."""
    raw, _ = QUANT_FORMATS[fmt]
    count, size = _SCALES[fmt]
    rows = torch.randint(0, 256, (n, k // QK, raw), dtype=torch.uint8, generator=gen)
    scales = (torch.rand(n, k // QK, count, generator=gen) - 0.5).half()
    if size == 4:
        scales = scales.float()
        ints = torch.randint(0, 64, (n, k // QK, count), generator=gen).float()
        scales[..., : count - 1] *= ints[..., : count - 1]  # d (d_lo, d_hi); m as it is
    rows[:, :, : count * size] = scales.view(torch.uint8)
    return Quantized(fmt, rows.reshape(n, -1))


def quantize_q8_0(w: torch.Tensor) -> Quantized | None:
    """Q8_0 blocks of an (n, k) fp32 weight, like llama.cpp's (d = max |w| / 127 per 32 inputs,
    in fp16; q = round(w / d)); None when k is not a multiple of 32. A weight that came from Q8_0
    blocks gets those blocks back."""
    n, k = w.shape
    if k % QK:
        return None
    g = w.detach().float().reshape(n, k // QK, QK)
    d = (g.abs().amax(-1, keepdim=True) / 127).half()
    inv = torch.where(d == 0, 0.0, 1.0 / d.float())
    q = (g * inv).round().clamp(-127, 127).to(torch.int8)
    rows = torch.cat([d.view(torch.uint8), q.view(torch.uint8)], dim=-1)  # (n, k / 32, 34)
    return Quantized("q8_0", rows.reshape(n, -1))


def _unpack(fmt: str, blocks: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Blocks (..., bytes) of fmt: their scales, fp32 (..., 1) each, and their codes (..., 32),
    uint8 (4-bit codes) or int8."""
    count, size = _SCALES[fmt]
    kind = torch.float16 if size == 2 else torch.float32
    spans = [blocks[..., i * size : (i + 1) * size] for i in range(count)]
    scales = [b.contiguous().view(kind).float() for b in spans]
    codes = blocks[..., count * size :]
    if fmt in ("q4_1", "q4_f"):
        return scales, torch.cat([codes & 15, codes >> 4], dim=-1)
    return scales, codes.contiguous().view(torch.int8)


def dequantize(w: Quantized) -> torch.Tensor:
    """The fp32 weight (n, k) that `w` stands for, as gguf.quants computes it (from_gguf's
    blocks: as it computes the GGUF blocks they came from) and as the kernel expands it."""
    n = w.rows.shape[0]
    scales, q = _unpack(w.fmt, w.rows.reshape(n, -1, QUANT_FORMATS[w.fmt][0]))
    q = q.float()  # (n, k / 32, 32)
    if w.fmt == "q8_0":
        return (q * scales[0]).reshape(n, -1)
    if w.fmt == "q8_f":  # d_lo for inputs 0-15, d_hi for 16-31
        d_lo, d_hi, m = scales
        d = torch.cat([d_lo, d_hi], dim=-1).repeat_interleave(QK // 2, dim=-1)
        return (d * q + m).reshape(n, -1)
    d, m = scales
    return (d * q + m).reshape(n, -1)


def dequantize_rows(w: Quantized, ids: torch.Tensor) -> torch.Tensor:
    """dequantize(w)[ids], (*ids.shape, k), from the rows of the given ids alone (an embedding
    lookup from the blocks: 262144 x 640 fp32 is 671 MB)."""
    rows = w.rows[ids.reshape(-1)]
    return dequantize(Quantized(w.fmt, rows)).reshape(*ids.shape, -1)


def _self_test(lib: ctypes.CDLL) -> bool:
    gen = torch.Generator().manual_seed(0)
    w, x = torch.randn(40, 19, generator=gen), torch.randn(8, 19, generator=gen)
    ok = torch.allclose(_call(lib, x, pack(w)), F.linear(x, w), atol=1e-5, rtol=1e-5)
    x = torch.randn(13, 64, generator=gen)
    for fmt in QUANT_FORMATS:  # 1 row: two panels at once; 13: expanded into a buffer
        quant = random_quantized(fmt, 40, 64, gen)
        blocks, fp32 = pack_quant(quant, vnni=False), pack(dequantize(quant))
        for m in (1, 8, 13):
            ok = ok and torch.equal(_call(lib, x[:m], blocks), _call(lib, x[:m], fp32))
    x = torch.randn(3, 20, generator=gen)
    g = torch.randn(20, generator=gen)
    ok = ok and torch.allclose(_norm(lib, x, g, 1e-5), F.rms_norm(x, (20,), g, 1e-5))
    q, kv = torch.randn(3, 4, 8, generator=gen), torch.randn(2, 2, 9, 8, generator=gen)
    out = attention(q, kv[0], kv[1], None, True, 0.3, lib)
    ref = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], kv[0][None], kv[1][None], scale=0.3, enable_gqa=True,
        attn_mask=torch.ones(3, 9, dtype=torch.bool).tril(6),
    )[0].transpose(0, 1)  # fmt: skip
    return bool(ok and out is not None and torch.allclose(out, ref, atol=1e-5, rtol=1e-5))


def _norm(lib: ctypes.CDLL, x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    k = x.shape[-1]
    lib.rms_norm_rows(x.data_ptr(), g.contiguous().data_ptr(), y.data_ptr(), x.numel() // k, k, eps)
    return y


@functools.cache
def has_vnni() -> bool:
    """The CPU has AVX-512 VNNI and the kernel's products there agree with `vnni_reference` (for
    Q4_1 and Q8_0)."""
    lib = _library()
    return lib is not None and bool(lib.vnni_supported()) and _integer_self_test(lib, "q4_1")


@functools.cache
def integer_products(fmt: str) -> bool:
    """Blocks of fmt are multiplied as integers here (`pack_quant`'s default): Q8_0 and q8_f
    wherever the kernel runs (AVX-512 VNNI, else AVX2), Q4_1 and q4_f
    with AVX-512 VNNI only (AVX2 would widen their nibbles to int16 first, for no fewer
    instructions than the fp32 expansion); each after a self-test against `vnni_reference`."""
    lib = _library()
    nibbles = fmt in ("q4_1", "q4_f")
    if lib is None or fmt not in VNNI_FORMATS or (nibbles and not has_vnni()):
        return False
    return _integer_self_test(lib, fmt)


def _integer_self_test(lib: ctypes.CDLL, fmt: str) -> bool:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(9, 96, generator=gen)
    q = random_quantized(fmt, 40, 96, gen)
    ref = vnni_reference(x, q).float()
    if not torch.allclose(_call(lib, x, pack_quant(q, vnni=True)), ref, atol=1e-4, rtol=1e-4):
        log.info("cpu_rows integer products of %s off: they disagreed with vnni_reference", fmt)
        return False
    return True


def available() -> bool:
    """The kernel is built and loaded (see the module docstring for when it is not)."""
    return _library() is not None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of fp32 CPU x (..., k) with gain weight (k,), as F.rms_norm computes it up to
    rounding, in one call (torch's composite takes ~30-60 us for a decode row). Needs
    available()."""
    return _norm(_loaded(), x, weight, eps)


def argmax(x: torch.Tensor) -> list[int]:
    """Each row's argmax of x (..., k), as `x.argmax(-1)` gives it for NaN-free rows (the first
    of equal values), in one C call on fp32 CPU rows (torch takes ~40 us a row of 49152 logits,
    the kernel ~9 with the call); torch's elsewhere."""
    lib = _library() if x.device.type == "cpu" and x.dtype == torch.float32 else None
    if lib is None:
        return x.argmax(-1).reshape(-1).tolist()
    x = x.contiguous()
    k = x.shape[-1]
    out = torch.empty(x.numel() // k, dtype=torch.int64)
    lib.argmax_rows(x.data_ptr(), out.numel(), k, out.data_ptr())
    return out.tolist()


def attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    lib: ctypes.CDLL | None = None,
) -> torch.Tensor | None:
    """Decode attention, out (T, H, D), for q (T, H, D) and keys/values (Hkv, N, D) whose last two
    dims are contiguous (a KV cache's view is); mask: bool (T, N), True = visible, or None: every
    key (causal False) or key j <= N - T + i for row i. As F.scaled_dot_product_attention up to
    rounding, but each row computed on its own (cpu_rows.c `attend_rows`): a row's bits never
    depend on the other rows. None where it does not apply (layouts, D not a multiple of 8).
    Needs available() (or `lib`, the library being tested)."""
    t, h, d = q.shape
    hkv, n, _ = keys.shape
    lay = q.stride(1) == d and q.stride(2) == 1 and keys.stride() == values.stride()
    lay = lay and keys.stride(1) == d and keys.stride(2) == 1 and d % 8 == 0 and d <= 256
    lay = lay and h % hkv == 0
    if not lay or (mask is not None and (mask.shape != (t, n) or mask.dtype != torch.bool)):
        return None
    mask = None if mask is None else mask.contiguous()
    out = torch.empty(t, h, d)
    (lib or _loaded()).attend_rows(
        q.data_ptr(), keys.data_ptr(), values.data_ptr(), out.data_ptr(),
        None if mask is None else mask.data_ptr(), t, n, h, hkv, d, q.stride(0), keys.stride(0),
        scale, int(causal), torch.get_num_threads(),
    )  # fmt: skip
    return out


# matmul_fmt_ws's fmt (cpu_rows.c)
FORMAT_CODES = {
    "f32": 0,
    "q4_1": 1,
    "q8_0": 2,
    "q4_1_vnni": 3,
    "q8_0_vnni": 4,
    "q4_f": 5,
    "q8_f": 6,
    "q8_f_vnni": 7,
    "q4_f_vnni": 8,
}


def pack(weight: torch.Tensor) -> Panels:
    """The kernel's copy of an (n, k) fp32 CPU weight."""
    n, k = weight.shape
    pad = -n % PANEL
    w = weight.detach().float()
    if pad:
        w = torch.cat([w, w.new_zeros(pad, k)])
    return Panels(w.view(-1, PANEL, k).transpose(1, 2).contiguous(), n)


def pack_quant(w: Quantized, vnni: bool | None = None) -> Panels:
    """The kernel's copy of a block-quantized weight: per panel of 16 columns and block of 32
    inputs, the 16 columns' scales (each scale of the format in turn, fp16 or fp32 as in its
    blocks) then the codes. For the fp32 products (fmt "q4_1", "q8_0", "q4_f", "q8_f"): input by
    input, 16 columns each (Q4_1: d[16], m[16], then 8 bytes per input, column j in the low
    nibble of byte j, column j + 8 in its high nibble; Q8_0: d[16], then 16 int8 per input;
    q4_f: fp32 d[16], m[16], then as Q4_1; q8_f: fp32 d_lo[16], d_hi[16], m[16], then as Q8_0).
    For the integer products (`vnni`, default where `integer_products`; fmt "q4_1_vnni",
    "q8_0_vnni", "q8_f_vnni", "q4_f_vnni"): Q4_1 d[16], m[16], then 4 chunks of 64 bytes whose
    byte 4 j + i holds input 8 c + i of column j in its low nibble and 8 c + 4 + i in its high one
    (vpdpbusd's order); Q8_0 d[16], then 16 chunks of 32 bytes whose byte 2 j + i is input 2 c + i
    of column j (vpdpwssd's, after widening to int16); q8_f fp32 d_lo[16], d_hi[16], m[16], then
    as Q8_0; q4_f fp32 d[16], m[16], then as Q4_1."""
    vnni = integer_products(w.fmt) if vnni is None else vnni and w.fmt in VNNI_FORMATS
    raw, _ = QUANT_FORMATS[w.fmt]
    count, size = _SCALES[w.fmt]
    n = w.rows.shape[0]
    blocks = w.rows.reshape(n, -1, raw)
    pad = -n % PANEL
    if pad:
        blocks = torch.cat([blocks, blocks.new_zeros(pad, *blocks.shape[1:])])
    panels = blocks.view(-1, PANEL, blocks.shape[1], raw).transpose(1, 2)  # (P, k/32, 16, raw)
    lead = panels.shape[:2]
    # each scale's bytes, column by column
    scales = [panels[..., i * size : (i + 1) * size].reshape(*lead, -1) for i in range(count)]
    nibbles = w.fmt in ("q4_1", "q4_f")
    if nibbles:
        nib = panels[..., count * size :]  # (P, k/32, 16 columns, 16 bytes)
        codes = torch.cat([nib & 15, nib >> 4], dim=-1)  # (P, k/32, 16, 32 inputs)
    else:
        codes = panels[..., count * size :]  # (P, k/32, 16 columns, 32 inputs) int8 bytes
    if not vnni:
        by_input = codes.transpose(2, 3)  # (P, k/32, 32 inputs, 16 columns)
        if nibbles:
            by_input = by_input[..., : PANEL // 2] | (by_input[..., PANEL // 2 :] << 4)
        return Panels(torch.cat([*scales, by_input.reshape(*lead, -1)], -1).contiguous(), n, w.fmt)
    if nibbles:  # (P, k/32, chunk c, 16 columns, 4 inputs): byte 4 j + i of chunk c
        quads = codes.view(*lead, PANEL, QK // 8, 2, 4)  # input 8 c + 4 h + i of column j
        vec = (quads[..., 0, :] | (quads[..., 1, :] << 4)).transpose(2, 3)
    else:  # (P, k/32, pair g, 16 columns, 2 inputs): 16-bit lane 2 j + i of chunk g: 2 g + i
        vec = codes.view(*lead, PANEL, QK // 2, 2).transpose(2, 3)
    data = torch.cat([*scales, vec.reshape(*lead, -1)], -1).contiguous()
    return Panels(data, n, f"{w.fmt}_vnni")


def vnni_reference(x: torch.Tensor, w: Quantized) -> torch.Tensor:
    """What the integer products (VNNI; AVX2 for Q8_0 and q8_f) compute for fp32 x (m, k) and
    Q4_1 / q4_f / Q8_0 / q8_f blocks w (n, k), in float64: per row and block of 32 inputs the
    largest |x| (the first) kept in fp32, the others rounded to int16 (dx = their max |x| /
    32767), the codes' sums exact; per block Q4_1 and q4_f d (dx sum(q xq) + out q_out) +
    m sum(x), Q8_0 the same without m, q8_f the sums of inputs 0-15 and 16-31 apart, times d_lo
    and d_hi, + m sum(x). Tests."""
    m, k = x.shape
    xb = x.reshape(m, k // QK, QK)
    at = xb.abs().argmax(-1, keepdim=True)  # (m, k/32, 1)
    out = xb.gather(-1, at)
    rest = xb.scatter(-1, at, 0.0)
    dx = rest.abs().amax(-1) / 32767  # (m, k/32), fp32 as the kernel
    inv = torch.where(dx > 0, 1 / dx, torch.zeros_like(dx))
    xq = torch.round(rest * inv[..., None]).double()
    # the inputs as the sums see them: dx xq, and the outlier in fp32
    seen = (dx.double()[..., None] * xq).scatter(-1, at, out.double())
    n = w.rows.shape[0]
    scales, q = _unpack(w.fmt, w.rows.reshape(n, k // QK, QUANT_FORMATS[w.fmt][0]))
    scales = [c.double() for c in scales]  # (n, k/32, 1) each
    d = scales[0]
    if w.fmt == "q8_f":  # d_lo for inputs 0-15, d_hi for 16-31
        d = torch.cat([scales[0], scales[1]], -1).repeat_interleave(QK // 2, dim=-1)
    y = torch.einsum("mbi,nbi->mn", seen, d * q.double())
    if w.fmt in ("q4_1", "q4_f", "q8_f"):
        y = y + torch.einsum("nb,mb->mn", scales[-1][..., 0], xb.sum(-1).double())
    return y


class Sketch(NamedTuple):
    """A 4-bit sketch of a head's panels for `head_argmax` (cpu_rows.c: its layout and bound):
    data (panels, k / 32, SKETCH_BYTES) uint8, bounds (panels, 2, 16) fp32 (rn, sn)."""

    data: torch.Tensor
    bounds: torch.Tensor


SKETCH_BYTES = 2 * PANEL + QK * PANEL // 2
# Rows a greedy step sketches: one. With drafts to check, each row's panels join the pick and
# hybrid ran 5 % slower on Gemma 3 than with the whole head.
SKETCH_ROWS = 1
# Past this share of panels head_argmax computes the whole head: picked panels are read out of
# order, ~1.3x a streamed panel's time, after the pass (0.5 of the head).
SKETCH_WHOLE = 0.4
_SKETCH_CHUNK = 8192  # weight rows dequantized at a time while sketching (21 MB at k = 640)


def pack_sketch(w: Quantized) -> Sketch:
    """The sketch of the head whose blocks are `w` (n, k): per row and 32 inputs d = max |w| /
    7.5 in fp16 and codes c = round(w / d) + 8 in 0..15 (s = d (c - 8)); per row rn = |w - s|
    and sn = |s|, raised over their fp32 rounding; rn -inf on the padding rows."""
    n, k = w.rows.shape[0], w.cols
    pad, blocks = -n % PANEL, k // QK
    rows = torch.empty(n + pad, blocks, 18, dtype=torch.uint8)  # per block: d, 16 code bytes
    rows[n:, :, :2] = 0
    rows[n:, :, 2:] = 8 | (8 << 4)
    bounds = torch.zeros(n + pad, 2)
    bounds[n:, 0] = -torch.inf
    up = 1 + 2e-7 * k  # over the fp32 sums' rounding (k terms)
    for r0 in range(0, n, _SKETCH_CHUNK):
        full = dequantize(Quantized(w.fmt, w.rows[r0 : r0 + _SKETCH_CHUNK])).view(-1, blocks, QK)
        span = slice(r0, r0 + len(full))
        d = (full.abs().amax(-1, keepdim=True) / 7.5).half()
        df = d.float()
        q = torch.where(df == 0, 0.0, full / df).round_().clamp_(-8, 7)
        s = q * df  # exact: a 4-bit integer times an fp16
        rn = torch.linalg.vector_norm((full - s).view(len(full), -1), dim=1)
        bounds[span, 0] = rn * up
        bounds[span, 1] = torch.linalg.vector_norm(s.view(len(full), -1), dim=1) * up
        c = (q + 8).to(torch.uint8)  # (rows, blocks, 32)
        rows[span, :, :2] = d.view(torch.uint8)
        rows[span, :, 2:] = c[..., :16] | (c[..., 16:] << 4)
    # -> per panel and block: the 16 rows' d, then chunk c's byte 2 j + i: row j's inputs 2 c + i
    # (low nibble) and 16 + 2 c + i (high nibble)
    rows = rows.view(-1, PANEL, blocks, 18).transpose(1, 2)  # (P, B, 16 rows, 18)
    scales = rows[..., :2].reshape(*rows.shape[:2], 2 * PANEL)
    codes = rows[..., 2:].reshape(*rows.shape[:3], 8, 2).transpose(2, 3)  # (P, B, c, j, i)
    data = torch.cat([scales, codes.reshape(*rows.shape[:2], -1)], -1).contiguous()
    return Sketch(data, bounds.view(-1, PANEL, 2).transpose(1, 2).contiguous())


def sketch_pass(x: torch.Tensor, sketch: Sketch, wide: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row of x's (m, k) best estimate and upper bound per panel of the sketch (m, panels)
    each (cpu_rows.c); ``wide``: 512-bit products (AVX-512BW; where `has_vnni`), the same bits."""
    x = x.contiguous()
    m, k = x.shape
    panels = sketch.data.shape[0]
    top, upper = torch.empty(m, panels), torch.empty(m, panels)
    _loaded().sketch_pass(
        x.data_ptr(), m, k, sketch.data.data_ptr(), sketch.bounds.data_ptr(), panels,
        top.data_ptr(), upper.data_ptr(), torch.get_num_threads(), int(wide),
    )  # fmt: skip
    return top, upper


def head_argmax(x: torch.Tensor, w: Panels, sketch: Sketch) -> tuple[list[int], float]:
    """Each row's argmax of x @ w.T (x (m, k) fp32; w in a block format), as
    argmax(matmul(x, None, w)) gives it, ties to the first, without computing every logit: the
    sketch's pass bounds every panel's logits; the panel of the best estimate and each panel
    whose bound reaches that panel's best logit are computed exactly (cpu_rows.c); past
    SKETCH_WHOLE of them, the whole head. Also the share of panels the bound left."""
    lib = _loaded()
    x = x.contiguous()
    m = x.shape[0]
    panels = sketch.data.shape[0]
    top, upper = sketch_pass(x, sketch, has_vnni())
    first = top.argmax(1).to(torch.int32)  # (m,): each row's panel of the best estimate
    seen = _call(lib, x, w, first).view(m, m, PANEL)[torch.arange(m), torch.arange(m)]
    cols = first[:, None].long() * PANEL + torch.arange(PANEL)
    floor = seen.masked_fill(cols >= w.n, -torch.inf).amax(1)  # (m,) a logit each row reaches
    pick = (upper >= floor[:, None]).any(0).nonzero()[:, 0].to(torch.int32)
    share = len(pick) / panels
    if share > SKETCH_WHOLE:
        return argmax(_call(lib, x, w)), share
    y = _call(lib, x, w, pick)
    ids = (pick[:, None].long() * PANEL + torch.arange(PANEL)).view(-1)
    y[:, ids >= w.n] = -torch.inf
    return ids[argmax(y)].tolist(), share


def matmul(
    x: torch.Tensor, weight: torch.Tensor | None, panels: Panels, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x @ weight.T (+ bias) for fp32 CPU x (..., k); panels = pack(weight) or pack_quant of
    the weight's blocks. Past panels.max_rows rows F.linear on `weight`; weight None: the kernel
    for every row count. Needs available()."""
    rows = x.numel() // x.shape[-1]
    if weight is not None and rows > panels.max_rows:
        return F.linear(x, weight, bias)
    y = _call(_loaded(), x.reshape(rows, x.shape[-1]).contiguous(), panels)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], panels.n)
