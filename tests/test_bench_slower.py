"""bench/slower.py: a choice scored as bench.tools scores it, and each speed heard once."""

from __future__ import annotations

from bench.slower import Slowed, scored
from bench.tools import TOOLS
from dllm_voice.app.tools.chooser import Choice
from dllm_voice.audio.asr import WhisperASR
from dllm_voice.audio.config import ASRConfig
from dllm_voice.audio.resample import to_float32
from testkit.speech import speech_pcm
from testkit.tool_requests import REQUESTS


def test_a_choice_is_right_when_its_sentence_is_the_expected_calls():
    (req,) = [r for r in REQUESTS if r.text == "Twelve plus twenty-nine, what does that make?"]
    calc = TOOLS["calculate"]
    assert scored(req, Choice(calc, 0.9, "head+slower", {"expression": "12 + 29"}), 1e9)[
        "answer_correct"
    ]
    assert not scored(req, Choice(calc, 0.9, "head+slower", {"expression": "12 + 39"}), 1e9)[
        "answer_correct"
    ]
    assert not scored(req, None, 1e9)["answer_correct"]
    (none,) = [r for r in REQUESTS if r.tool is None][:1]
    assert scored(none, Choice(calc, 0.9, "head", {"expression": "1 + 1"}), 1e9)["false_call"]


def test_each_speed_is_heard_once_and_only_when_asked():
    slowed = Slowed(WhisperASR(ASRConfig()), to_float32(speech_pcm("Set a timer for ten minutes.")))
    hear = slowed.at((0.9, 0.8))
    assert not slowed.asked and not slowed.by_speed
    heard = hear()
    assert slowed.asked and set(slowed.by_speed) == {0.9, 0.8}
    assert any("timer" in h.lower() for h in heard) and len(set(heard)) == len(heard)
    first = dict(slowed.by_speed)
    slowed.at((0.8,))()
    assert slowed.by_speed == first  # not heard again
