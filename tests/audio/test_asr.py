"""Streaming Whisper: real speech through VAD + ASR, no words from non-speech, bad input."""

import numpy as np
import pytest

from audio.asr import StreamingTranscriber, agreed_prefix, cut_trailing_repeat
from audio.config import ASRConfig, VADConfig
from audio.errors import AudioFormatError
from audio.vad import Endpointer
from tests.speech import frames


def words(text: str) -> list[str]:
    return ["".join(c for c in w.lower() if c.isalnum()) for w in text.split()]


@pytest.mark.parametrize("voice", ["france_piper", "france_espeak"])
def test_vad_then_asr_gives_the_words(voice: str, asr, request: pytest.FixtureRequest) -> None:
    pcm = request.getfixturevalue(voice)
    ep = Endpointer(VADConfig())
    utterance = None
    for f in frames(pcm):
        for e in ep.process(f):
            if e.kind == "speech_end":
                utterance = ep.speech_audio()
    assert utterance is not None
    t = asr.transcribe(utterance, final=True)
    assert t.final and t.stable == t.text
    got = words(t.text)
    assert {"what", "capital", "france"} <= set(got), t.text


def test_non_speech_gives_no_transcript(asr) -> None:
    rng = np.random.default_rng(0)
    t = np.arange(16000 * 2) / 16000
    cases = {
        "silence": np.zeros(32000, np.int16),
        "white noise": (rng.standard_normal(32000) * 0.1 * 32767).astype(np.int16),
        "440 Hz tone": (0.3 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16),
    }
    for name, pcm in cases.items():
        assert asr.transcribe(pcm, final=True).text == "", name


def test_streaming_partials_and_fast_final(asr, france_piper: np.ndarray) -> None:
    st = StreamingTranscriber(asr, ASRConfig(partial_interval_ms=700))
    partials = []
    speech_end = len(france_piper) - 16 * 600  # the last 600 ms are silence
    for f in frames(france_piper[:speech_end]):
        st.feed(f)
        if st.partial_due():
            partials.append(st.partial())
    assert len(partials) >= 2
    for p in partials:
        assert not p.final and p.text.startswith(p.stable)
    assert partials[-1].stable  # consecutive passes agreed on some words
    partials.append(st.partial())  # the app runs one at the VAD pause
    for f in frames(france_piper[speech_end:]):
        st.feed(f)
    final = st.final()
    assert final.final and final.text == partials[-1].text
    assert final.compute_ms < 50  # only silence came after the last pass: no new pass
    st.reset()
    assert st.final().text == ""


def test_final_reuses_the_last_pass_over_trailing_noise(asr, france_piper) -> None:
    st = StreamingTranscriber(asr, ASRConfig())
    speech = france_piper[: len(france_piper) - 16 * 600]
    st.feed(speech)
    text = st.partial().text
    noise = np.random.default_rng(0).standard_normal(16 * 600) * 0.03 * 32767
    st.feed(noise.astype(np.int16))  # a fan, not a word: webrtcvad alone calls this voice
    final = st.final()
    assert final.text == text and final.compute_ms < 100


def test_final_reruns_when_speech_came_after_the_last_pass(asr, france_piper) -> None:
    st = StreamingTranscriber(asr, ASRConfig())
    half = len(france_piper) // 2
    st.feed(france_piper[:half])
    first = st.partial()
    st.feed(france_piper[half:])
    final = st.final()
    assert len(final.text) > len(first.text) and "france" in words(final.text)


def test_helpers() -> None:
    assert agreed_prefix("What is the", "what is a cat") == "what is"
    assert agreed_prefix("", "hello") == ""
    assert cut_trailing_repeat([5, 6, 7, 8, 5, 6]) == [5, 6, 7, 8]
    assert cut_trailing_repeat([1, 2, 3, 4, 5, 6, 3, 4, 5, 6]) == [1, 2, 3, 4, 5, 6]
    assert cut_trailing_repeat([1, 2, 3, 3]) == [1, 2, 3, 3]


def test_bad_input(asr) -> None:
    assert asr.transcribe(np.zeros(0, np.int16), final=True).text == ""
    assert asr.transcribe(np.full(8000, np.nan, np.float32), final=True).text == ""
    with pytest.raises(AudioFormatError):
        asr.transcribe(np.zeros((100, 2), np.int16), final=True)
    st = StreamingTranscriber(asr, ASRConfig())
    st.feed(np.zeros(0, np.int16))
    assert not st.partial_due()


def test_long_utterance_goes_through_chunked_transcribe(asr) -> None:
    from tests.speech import speech_pcm

    text = (
        "The quick brown fox jumps over the lazy dog. She sells sea shells by the sea shore. "
        "Peter Piper picked a peck of pickled peppers. How much wood would a woodchuck chuck. "
        "The end."
    )
    pcm = speech_pcm(text, "piper", tail_ms=300)
    assert len(pcm) > 9.5 * 16000  # beyond the 10 s window: the 30 s path
    got = set(words(asr.transcribe(pcm, final=True).text))
    assert {"fox", "dog", "peter", "wood"} <= got
