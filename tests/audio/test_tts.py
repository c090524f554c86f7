"""Clause chunker cases, Piper synthesis, rate conversion and cancellation."""

import threading
from pathlib import Path

import numpy as np
import pytest

from dllm_voice.audio.config import TTSConfig
from dllm_voice.audio.errors import ModelLoadError
from dllm_voice.audio.tts import _FIRST_FRAMES, ClauseChunker, PiperTTS, default_voice, split_voice


def chunk(pieces: list[str], **kw) -> list[str]:
    c = ClauseChunker(**kw)
    out = []
    for p in pieces:
        out += c.push(p)
    return out + c.flush()


TEXT = (
    "Sure, the capital of France is Paris, a city of 2,100,000 people. Dr. Smith said pi "
    "is 3.14, e.g. in math class. Is that right? Yes!"
)
EXPECTED = [
    "Sure, the capital of France is Paris,",
    "a city of 2,100,000 people.",
    "Dr. Smith said pi is 3.14,",
    "e.g. in math class.",
    "Is that right?",
    "Yes!",
]


@pytest.mark.parametrize("split", ["whole", "chars", "words"])
def test_chunker_is_independent_of_increment_size(split: str) -> None:
    pieces = {
        "whole": [TEXT],
        "chars": list(TEXT),
        "words": [w + " " for w in TEXT.split(" ")],
    }[split]
    assert chunk(pieces) == EXPECTED


@pytest.mark.parametrize(
    "text,expected",
    [
        ("It costs $3.50 today. Okay.", ["It costs $3.50 today.", "Okay."]),
        ("Call Mr. J. K. Rowling now.", ["Call Mr. J. K. Rowling now."]),
        ("I live in the U.S. and you?", ["I live in the U.S. and you?"]),
        ('He said "stop." Then left.', ['He said "stop."', "Then left."]),
        ("Wait... what?! Really.", ["Wait...", "what?!", "Really."]),
        ("Yes, sure.", ["Yes, sure."]),  # first comma cut needs 3 words
        ("No. We sat. See you on Sat. morning.", ["No.", "We sat.", "See you on Sat. morning."]),
        ("line one\nline two", ["line one", "line two"]),
        ("...", []),
        ("", []),
    ],
)
def test_chunker_cases(text: str, expected: list[str]) -> None:
    assert chunk([text]) == expected


def test_chunker_waits_at_ambiguous_ends_and_caps_length() -> None:
    c = ClauseChunker()
    assert c.push("The value is 3.") == []  # 3.14 or end of sentence? wait
    assert c.push("14 and") == []
    assert c.push(" more, ok") == ["The value is 3.14 and more,"]
    long = "word " * 100
    out = chunk([long], max_chunk_chars=50)
    assert all(len(x) <= 50 for x in out) and " ".join(out).split() == long.split()


def test_later_commas_need_more_words() -> None:
    text = "The first part is here, then a, b, and c follow, and the list ends here."
    assert chunk([text]) == [
        "The first part is here,",
        "then a, b, and c follow,",
        "and the list ends here.",
    ]


def test_synthesis_rate_duration_and_pieces(tts: PiperTTS) -> None:
    pieces = list(tts.synthesize("The capital of France is Paris."))
    pcm = np.concatenate(pieces)
    assert pcm.dtype == np.int16 and tts.sample_rate_hz == 22050
    assert 1.0 < len(pcm) / 22050 < 4.0
    assert all(len(p) == 2205 for p in pieces[:-1])  # 100 ms pieces
    assert np.abs(pcm).max() > 10000


def test_a_chunk_cut_inside_its_sentence_ends_without_piper_s_closing_silence(
    tts: PiperTTS,
) -> None:
    def silent_tail_ms(text: str) -> float:
        pcm = np.abs(np.concatenate(list(tts.synthesize(text))).astype(np.float32))
        loud = np.flatnonzero(pcm > pcm.max() * 0.01)
        return 1000 * (len(pcm) - 1 - loud[-1]) / tts.sample_rate_hz

    # Piper's noise varies the tail from run to run: 29-51 ms cut, 147-262 ms at a full stop.
    assert silent_tail_ms("The sky is") <= 60  # the answer goes on: "blue because ..."
    assert silent_tail_ms("The sky is blue.") >= 120  # a sentence's end keeps its pause


