"""The end of turn heard in the speech (audio/prosody.py): features on odd input, cost, and the
committed classifier on real synthesized speech of sentences it was not trained on."""

import time

import numpy as np
import pytest

from dllm_voice.audio.prosody import FEATURE_NAMES, TurnEndAudio, features
from testkit.speech import speech_pcm


def test_features_are_finite_on_silence_noise_and_short_input():
    rng = np.random.default_rng(0)
    for pcm in (
        np.zeros(16000, np.int16),
        (rng.standard_normal(24000) * 3000).astype(np.int16),
        np.zeros(100, np.int16),
        np.zeros(0, np.int16),
    ):
        f = features(pcm)
        assert f.shape == (len(FEATURE_NAMES),) and np.isfinite(f).all()


def test_score_costs_a_few_ms():
    model = TurnEndAudio()
    tone = (np.sin(np.arange(48000) * 2 * np.pi * 150 / 16000) * 8000).astype(np.int16)
    model.score(tone)
    t0 = time.perf_counter()
    for _ in range(20):
        p = model.score(tone)
    assert 0.0 <= p <= 1.0
    assert (time.perf_counter() - t0) / 20 < 0.01  # 1-2 ms on 2 Zen 1 cores


# bench/voice.py's paused set: never in the training sentences.
SENTENCES = [
    ("What is the capital of", "Germany?"),
    ("How far is the", "sun from the Earth?"),
    ("Tell me a fun fact about", "the moon."),
    ("What should I cook for", "dinner tonight?"),
    ("Could you explain why the", "sky is blue?"),
    ("How long should I", "boil an egg?"),
]


@pytest.mark.slow
@pytest.mark.parametrize("voice", ["piper", "espeak:en-us"])
def test_complete_sentences_sound_more_final_than_their_first_part(voice):
    model = TurnEndAudio()
    done = [model.score(speech_pcm(f"{a} {b}", voice)) for a, b in SENTENCES]
    cut = [model.score(speech_pcm(a, voice)) for a, _ in SENTENCES]
    pairs = [d > c for d, c in zip(done, cut, strict=True)]
    # 6 and 5 of 6 on the training run's clips ("Tell me a fun fact about" sounds final in
    # espeak-ng): the classifier catches about half of all cuts, so no single pair is sure.
    assert sum(pairs) >= 4, (done, cut)
