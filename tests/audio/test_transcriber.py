"""One turn's streaming transcription: partials, a final that reuses the last pass, long turns
in segments, a short last segment heard again, and the Refiner's whole passes."""

from concurrent.futures import Future

import numpy as np
import pytest

from dllm_voice.audio.asr import Transcript, sound_goes_on
from dllm_voice.audio.config import ASRConfig, VADConfig
from dllm_voice.audio.transcriber import StreamingTranscriber
from dllm_voice.audio.vad import Endpointer
from testkit.speech import frames, speech_pcm


def words(text: str) -> list[str]:
    return ["".join(c for c in w.lower() if c.isalnum()) for w in text.split()]


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


def test_final_reruns_when_the_last_pass_ended_inside_the_last_word(asr, france_piper) -> None:
    # A pass that stops 20 ms into the "s" of "France" reads "friend?"; what follows it is no
    # voice to the VADs (a fricative, then silence), yet it is the rest of the word.
    st = StreamingTranscriber(asr, ASRConfig())
    cut = len(france_piper) - 16 * (800 + 270)
    st.feed(france_piper[:cut])
    st.partial()
    tail = france_piper[cut:]
    assert not asr.has_speech(tail) and sound_goes_on(tail, ASRConfig().min_rms_dbfs)
    st.feed(tail)
    assert "france" in words(st.final().text)


class WordsASR:
    """Fake Whisper: a run of equal nonzero samples is the word "w<value>", zeros are silence."""

    def transcribe(
        self, pcm16k: np.ndarray, *, final: bool, prev=None, listener=False
    ) -> Transcript:
        values = pcm16k[np.flatnonzero(np.diff(pcm16k, prepend=0))]
        text = " ".join(f"w{v}" for v in values if v)
        return Transcript(text, text if final else "", final, len(pcm16k) / 16, 1.0)

    def has_speech(self, pcm16k: np.ndarray) -> bool:
        return bool(np.any(pcm16k))


def test_segments_keep_every_word_and_bound_the_audio() -> None:
    # 300 s of words (0.3 s each, 60 ms gaps) fed at once, a segment closed every 10 s as the
    # VAD would: the final has every word once, in order; a pass never sees more than a segment.
    st = StreamingTranscriber(WordsASR(), ASRConfig())
    word = np.concatenate([np.ones(4800, np.int16), np.zeros(960, np.int16)])
    n_words = 300 * 16000 // len(word)
    pcm = np.concatenate([word * (1 + k % 30000) for k in range(n_words)])
    longest = 0
    for i, f in enumerate(frames(pcm)):
        st.feed(f)
        longest = max(longest, len(st.audio()))
        if (i + 1) % 333 == 0:  # a segment every ~10 s
            closed = st.close_segment()
            assert closed.stable == closed.text and not closed.final
            assert not st.audio()[:1].any()  # the cut landed in a gap between words
        elif st.partial_due():
            p = st.partial()
            assert p.text.startswith(p.stable)
    final = st.final()
    assert final.text.split() == [f"w{1 + k}" for k in range(n_words)]
    assert longest <= 12.2 * 16000  # one segment, the overlap (<= 1.6 s) and 0.6 s carried
    assert 299_000 <= final.audio_ms <= 300_000


def test_partials_of_a_long_turn_see_only_the_current_segment() -> None:
    st = StreamingTranscriber(WordsASR(), ASRConfig())
    st.feed(np.concatenate([np.full(8000, 7, np.int16), np.zeros(4000, np.int16)]))
    assert st.close_segment().text == "w7"  # cut in the gap; w7 is heard again (overlap)
    assert len(st.audio()) <= 12000
    st.feed(np.full(8000, 9, np.int16))
    p = st.partial()
    assert p.text == "w7 w9" and p.stable == "w7" and p.audio_ms == 1250.0
    st.feed(np.zeros(4800, np.int16))
    final = st.final()  # only silence after the last pass: reused
    assert final.text == "w7 w9" and final.final
    assert st.close_segment().text == "w7 w9"  # nothing new to close: the same text
    st.reset()
    assert st.final().text == ""


