"""G.711 against the standard's fixed points, and the Realtime formats' streaming conversions."""

from __future__ import annotations

import numpy as np
import pytest

from dllm_voice.app.server.realtime.formats import AudioFormat, FormatError, to_client, to_pipeline
from dllm_voice.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode


def tone(n: int, rate: int, level: float = 20000.0) -> np.ndarray:
    t = np.arange(n) / rate
    return (level * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


def test_the_laws_fixed_points() -> None:
    ulaw = ulaw_decode(bytes([0xFF, 0x7F, 0x00, 0x80]))
    assert list(ulaw) == [0, 0, -32124, 32124]
    assert ulaw_encode(np.array([0, 32767, -32768], np.int16)) == bytes([0xFF, 0x80, 0x00])
    alaw = alaw_decode(bytes([0xD5, 0x55, 0xAA, 0x2A]))
    assert list(alaw) == [8, -8, 32256, -32256]
    assert alaw_encode(np.array([0, 32767, -32768], np.int16)) == bytes([0xD5, 0xAA, 0x2A])


@pytest.mark.parametrize(
    ("encode", "decode"), [(ulaw_encode, ulaw_decode), (alaw_encode, alaw_decode)]
)
def test_a_tone_survives_at_telephone_quality(encode, decode) -> None:  # type: ignore[no-untyped-def]
    x = tone(8000, 8000)
    err = decode(encode(x)).astype(float) - x
    snr = 10 * np.log10(np.mean(x.astype(float) ** 2) / np.mean(err**2))
    assert snr > 35  # G.711's 8 bits give ~38 dB on a loud tone
    codes = bytes(range(256))
    assert (decode(encode(decode(codes))) == decode(codes)).all()  # every code decodes and back


def test_formats_by_ga_and_beta_names() -> None:
    assert AudioFormat.parse({"type": "audio/pcm", "rate": 24000}) == AudioFormat.parse("pcm16")
    assert AudioFormat.parse("g711_ulaw").rate_hz == 8000
    assert AudioFormat.parse({"type": "audio/pcma"}).as_json() == {"type": "audio/pcma"}
    for bad in ({"type": "audio/pcm", "rate": 16000}, "mp3", None, {"type": 3}):
        with pytest.raises(FormatError):
            AudioFormat.parse(bad)


@pytest.mark.parametrize("fmt", ["pcm16", "g711_ulaw", "g711_alaw"])
def test_chunked_conversion_equals_whole(fmt: str) -> None:
    """Odd-sized chunks (half a PCM16 sample included) convert as the whole stream does."""
    f = AudioFormat.parse(fmt)
    x = f.encode(tone(f.rate_hz, f.rate_hz))
    whole = to_pipeline(f, 16000).feed(x)
    stream, conv = b"", to_pipeline(f, 16000)
    for i in range(0, len(x), 777):
        stream += conv.feed(x[i : i + 777])
    assert stream == whole
    assert abs(len(whole) // 2 - 16000) < 40  # one second at 16 kHz, less the filter's delay
    out = to_client(f, 22050).feed(tone(22050, 22050).tobytes())
    assert abs(len(out) // f.bytes_per_sample - f.rate_hz) < 40
