"""Shared fixtures for audio tests: the real models, loaded once per session, and speech clips."""

import numpy as np
import pytest

from dllm_voice.audio.asr import WhisperASR
from dllm_voice.audio.config import ASRConfig, TTSConfig
from dllm_voice.audio.tts import PiperTTS
from testkit.speech import speech_pcm

FRANCE = "What is the capital of France?"


@pytest.fixture(scope="session")
def asr() -> WhisperASR:
    return WhisperASR(ASRConfig())


@pytest.fixture(scope="session")
def tts() -> PiperTTS:
    return PiperTTS(TTSConfig())


@pytest.fixture(scope="session")
def france_piper() -> np.ndarray:
    """16 kHz int16: 0.3 s silence, the question (Piper joe voice), 0.8 s silence."""
    return speech_pcm(FRANCE, "piper", lead_ms=300, tail_ms=800)


@pytest.fixture(scope="session")
def france_espeak() -> np.ndarray:
    """The same question in espeak-ng's voice (a different speaker and synthesizer)."""
    return speech_pcm(FRANCE, "espeak", lead_ms=300, tail_ms=800)
