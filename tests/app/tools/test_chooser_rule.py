"""The chooser's rule on a head with known outputs: the parsers decide among built-in tools in
the head's order, the head alone only for a tool without a parser that it is sure of; what else
the recognizer heard only when the best hearing makes no call."""

from __future__ import annotations

import numpy as np
import pytest

from dllm_voice.app.tools.builtin.catalog import BUILTIN
from dllm_voice.app.tools.chooser import NONE, Choice, Head, ToolChooser
from dllm_voice.app.tools.registry import Tool, ToolBox

LABELS = ("set_timer", "calculate", NONE, "weather", "get_time", "country_info")


def head_giving(probs: dict[str, float]) -> tuple[Head, np.ndarray]:
    """A head whose output on the returned state is ``probs`` (the rest shared evenly)."""
    rest = (1.0 - sum(probs.values())) / (len(LABELS) - len(probs))
    p = np.array([probs.get(label, rest) for label in LABELS], np.float32)
    weight = np.eye(len(LABELS), dtype=np.float32)
    return Head(weight, np.zeros(len(LABELS), np.float32), LABELS, 0), np.log(p)


def box(*more: str) -> ToolBox:
    builtins = {t.name: t for tools in BUILTIN.values() for t in tools}
    weather = Tool("weather", "Tell the weather in a city.", {"type": "object"}, None)
    return ToolBox.of(
        [builtins["set_timer"], builtins["calculate"], weather, *map(builtins.get, more)]
    )


def test_a_parser_that_reads_the_words_is_called_whatever_the_head_gives_it():
    # The head takes "cut 350 in half" for a timer and gives arithmetic 1 %.
    head, state = head_giving({"set_timer": 0.6, "calculate": 0.01, NONE: 0.38})
    choice = ToolChooser(head, 0.9).choose(box(), state, "Cut 350 in half.")
    assert choice is not None and choice.tool.name == "calculate" and choice.how == "head+words"
    assert choice.arguments is not None


def test_no_parser_reading_the_words_and_no_sure_head_is_no_call():
    head, state = head_giving({NONE: 0.5, "set_timer": 0.3})
    assert ToolChooser(head, 0.9).choose(box(), state, "How long does rice take?") is None


def test_a_tool_without_a_parser_needs_the_head_to_be_sure():
    sure, state = head_giving({"weather": 0.95})
    choice = ToolChooser(sure, 0.9).choose(box(), state, "Will I need an umbrella in Oslo?")
    assert choice is not None and choice.tool.name == "weather" and choice.how == "head"
    unsure, state = head_giving({"weather": 0.6})
    assert ToolChooser(unsure, 0.9).choose(box(), state, "Will I need an umbrella?") is None


def test_an_alternative_hearing_a_parser_reads_makes_the_call():
    head, state = head_giving({NONE: 0.6, "calculate": 0.2})
    heard = ("What's left if I have 63 apples in the 19?",)
    alternatives = (
        "what's left if I have 63 apples in the 19",
        "What's left if I have 63 apples and eat 19?",
    )
    choice = ToolChooser(head, 0.9).choose(box(), state, heard[0], alternatives)
    assert choice is not None and choice.tool.name == "calculate"
    assert choice.how == "head+alternative" and choice.arguments is not None


def test_the_best_hearing_goes_before_its_alternatives():
    head, state = head_giving({"set_timer": 0.5, "calculate": 0.3})
    choice = ToolChooser(head, 0.9).choose(
        box(), state, "Set a timer for ten minutes.", ("Add ten and five.",)
    )
    assert choice is not None and choice.tool.name == "set_timer" and choice.how == "head+words"


def time_in_barco(alternative: str) -> Choice | None:
    """The call for "What time is it in Barco?" (a place no table knows) heard also as
    ``alternative``."""
    head, state = head_giving({"get_time": 0.8, NONE: 0.1})
    text = "What time is it in Barco?"
    return ToolChooser(head, 0.9).choose(box("get_time"), state, text, (alternative,))


def test_a_known_place_in_an_alternative_goes_before_an_unknown_one_in_the_best_hearing():
    choice = time_in_barco("What time is it in Baku?")
    assert choice is not None and choice.arguments == {"place": "Baku"}
    assert choice.how == "head+alternative"
    tools = box("country_info")
    head, state = head_giving({"country_info": 0.8, NONE: 0.1})
    text, heard = "How many people live in Sultan?", ("How many people live in Sudan?",)
    choice = ToolChooser(head, 0.9).choose(tools, state, text, heard)
    assert choice is not None and choice.arguments == {"country": "Sudan", "fact": "population"}


def test_an_alternative_read_as_a_guess_makes_no_call():
    tools = box("get_time")
    head, state = head_giving({"get_time": 0.5, NONE: 0.3})
    text = "Can you tell me what time it is a narrow beat?"
    choice = ToolChooser(head, 0.9).choose(tools, state, text, ("What time is it in I'll be?",))
    assert choice is None


