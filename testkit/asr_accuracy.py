"""Word error rate, and the final the pipeline's streaming path makes of a spoken clip.

Shared by tests/audio/test_asr_accuracy.py (the streaming final against one whole-utterance
pass) and bench/speech.py (the final's reuse rules, long turns).
"""

import numpy as np

from dllm_voice.audio.asr import WhisperASR
from dllm_voice.audio.config import ASRConfig, VADConfig
from dllm_voice.audio.transcriber import StreamingTranscriber
from dllm_voice.audio.vad import Endpointer
from testkit.speech import frames, speech_pcm


def norm_words(text: str) -> list[str]:
    words = ("".join(c for c in w.lower() if c.isalnum()) for w in text.replace("-", " ").split())
    return [w for w in words if w]


def word_errors(ref: str, hyp: str) -> int:
    """Word-level edit distance (substitutions + insertions + deletions)."""
    r, h = norm_words(ref), norm_words(hyp)
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        diag, d[0] = d[0], i
        for j in range(1, len(h) + 1):
            diag, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, diag + (r[i - 1] != h[j - 1]))
    return d[len(h)]


def wer(pairs: list[tuple[str, str]]) -> float:
    """Word error rate of (reference, hypothesis) pairs."""
    return sum(word_errors(r, h) for r, h in pairs) / sum(len(norm_words(r)) for r, _ in pairs)


def clip(text: str, voice: str) -> np.ndarray:
    """16 kHz int16: 0.3 s silence, the question, 0.9 s silence (enough for speech_end)."""
    name, _, path = voice.partition("/")
    if path != "48k":
        return speech_pcm(text, name, lead_ms=300, tail_ms=900)
    # The voice's own band (espeak-ng: 11 kHz) reaches the page's 3:1 mean, which folds it.
    pcm48 = speech_pcm(text, name, rate_hz=48000, lead_ms=300, tail_ms=900)
    n = len(pcm48) // 3
    return pcm48[: 3 * n].astype(np.float64).reshape(n, 3).mean(axis=1).astype(np.int16)


def streaming_final(
    asr: WhisperASR, pcm: np.ndarray, cfg: ASRConfig, vad: VADConfig | None = None, refiner=None
) -> str:
    """The final as the pipeline makes it: feed after the VAD, partial at a pause, a segment
    closed at a long turn's cut, final at the end."""
    ep = Endpointer(vad or VADConfig())
    st = StreamingTranscriber(asr, cfg, refiner)
    for f in frames(pcm):
        was_speaking = ep.in_speech
        events = ep.process(f)
        if was_speaking and ep.in_speech:
            st.feed(f)
        for e in events:
            if e.kind == "speech_start":
                st.feed(ep.speech_audio())
            elif e.kind == "pause":
                st.partial()
            elif e.kind == "segment":
                st.close_segment()
            elif e.kind == "speech_end":
                return st.final().text
    raise AssertionError("no speech_end: the clip needs more trailing silence")
