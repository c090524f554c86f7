"""Words that sound alike, by the CMU Pronouncing Dictionary's phonemes."""

from __future__ import annotations

from dllm_voice.app.tools.builtin.sounds import distance, sounds_like

NUMBERS = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def test_near_sounds_cost_half_a_phoneme() -> None:
    assert distance("leaders", "liters") == 0.5  # d for t
    assert distance("free", "three") == 0.5  # f for th
    assert distance("free", "four") == 2.0
    assert distance("grams", "grams") == 0.0
    assert distance("qwzxv", "three") == float("inf")  # not in the dictionary


def test_the_one_nearest_sound_is_taken() -> None:
    assert sounds_like("free", NUMBERS) == "three"
    assert sounds_like("aid", NUMBERS) == "eight"
    assert sounds_like("sex", NUMBERS) == "six"
    assert sounds_like("leakers", ["liters", "gallons", "cups"]) == "liters"
    assert sounds_like("ten", NUMBERS) == "ten"


def test_far_ties_and_unknown_words_give_none() -> None:
    assert sounds_like("made", NUMBERS) is None  # 1.5 from "eight": too far for 2 phonemes
    assert sounds_like("obvious", ["populous"]) is None
    assert sounds_like("qwzxv", NUMBERS) is None
    assert sounds_like("bat", ["pat", "bad"]) is None  # both half a phoneme away
    assert sounds_like("word", []) is None