def test_no_alternative_is_read_where_the_head_is_sure_no_tool_is_needed():
    head, state = head_giving({NONE: 0.95})
    text, alternatives = "Can parrots count to ten?", ("Can parrots count 2 + 10?",)
    assert ToolChooser(head, 0.9).choose(box(), state, text, alternatives) is None
    head, state = head_giving({NONE: 0.7})
    assert ToolChooser(head, 0.9).choose(box(), state, text, alternatives) is not None


class HeardSlower:
    """A recognizer's ``slower``: ``heard``, and how often it was asked (each costs a pass)."""

    def __init__(self, *heard: str) -> None:
        self.heard, self.asked = heard, 0

    def __call__(self) -> tuple[str, ...]:
        self.asked += 1
        return self.heard


def test_the_turn_heard_slower_is_read_where_no_hearing_at_full_speed_makes_a_call():
    head, state = head_giving({NONE: 0.4, "calculate": 0.5})
    slower = HeardSlower("It's a multi light message for me.", "Multiply 19 by 6 for me.")
    alternatives = ("Multiply, 19.6 for me.",)
    choice = ToolChooser(head, 0.9).choose(
        box(), state, "Multiply 19.6 for me.", alternatives, slower
    )
    assert choice is not None and choice.how == "head+slower" and slower.asked == 1
    assert choice.tool.name == "calculate" and choice.arguments == {"expression": "19 * 6"}


def test_the_turn_is_not_heard_slower_where_a_hearing_makes_a_call_or_no_tool_is_likely():
    head, state = head_giving({"set_timer": 0.5, "calculate": 0.3})
    slower = HeardSlower("Add ten and five.")
    choice = ToolChooser(head, 0.9).choose(box(), state, "Set a timer for ten minutes.", (), slower)
    assert choice is not None and choice.tool.name == "set_timer" and slower.asked == 0
    alternatives = ("Set a timer for ten minutes.",)
    choice = ToolChooser(head, 0.9).choose(
        box(), state, "Said time for ten minutes.", alternatives, slower
    )
    assert choice is not None and choice.how == "head+alternative" and slower.asked == 0
    for p_none in (0.95, 0.8):  # sure of none, or leaning to none: not worth a pass
        unsure, state = head_giving({NONE: p_none})
        slower = HeardSlower("Can parrots count 2 + 10?")
        choice = ToolChooser(unsure, 0.9).choose(
            box(), state, "Can parrots count to ten?", (), slower
        )
        assert choice is None and slower.asked == 0
    head, state = head_giving({NONE: 0.1, "calculate": 0.8})
    slower = HeardSlower("Why is 12 + 12 24?")
    assert ToolChooser(head, 0.9).choose(box(), state, "Why is a dozen twelve?", (), slower) is None
    assert slower.asked == 0  # a reason asked: no tool gives one


def test_a_request_corrected_as_it_is_said_is_read_from_the_correction():
    head, state = head_giving({"set_timer": 0.6, NONE: 0.3})
    chooser = ToolChooser(head, 0.9)
    said = "Give me a two minute warning... I mean set a two minute timer."
    choice = chooser.choose(box(), state, said)
    assert choice is not None and choice.arguments == {"seconds": 120.0}
    # A correction that reads no call leaves the whole turn to be read.
    choice = chooser.choose(box(), state, "Set a timer for five minutes, I mean, please.")
    assert choice is not None and choice.arguments == {"seconds": 300.0}


def test_a_request_amended_by_a_new_amount_is_read_with_it():
    head, state = head_giving({"set_timer": 0.5, "calculate": 0.2, NONE: 0.2})
    chooser = ToolChooser(head, 0.9)

    def args(said: str) -> object:
        choice = chooser.choose(box("convert_units"), state, said)
        return choice.arguments if choice is not None else None

    assert args("Set a timer for five minutes, actually make it ten.") == {"seconds": 600.0}
    assert args("Set a pasta timer for 5 minutes. No, make that 8 please.") == {
        "seconds": 480.0,
        "label": "pasta",
    }
    assert args("Set a timer for five minutes, make it ten seconds") == {"seconds": 10.0}
    assert args("Set a timer for three minutes, I mean four.") == {"seconds": 240.0}
    assert args("What's fifteen percent of eighty? Make it twenty percent.") == {
        "expression": "20 percent of 80"
    }
    # No amount after it: the turn as said.
    assert args("Set a timer for ten minutes and make it loud.") == {"seconds": 600.0}


@pytest.mark.parametrize(
    "alternative",
    [
        "What time is it in Parko?",  # no hearing names a place the tool knows
        "What time is it?",  # the local time: the user asked about a place
        "What's two times ten?",  # another tool's words
    ],
)
def test_the_best_hearings_guess_stands_against_an_alternative_that_names_no_known_place(
    alternative: str,
) -> None:
    choice = time_in_barco(alternative)
    assert choice is not None and choice.arguments == {"place": "Barco"}
