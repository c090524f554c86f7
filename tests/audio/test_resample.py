"""Resampling, down-mixing and PCM sanitizing: accuracy, streaming equivalence, bad input."""

import numpy as np
import pytest

from dllm_voice.audio.errors import AudioFormatError
from dllm_voice.audio.resample import Resampler, resample, to_float32, to_int16, to_mono


def tone(freq: float, rate: int, seconds: float = 1.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.mark.parametrize(
    "src,dst", [(44100, 16000), (48000, 16000), (22050, 16000), (16000, 48000), (8000, 16000)]
)
def test_tone_survives_rate_change(src: int, dst: int) -> None:
    y = resample(tone(440.0, src), src, dst)
    assert len(y) == int(np.ceil(src * dst / src))
    ref = tone(440.0, dst, len(y) / dst)
    assert np.abs(y[500:-500] - ref[500:-500]).max() < 1e-3


def test_round_trip_16k_48k_16k() -> None:
    rng = np.random.default_rng(0)
    # Band-limited noise (below 7 kHz) must come back unchanged.
    x = resample(rng.standard_normal(48000).astype(np.float32) * 0.1, 48000, 14000)
    x = resample(x, 14000, 16000)
    back = resample(resample(x, 16000, 48000), 48000, 16000)
    assert len(back) == len(x)
    err = np.sqrt(np.mean((back[200:-200] - x[200:-200]) ** 2) / np.mean(x**2))
    assert err < 0.01


def test_int16_round_trip_keeps_dtype() -> None:
    x = to_int16(tone(300.0, 16000))
    y = resample(resample(x, 16000, 22050), 22050, 16000)
    assert y.dtype == np.int16
    assert np.abs(y[200:-200].astype(int) - x[200:-200]).max() < 200


def test_aliasing_removed_when_downsampling() -> None:
    y = resample(tone(10000.0, 48000), 48000, 16000)  # 10 kHz is above the 8 kHz Nyquist
    assert np.sqrt(np.mean(y[300:-300] ** 2)) < 1e-3


def test_streaming_equals_one_shot() -> None:
    x = tone(1000.0, 44100, 0.7)
    r = Resampler(44100, 16000)
    parts = [r.process(x[i : i + 777]) for i in range(0, len(x), 777)] + [r.flush()]
    assert np.array_equal(np.concatenate(parts), resample(x, 44100, 16000))


def test_to_mono_interleaved_and_frames() -> None:
    stereo = np.stack([np.full(10, 1000, np.int16), np.full(10, 3000, np.int16)], axis=1)
    assert np.array_equal(to_mono(stereo), np.full(10, 2000, np.int16))
    assert np.array_equal(to_mono(stereo.reshape(-1), channels=2), np.full(10, 2000, np.int16))
    assert len(to_mono(np.zeros(7, np.int16), channels=2)) == 3  # partial frame dropped


def test_bad_floats_are_sanitized() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 2.0, -3.0, 0.5], np.float32)
    assert to_int16(x).tolist() == [0, 32767, -32767, 32767, -32767, 16383]
    f = to_float32(x)
    assert np.isfinite(f).all() and np.abs(f).max() <= 1.0


def test_empty_and_wrong_input() -> None:
    assert len(resample(np.zeros(0, np.int16), 48000, 16000)) == 0
    with pytest.raises(AudioFormatError):
        resample(np.zeros((10, 2), np.int16), 48000, 16000)
    with pytest.raises(AudioFormatError):
        Resampler(0, 16000)
    with pytest.raises(AudioFormatError):
        to_int16(np.array(["a"]))