def test_long_turn_through_vad_segments_loses_no_speech(asr) -> None:
    sentences = (
        "The quick brown fox jumps over the lazy dog.",
        "She sells sea shells by the sea shore.",
        "Peter Piper picked a peck of pickled peppers.",
        "How much wood would a woodchuck chuck.",
    )
    gap = np.zeros(1600, np.int16)  # 100 ms: shorter than a pause, one continuous turn
    pcm = np.concatenate(
        [np.zeros(4800, np.int16)]
        + [np.concatenate([speech_pcm(s, "piper"), gap]) for s in sentences]
        + [np.zeros(16000, np.int16)]
    )
    ep = Endpointer(VADConfig(max_turn_s=4.0))
    st = StreamingTranscriber(asr, ASRConfig())
    kinds, longest, final = [], 0, None
    for f in frames(pcm):
        was_speaking = ep.in_speech
        events = ep.process(f)
        if was_speaking and ep.in_speech:
            st.feed(f)
        for e in events:
            kinds.append(e.kind)
            if e.kind == "speech_start":
                st.feed(ep.speech_audio())
            elif e.kind == "segment":
                st.close_segment()
            elif e.kind == "pause":
                st.partial()
            elif e.kind == "speech_end":
                final = st.final()
        longest = max(longest, len(st.audio()))
    assert kinds.count("speech_start") == kinds.count("speech_end") == 1
    assert kinds.count("segment") >= 2 and final is not None
    assert longest <= 4.9 * 16000  # 4 s, the pre-roll and what a cut carries over
    got = set(words(final.text))
    assert {"fox", "dog", "sells", "peter", "peppers", "wood"} <= got, final.text


def test_partials_are_spaced_by_what_the_last_one_cost() -> None:
    class SlowASR(WordsASR):  # a pass that took 1 s, as on a slow CPU
        def transcribe(
            self, pcm16k: np.ndarray, *, final: bool, prev=None, listener=False
        ) -> Transcript:
            t = super().transcribe(pcm16k, final=final, prev=prev)
            return Transcript(t.text, t.stable, final, t.audio_ms, 1000.0)

    st = StreamingTranscriber(SlowASR(), ASRConfig(partial_interval_ms=400))
    st.feed(np.full(8000, 3, np.int16))
    assert st.partial_due()  # 500 ms of audio, no pass yet: the interval alone
    st.partial()
    st.feed(np.full(8000, 3, np.int16))
    assert not st.partial_due()  # 500 ms new: more than the interval, less than the pass took
    st.feed(np.full(8000, 3, np.int16))
    assert st.partial_due()


class HeldRefiner:
    """Fake Refiner: one pass is the words of the audio in capitals; it finishes on release()."""

    def __init__(self) -> None:
        self.asked: list[tuple[Future[str], str, np.ndarray]] = []

    def submit(self, pcm16k: np.ndarray) -> Future[str]:
        fut: Future[str] = Future()
        self.asked.append((fut, WordsASR().transcribe(pcm16k, final=True).text.upper(), pcm16k))
        return fut

    def release(self) -> None:
        for fut, text, _ in self.asked:
            if not fut.done() and fut.set_running_or_notify_cancel():
                fut.set_result(text)


def test_a_long_turn_is_refined_whole_while_it_goes_on_and_after_its_final() -> None:
    refiner = HeldRefiner()
    st = StreamingTranscriber(WordsASR(), ASRConfig(), refiner)
    gap = np.zeros(4000, np.int16)
    for value in (1, 2, 3):  # two words, then the VAD's segment event
        word = np.full(8000, value, np.int16)
        st.feed(np.concatenate([word, gap, word + 10, gap]))
        st.close_segment()
        # A lone segment was heard in one pass; then one whole pass at a time, over all the
        # closed segments.
        assert len(refiner.asked) == (value >= 2)
    ((fut, text, audio),) = refiner.asked
    assert text == "W1 W11 W2 W12" and len(audio) <= 2 * 24000  # up to the cut, in the gap
    st.feed(np.full(8000, 5, np.int16))
    assert st.partial().text == "w1 w11 w2 w12 w3 w13 w5"  # nothing waits for it
    refiner.release()
    # Taken at the next pass, joined to the segments it does not cover where they overlap (their
    # words there: the pass ends at the cut, where tiny.en drops words); the next one is asked.
    assert st.partial().text == "W1 W11 w2 w12 w3 w13 w5"
    assert refiner.asked[-1][1] == "W1 W11 W2 W12 W3 W13" and len(refiner.asked) == 2
    final = st.final()
    assert final.text == "W1 W11 w2 w12 w3 w13 w5" and final.segments == (3, 2)
    rolling = refiner.asked[-1][0]
    fut = st.refinement()  # after the final: all of the turn, the one still queued dropped
    assert fut is not None and st.refinement() is fut and rolling.cancelled()
    ((_, text, audio),) = refiner.asked[2:]
    assert text == "W1 W11 W2 W12 W3 W13 W5" and len(audio) == 3 * 24000 + 8000  # all of it
    st.feed(np.full(8000, 6, np.int16))  # the turn went on (reopened): asked again, whole
    assert st.refinement() is not fut and fut.cancelled()
    assert refiner.asked[-1][1] == "W1 W11 W2 W12 W3 W13 W5 W6"
    st.reset()
    st.feed(np.full(8000, 7, np.int16))
    st.final()
    assert st.refinement() is None  # one segment: the final was already one pass
    assert StreamingTranscriber(WordsASR(), ASRConfig()).refinement() is None