def test_resampled_to_sink_rate(tts: PiperTTS) -> None:
    tts48 = tts.at_rate(48000)
    pcm = np.concatenate(list(tts48.synthesize("Hello there.")))
    assert tts48.sample_rate_hz == 48000 and tts.sample_rate_hz == 22050
    assert 0.5 < len(pcm) / 48000 < 2.5


def test_cancel_stops_within_one_chunk(tts: PiperTTS) -> None:
    cancel = threading.Event()
    text = "This is the first sentence. Here is a second one. And a third sentence follows."
    got = 0
    for i, p in enumerate(tts.synthesize(text, cancel)):
        got += len(p)
        if i == 1:
            cancel.set()
    assert got == 2 * 2205  # nothing after the cancel (the text is ~5 s of speech)
    cancel.clear()
    pieces = list(tts.stream(iter(["Hi there. ", "How are ", "you today?"]), cancel))
    assert [p.text for p in pieces if p.last_in_chunk] == ["Hi there.", "How are you today?"]
    assert {p.chunk_index for p in pieces} == {0, 1}
    cancel.set()
    assert list(tts.stream(iter(["Never spoken."]), cancel)) == []


def _still(tts: PiperTTS, monkeypatch: pytest.MonkeyPatch) -> None:
    """Piper without its noise, so two syntheses of a text are the same audio."""
    from piper import SynthesisConfig

    monkeypatch.setattr(tts, "_scales", lambda: SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0))


def test_chunked_decode_is_one_whole_run_at_one_gain_per_voice(
    tts: PiperTTS, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime
    from piper import PiperVoice

    _still(tts, monkeypatch)
    whole = PiperVoice(
        session=onnxruntime.InferenceSession(str(default_voice())), config=tts.voice.config
    )
    text = "The capital of France is Paris, a city of art and food."
    (phonemes,) = tts.voice.phonemize(text)
    ids = tts.voice.phonemes_to_ids(phonemes)
    chunks = list(tts._sentence_audio(ids, tts._scales()))
    assert len(chunks) >= 3 and [last for _, last in chunks][-1]  # ~3 s: 3+ decoder chunks
    assert len(chunks[0][0]) == _FIRST_FRAMES * tts.voice.config.hop_length
    ref = np.asarray(whole.phoneme_ids_to_audio(ids, tts._scales()), np.float32)
    got = np.concatenate([a for a, _ in chunks])
    assert got.shape == ref.shape and np.abs(got - ref).max() < 1e-4  # no seam at the cuts
    # One gain for the voice, not a peak per clause: the output is the raw audio times it.
    pcm = np.concatenate(list(tts.synthesize(text))).astype(np.float32) / 32767
    assert np.abs(pcm - ref * tts._gain).max() < 2e-4


def test_cancel_runs_no_further_decoder_chunk(
    tts: PiperTTS, monkeypatch: pytest.MonkeyPatch
) -> None:
    front, back, latent = tts._split
    runs = []

    class Counting:
        def run(self, *args, **kw):
            runs.append(1)
            return back.run(*args, **kw)

    monkeypatch.setattr(tts, "_split", (front, Counting(), latent))
    cancel = threading.Event()
    pieces = 0
    for _ in tts.synthesize("The capital of France is Paris, a city of art and food.", cancel):
        pieces += 1
        cancel.set()  # after the first 100 ms piece of the first ~230 ms chunk
    assert pieces == 1 and len(runs) == 1


def test_a_voice_that_does_not_cut_runs_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"], name="/enc_p/Identity")],
        "no_decoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    path = tmp_path / "no_decoder.onnx"
    onnx.save(helper.make_model(graph), str(path))
    assert split_voice(path, None) is None
    monkeypatch.setattr("dllm_voice.audio.tts.split_voice", lambda path, opts: None)
    for tts in (PiperTTS(TTSConfig()), PiperTTS(TTSConfig(chunked_decode=False))):
        assert tts._split is None
        pcm = np.concatenate(list(tts.synthesize("The sky is blue.")))
        assert 0.8 < len(pcm) / 22050 < 3.0 and np.abs(pcm).max() > 10000


def test_bad_voice_path() -> None:
    with pytest.raises(ModelLoadError, match="tts.voice"):
        PiperTTS(TTSConfig(voice="/nonexistent/voice.onnx"))
