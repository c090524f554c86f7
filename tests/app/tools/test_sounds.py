"""Words that sound alike, by the CMU Pronouncing Dictionary's phonemes."""

from __future__ import annotations

from dllm_voice.app.tools.builtin.sounds import distance, nearest, phrase_like, said, sounds_like

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


def test_where_only_a_candidate_fits_the_nearest_clear_one_is_taken() -> None:
    assert nearest("made", NUMBERS, most=1.5, margin=0.5) == "eight"  # nine is 2.0
    assert nearest("made", NUMBERS, most=1.0, margin=0.5) is None  # farther than allowed
    assert nearest("fine", NUMBERS, most=1.5, margin=0.5) is None  # five and nine both 1.0
    assert nearest("qwzxv", NUMBERS, most=1.5, margin=0.5) is None
    assert nearest("made", [], most=1.5, margin=0.5) is None


def test_a_phrase_is_heard_as_the_name_it_sounds_like() -> None:
    names = {n: said(n) for n in ("bulgaria", "hungary", "algeria", "kenya")}
    assert said("bulk area") == ("B", "AH", "L", "K", "EH", "R", "IY", "AH")
    assert phrase_like("bulk area", names) == "bulgaria"  # k for g
    assert phrase_like("hunger", names) == "hungary"
    assert phrase_like("the market", names) is None
    assert said("qwzxv area") == ()  # a word the dictionary lacks: no sound to compare
    assert phrase_like("qwzxv area", names) is None