class CountingASR(WordsASR):
    """WordsASR that records the samples of each pass and can hear nothing in one that long."""

    def __init__(self, deaf_to: int = -1) -> None:
        self.heard: list[int] = []
        self.deaf_to = deaf_to

    def transcribe(
        self, pcm16k: np.ndarray, *, final: bool, prev=None, listener=False
    ) -> Transcript:
        self.heard.append(len(pcm16k))
        if len(pcm16k) == self.deaf_to:
            return Transcript("", "", final, len(pcm16k) / 16, 1.0)
        return super().transcribe(pcm16k, final=final, prev=prev)


def _sentence(words: int) -> np.ndarray:
    """Words w1 .. w<words>, 0.5 s each with 0.25 s of silence after it."""
    gap = np.zeros(4000, np.int16)
    return np.concatenate(
        [np.concatenate([np.full(8000, v, np.int16), gap]) for v in range(1, words + 1)]
    )


@pytest.mark.parametrize("at_pause", [False, True])
def test_a_short_last_segment_is_heard_again_with_the_audio_before_its_cut(at_pause) -> None:
    # A cut at a breath inside the last sentence: the last segment (w7) is heard again with the
    # audio before the cut, by the pause's pass where the pipeline says it is one (the final then
    # reuses it), else by the final.
    said = _sentence(6)  # 4.5 s
    for tail, refiner in ((8000, None), (8000, HeldRefiner()), (56000, None)):
        asr = CountingASR()
        st = StreamingTranscriber(asr, ASRConfig(), refiner)
        st.feed(said)
        st.close_segment()
        st.feed(np.full(tail, 7, np.int16))
        asr.heard.clear()
        paused = st.partial(at_pause=at_pause)
        by_pause = list(asr.heard)
        asr.heard.clear()
        final = st.final()
        assert final.text == paused.text == "w1 w2 w3 w4 w5 w6 w7" and final.final
        assert not paused.final and final.audio_ms == paused.audio_ms
        again = by_pause if at_pause else asr.heard
        if tail >= 48000:  # 3.5 s after the cut: heard alone, the pause's pass is the final
            assert len(by_pause) == 1 and asr.heard == []
            continue
        assert asr.heard == [] if at_pause else len(by_pause) == 1  # the segment alone
        if refiner is not None:  # the closed segment's audio is kept and no whole pass
            assert again == [len(said) + tail]  # covers it yet: all of it again
        else:  # the 3 s before the cut
            (heard,) = again
            assert 48000 + tail < heard <= 48000 + tail + 4000


def test_a_short_last_segment_heard_again_stays_in_the_short_window_and_never_loses_words():
    # A closed segment of 9 s: with it the pass would leave Whisper's short window, so the 3 s
    # before the cut go instead; a pass that hears nothing leaves the segments' text.
    said = _sentence(12)  # 9 s
    asr = CountingASR()
    st = StreamingTranscriber(asr, ASRConfig(), HeldRefiner())
    st.feed(said)
    st.close_segment()
    st.feed(np.full(8000, 13, np.int16))
    asr.heard.clear()
    assert st.final().text == " ".join(f"w{k}" for k in range(1, 14))
    (heard,) = asr.heard
    assert 48000 + 8000 < heard <= 48000 + 8000 + 4000

    asr = CountingASR(deaf_to=len(_sentence(6)) + 8000)
    st = StreamingTranscriber(asr, ASRConfig(), HeldRefiner())
    st.feed(_sentence(6))
    st.close_segment()
    st.feed(np.full(8000, 7, np.int16))
    assert st.partial(at_pause=True).text == "w1 w2 w3 w4 w5 w6 w7"
    assert st.final().text == "w1 w2 w3 w4 w5 w6 w7"


