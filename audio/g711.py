"""G.711 μ-law and A-law (ITU-T G.711), the 8 kHz telephony codecs, as numpy lookup tables.

Python's own `audioop` is gone since 3.13, so the two laws are written here from the standard's
segment tables: 8-bit codes, decoded through a 256-entry table and encoded through one entry
per int16 value (64 KiB each, built once on first use).
"""

from functools import cache

import numpy as np
import numpy.typing as npt

from dllm_voice.audio.resample import PCM16

Codes = npt.NDArray[np.uint8]

_ULAW_BIAS = 0x84  # added before the segment search so segment 0 starts at 0
_ULAW_CLIP = 32635  # 0x7FFF minus the bias: the largest magnitude μ-law codes


def _segment(magnitude: npt.NDArray[np.int64], first_top: int) -> npt.NDArray[np.int64]:
    """The segment (0-7) of each magnitude: segment s ends below first_top << s."""
    tops = first_top << np.arange(8)
    return np.minimum(np.searchsorted(tops, magnitude, side="right"), 7)


@cache
def _ulaw_tables() -> tuple[PCM16, Codes]:
    codes = np.arange(256)
    inv = ~codes & 0xFF
    exponent, mantissa = (inv >> 4) & 7, inv & 0x0F
    magnitude = (((mantissa << 3) + _ULAW_BIAS) << exponent) - _ULAW_BIAS
    decode = np.where(inv & 0x80, -magnitude, magnitude).astype(np.int16)

    x = np.arange(-32768, 32768, dtype=np.int64)
    sign = np.where(x < 0, 0x80, 0)
    biased = np.minimum(np.abs(x), _ULAW_CLIP) + _ULAW_BIAS
    exp = _segment(biased, 0x100)
    mant = (biased >> (exp + 3)) & 0x0F
    encode = (~(sign | (exp << 4) | mant) & 0xFF).astype(np.uint8)
    return decode, encode


@cache
def _alaw_tables() -> tuple[PCM16, Codes]:
    codes = np.arange(256) ^ 0x55  # every other bit is inverted on the line
    seg, quant = (codes >> 4) & 7, codes & 0x0F
    magnitude = np.where(
        seg == 0, (quant << 4) + 8, ((quant << 4) + 0x108) << np.maximum(seg - 1, 0)
    )
    decode = np.where(codes & 0x80, magnitude, -magnitude).astype(np.int16)

    x = np.arange(-32768, 32768, dtype=np.int64) >> 3  # A-law codes 13 bits
    positive = x >= 0
    magnitude13 = np.where(positive, x, -x - 1)
    seg13 = _segment(magnitude13, 0x20)
    step = np.where(seg13 < 2, 1, seg13)
    code = (seg13 << 4) | ((magnitude13 >> step) & 0x0F)
    encode = (code ^ np.where(positive, 0xD5, 0x55)).astype(np.uint8)
    return decode, encode


def ulaw_decode(data: bytes) -> PCM16:
    return _ulaw_tables()[0][np.frombuffer(data, dtype=np.uint8)]


def ulaw_encode(pcm: PCM16) -> bytes:
    return bytes(_ulaw_tables()[1][np.asarray(pcm, dtype=np.int16).astype(np.int64) + 32768])


def alaw_decode(data: bytes) -> PCM16:
    return _alaw_tables()[0][np.frombuffer(data, dtype=np.uint8)]


def alaw_encode(pcm: PCM16) -> bytes:
    return bytes(_alaw_tables()[1][np.asarray(pcm, dtype=np.int16).astype(np.int64) + 32768])
