"""GGUF block types as the CPU kernel's block formats (kernels/cpu_rows.py), exactly.

The other block types of llama.cpp's Q4_K_M / Q5_K_M / Q6_K files reach the kernel through
`from_gguf`, each converted exactly (the same weights as gguf.quants.dequantize): Q4_0 to Q4_1
(m = -8 d), Q5_0 to Q8_0 (codes q - 16), and the K-quants, whose 256-input super-blocks scale
each 32 (Q6_K: 16) inputs by an fp16 times a 6-bit (8-bit) integer, to two formats of 32-input
blocks with those products as fp32 scales: "q4_f" (Q4_K: d, m, Q4_1's nibbles; 0.75 bytes a
weight) and "q8_f" (Q5_K, Q6_K, Q5_1: d for inputs 0-15, d for 16-31, m, int8 codes; 1.375
bytes). d q stays exact in fp32 (at most 24 significant bits), so their expansion, a single
fma, keeps the kernel's exactness. `fuse` stacks the q|k|v and gate|up matrices, in q8_f where
their formats differ (Q4_K_M mixes Q4_K and Q6_K). q4_f takes the integer products with AVX-512
VNNI (Q4_1's, its scales in fp32), the fp32 ones elsewhere; q8_f the integer ones everywhere
(its two halves' int32 sums scaled by d_lo and d_hi, + m sum(x); vpdpwssd with VNNI, vpmaddwd
on AVX2): Gemma 3 270M's 640 x 2048 down product (Q6_K) 0.19 ms a row instead of 0.30 on Zen 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from dllm_voice.kernels.cpu_rows import QK, QUANT_FORMATS, Quantized, _unpack

if TYPE_CHECKING:  # gguf takes ~0.4 s to import; the loader has it imported already
    from gguf import GGMLQuantizationType


def _fp16(b: torch.Tensor) -> torch.Tensor:
    """Bytes (..., 2) of fp16 values as fp32 (..., 1)."""
    return b.contiguous().view(torch.float16).float()


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """A tensor (..., c) as its bytes (..., c * itemsize)."""
    return t.contiguous().view(torch.uint8)


def _q8_f(q: torch.Tensor, d_lo: torch.Tensor, d_hi: torch.Tensor, m: torch.Tensor) -> Quantized:
    """q8_f rows from codes (n, k / 32, 32) (values in int8's range) and fp32 scales
    (n, k / 32, 1)."""
    n = q.shape[0]
    scales = torch.cat([d_lo, d_hi, m], dim=-1).float()
    rows = torch.cat([_bytes(scales), _bytes(q.to(torch.int8))], dim=-1)
    return Quantized("q8_f", rows.reshape(n, -1))


def _high_bits(qh: torch.Tensor) -> torch.Tensor:
    """Bits (..., 8 c) of bytes qh (..., c), bit i of byte j at 8 j + i: the fifth bit of Q5_0 /
    Q5_1 codes (their uint32 qh, little-endian)."""
    bits = (qh[..., None] >> torch.arange(8, dtype=torch.uint8)) & 1
    return bits.reshape(*qh.shape[:-1], -1)


def _k_scales(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 6-bit scales and mins (..., 8) of Q4_K / Q5_K's 12 bytes (..., 12): bytes 0-3 hold
    scales 0-3 and the top bits of 4-7, bytes 4-7 mins 0-3 and the top bits of mins 4-7, bytes
    8-11 the low nibbles of scales 4-7 (low) and mins 4-7 (high); gguf-py's get_scale_min."""
    s = s.reshape(*s.shape[:-1], 3, 4)
    d, m, md = s[..., 0, :], s[..., 1, :], s[..., 2, :]
    sc = torch.cat([d & 63, (md & 15) | ((d >> 2) & 48)], dim=-1)
    mn = torch.cat([m & 63, (md >> 4) | ((m >> 2) & 48)], dim=-1)
    return sc.float(), mn.float()


def _nibble_rows(blocks: torch.Tensor, at: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K / Q5_K super-blocks (n, b, bytes): their per-32 scales d sc and offsets -dmin m,
    fp32 (n, b, 8, 1) (exact: an fp16 times a 6-bit integer), and the low 4 bits of their codes
    (n, b, 8, 32) from the 128 bytes at `at`: sub-blocks 2 j and 2 j + 1 are the low and the high
    nibbles of bytes 32 j..32 j + 31."""
    n, b, _ = blocks.shape
    d, dmin = _fp16(blocks[..., 0:2]), _fp16(blocks[..., 2:4])
    sc, mn = _k_scales(blocks[..., 4:16])
    qs = blocks[..., at : at + 128].reshape(n, b, 4, 1, 32)
    low = torch.cat([qs & 15, qs >> 4], dim=3).reshape(n, b, 8, 32)
    return (d * sc)[..., None], (-(dmin * mn))[..., None], low


# GGUF block types by name: bytes of a block and inputs per block (gguf's GGML_QUANT_SIZES).
_GGUF_BLOCKS = {
    "Q4_0": (18, 32), "Q4_1": (20, 32), "Q5_0": (22, 32), "Q5_1": (24, 32), "Q8_0": (34, 32),
    "Q4_K": (144, 256), "Q5_K": (176, 256), "Q6_K": (210, 256),
}  # fmt: skip


def from_gguf(qtype: GGMLQuantizationType, rows: torch.Tensor) -> Quantized | None:
    """The kernel's blocks for a GGUF tensor's rows (uint8 (n, bytes per row), as the file holds
    them), each giving exactly the weights gguf.quants.dequantize gives; None for types the
    kernel does not take (F32, F16, BF16, Q2_K, Q3_K, IQ*, ...). Q4_1, Q8_0 stay as they are;
    Q4_0 (w = d (q - 8)) becomes q4_1 with m = -8 d (exact in fp16; q8_f where |d| > 8188 would
    overflow it), Q5_0 (w = d (q - 16)) q8_0 with codes q - 16; Q4_K q4_f; Q5_K, Q6_K (its
    scale per 16 inputs: d_lo, d_hi) and Q5_1 q8_f."""
    name = getattr(qtype, "name", None)
    if name not in _GGUF_BLOCKS:
        return None
    rows = torch.as_tensor(rows)
    if name in ("Q4_1", "Q8_0"):
        return Quantized(name.lower(), rows)
    size, _ = _GGUF_BLOCKS[name]
    n = rows.shape[0]
    blocks = rows.reshape(n, -1, size)
    b = blocks.shape[1]
    if name == "Q4_0":
        d = _fp16(blocks[..., :2])
        m = (-8 * d).half()
        if torch.isfinite(m).all():
            rows = torch.cat([blocks[..., :2], _bytes(m), blocks[..., 2:]], dim=-1)
            return Quantized("q4_1", rows.reshape(n, -1))
        qs = blocks[..., 2:]
        q = torch.cat([qs & 15, qs >> 4], dim=-1).to(torch.int8) - 8
        return _q8_f(q, d, d, torch.full_like(d, -0.0))
    if name in ("Q5_0", "Q5_1"):
        at = 2 if name == "Q5_0" else 4
        qs = blocks[..., at + 4 :]
        q = torch.cat([qs & 15, qs >> 4], dim=-1) | (_high_bits(blocks[..., at : at + 4]) << 4)
        if name == "Q5_0":  # w = d (q - 16): int8 codes q - 16
            codes = _bytes(q.to(torch.int8) - 16)
            return Quantized("q8_0", torch.cat([blocks[..., :2], codes], -1).reshape(n, -1))
        d = _fp16(blocks[..., :2])
        return _q8_f(q, d, d, _fp16(blocks[..., 2:4]))
    if name == "Q4_K":
        d, m, low = _nibble_rows(blocks, 16)
        nibbles = low[..., :16] | (low[..., 16:] << 4)  # Q4_1's order: i low, i + 16 high
        rows = torch.cat([_bytes(d), _bytes(m), nibbles], dim=-1)  # (n, b, 8, 24)
        return Quantized("q4_f", rows.reshape(n, -1))
    if name == "Q5_K":  # bit 4 of sub-block i's codes: bit i of the 32 bytes of qh
        d, m, low = _nibble_rows(blocks, 48)
        high = (blocks[..., None, 16:48] >> torch.arange(8, dtype=torch.uint8)[:, None]) & 1
        q = (low | (high << 4)).reshape(n, b * 8, QK)
        d = d.reshape(n, b * 8, 1)
        return _q8_f(q, d, d, m.reshape(n, b * 8, 1))
    # Q6_K: ql (128), qh (64), int8 scales (16), fp16 d; in each half of 128 inputs the low
    # nibbles of its 64 ql bytes, then their high ones; bits 4-5 from qh's bit pairs 0-3.
    ql = blocks[..., :128].reshape(n, b, 2, 1, 64)
    ql = torch.cat([ql & 15, ql >> 4], dim=3).reshape(n, b, 8, 32)
    qh = blocks[..., 128:192].reshape(n, b, 2, 1, 32)
    qh = (qh >> torch.tensor([0, 2, 4, 6], dtype=torch.uint8)[:, None]) & 3
    q = (ql | (qh.reshape(n, b, 8, 32) << 4)).to(torch.int8) - 32
    ds = _fp16(blocks[..., 208:210]) * blocks[..., 192:208].contiguous().view(torch.int8).float()
    ds = ds.reshape(n, b * 8, 2, 1)  # exact: an fp16 times an int8
    none = torch.full_like(ds[:, :, 0], -0.0)
    return _q8_f(q.reshape(n, b * 8, QK), ds[:, :, 0], ds[:, :, 1], none)


def _as_q8_f(w: Quantized) -> Quantized:
    """w in q8_f, the same weights bit for bit (every format's d q + m is exact in it; m = -0
    where a format has none, so that d q + m keeps d q's sign of zero)."""
    if w.fmt == "q8_f":
        return w
    n = w.rows.shape[0]
    scales, q = _unpack(w.fmt, w.rows.reshape(n, -1, QUANT_FORMATS[w.fmt][0]))
    d = scales[0]
    m = scales[1] if len(scales) > 1 else torch.full_like(d, -0.0)
    return _q8_f(q, d, d, m)


def fuse(parts: Sequence[Quantized]) -> Quantized:
    """The rows of several matrices of k inputs stacked into one (fused q|k|v, gate|up): rows
    concatenated where every part has the same format, else each part in q8_f first (Q4_K_M
    files mix Q4_K and Q6_K in them)."""
    if len({p.cols for p in parts}) != 1:
        raise ValueError(f"parts of different widths: {[p.cols for p in parts]}")
    if len({p.fmt for p in parts}) == 1:
        return Quantized(parts[0].fmt, torch.cat([p.rows for p in parts]))
    return Quantized("q8_f", torch.cat([_as_q8_f(p).rows for p in parts]))
