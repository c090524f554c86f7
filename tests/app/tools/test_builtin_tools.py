"""The built-in tools (app/tools/builtin): each tool's sentence and its bad arguments'
ToolError sentences, spoken numbers, the gazetteer, the catalog and the schema check a call goes
through. No model; the gazetteer and pint load once (~2 s)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from dllm_voice.app.tools.builtin import (
    calculator,
    clock,
    countries,
    numbers,
    places,
    timers,
    units,
)
from dllm_voice.app.tools.builtin.catalog import BUILTIN
from dllm_voice.app.tools.registry import ToolContext, ToolError
from tests.app.tools.builtin_helpers import error_of, fixed_context, tool_of


@pytest.fixture
def ctx() -> Iterator[ToolContext]:
    with fixed_context() as context:
        yield context


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("a hundred degrees", "100 degrees"),
        ("one and a half hours", "1.5 hours"),
        ("a dozen eggs", "12 eggs"),
        ("half a dozen", "6"),
        ("half of ninety", "0.5 of 90"),
        ("half an hour", "0.5 hour"),
        ("an hour and a half", "1.5 hour"),
        ("a quarter of an hour", "0.25 hour"),
        ("a quarter in a hour", "0.25 hour"),  # Whisper's "in" for "of"
        ("half in a cup", "half in a cup"),
        ("twelve plus twenty-nine", "12 plus 29"),
        ("two point five miles", "2.5 miles"),
        ("1,000 plus 2", "1000 plus 2"),
        ("a couple of minutes", "2 minutes"),
        ("cut 300 and 50 in half", "cut 350 in half"),  # Whisper's "three hundred and fifty"
        ("100 and $20 and 25% off", "$120 and 25% off"),
        ("1200 and 5", "1205"),
        ("add 350 and 20", "add 350 and 20"),  # not a scale word's "and"
        ("between 100 and 37", "between 100 and 37"),
        ("the sum of 300 and 50", "the sum of 300 and 50"),
        ("300 and 2.5", "300 and 2.5"),
    ],
)
def test_digits(words: str, expected: str) -> None:
    assert numbers.digits(words) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Set a timer for twenty minutes, sorry, twenty-five minutes.",
            "Set a timer for 25 minutes.",
        ),
        (
            "Set a timer for 10 minutes. No, make it 12, please.",
            "Set a timer for 12 minutes, please.",
        ),
        ("Set an alarm for seven, no, eight in the morning.", "Set an alarm for 8 in the morning."),
        ("Remind Bob in 5 minutes, I mean 6 minutes.", "Remind Bob in 6 minutes."),
        # Not a value said again: left as said.
        ("What is 5 plus 3, no, 5 plus 4?", "What is 5 plus 3, no, 5 plus 4?"),
        ("Set a timer for 5 minutes, no more.", "Set a timer for 5 minutes, no more."),
        ("What time is it in Paris, no, in Rome?", "What time is it in Paris, no, in Rome?"),
    ],
)
def test_a_corrected_value_replaces_the_one_before(text: str, expected: str) -> None:
    assert numbers.corrected(text) == expected


@pytest.mark.parametrize(
    ("x", "spoken"),
    [
        (46507760, "46.5 million"),
        (37.7777, "37.8"),
        (41.0, "41"),
        (3.14159, "3.14"),
        (1 / 3, "0.333"),
        (-5, "minus 5"),
        (999_960_000, "1 billion"),
        (1.5e12, "1.5 trillion"),
        (2**100, "1.27 times 10 to the power of 30"),
        (0.00002, "0.00002"),
        (float("inf"), "infinity"),
    ],
)
def test_say_number(x: float, spoken: str) -> None:
    assert numbers.say_number(x) == spoken


def test_places_find_the_longest_name_and_zone() -> None:
    found = places.find_place("what time is it in new york")
    assert found is not None and found.zone == "America/New_York"
    spain = places.find_place("the capital of Spain")
    assert spain is not None and (spain.kind, spain.zone) == ("country", "Europe/Madrid")
    uk = places.find_place("what time is it in the uk")
    assert uk is not None and uk.where == "in the United Kingdom"
    assert places.zone_of("Europe/Paris") == ZoneInfo("Europe/Paris")
    assert places.zone_of("sao paulo") == ZoneInfo("America/Sao_Paulo")
    assert places.zone_of("Washington DC") == ZoneInfo("America/New_York")
    assert places.zone_of("pacific time") == ZoneInfo("America/Los_Angeles")
    assert error_of(lambda: places.zone_of("Narnia")) == "I don't know the place 'Narnia'."


def test_a_city_named_like_a_word_counts_only_capitalized() -> None:
    assert places.find_place("that's nice, what time is it") is None
    assert places.find_place("what time is it") is None
    nice = places.find_place("What time is it in Nice?")
    assert nice is not None and nice.zone == "Europe/Paris"
    assert places.lookup("nice") == nice  # a place argument is a name, whatever its case


def test_clock_speaks_time_and_date(ctx: ToolContext) -> None:
    assert clock.get_time("Tokyo", ctx=ctx) == "It's 9:41 PM in Tokyo."
    assert clock.get_time("", ctx=ctx) == "It's 12:41 PM."
    assert clock.get_time("utc", ctx=ctx) == "It's 12:41 PM UTC."
    assert clock.get_time("Spain", ctx=ctx) == "It's 1:41 PM in Spain."
    assert clock.get_date("", ctx=ctx) == "Today is Saturday, December 5, 2026."
    assert clock.get_date("sydney", ctx=ctx) == "It's Saturday, December 5, 2026 in Sydney."
    tokyo_date = clock.get_date("tokyo", ctx=ctx)
    assert tokyo_date == "It's Saturday, December 5, 2026 in Tokyo."
    assert clock.spoken_time(datetime(2026, 1, 1, 0, 5)) == "12:05 AM"
    assert clock.spoken_time(datetime(2026, 1, 1, 21, 0)) == "9 PM"


def test_clock_unknown_place(ctx: ToolContext) -> None:
    assert error_of(lambda: clock.get_time("Atlantiszz", ctx=ctx)) == (
        "I don't know the place 'Atlantiszz'."
    )
    assert error_of(lambda: clock.get_date("Narnia", ctx=ctx)) == "I don't know the place 'Narnia'."


@pytest.mark.parametrize(
    ("expression", "spoken"),
    [
        ("12 plus 29", "12 plus 29 is 41."),
        ("12+29", "12 plus 29 is 41."),
        ("twelve plus twenty-nine", "Twelve plus twenty-nine is 41."),
        ("15% of 80", "15 percent of 80 is 12."),
        ("15 percent of 80", "15 percent of 80 is 12."),
        ("half of 90", "Half of 90 is 45."),
        ("a third of ninety", "A third of ninety is 30."),
        ("square root of 144", "Square root of 144 is 12."),
        ("five factorial", "Five factorial is 120."),
        ("the factorial of 6 minus 20", "Factorial of 6 minus 20 is 700."),
        ("square root of one forty-four", "Square root of one forty-four is 12."),
        ("two fifty times four", "Two fifty times four is 1000."),
        ("nineteen ninety-nine plus one", "Nineteen ninety-nine plus one is 2000."),
        ("sqrt(2)", "The square root of 2 is 1.41."),
        ("7 squared", "7 squared is 49."),
        ("2 to the power of 10", "2 to the power of 10 is 1024."),
        ("2^10", "2 to the power of 10 is 1024."),
        ("100 divided by 8", "100 divided by 8 is 12.5."),
        ("81 over 9", "81 over 9 is 9."),
        ("6 x 7", "6 times 7 is 42."),
        ("9 multiplied by 8", "9 multiplied by 8 is 72."),
        ("1/3", "1 divided by 3 is 0.333."),
        ("10 minus 3 times 2", "10 minus 3 times 2 is 4."),
        ("80 plus 15 percent", "80 plus 15 percent is 92."),
        ("add five and three", "Five plus three is 8."),
        ("subtract 3 from 10", "10 minus 3 is 7."),
        ("17 mod 5", "17 mod 5 is 2."),
        ("46507760 * 1", "46507760 times 1 is 46.5 million."),
    ],
)
def test_calculate(expression: str, spoken: str) -> None:
    assert calculator.calculate(expression) == spoken


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("1/0", "I can't divide by zero."),
        ("5 divided by zero", "I can't divide by zero."),
        ("square root of minus 4", "I can't take the square root of a negative number."),
        ("9**9**9", "That number is too big for me."),
        ("hello there", "I can't work out 'hello there'."),
        ("2 +", "I can't work out '2 +'."),
        ("__import__('os')", "I can't work out '__import__('os')'."),
        ("(-8) ** 0.5", "That has no real answer."),
        ("factorial of 2.5", "A factorial needs a whole number, zero or more."),
        ("500 factorial", "That number is too big for me."),
    ],
)
def test_calculate_errors(expression: str, error: str) -> None:
    assert error_of(lambda: calculator.calculate(expression)) == error


@pytest.mark.parametrize(
    ("args", "spoken"),
    [
        (
            (100, "degrees Fahrenheit", "degrees Celsius"),
            "100 degrees Fahrenheit is 37.8 degrees Celsius.",
        ),
        ((-40, "celsius", "f"), "Minus 40 degrees Celsius is minus 40 degrees Fahrenheit."),
        ((3, "miles", "kilometres"), "3 miles is 4.83 kilometers."),
        ((1, "mile", "km"), "1 mile is 1.61 kilometers."),
        ((70, "kilograms", "pounds"), "70 kilograms is 154.3 pounds."),
        ((1, "pound", "ounces"), "1 pound is 16 ounces."),
        ((2, "cups", "ounces"), "2 cups is 16 fluid ounces."),
        ((60, "miles per hour", "km/h"), "60 miles per hour is 96.6 kilometers per hour."),
        ((1, "day", "seconds"), "1 day is 86400 seconds."),
        ((1, "acre", "square feet"), "1 acre is 43560.2 square feet."),
        ((5, "feet", "inches"), "5 feet is 60 inches."),
        ((2.5, "gallons", "litres"), "2.5 gallons is 9.46 liters."),
        ((500, "grammes", "ounces"), "500 grams is 17.6 ounces."),
    ],
)
def test_convert_units(args: tuple[float, str, str], spoken: str) -> None:
    assert units.convert_units(*args) == spoken


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((3, "blorps", "miles"), "I don't know the unit 'blorps'."),
        ((5, "dollars", "euros"), "I have no exchange rates, so I can't convert dollars to euros."),
        ((3, "miles", "1/0"), "I don't know the unit '1/0'."),
        ((1, "kilograms", "miles"), "I can't convert kilograms to miles."),
        ((1, "degrees celsius", "hours"), "I can't convert degrees celsius to hours."),
        ((float("inf"), "m", "km"), "I need a number to convert."),
    ],
)
def test_convert_units_errors(args: tuple[float, str, str], error: str) -> None:
    assert error_of(lambda: units.convert_units(*args)) == error


@pytest.mark.parametrize(
    ("country", "fact", "spoken"),
    [
        ("Spain", "capital", "The capital of Spain is Madrid."),
        ("spain", "population", "Spain has about 46.5 million people."),
        (
            "Switzerland",
            "languages",
            "The official languages of Switzerland are German, French and Italian.",
        ),
        ("brazil", "languages", "The official language of Brazil is Portuguese."),
        ("Switzerland", "currency", "Switzerland uses the Swiss franc."),
        ("the UK", "currency", "The United Kingdom uses the British pound."),
        ("America", "capital", "The capital of the United States is Washington D.C."),
        ("Antarctica", "capital", "Antarctica has no capital."),
    ],
)
def test_country_info(country: str, fact: Any, spoken: str) -> None:
    assert countries.country_info(country, fact) == spoken


def test_country_info_unknown() -> None:
    assert error_of(lambda: countries.country_info("Atlantis", "capital")) == (
        "I don't know the country 'Atlantis'."
    )


def test_catalog_groups() -> None:
    names = {group: [t.name for t in tools] for group, tools in BUILTIN.items()}
    assert names == {
        "clock": ["get_time", "get_date"],
        "timers": ["set_timer", "set_alarm", "list_timers", "cancel_timer"],
        "calculator": ["calculate"],
        "units": ["convert_units"],
        "countries": ["country_info"],
    }
    tools = [t for group in BUILTIN.values() for t in group]
    assert all(t.parse is not None and t.description for t in tools)
    assert {t.name for t in tools if t.side_effects} == {"set_timer", "set_alarm", "cancel_timer"}
    assert tool_of(timers.set_timer).context_arg == "ctx"


def test_call_coerces_and_checks(ctx: ToolContext) -> None:
    set_timer, convert = tool_of(timers.set_timer), tool_of(units.convert_units)
    # An int is a number: the schema takes 300 for seconds: float.
    assert asyncio.run(set_timer.call({"seconds": 300}, ctx)) == "Timer set for 5 minutes."
    converted = asyncio.run(convert.call({"value": 3, "from_unit": "miles", "to_unit": "km"}, ctx))
    assert converted == "3 miles is 4.83 kilometers."
    assert asyncio.run(tool_of(clock.get_time).call({"place": "Tokyo"}, ctx)) == (
        "It's 9:41 PM in Tokyo."
    )
    with pytest.raises(ToolError):
        asyncio.run(set_timer.call({"seconds": "five"}, ctx))
    with pytest.raises(ToolError):
        asyncio.run(set_timer.call({"label": "tea"}, ctx))  # seconds is required
    with pytest.raises(ToolError):
        asyncio.run(tool_of(countries.country_info).call({"country": "Spain", "fact": "size"}, ctx))
    with pytest.raises(ToolError, match="I can't divide by zero."):
        asyncio.run(tool_of(calculator.calculate).call({"expression": "1/0"}, ctx))


def test_loading_the_tools_loads_the_gazetteer_and_units_ahead_of_the_first_question() -> None:
    import threading
    import time

    from dllm_voice.app.tools import toolset
    from dllm_voice.app.tools.builtin import places, units
    from dllm_voice.app.tools.config import ToolsConfig

    places._gazetteer.cache_clear()
    units._units.cache_clear()
    toolset.Toolset.load(ToolsConfig(), 0)
    warming = [t for t in threading.enumerate() if t.name == "tools-warm"]
    assert warming
    warming[0].join(timeout=30)
    assert places._gazetteer.cache_info().currsize == 1
    assert units._units.cache_info().currsize == 1
    t0 = time.perf_counter()
    assert places.lookup("Ottawa") is not None
    assert time.perf_counter() - t0 < 0.1
