"""The built-in tools' parsers on the many ways people say a request aloud: other verbs and word
orders, fillers ("um", "hey", "could you"), numbers in words or digits, and an ASR's text (lower
case, no punctuation); and the questions worded like requests that no tool answers (None), each
of which would be a false call if a parser read it."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from dllm_voice.app.tools.builtin import calculator, clock, countries, timers, units
from tests.app.tools.builtin_helpers import tool_of

Parse = Callable[[str], "dict[str, object] | None"]


def _parser(fn: Callable[..., object]) -> Parse:
    parse = tool_of(fn).parse
    assert parse is not None
    return parse


PARSERS: dict[str, Parse] = {
    "get_time": clock.parse_time,
    "get_date": clock.parse_date,
    "set_timer": _parser(timers.set_timer),
    "set_alarm": _parser(timers.set_alarm),
    "list_timers": _parser(timers.list_timers),
    "cancel_timer": _parser(timers.cancel_timer),
    "calculate": calculator.parse_calculation,
    "convert_units": units.parse_conversion,
    "country_info": countries.parse_country_question,
}


@pytest.mark.parametrize(
    ("text", "place"),
    [
        ("any idea what the hour is over in lisbon", "lisbon"),
        ("do you know what the time is in denver right now", "denver"),
        ("um what time is it", None),
        ("hey could you tell me the time please", None),
        ("do you have the time", None),
        ("you wouldn't have the time by any chance", None),
        ("what's the time right now", None),
        ("what hour is it", None),
        ("whats the hour", None),
        ("so what time have we got", None),
        ("time please", None),
        ("what o'clock is it", None),
        ("tell me the time, thanks", None),
        ("what does the clock say in lima", "lima"),
        ("ok so utc time right now", "utc"),
        ("what time's it", None),
        ("what time is it in tokyo", "tokyo"),
        ("tell me the current time in london", "london"),
        ("what's the local time in sydney", "sydney"),
        ("could you tell me what time it is in paris", "paris"),
        ("What time is it on the west coast, in Los Angeles?", "Los Angeles"),
        ("what time is it, in tokyo", "tokyo"),
        ("What time is it back home in Manila?", "Manila"),
        ("time in berlin please", "berlin"),
        ("in dubai what time is it", "dubai"),
        ("do you know the time in mumbai", "mumbai"),
        ("what's the hour in cairo right now", "cairo"),
        ("can you check the time in rome for me", "rome"),
        ("what time would it be in chicago right now", "chicago"),
        ("i need the time in singapore", "singapore"),
        ("What time is it over in Japan?", "Japan"),
        ("my brother lives in denver is it late there", "denver"),
        ("is it night time in seoul right now", "seoul"),
        ("is it morning yet in new zealand", "new zealand"),
        ("My sister lives in Madrid, is it dinner time there yet?", "Madrid"),
        ("is it still business hours in singapore", "singapore"),
        ("are they still awake in lisbon or is it the middle of the night", "lisbon"),
        ("what's the exact time in manila", "manila"),
        ("what is the correct time", None),
        ("Can you check the clock for me?", None),
        ("What time is it? I have a meeting tomorrow.", None),
        ("I'm flying to Rome tomorrow; what's the time there now?", "Rome"),
        ("What's the time like in Istanbul?", "Istanbul"),
        ("What hours is it in Cairo at the moment?", "Cairo"),  # Whisper's plural
        ("how do i check the time in tokyo", "tokyo"),
    ],
)
def test_time_phrasings(text: str, place: str | None) -> None:
    assert clock.parse_time(text) == ({} if place is None else {"place": place})


@pytest.mark.parametrize(
    ("text", "place"),
    [
        ("um what's the date", None),
        ("what day is it", None),
        ("hey what day is today", None),
        ("could you tell me the date please", None),
        ("what's today's date", None),
        ("what date is it", None),
        ("which day of the week is it", None),
        ("what month are we in", None),
        ("what year are we in", None),
        ("do you know what day it is", None),
        ("what is the date today", None),
        ("what date are we at", None),
        ("what's the day today", None),
        ("is today tuesday", None),
        ("what's the day and date", None),
        ("what day of the month is it", None),
        ("what is the date in tokyo", "tokyo"),
        ("what day is it in new zealand right now", "new zealand"),
        ("is it already saturday in auckland", "auckland"),
        ("has monday started in sydney yet", "sydney"),
        ("is it still friday in los angeles", "los angeles"),
        ("what's the date over in london", "london"),
        ("give me the current date for Toronto", "Toronto"),
        ("Is today the fifth or the sixth?", None),
        ("is it the 21st today", None),
        ("What day on the week is today?", None),  # Whisper's "on" for "of"
    ],
)
def test_date_phrasings(text: str, place: str | None) -> None:
    assert clock.parse_date(text) == ({} if place is None else {"place": place})


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("um set a timer for like twenty minutes", {"seconds": 1200.0}),
        ("could you start a three minute timer", {"seconds": 180.0}),
        ("put a timer on for 15 minutes", {"seconds": 900.0}),
        ("give me a 2 minute timer", {"seconds": 120.0}),
        ("timer ten minutes", {"seconds": 600.0}),
        ("ninety second timer", {"seconds": 90.0}),
        ("set a timer for one second", {"seconds": 1.0}),
        ("set a timer for a couple of minutes", {"seconds": 120.0}),
        ("set a twenty-five minute timer please", {"seconds": 1500.0}),
        ("start a countdown for 90 seconds", {"seconds": 90.0}),
        ("count down from two minutes", {"seconds": 120.0}),
        ("start counting down from ten seconds", {"seconds": 10.0}),
        ("remind me in ten minutes", {"seconds": 600.0}),
        ("buzz me in forty five minutes", {"seconds": 2700.0}),
        ("ping me in half an hour", {"seconds": 1800.0}),
        ("alert me in 30 seconds", {"seconds": 30.0}),
        ("let me know in five minutes", {"seconds": 300.0}),
        ("tell me when 10 minutes are up", {"seconds": 600.0}),
        ("wake me in twenty minutes", {"seconds": 1200.0}),
        ("can you time 4 minutes for me", {"seconds": 240.0}),
        ("set timer 3 mins", {"seconds": 180.0}),
        ("set a timer for an hour and 20 minutes", {"seconds": 4800.0}),
        ("set a timer for two and a half minutes", {"seconds": 150.0}),
        ("start a 30 second countdown", {"seconds": 30.0}),
        ("remind me in an hour", {"seconds": 3600.0}),
        ("set a timer for 3 minutes and 30 seconds", {"seconds": 210.0}),
        ("notify me in 2 minutes", {"seconds": 120.0}),
        ("can you time 40 seconds", {"seconds": 40.0}),
        ("set a tea timer for four minutes", {"seconds": 240.0, "label": "tea"}),
        ("twelve minute timer for the pasta please", {"seconds": 720.0, "label": "pasta"}),
        ("the eggs need six minutes let me know", {"seconds": 360.0, "label": "eggs"}),
        ("give the rice 18 minutes and tell me", {"seconds": 1080.0, "label": "rice"}),
        ("Give it ten minutes and tell me.", {"seconds": 600.0}),  # Whisper's full stop
        ("I'm boiling eggs, give me seven minutes.", {"seconds": 420.0, "label": "eggs"}),
        ("my bread needs forty minutes can you keep track", {"seconds": 2400.0, "label": "bread"}),
        (
            "i'm putting the cookies in now remind me in twelve minutes",
            {"seconds": 720.0, "label": "cookies"},
        ),
        ("i'm going for a 40 minute run, set a timer", {"seconds": 2400.0, "label": "run"}),
        (
            "the potatoes need 25 minutes, time them for me",
            {"seconds": 1500.0, "label": "potatoes"},
        ),
        # A number before a duration is no time of day for an alarm.
        ("I want to have four twenty minutes wake me up after.", {"seconds": 1200.0}),
        # The name said last, on its own; not a sign-off.
        ("Timer, nine minutes, hard boiled eggs.", {"seconds": 540.0, "label": "hard boiled eggs"}),
        ("Fifteen minute timer, laundry.", {"seconds": 900.0, "label": "laundry"}),
        ("Set a timer for ten minutes, thank you.", {"seconds": 600.0}),
        ("Start a three minute timer, okay?", {"seconds": 180.0}),
        ("Two minute timer, go.", {"seconds": 120.0}),
        # A length on its own after what is cooking.
        ("I'm roasting peppers, fifteen minutes please.", {"seconds": 900.0, "label": "peppers"}),
        ("Start the clock, five minutes.", {"seconds": 300.0}),
        (
            "Okay, so I'm making cookies. 12 minutes, please.",
            {"seconds": 720.0, "label": "cookies"},
        ),
        ("Time six minutes for me, I'm heading out.", {"seconds": 360.0}),
        ("Time for one hour twenty minutes, please.", {"seconds": 4800.0}),  # Whisper's "timer"
        ("Set a timer for a quarter in a hour.", {"seconds": 900.0}),  # Whisper's "in" for "of"
        # A length corrected as it is said replaces the one before.
        ("Set a timer for twenty minutes, sorry, twenty-five minutes.", {"seconds": 1500.0}),
        ("Set a timer for 10 minutes. No, make it 12.", {"seconds": 720.0}),
        ("Timer for one hour, no, one hour twenty minutes.", {"seconds": 4800.0}),
        (
            "Set a timer for five minutes for the pasta, no, eight minutes.",
            {"seconds": 480.0, "label": "pasta"},
        ),
        (
            "Remind me to call Bob in 10 minutes, no, 15 minutes.",
            {"seconds": 900.0, "reminder": "call Bob"},
        ),
    ],
)
def test_set_timer_phrasings(text: str, args: dict[str, object]) -> None:
    assert PARSERS["set_timer"](text) == args


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("set an alarm for 7 am", "7:00 AM"),
        ("um wake me up at six thirty", "6:30 AM"),
        ("set alarm 6 am", "6:00 AM"),
        ("can you wake me at half past seven", "7:30 AM"),
        ("please set an alarm at eight in the morning", "8:00 AM"),
        ("i need an alarm for 5:45", "5:45"),
        ("get me up at 6", "6:00 AM"),
        ("set my alarm to 9 pm", "9:00 PM"),
        ("set an alarm for quarter past six", "6:15"),
        ("create an alarm for ten o'clock", "10:00"),
        ("wake me at noon", "12:00 PM"),
        ("set an alarm for six fifteen a m", "6:15 AM"),
        ("alarm at seven forty five please", "7:45"),
        ("could you set an alarm for 11 pm", "11:00 PM"),
        ("make my phone ring at five thirty tomorrow morning", "5:30 AM"),
        ("wake me up tomorrow at 7 in the morning", "7:00 AM"),
        ("buzz me at 4 this afternoon", "4:00 PM"),
        ("i need to be up at 5 am", "5:00 AM"),
        ("alarm 7 15", "7:15"),
        ("set a wake up call for 6", "6:00 AM"),
        ("alarm for 21:30 tomorrow morning", "21:30"),
        ("could you make my phone ring at 730 tomorrow morning", "7:30 AM"),  # Whisper's digits
        ("Please set an alarm for 645.", "6:45"),
        ("set an alarm for 1130 pm", "11:30 PM"),
        ("I want to get up at five forty-five.", "5:45 AM"),
        ("i'd like to be up at seven tomorrow", "7:00 AM"),
        ("Set an alarm for seven, no, eight in the morning.", "8:00 AM"),
        ("wake me at 6:30, no wait, 6:45", "6:45 AM"),
        ("Alarm for seven fifteen, I mean seven forty-five, in the morning.", "7:45 AM"),
    ],
)
def test_set_alarm_phrasings(text: str, at: str) -> None:
    assert PARSERS["set_alarm"](text) == {"at": at}


@pytest.mark.parametrize(
    "text",
    [
        "what timers do i have",
        "how long is left on my timer",
        "are there any timers",
        "list all my alarms",
        "show me my timers",
        "what alarms are set",
        "check on my timer",
        "how's the pasta timer doing",
        "when does my timer go off",
        "when is my alarm",
        "what time is my alarm set for",
        "how many timers are running",
        "is my timer still going",
        "um how much longer on the timer",
        "what's left on the egg timer",
        "how much time is left",
        "how long until my timer goes off",
        "did i set an alarm",
        "is there a timer running",
        "timer status",
        "give me a rundown of my timers",
        "a quick overview of the alarms please",
        "can you go over my timers",
    ],
)
def test_list_timers_phrasings(text: str) -> None:
    assert PARSERS["list_timers"](text) == {}


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("cancel the timer", {}),
        ("stop my timer", {}),
        ("kill the timer", {}),
        ("no more timer please", {}),
        ("stop the countdown", {}),
        ("um never mind the timer", {}),
        ("scrap that timer", {}),
        ("i don't need the timer anymore", {}),
        ("cancel my alarm", {"label": "alarm"}),
        ("turn the alarm off", {"label": "alarm"}),
        ("delete the pasta timer", {"label": "pasta"}),
        ("cancel all my timers", {"label": "all"}),
        ("clear every alarm", {"label": "all"}),
        ("can you cancel the five minute timer", {"label": "5 minutes"}),
        ("get rid of my 7 am alarm", {"label": "7 AM alarm"}),
        ("cancel the alarm for six thirty", {"label": "6:30 alarm"}),  # either half of the day
        ("turn off the 18:30 alarm", {"label": "6:30 PM alarm"}),
        ("please cancel the tea timer", {"label": "tea"}),
        ("the eggs are done so drop the timer", {"label": "eggs"}),
        ("the rice is ready you can stop the timer", {"label": "rice"}),
        ("the laundry is out early so drop at timer", {"label": "laundry"}),  # "that timer"
        ("turn off timer", {}),
        ("Cancelled the rice timer.", {"label": "rice"}),  # Whisper's "cancel the"
        ("okay cancelled my alarm", {"label": "alarm"}),
    ],
)
def test_cancel_timer_phrasings(text: str, args: dict[str, object]) -> None:
    assert PARSERS["cancel_timer"](text) == args


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("what's twelve plus twenty nine", 41),
        ("um what's a hundred divided by four", 25),
        ("cut three hundred and fifty in half", 175),
        ("split 120 three ways", 40),
        ("I owe 60 dollars split three ways, how much each?", 20),
        ("halve 84", 42),
        ("double forty five", 90),
        ("triple 12", 36),
        ("what do you get when you square nine", 81),
        ("cube three", 27),
        ("multiply 6 by 7", 42),
        ("divide 100 by 8", 12.5),
        ("subtract 17 from 50", 33),
        ("take 8 away from 20", 12),
        ("what do i get if i take thirty from two hundred", 170),
        ("add up 13 and 29 for me", 42),
        ("add 5 to 12", 17),
        ("what's the sum of 10 20 and 30", 60),
        ("the product of two hundred fifty and four", 1000),
        ("what's the product on 250 and four", 1000),  # Whisper's "on" for "of"
        ("the sum on 12 and 30", 42),
        ("square root of one forty-four", 12),
        ("hey what do you get if you multiply twelve by eleven", 132),
        ("how much is three times four", 12),
        ("what does 2 plus 2 equal", 4),
        ("what is one point five plus two point two five", 3.75),
        ("what's 15 percent of 80", 12),
        ("what is fifteen percent of eighty", 12),
        ("how much is 20% of 150", 30),
        ("25% of 60% please", 15),  # Whisper's "25 percent of 60"
        ("calculate 3 percent of a thousand", 30),
        ("what's a 15 percent tip on 80 dollars", 12),
        ("the bill is forty dollars what's a twenty percent tip", 8),
        ("sixty dollars with ten percent off how much do i save", 6),
        ("what's twenty percent off of fifty dollars", 40),
        ("how much is 30% off 80", 56),
        ("what is 45 plus 10 percent", 49.5),
        ("what's 200 minus 25%", 150),
        ("i have 63 marbles and lose 19 how many are left", 44),
        ("if i had 12 eggs and used 5 how many would i have", 7),
        ("i have 40 dollars and spend 15 what's left", 25),
        ("i had 7 apples and bought 5 more how many do i have", 12),
        ("ninety dollars split between 4 people", 22.5),
        ("how much is 144 shared evenly among 12 friends", 12),
        ("if 900 is divided among thirty six people what does each get", 25),
        ("what's seven plus eight plus nine", 24),
        ("can you work out 48 divided by 6", 8),
        ("what is 100 minus 37", 63),
        ("calculate seventeen times twenty three please", 391),
        ("what's the square root of eighty one", 9),
        ("what's 2 to the power of 8", 256),
        ("how much is 30 dollars plus 15 dollars", 45),
        ("i bought 3 shirts at 20 dollars each how much did i spend", 60),
        ("if a pizza costs twelve dollars and i buy three what's the total", 36),
        ("if i save 40 dollars a week for 12 weeks how much do i have", 480),
        ("a ticket costs 15 dollars and we need 4, how much is that", 60),
        ("what's the difference between 100 and 37", 63),
        ("what's the average of 4 8 and 12", 8),
        ("increase 80 by 10 percent", 88),
        ("reduce 200 by 15 percent", 170),
        ("whats 7 x 8", 56),
        ("negative 5 plus 8", 3),
        ("hey square 12", 144),
        ("five factorial", 120),
        ("what is the factorial of four", 24),
        ("what's forty times itself", 1600),
        ("90 take away 12", 78),
        ("how much is a third of 120", 40),
        ("a coat costs 120 dollars with 25 percent off how much do i pay", 90),
        ("one hundred forty four, take its square root", 12),
        ("27. now find the cube root", 3),
        ("and 19 and 23", 42),  # Whisper's "add" at the start of numbers alone
        ("And up fourteen twenty-two and thirty-one.", 67),
        ("How much is half on three hundred and fifty?", 175),  # "on" for "of"
        ("If a ticket costs fourteen dollars, how much are five tickets?", 70),
        ("I had two hundred dollars and paid seventy-five for groceries, what's left?", 125),
        ("i always forget what seven times it", 56),  # the last number heard by its sound
        ("I always forget what seven times made.", 56),  # 1.5 phonemes, no other number near
        ("what's six times late", 48),
        ("what's nine times for", 36),
        ("what is 12 divided by sex", 2),
        ("Can you add it hundred and fifty to twelve hundred?", 2050),  # "eight" by its sound
        ("Take 48 from 100 and free.", 55),  # "three" by its sound
        ("What's two hundred and sex minus six?", 200),
        ("Add a hundred and ten to a hundred and fifty.", 260),
        ("What's fifteen percent on sixty?", 9),  # Whisper's "on" for "of"
        ("What is one half plus one quarter?", 0.75),
        ("one third plus one sixth", 0.5),
        ("three eighths of 64", 24),
        ("If I earn 25 dollars an hour for 8 hours, how much do I make?", 200),
        ("Split a hundred and twenty dollars four ways.", 30),
        ("I have 52 cards, deal them equally among 4 people, how many each?", 13),
        ("If I hand out thirty sweets to six kids, how many does each get?", 5),
        ("If I buy four coffees at three fifty each, what's the total?", 14),
        ("I got paid nine hundred and spent three hundred and twenty, what's left?", 580),
        ("Three people split a bill of ninety dollars. How much does each pay?", 30),
        ("What's a dozen times eight?", 96),
        ("A taxi costs thirty-two dollars and I give the driver forty, what's my change?", 8),
        ("I pay with 100 dollars for shoes that cost 64, how much change?", 36),
        # A sum corrected as it is said: the restatement, or the number said again.
        ("What's twelve times seven, no, twelve times eight?", 96),
        ("What's 15 percent of 80, sorry, of 90?", 13.5),
        ("what is ten plus five, no wait, plus six", 16),
        ("What is seven times eight, no, nine?", 63),
        ("What is two plus two, no kidding?", 4),
    ],
)
def test_calculation_phrasings(text: str, value: float) -> None:
    args = calculator.parse_calculation(text)
    assert args is not None, text
    said = calculator.calculate(str(args["expression"]))
    assert re.search(rf" is {value:g}\.$", said), said


@pytest.mark.parametrize(
    ("text", "value", "source", "target"),
    [
        ("How many kilometers is a three mile run?", 3.0, "mile", "kilometer"),
        ("its a hundred degrees fahrenheit outside what is that in celsius", 100.0, "degF", "degC"),
        ("convert 5 miles to kilometers", 5.0, "mile", "kilometer"),
        ("what's 10 kilos in pounds", 10.0, "kilogram", "pound"),
        ("how many feet in a mile", 1.0, "mile", "foot"),
        ("how many grams are in an ounce", 1.0, "ounce", "gram"),
        ("um how many centimeters is 6 inches", 6.0, "inch", "centimeter"),
        ("what is 72 fahrenheit in celsius", 72.0, "degF", "degC"),
        ("72 degrees f in c", 72.0, "degF", "degC"),
        ("how much is 3 cups in milliliters", 3.0, "cup", "milliliter"),
        ("i'm six feet tall how much is that in centimeters", 6.0, "foot", "centimeter"),
        ("what's 100 km in miles", 100.0, "kilometer", "mile"),
        ("could you convert twenty degrees celsius to fahrenheit please", 20.0, "degC", "degF"),
        ("how many liters is 2 gallons", 2.0, "gallon", "liter"),
        ("two pounds in kilograms", 2.0, "pound", "kilogram"),
        ("what is 30 miles per hour in kilometers per hour", 30.0, "mph", "kph"),
        ("how many ounces in a cup", 1.0, "cup", "fluid_ounce"),
        ("How many feet in 3 meters, no, 4 meters?", 4.0, "meter", "foot"),
        ("Convert 10 miles, no wait, 12 miles to kilometers.", 12.0, "mile", "kilometer"),
        (
            "What's fifty degrees Fahrenheit, no, sixty degrees Fahrenheit in Celsius?",
            60.0,
            "degF",
            "degC",
        ),
        ("how far is 5 kilometers in miles", 5.0, "kilometer", "mile"),
        ("how hot is 40 celsius in fahrenheit", 40.0, "degC", "degF"),
        ("i ran 10 kilometers how many miles is that", 10.0, "kilometer", "mile"),
        ("a marathon is 26.2 miles how far is that in kilometers", 26.2, "mile", "kilometer"),
        ("my bag weighs 20 kilograms is that more than 40 pounds", 20.0, "kilogram", "pound"),
        ("a 9 inch pan is how many centimeters wide", 9.0, "inch", "centimeter"),
        ("my recipe calls for 250 grams of butter how many ounces is that", 250.0, "gram", "ounce"),
        ("turn 3 tablespoons into teaspoons", 3.0, "tablespoon", "teaspoon"),
        ("put 4 quarts in liters for me", 4.0, "quart", "liter"),
        ("how many seconds are there in an hour", 1.0, "hour", "second"),
        ("what's one and a half miles in meters", 1.5, "mile", "meter"),
        ("express 5000 meters in kilometers", 5000.0, "meter", "kilometer"),
        ("how many yards is a 100 meter dash", 100.0, "meter", "yard"),
        ("a half gallon of milk is how many liters", 0.5, "gallon", "liter"),
        ("minus ten celsius is how much in fahrenheit", -10.0, "degC", "degF"),
        ("what's 100°F in celsius", 100.0, "degF", "degC"),
        ("a liter is how many cups", 1.0, "liter", "cup"),
        ("10 miles equals how many kilometers", 10.0, "mile", "kilometer"),
        ("twenty celsius what's that in fahrenheit", 20.0, "degC", "degF"),
        ("whats 5 foot in cm", 5.0, "foot", "centimeter"),
        ("how many tablespoons in a quarter cup", 0.25, "cup", "tablespoon"),
        ("how fast is 100 kilometers an hour in miles per hour", 100.0, "kph", "mph"),
        ("how heavy is 12 stone in kilograms", 12.0, "stone", "kilogram"),
        ("what's 5 km/h in mph", 5.0, "kph", "mph"),
        ("i'm six feet tall how much is that meters", 6.0, "foot", "meter"),
    ],
)
def test_conversion_phrasings(text: str, value: float, source: str, target: str) -> None:
    args = units.parse_conversion(text)
    assert args is not None, text
    assert args["value"] == pytest.approx(value)
    said = units.convert_units(float(value), str(args["from_unit"]), str(args["to_unit"]))
    assert said == units.convert_units(float(value), source, target)


@pytest.mark.parametrize(
    "text",
    ["set a timer for 1 hour and 30 minutes", "remind me in 5 minutes", "wake me at 7 am"],
)
def test_conversion_leaves_timers(text: str) -> None:
    assert units.parse_conversion(text) is None


@pytest.mark.parametrize(
    ("text", "country", "fact"),
    [
        ("um what's the capital of france", "france", "capital"),
        ("capital of japan", "japan", "capital"),
        ("what is the capital city of australia", "australia", "capital"),
        ("tell me the capital of canada please", "canada", "capital"),
        ("which city is germany's capital", "germany", "capital"),
        ("is sydney the capital of australia", "australia", "capital"),
        ("what's the population of brazil", "brazil", "population"),
        ("how many people live in china", "china", "population"),
        ("how many people are there in india", "india", "population"),
        ("how big is the population of mexico", "mexico", "population"),
        ("population of nigeria", "nigeria", "population"),
        ("what language do they speak in portugal", "portugal", "languages"),
        ("what's the official language of egypt", "egypt", "languages"),
        ("which languages are spoken in belgium", "belgium", "languages"),
        ("what currency do they use in thailand", "thailand", "currency"),
        ("what money does sweden use", "sweden", "currency"),
        ("hey what currency is used in japan", "japan", "currency"),
        ("what currency should i bring on my trip to vietnam", "vietnam", "currency"),
        ("could you tell me the capital of italy please", "italy", "capital"),
        ("what is kenya's capital", "kenya", "capital"),
        ("peru's capital is it lima", "peru", "capital"),
        ("How populated is India?", "India", "population"),
        # A people named for its country; the most populous one of a shared name.
        ("What languages do Austrians speak?", "Austria", "languages"),
        ("What money do the Chinese use?", "China", "currency"),
        ("which language do new zealanders speak", "New Zealand", "languages"),
    ],
)
def test_country_phrasings(text: str, country: str, fact: str) -> None:
    assert countries.parse_country_question(text) == {"country": country, "fact": fact}


# Worded like requests, asked of no tool: every parser must leave them.
NOT_TOOL_REQUESTS = [
    "what time does the sun set",
    "what time does the store close",
    "tell me about the history of time zones",
    "how much time do i need to boil an egg",
    "do you speak french",
    "what is time",
    "what alarm sound is the least annoying",
    "what's two plus two in a math joke",
    "i'm cooking dinner, it takes 30 minutes, any tips?",
    "a coffee costs four dollars and i have ten, can i buy two?",
    "what languages do programmers speak",
    "what's a good time to visit japan",
    "what time did the titanic sink",
    "how many people live near me",
    "how many people live in my house",
    "why is the sky blue",
    "what's half the battle",
    "what day is thanksgiving",
    "what's the date of the moon landing",
    "what's the date for the wedding",
    "do you know the time it takes to fly to rome",
    "what's a good date idea",
    "how long does it take to boil an egg",
    "i ran for ten minutes today",
    "the meeting is in 10 minutes",
    "i hate my alarm clock",
    "how many feet does a centipede have",
    "how far is the moon",
    "how many miles did i run",
    "what's the weather in paris",
    "who won the world cup in 2018",
    "tell me a joke about the number seven",
    "i'm twenty five years old",
    "what happened in 1969",
    "what happened on the seventh of july",
    "is it the eighth wonder of the world",
    "I worked eight hours today",
    "i have two cats and three dogs",
    "what's the plus side of moving",
    "what is capital punishment",
    "what language should i learn",
    "how much money do i have",
    "what is the population of bacteria in the gut",
    "what's the square footage of my house",
    "one more thing",
    "how did washington end up being the capital",
    "play the top 40",
    "how do you say hello in french",
    "what is the time complexity of quicksort",
    "is it a good idea to take a second job",
    "who is number one on the charts",
    "my alarm didn't go off this morning",
    "how many calories are in an apple",
    "in 2020 about 20 percent of people worked from home",
    "my phone is at 15 percent",
    "back to square one",
    "tell me about the five minute rule",
    "can you tell me a two minute story",
    "how many minutes does it take to walk a mile",
    "how many hours do you sleep in a day",
    "how many cups of flour in a 5 pound bag",
    "what's the best way to cut an onion in half",
    "how much time is left in the game",
    "what's the difference between a frog and a toad",
    "is today a holiday",
    "what's the average height of a man",
    "what's a good alarm clock",
    "tell me a joke about timers",
    "how many languages are there in the world",
    "is universal healthcare a good idea",
    "when is the best time of day to walk my dog",
    "and so on and so forth",
    "what is the right time to plant tomatoes",
    "we turned 2 rooms into offices",
    "the top hundred songs of the year",
    "what should i name my timer at",  # Whisper's "timer app"
    "how many people live on the island",  # not Iceland ("Island" in the data)
    "what is the population of the island of crete",  # nor Iceland by its sound
    "what time should i go to bed if i wake up at six",
    "is it true that sweden has no capital punishment",
    "what's the date palm tree",
    "tell me about the first timer ever invented",
    "how do i say what time is it in spanish",
    "is it the first time you've heard this",
    "what time will it be in tokyo tomorrow",
    "i cancelled the rice timer yesterday",
    "i want to get up earlier any tips",
    "and then 3 and 4 more",
    "what day of the week is christmas this year",
    "what day of the week does my birthday fall on",
    "put half on the table",
    "what time is it on mars",
    "time for a break in ten minutes",
    "my alarm went off at six, no joke",
    "my alarm didnt go off at 7 this morning",
    "is it time for bed",
    "i have eight cubes",
    "give me two squares",
    "is it better to set one alarm or many",
    "should i set three alarms or just one",
    "is it dinner time yet",
    "how do i deal with 3 kids",
    "give me seven minutes",
    "What's the square root of negative one called?",
    "what do you call ten to the power of a hundred",
    "i dealt cards to 4 players",
    "How do I set the clock on my oven?",
    "how do i check the clock on my own room",
    "what hours is the shop open",
    "what's three times more",
    "it's ten times better",
    "how much is five times that",
]


@pytest.mark.parametrize("text", NOT_TOOL_REQUESTS)
@pytest.mark.parametrize("tool", list(PARSERS))
def test_not_a_tool_request(tool: str, text: str) -> None:
    assert PARSERS[tool](text) is None


@pytest.mark.parametrize(
    ("text", "value", "source", "target"),
    [
        ("convert three gallons into leaders", 3.0, "gallon", "liter"),  # liters
        ("two cops in milliliters", 2.0, "cup", "milliliter"),  # cups
        ("what's ten meters in feat", 10.0, "meter", "foot"),  # feet
        ("how many grams is ate ounces", 8.0, "ounce", "gram"),  # eight
        ("i drove sex miles how many kilometers is that", 6.0, "mile", "kilometer"),  # six
    ],
)
def test_a_misheard_unit_or_number_is_read_by_its_sound(
    text: str, value: float, source: str, target: str
) -> None:
    args = units.parse_conversion(text)
    assert args is not None, text
    assert args["value"] == pytest.approx(value)
    said = units.convert_units(float(value), str(args["from_unit"]), str(args["to_unit"]))
    assert said == units.convert_units(float(value), source, target)
