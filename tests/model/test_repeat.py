"""RepeatGuard: loops are cut at the last sentence end before them, repeats are held back."""

from __future__ import annotations

from dllm_voice.model.repeat import RepeatGuard


def stream(text: str) -> tuple[RepeatGuard, str, int]:
    """Feed ``text`` word by word; (guard, text so far, safe chars) where it stopped."""
    guard, acc, safe = RepeatGuard(), "", 0
    for word in text.split(" "):
        acc = f"{acc} {word}" if acc else word
        safe = guard.check(acc)
        if guard.loop:
            break
    return guard, acc, safe


def test_sentence_loop_keeps_the_first_copy() -> None:
    text = "The capital of France is Paris.\n\nA dragon, no. A dragon, no. A dragon, no. A dragon"
    guard, acc, safe = stream(text)
    assert guard.loop
    assert guard.kept(acc) == "The capital of France is Paris.\n\nA dragon, no."
    assert safe == len("The capital of France is Paris.\n\nA dragon, no. ")


def test_word_loop_ends_at_the_sentence_before_it() -> None:
    guard, acc, _ = stream("Once there was a dragon. The dragon said no no no no no no no no no")
    assert guard.loop and guard.kept(acc) == "Once there was a dragon."


def test_repeated_sentence_without_a_sentence_end_before_keeps_what_came_first() -> None:
    guard, acc, _ = stream("I think that I think that I think that I think that")
    assert guard.loop and guard.kept(acc) == "I think that"


def test_a_list_that_goes_round_ends_before_its_first_repeat() -> None:
    guard, acc, _ = stream(
        "There are 7 continents: Africa, Antarctica, Australia, North and South America, "
        "Antarctica, Antarctica, Antarctica, Antarctica, Australia, South America"
    )
    assert guard.loop
    assert guard.kept(acc) == (
        "There are 7 continents: Africa, Antarctica, Australia, North and South America."
    )
    guard, acc, _ = stream("Monday, Tuesday, Wednesday, Monday, Tuesday, Wednesday, Monday,")
    assert guard.loop and guard.kept(acc) == "Monday, Tuesday, Wednesday."
    guard, acc, _ = stream("Red, blue, green, red, yellow, red, white.")  # red a third time
    assert guard.loop and guard.kept(acc) == "Red, blue, green, red, yellow."


def test_a_list_item_said_again_is_held_and_released_when_the_list_goes_on() -> None:
    text = "Yes, yes, I know. Mix red, blue, red, and green."
    guard, acc, safe = stream(text)
    assert not guard.loop and safe == len(text)
    guard = RepeatGuard()
    # held from the separator before it, so that a list cut there ends "Colors: red, blue."
    assert guard.check("Colors: red, blue, red, ") == len("Colors: red, blue")
    assert guard.check("Colors: red, blue, red, gr") == len("Colors: red, blue")
    assert guard.check("Colors: red, blue, red, green,") == len("Colors: red, blue, red, green")
    text = "Colors: red, blue, red, green, w"
    assert guard.check(text) == len(text)
    assert not guard.loop


def test_ordinary_text_is_not_a_loop_and_short_repeats_are_released() -> None:
    text = "It is very very blue. The sky is blue because the air scatters blue light the most."
    guard, acc, safe = stream(text)
    assert not guard.loop and acc == text and safe == len(text)
    guard = RepeatGuard()
    held = guard.check("I said it is it is")
    assert held == len("I said it is ")  # a repeat is forming: held back
    assert guard.check("I said it is it is fine") == len("I said it is it is fine")
    assert guard.check("no no no", final=True) == len("no no no")


def test_a_word_still_growing_is_held_while_it_may_repeat() -> None:
    guard = RepeatGuard()
    assert guard.check("I'm sorry, I'm sorr") == len("I'm sorry, ")  # "sorr" may become "sorry,"
    assert not guard.loop


def test_a_phrase_said_a_third_time_ends_the_answer_before_it() -> None:
    text = (
        "What's a joke about computers? A joke about computers is that a computer is a "
        "computer, and a joke about computers is funny."
    )
    guard, acc, _ = stream(text)
    assert guard.loop and guard.kept(acc) == "What's a joke about computers?"