def test_a_segment_closed_after_a_pause_heard_again_keeps_its_words() -> None:
    # The pause's pass heard the turn again, and the segment is cut in that pause (a short
    # vad.max_turn_s): the closed segment's text is its own pass, not the one before the pause.
    st = StreamingTranscriber(CountingASR(), ASRConfig(), HeldRefiner())
    st.feed(_sentence(6))
    st.close_segment()
    st.feed(np.full(8000, 7, np.int16))
    st.partial(at_pause=True)
    st.feed(np.zeros(8000, np.int16))
    assert st.close_segment().text == "w1 w2 w3 w4 w5 w6 w7"
    st.feed(np.full(48000, 8, np.int16))
    assert st.final().text == "w1 w2 w3 w4 w5 w6 w7 w8"


@pytest.mark.slow  # the refinement runs when the CPU is idle: seconds, more when it is not
def test_refinement_is_one_whole_pass_over_the_long_turn(asr) -> None:
    # Four sentences in 4 s segments: after the final, all of the turn is transcribed again as
    # one pass on the refiner's own model, every sentence once (also "sells" as "G-cell": tiny.en
    # is not always better with the context).
    sentences = (
        "The quick brown fox jumps over the lazy dog.",
        "She sells sea shells by the sea shore.",
        "Peter Piper picked a peck of pickled peppers.",
        "How much wood would a woodchuck chuck.",
    )
    gap = np.zeros(1600, np.int16)
    pcm = np.concatenate([np.concatenate([speech_pcm(s, "piper"), gap]) for s in sentences])
    st = StreamingTranscriber(asr, ASRConfig(), asr.refiner)
    for k, f in enumerate(frames(pcm)):
        st.feed(f)
        if k % 133 == 132:  # every 4 s
            st.close_segment()
    st.final()
    fut = st.refinement()
    assert fut is not None, "no refinement asked for"
    refined = fut.result(timeout=600)
    assert refined == asr.refiner.transcribe(pcm)  # one pass over all of the turn
    got = words(refined)
    for w in ("fox", "dog", "peter", "peppers", "much"):
        assert got.count(w) == 1, refined


class PromptASR(WordsASR):
    """WordsASR that records which prompt each pass was heard with."""

    def __init__(self) -> None:
        self.passes: list[bool] = []

    def transcribe(
        self, pcm16k: np.ndarray, *, final: bool, prev=None, listener=False
    ) -> Transcript:
        self.passes.append(listener)
        return super().transcribe(pcm16k, final=final, prev=prev, listener=listener)


def test_over_an_answer_a_turn_is_heard_with_the_listeners_prompt() -> None:
    # A listener's word: every pass with the listener's prompt, the final reusing the last.
    asr = PromptASR()
    st = StreamingTranscriber(asr, ASRConfig(), over_answer=True)
    st.feed(np.full(4800, 7, np.int16))
    st.partial(at_pause=True)
    st.feed(np.zeros(1600, np.int16))
    assert st.final().text == "w7" and asr.passes == [True]
    # A request (more words than a listener says): its final is heard again with the usual one.
    asr = PromptASR()
    st = StreamingTranscriber(asr, ASRConfig(), over_answer=True)
    words = [
        np.concatenate([np.full(4800, v, np.int16), np.zeros(960, np.int16)]) for v in range(1, 7)
    ]
    st.feed(np.concatenate(words))
    st.partial(at_pause=True)
    assert st.final().text == "w1 w2 w3 w4 w5 w6" and asr.passes == [True, False]
    # Not over an answer: the usual prompt throughout.
    asr = PromptASR()
    st = StreamingTranscriber(asr, ASRConfig())
    st.feed(np.concatenate(words))
    st.final()
    assert asr.passes == [False]
