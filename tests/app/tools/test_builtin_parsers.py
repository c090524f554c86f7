"""The built-in tools' parsers: the arguments read from a user's words as an ASR writes them
(lower case, no punctuation, numbers in words or digits), on varied phrasings each, and the
phrasings that are not theirs (None)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dllm_voice.app.tools.builtin import calculator, clock, countries, timers, units
from tests.app.tools.builtin_helpers import tool_of


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("What's the time?", {}),
        ("what time is it", {}),
        ("hey what time is it now", {}),
        ("tell me the time", {}),
        ("what time is it in new york", {"place": "new york"}),
        ("What time is it in Tokyo right now?", {"place": "Tokyo"}),
        ("What time is it where my mom lives, in Chicago?", {"place": "Chicago"}),
        ("whats the time in london", {"place": "london"}),
        ("do you know what time it is in paris", {"place": "paris"}),
        ("current time in berlin", {"place": "berlin"}),
        ("time in mumbai", {"place": "mumbai"}),
        ("how late is it in LA", {"place": "LA"}),
        ("what time is it over in hawaii", {"place": "hawaii"}),
        ("what time is it in nice", {"place": "nice"}),
        ("what time is it in narnia", {"place": "narnia"}),
        ("What time do they have in Mexico City?", {"place": "Mexico City"}),
        ("time check in los angeles please", {"place": "los angeles"}),
        ("what time is it at home", {}),
        ("what time is my alarm", None),
        ("set a timer for five minutes", None),
        ("what time does the store open", None),
        ("what time do they have lunch in spain", None),
        ("what time is it tomorrow in tokyo", None),
        ("What's the time in the song by Pink Floyd?", None),
        ("What time is it in Narnia?", {"place": "Narnia"}),
        # A known name's start is not the place where the name goes on: Whisper's "La Robino"
        # for Nairobi is not LA.
        ("If I called my friend in La Robino, what time would it be?", {"place": "La Robino"}),
        ("What time is it in San Robino?", {"place": "San Robino"}),
        ("What time is it in Sydney Australia?", {"place": "Australia"}),
        ("What time is it in Paris? Tell me.", {"place": "Paris"}),
        ("What time is it at Home?", {}),
        ("What time is it in New York State?", {"place": "New York"}),
        ("What time is it in Quebec City?", {"place": "Quebec"}),
        ("how much time is left on my timer", None),
    ],
)
def test_parse_time(text: str, args: dict[str, object] | None) -> None:
    assert clock.parse_time(text) == args


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("What's the date today?", {}),
        ("what is today's date", {}),
        ("what day of the week is it", {}),
        ("whats today", {}),
        ("which day is it today", {}),
        ("what year is it", {}),
        ("Which weekday is today?", {}),
        ("tell me the date", {}),
        ("what day is it in sydney", {"place": "sydney"}),
        ("what's the date in tokyo", {"place": "tokyo"}),
        ("what month is it in australia", {"place": "australia"}),
        ("what's the date tomorrow", None),
        ("what time is it", None),
    ],
)
def test_parse_date(text: str, args: dict[str, object] | None) -> None:
    assert clock.parse_date(text) == args


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("Set a timer for five minutes.", {"seconds": 300.0}),
        ("set a timer for one and a half hours", {"seconds": 5400.0}),
        ("set a 10 minute timer", {"seconds": 600.0}),
        ("timer for 30 seconds", {"seconds": 30.0}),
        ("start a timer for an hour and a half", {"seconds": 5400.0}),
        ("set a timer for half an hour", {"seconds": 1800.0}),
        ("set a timer for a minute and a half", {"seconds": 90.0}),
        ("set timer 5 min", {"seconds": 300.0}),
        ("set a timer for a quarter of an hour", {"seconds": 900.0}),
        ("can you set a timer for 2 hours and 15 minutes please", {"seconds": 8100.0}),
        ("countdown from ninety seconds", {"seconds": 90.0}),
        ("set a pasta timer for twelve minutes", {"seconds": 720.0, "label": "pasta"}),
        ("set a timer for 10 minutes for the pasta", {"seconds": 600.0, "label": "pasta"}),
        ("set a timer called tea for 3 minutes", {"seconds": 180.0, "label": "tea"}),
        ("set an egg timer for six minutes", {"seconds": 360.0, "label": "egg"}),
        ("set a timer for 5 minutes named pizza dough", {"seconds": 300.0, "label": "pizza dough"}),
        ("set a timer for 10 minutes for me", {"seconds": 600.0}),
        ("Set a three-minute timer for nothing.", {"seconds": 180.0}),
        (
            "remind me to check the oven in twenty minutes",
            {"seconds": 1200.0, "reminder": "check the oven"},
        ),
        ("in an hour remind me to call my mom", {"seconds": 3600.0, "reminder": "call your mom"}),
        ("remind me that i need to leave in 10 minutes", {"seconds": 600.0, "reminder": "leave"}),
        ("Remind me in five minutes to call Bob.", {"seconds": 300.0, "reminder": "call Bob"}),
        (
            "remind me after an hour and a half to take my pills",
            {"seconds": 5400.0, "reminder": "take your pills"},
        ),
        (
            "Give me a reminder in 20 minutes, to move the car.",
            {"seconds": 1200.0, "reminder": "move the car"},
        ),
        ("set a reminder for ten minutes", {"seconds": 600.0}),
        ("remind me in the morning to call mom", None),
        ("set a timer", None),
        ("cancel the pasta timer", None),
        ("how much time is left on my timer", None),
        ("set an alarm for 7", None),
        ("set a timer for negative five minutes", {"seconds": -300.0}),  # the tool refuses it
        (
            "I'm making rice, set a timer for eighteen minutes.",
            {"seconds": 1080.0, "label": "rice"},
        ),
        ("I'm baking for an hour, set a timer", {"seconds": 3600.0}),
    ],
)
def test_parse_set_timer(text: str, args: dict[str, object] | None) -> None:
    assert tool_of(timers.set_timer).parse is not None
    assert tool_of(timers.set_timer).parse(text) == args


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("wake me up at seven thirty", "7:30 AM"),
        ("wake me at half past six", "6:30 AM"),
        ("Wake me at half-pass six.", "6:30 AM"),
        ("Set an alarm for a quarter pass seven in the morning.", "7:15 AM"),
        ("set an alarm for eight tomorrow", "8:00 AM"),
        ("set an alarm for two tomorrow", "2:00"),
        ("wake me up at three", "3:00"),
        ("set an alarm for 7:30 am", "7:30 AM"),
        ("set an alarm for 19:00", "19:00"),
        ("alarm at 6", "6:00"),
        ("set my alarm for half past six", "6:30"),
        ("wake me at 7 in the morning", "7:00 AM"),
        ("set an alarm for noon", "12:00 PM"),
        ("set an alarm for quarter to eight", "7:45"),
        ("wake me up at six forty five a.m.", "6:45 AM"),
        ("set the alarm for seven oh five", "7:05"),
        ("alarm for nineteen hundred hours", "19:00"),
        ("Wake me up at 5 to 7.", "6:55 AM"),
        ("set an alarm for 8 o'clock tonight", "8:00 PM"),
        ("Set an alarm for 6.30 m.", "6:30 AM"),  # Whisper's "a.m." said softly
        ("set an alarm", None),
        ("cancel my alarm", None),
        ("wake me up in 20 minutes", None),
    ],
)
def test_parse_set_alarm(text: str, at: str | None) -> None:
    parse = tool_of(timers.set_alarm).parse
    assert parse is not None
    assert parse(text) == (None if at is None else {"at": at})


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("Remind me at five p.m. to call Bob.", {"at": "5:00 PM", "reminder": "call Bob"}),
        (
            "remind me tomorrow at 7 am to take out the trash",
            {"at": "7:00 AM", "reminder": "take out the trash"},
        ),
        (
            "Remind me to pick up the kids at three thirty.",
            {"at": "3:30", "reminder": "pick up the kids"},
        ),
        ("remind me at noon that I need to eat", {"at": "12:00 PM", "reminder": "eat"}),
        ("wake me at 7 to go running", {"at": "7:00 AM"}),
    ],
)
def test_parse_alarm_reminder(text: str, args: dict[str, object]) -> None:
    parse = tool_of(timers.set_alarm).parse
    assert parse is not None
    assert parse(text) == args


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("what timers do i have", {}),
        ("how much time is left on my timer", {}),
        ("how long left on the pasta timer", {}),
        ("list my timers", {}),
        ("any timers running?", {}),
        ("check my alarms", {}),
        ("show timers", {}),
        ("how's my timer doing", {}),
        ("do i have any alarms set", {}),
        ("is there a timer running", {}),
        ("How long is left on the bread?", {}),
        ("How long until my tea is ready?", {}),
        ("how long until christmas", None),
        ("How long until the sun is up?", None),
        ("set a timer for 5 minutes", None),
        ("what does a timer look like", None),
        ("What's a good alarm sound to wake up to?", None),
        ("what alarms did i set", {}),
        ("which timer is running", {}),
        ("how does an alarm work", None),
        ("cancel my timer", None),
        ("what time is it", None),
    ],
)
def test_parse_list_timers(text: str, args: dict[str, object] | None) -> None:
    parse = tool_of(timers.list_timers).parse
    assert parse is not None and parse(text) == args


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("cancel the pasta timer", {"label": "pasta"}),
        ("cancel my timer", {}),
        ("stop the timer", {}),
        ("never mind the timer", {}),
        ("cancel all timers", {"label": "all"}),
        ("cancel the dentist reminder", {"label": "dentist"}),
        ("forget my reminder", {"label": "reminder"}),
        ("delete all my alarms", {"label": "all"}),
        ("cancel the five minute timer", {"label": "5 minutes"}),
        ("turn off the alarm", {"label": "alarm"}),
        ("cancel the 7 am alarm", {"label": "7 AM alarm"}),
        ("remove the timer called tea", {"label": "tea"}),
        ("stop the egg timer", {"label": "egg"}),
        ("cancel the timer for the pasta", {"label": "pasta"}),
        ("stop", None),
        ("set a timer for five minutes", None),
        ("Cancel everything.", {"label": "all"}),
        ("Okay, clear them all, please.", {"label": "all"}),
        ("Should I cancel everything and move to Spain?", None),
        ("stop everything you're doing", None),
    ],
)
def test_parse_cancel_timer(text: str, args: dict[str, object] | None) -> None:
    parse = tool_of(timers.cancel_timer).parse
    assert parse is not None and parse(text) == args


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("What's twelve plus twenty-nine?", "twelve plus twenty-nine"),
        ("what's 15 percent of 80", "15 percent of 80"),
        ("whats 15% of 80", "15% of 80"),
        ("what is half of ninety", "half of ninety"),
        ("what's the square root of 144", "square root of 144"),
        ("what's seven squared", "seven squared"),
        ("what is 2 to the power of 10", "2 to the power of 10"),
        ("what is 3 to the 4th power", "3 to the 4th power"),
        ("how much is 9 multiplied by 8", "9 multiplied by 8"),
        ("calculate 6 x 7", "6 x 7"),
        ("what's six times seven", "six times seven"),
        ("what is 81 over 9", "81 over 9"),
        ("what's 100 divided by 7", "100 divided by 7"),
        ("what's 2 + 2", "2 + 2"),
        ("add five and three", "5 + 3"),
        ("what's a third of ninety", "a third of ninety"),
        ("compute (3 + 4) * 2", "(3 + 4) * 2"),
        ("what is 1 divided by 0", "1 divided by 0"),
        ("what time is it", None),
        ("set a timer for one and a half hours", None),
        ("how many kilometers are in three miles", None),
        ("what is the capital of spain", None),
        ("what's 5", None),
        ("minus ten cells is in fahrenheit", None),
        ("what is minus ten plus four", "minus ten plus four"),
        ("What's the cube of four?", "4 ** 3"),
        ("What's eight cubes?", "eight cubed"),  # Whisper's hearing of "cubed"
        ("what is 9 square", "9 squared"),
        ("I have eight cubes.", None),
        ("Give me two squares.", None),
        ("what's ten plus ten in binary", None),
        ("What's two plus two in a poem?", None),  # something to write
    ],
)
def test_parse_calculation(text: str, expression: str | None) -> None:
    expected = None if expression is None else {"expression": expression}
    assert calculator.parse_calculation(text) == expected


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("How many kilometers are in three miles?", (3.0, "miles", "kilometers")),
        (
            "convert a hundred degrees fahrenheit to celsius",
            (100.0, "degrees fahrenheit", "celsius"),
        ),
        ("what's 5 feet in meters", (5.0, "feet", "meters")),
        ("what is 70 kilograms in pounds", (70.0, "kilograms", "pounds")),
        ("how many cups in a liter", (1.0, "liter", "cups")),
        ("how many ounces are there in a pound", (1.0, "pound", "ounces")),
        ("3 miles to km", (3.0, "miles", "km")),
        ("change 30 celsius into fahrenheit", (30.0, "celsius", "fahrenheit")),
        ("convert a hundred fahrenheit to celsiuses", (100.0, "fahrenheit", "celsiuses")),
        ("what's six feet two in centimeters", (74.0, "inches", "centimeters")),
        ("how tall is 5 foot 10 inches in meters", (70.0, "inches", "meters")),
        ("5 feet is how many meters", (5.0, "feet", "meters")),
        ("how many feet is 2 meters", (2.0, "meters", "feet")),
        (
            "what's sixty miles per hour in kilometers per hour",
            (60.0, "miles per hour", "kilometers per hour"),
        ),
        ("how many square feet in an acre", (1.0, "acre", "square feet")),
        (
            "convert minus 40 degrees celsius to fahrenheit",
            (-40.0, "degrees celsius", "fahrenheit"),
        ),
        ("convert two and a half gallons to litres", (2.5, "gallons", "litres")),
        ("How many kilogrammes is twelve pounds?", (12.0, "pounds", "kilogrammes")),
        # Races by their distance.
        ("How many miles is a 10K run?", (10.0, "km", "miles")),
        ("how far is a 5k in miles", (5.0, "km", "miles")),
        ("how long is a marathon in miles", (42.195, "km", "miles")),
        ("a half marathon is how many miles", (21.0975, "km", "miles")),
        # A distance said with the race is the one asked about.
        ("How many miles is a marathon of forty-two kilometers?", (42.0, "kilometers", "miles")),
        # Money: read so that the tool says it has no exchange rates.
        ("convert ten euros to dollars", (10.0, "euros", "dollars")),
        ("How much is $50 in British pounds?", (50.0, "dollars", "pounds")),
        ("how many yen for 20 euros", (20.0, "euros", "yen")),
        ("Convert 10k dollars to euros.", (10000.0, "dollars", "euros")),
        ("I paid 20 dollars in cash", None),
        # Asked in so many words: the tool says what it does not know or cannot do.
        ("Convert five blargs to meters.", (5.0, "blargs", "meters")),
        ("convert ten kilograms to meters", (10.0, "kilograms", "meters")),
        ("convert 5 ideas into actions", None),
        ("If I save 40 dollars a week for 12 weeks, how much do I have?", None),  # "do": no day
        ("what time is it in new york", None),
        ("what's 12 plus 29", None),
    ],
)
def test_parse_conversion(text: str, args: tuple[float, str, str] | None) -> None:
    expected = (
        None if args is None else dict(zip(("value", "from_unit", "to_unit"), args, strict=True))
    )
    assert units.parse_conversion(text) == expected


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("what is the capital of spain", ("spain", "capital")),
        ("What's Spain's capital?", ("Spain", "capital")),
        ("which city is the capital of france", ("france", "capital")),
        ("how many people live in japan", ("japan", "population")),
        ("what's the population of india", ("india", "population")),
        ("how many inhabitants does germany have", ("germany", "population")),
        ("what language do they speak in brazil", ("brazil", "languages")),
        ("what languages are spoken in switzerland", ("switzerland", "languages")),
        ("what do people speak in barcelona", ("Spain", "languages")),
        ("what money do they use in switzerland", ("switzerland", "currency")),
        ("what currency does japan use", ("japan", "currency")),
        ("what's the currency in the uk", ("uk", "currency")),
        # A country Whisper wrote as words that sound like it, where a country's name goes.
        ("What currency does hunger use?", ("Hungary", "currency")),
        ("What language do they speak in bulk area?", ("Bulgaria", "languages")),
        ("What language is Python written in?", None),  # "written": 1 from "Britain"
        ("What's the population of polar bears?", None),  # "polar": 1 from "Palau"
        ("Can you explain currencies?", None),  # "can you": 1 from "Kenya"
        ("what is the capital of narnia", ("narnia", "capital")),
        ("What is the capital of Narnia?", ("Narnia", "capital")),
        ("What's the capital of happiness?", None),
        ("What currency did ancient Greece use?", None),  # today's data: another time's question
        ("what was the capital of germany in 1980", None),
        ("What currency did Italy use before the euro?", None),
        ("What language is spoken in heaven?", None),
        ("What language is spoken in Heaven?", None),
        ("what's the population of new york", None),
        ("what is the capital of texas", None),
        ("what time is it in tokyo", None),
    ],
)
def test_parse_country_question(text: str, args: tuple[str, str] | None) -> None:
    expected = None if args is None else {"country": args[0], "fact": args[1]}
    assert countries.parse_country_question(text) == expected


@pytest.mark.parametrize(
    ("fn", "text"),
    [
        (clock.get_time, "what time is it in new york"),
        (timers.set_timer, "set a pasta timer for twelve minutes"),
        (timers.set_alarm, "wake me up at seven thirty"),
        (timers.cancel_timer, "cancel the pasta timer"),
        (calculator.calculate, "what's 15 percent of 80"),
        (units.convert_units, "How many kilometers are in three miles?"),
        (countries.country_info, "what money do they use in switzerland"),
    ],
)
def test_parsed_arguments_pass_the_schema(fn: Callable[..., object], text: str) -> None:
    t = tool_of(fn)
    assert t.parse is not None
    args = t.parse(text)
    assert args is not None and t.check(args) == args
