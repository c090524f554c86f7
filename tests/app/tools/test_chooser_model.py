"""The tool chooser and the argument grammar on the real bundled model (slow): the head on the
end-of-turn row picks the built-in tool for requests worded unlike its training templates, and
none for questions that only sound like them; a tool it never saw gets valid arguments."""

from __future__ import annotations

import pytest

from dllm_voice.app.conversation.config import DEFAULT_SYSTEM_PROMPT
from dllm_voice.app.terminal.ask import answer
from dllm_voice.app.tools.arguments import fill
from dllm_voice.app.tools.config import ToolsConfig
from dllm_voice.app.tools.registry import ToolContext, tool
from dllm_voice.app.tools.toolset import Toolset
from dllm_voice.model.config import LMConfig
from dllm_voice.model.engine import LM

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lm() -> LM:
    return LM.load(LMConfig())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Could you work out forty-four times three for me?", "calculate"),
        ("Any idea what the hour is over in Lisbon?", "get_time"),
        ("Put a timer on for twenty minutes.", "set_timer"),
        ("Which currency do they use in Mexico?", "country_info"),
        ("How many grams are there in two pounds?", "convert_units"),
        ("Who painted the Mona Lisa?", None),
        ("What time of year do tulips bloom?", None),
        ("Why do we have leap years?", None),
    ],
)
def test_the_head_picks_the_tool_or_none(lm: LM, text: str, expected: str | None) -> None:
    tools = Toolset.load(ToolsConfig(), lm.parameter_count())
    ctx = ToolContext()
    got = answer(lm, tools, text, DEFAULT_SYSTEM_PROMPT, ctx)
    ctx.close()
    assert (got.call.tool.name if got.call else None) == expected, got.text
    if expected is not None:
        assert got.outcome is not None and got.outcome.error is None, got.text


@tool()
def find_flight(destination: str, passengers: int) -> str:
    """Find flights to a city."""
    return f"{passengers} to {destination}"


def test_a_tool_never_trained_on_gets_valid_arguments_under_the_grammar(lm: LM) -> None:
    t = find_flight.__tool__  # type: ignore[attr-defined]
    got = fill(lm.session(), lm.tokenizer, t, "Find me flights to Boston for three people.")
    assert got is not None
    args, stats = got
    assert t.check(args) == args and args["destination"] == "Boston" and args["passengers"] == 3
    assert stats.tokens > stats.forwards  # forced tokens ride along with the chosen ones
