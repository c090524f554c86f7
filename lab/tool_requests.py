"""Training requests for the tool chooser: user turns labeled with the built-in tool they need.

The chooser (app/tools/chooser.py) is a classifier over the user's words that picks one of the
nine built-in tools or "none". Its training set is made here from templates x slot values, in
the style a speech recognizer writes a spoken turn: sometimes Whisper-like ("Um, what time is
it in Tokyo?"), sometimes lower case without punctuation, numbers as digits or as words,
fillers ("um", "hey", "okay so"), polite wrappers ("can you", "please"). About 300 requests
per tool, and about 1500 that need none: general questions, chit-chat and follow-ups, and many
hard negatives worded like tool requests ("what time does the sun set", "how long should I
boil an egg", "is the pound strong").

Every request keeps its template's id, and ``held_out_split`` holds out whole templates, so a
validation score measures phrasings the chooser never saw. The spoken benchmark
(testkit/tool_requests.py) is written by hand in other sentence shapes and is never in here.
Everything is deterministic in the seed.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

TOOLS = (
    "get_time",
    "get_date",
    "set_timer",
    "set_alarm",
    "list_timers",
    "cancel_timer",
    "calculate",
    "convert_units",
    "country_info",
)
NONE = "none"
LABELS = (*TOOLS, NONE)


@dataclass(frozen=True)
class Request:
    """A user turn as a recognizer writes it, its label, and the id of its template."""

    text: str
    label: str
    template: str  # "<group>/<index>"; a group's templates all have the group's label


# --- slot values -------------------------------------------------------------------------

CITIES = (
    "Tokyo", "New York", "London", "Paris", "Sydney", "Los Angeles", "Chicago", "Dubai",
    "Mumbai", "Berlin", "Moscow", "Singapore", "Hong Kong", "Toronto", "Mexico City",
    "Sao Paulo", "Cairo", "Lagos", "Nairobi", "Seoul", "Beijing", "Bangkok", "Honolulu",
    "Anchorage", "Denver", "Madrid", "Rome", "Istanbul", "Jakarta", "Manila", "Auckland",
    "Reykjavik", "Lima", "Buenos Aires", "Vancouver", "Dublin", "Amsterdam", "Stockholm",
    "Delhi", "Shanghai", "Cape Town", "Lisbon", "Athens", "Vienna", "Seattle", "Miami",
)  # fmt: skip
COUNTRIES = (
    "France", "Japan", "Brazil", "Canada", "Australia", "India", "China", "Germany", "Italy",
    "Spain", "Mexico", "Egypt", "Kenya", "Nigeria", "Argentina", "Chile", "Peru", "Norway",
    "Sweden", "Finland", "Poland", "Greece", "Turkey", "Russia", "South Korea", "Vietnam",
    "Thailand", "Indonesia", "the Philippines", "New Zealand", "Ireland", "Portugal",
    "Switzerland", "Austria", "the Netherlands", "Belgium", "Denmark", "Iceland", "Morocco",
    "South Africa", "Ethiopia", "Ghana", "Colombia", "Cuba", "Jamaica", "Pakistan",
    "Bangladesh", "Iran", "Saudi Arabia", "Israel", "Ukraine", "Hungary", "Czechia",
    "Malaysia", "Nepal", "Mongolia", "Kazakhstan", "Bolivia", "Uruguay", "Tanzania",
    "the United States", "the UK", "the USA", "England", "Scotland",
)  # fmt: skip
ZONES = (
    "Pacific time", "Eastern time", "Central time", "Mountain time", "UTC", "GMT",
    "Central European time", "Japan time", "Greenwich",
)  # fmt: skip
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
TIMER_LABELS = (
    "pasta", "laundry", "eggs", "rice", "tea", "the oven", "cookies", "pizza", "workout",
    "break", "nap", "homework", "meditation", "bread", "roast", "parking meter", "plank",
    "study session", "bath", "potatoes", "steak", "cake", "dryer", "stretching", "reading",
    "chicken", "soup", "dishwasher", "coffee", "muffins",
)  # fmt: skip
# Surface names, singular and plural, of the units convert_units takes.
UNIT_NAMES: dict[str, tuple[tuple[str, str], ...]] = {
    "mile": (("mile", "miles"),),
    "kilometer": (("kilometer", "kilometers"), ("kilometre", "kilometres"), ("km", "km")),
    "pound": (("pound", "pounds"), ("lb", "lbs")),
    "kilogram": (("kilogram", "kilograms"), ("kilo", "kilos"), ("kg", "kg")),
    "foot": (("foot", "feet"),),
    "meter": (("meter", "meters"), ("metre", "metres")),
    "yard": (("yard", "yards"),),
    "inch": (("inch", "inches"),),
    "centimeter": (("centimeter", "centimeters"), ("centimetre", "centimetres"), ("cm", "cm")),
    "ounce": (("ounce", "ounces"), ("oz", "oz")),
    "gram": (("gram", "grams"),),
    "stone": (("stone", "stone"),),
    "gallon": (("gallon", "gallons"),),
    "liter": (("liter", "liters"), ("litre", "litres")),
    "mile_per_hour": (("mile per hour", "miles per hour"), ("mph", "mph")),
    "kilometer_per_hour": (
        ("kilometer per hour", "kilometers per hour"), ("km/h", "km/h"), ("kph", "kph"),
    ),
    "cup": (("cup", "cups"),),
    "tablespoon": (("tablespoon", "tablespoons"),),
    "milliliter": (("milliliter", "milliliters"), ("ml", "ml")),
    "acre": (("acre", "acres"),),
    "hectare": (("hectare", "hectares"),),
    "degF": (("degree Fahrenheit", "degrees Fahrenheit"), ("Fahrenheit", "Fahrenheit"),
             ("degree F", "degrees F")),
    "degC": (("degree Celsius", "degrees Celsius"), ("Celsius", "Celsius"),
             ("degree C", "degrees C"), ("degree centigrade", "degrees centigrade")),
}  # fmt: skip
UNIT_PAIRS = (
    ("mile", "kilometer"), ("pound", "kilogram"), ("foot", "meter"), ("yard", "meter"),
    ("inch", "centimeter"), ("ounce", "gram"), ("stone", "kilogram"), ("gallon", "liter"),
    ("mile_per_hour", "kilometer_per_hour"), ("cup", "milliliter"),
    ("tablespoon", "milliliter"), ("acre", "hectare"), ("degF", "degC"),
)  # fmt: skip

_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def words(n: int) -> str:
    """A whole number 0..999,999 as words, the way it is said: 129 -> 'one hundred twenty-nine'."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else "-" + _ONES[n % 10])
    big, unit = (100, "hundred") if n < 1000 else (1000, "thousand")
    head = f"{words(n // big)} {unit}"
    return head if n % big == 0 else f"{head} {words(n % big)}"


def _number(rng: random.Random, x: float) -> str:
    """``x`` as a recognizer writes it: digits (with a thousands comma) or words."""
    if x < 0:
        return "minus " + _number(rng, -x)
    whole = int(x)
    if x != whole:  # a half
        return rng.choice((f"{x:g}", f"{words(whole)} and a half", f"{words(whole)} point five"))
    if rng.random() < 0.55:
        return f"{whole:,}" if rng.random() < 0.7 else str(whole)
    said = words(whole)
    return said.replace("-", " ") if rng.random() < 0.3 else said


def _duration(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind <= 1:
        m = rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 25, 30, 40, 45, 50, 90))
        return "a minute" if m == 1 and rng.random() < 0.5 else f"{_number(rng, m)} minutes"
    if kind == 2:
        return f"{_number(rng, rng.choice((10, 15, 20, 30, 40, 45, 60, 90)))} seconds"
    if kind == 3:
        h = rng.choice((1, 2, 3))
        return "an hour" if h == 1 else f"{_number(rng, h)} hours"
    if kind == 4:
        hours = "an hour" if rng.random() < 0.5 else f"{_number(rng, 2)} hours"
        return f"{hours} and {_number(rng, 15 * rng.randint(1, 3))} minutes"
    return rng.choice((
        "half an hour", "an hour and a half", "a minute and a half", "a quarter of an hour",
        "two and a half minutes", "a couple of minutes", "a few seconds", "1.5 hours",
    ))  # fmt: skip


def _clock(rng: random.Random) -> str:
    """An alarm time as a recognizer writes it: '7:30 a.m.', 'seven thirty', 'half past six'."""
    h = rng.randint(1, 12)
    m = rng.choice((0, 0, 0, 15, 30, 30, 45, 5, 10, 20, 40, 50))
    pm = rng.random() < 0.35
    meridiem = rng.choice(("pm", "p.m.", "PM") if pm else ("am", "a.m.", "AM"))
    minutes = "o'clock" if m == 0 else ("oh " if m < 10 else "") + words(m)
    said = f"{words(h)} {minutes}"
    if rng.random() < 0.5:
        text = rng.choice((
            f"{h}:{m:02d} {meridiem}", f"{h}:{m:02d}" if m else f"{h} {meridiem}",
            f"{h % 12 + (12 if pm else 0)}:{m:02d}", f"{said} {meridiem}",
        ))  # fmt: skip
    else:
        bare = [said]
        if m in (15, 30):
            bare.append(f"{'quarter' if m == 15 else 'half'} past {rng.choice((words(h), str(h)))}")
        if m == 45:
            bare.append(f"quarter to {words(h % 12 + 1)}")
        text = rng.choice(bare)
        if rng.random() < 0.5:
            text += " in the evening" if pm else " in the morning"
    return rng.choice(("noon", "midnight")) if rng.random() < 0.03 else text


def _conversion(rng: random.Random) -> dict[str, str]:
    """A value and a pair of units: {v} {from} ("3 miles"), {to} ("kilometers"), {from1}."""
    pair = rng.choice(UNIT_PAIRS)
    src, dst = pair if rng.random() < 0.5 else pair[::-1]
    if "deg" in src:
        value: float = rng.choice((-10, 0, 5, 20, 25, 30, 37, 40, 50, 68, 72, 90, 100, 180, 350))
    else:
        value = rng.choice((2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 50, 100, 250, 500, 2.5, 1.5))
        value = rng.randint(2, 400) if rng.random() < 0.3 else value
    one, many = rng.choice(UNIT_NAMES[src])
    return {
        "v": _number(rng, value),
        "from": many,
        "from1": one,
        "to": rng.choice(UNIT_NAMES[dst])[1],
    }


def _choice(values: Sequence[str]) -> Callable[[random.Random], str]:
    return lambda rng: rng.choice(values)


def _int(lo: int, hi: int) -> Callable[[random.Random], str]:
    return lambda rng: _number(rng, rng.randint(lo, hi))


# Slot name -> how one value is drawn. {v}, {from}, {from1}, {to} come from _conversion.
SLOTS: dict[str, Callable[[random.Random], str]] = {
    "city": _choice(CITIES),
    "place": lambda rng: rng.choice(rng.choice((CITIES, CITIES, COUNTRIES, ZONES))),
    "country": _choice(COUNTRIES),
    "weekday": _choice(WEEKDAYS),
    "dur": _duration,
    "label": _choice(TIMER_LABELS),
    "clock": _clock,
    "a": _int(2, 99),
    "b": _int(2, 999),
    "c": _int(2, 60),
    "big": _int(100, 9000),
    "k": _int(2, 12),
    "power": _int(2, 5),
    "p": lambda rng: (
        f"{rng.choice((5, 8, 10, 12, 15, 18, 20, 25, 30, 40, 75))}%"
        if rng.random() < 0.4
        else f"{_number(rng, rng.choice((5, 10, 12, 15, 18, 20, 25, 30, 35, 50, 60)))} percent"
    ),
    "sq": lambda rng: _number(rng, rng.choice((4, 9, 16, 25, 36, 49, 64, 81, 100, 121, 144, 169,
                                               196, 225, 400, 625, 900, 2))),
    "money": lambda rng: (
        f"${rng.randint(5, 300)}" if rng.random() < 0.5
        else f"{_number(rng, rng.randint(5, 300))} dollars"
    ),
    "plus": _choice(("plus", "plus", "plus", "+")),
    "minus": _choice(("minus", "minus", "-", "take away")),
    "times": _choice(("times", "times", "multiplied by", "x")),
    "over": _choice(("divided by", "divided by", "over", "/")),
}  # fmt: skip


# --- templates ---------------------------------------------------------------------------
# A template ends with "?" (a question) or "." (anything else); _spoken adds fillers, wrappers
# and the recognizer's casing and punctuation. A tool's templates fill their slots from SLOTS;
# NONE_TEMPLATES' groups from NONE_SLOTS first; NONE_SENTENCES are whole sentences.

TOOL_TEMPLATES: dict[str, tuple[str, ...]] = {
    "get_time": (
        "what time is it?", "what's the time?", "what time is it in {place}?",
        "what's the time in {place} right now?", "do you know what time it is?",
        "what time is it over in {place}?", "tell me the time.", "tell me the time in {place}.",
        "what's the current time?", "what's the current time in {place}?",
        "I'd like to know the time in {place}.", "is it morning in {city} right now?",
        "how late is it?", "what hour is it in {place}?", "got the time?",
        "check the time for me.", "what's the local time in {place}?", "time in {place}?",
        "what time is it right now?", "is it nighttime in {city} yet?",
        "if I called {city} now what time would it be there?", "what's the time now?",
        "what time have you got?", "what time is it at the moment in {place}?",
        "give me the time in {place}.", "what o'clock is it?", "{place} time right now?",
        "need the time please.", "what's the clock say in {city}?",
        "is it too late to call {city}, what time is it there?",
    ),
    "get_date": (
        "what's the date today?", "what's today's date?", "what day is it?",
        "what day of the week is it?", "what's the date in {place}?", "is today {weekday}?",
        "what month is it?", "what year is it?", "tell me today's date.", "what's the date?",
        "which day is it today?", "is it already {weekday} in {city}?",
        "what day is it in {place} right now?", "remind me what the date is.",
        "what's the date today in {place}?", "I lost track of the days, what day is it?",
        "what's today?", "today's date please.", "wait, is today {weekday}?",
        "what date is it?", "give me the date.", "what day is it over in {city}?",
        "do you know what day it is?", "what's the day and date?",
        "is it the weekend yet?", "what day of the month is it?",
        "check the date for me.", "what's the date in {city} today?",
    ),
    "set_timer": (
        "set a timer for {dur}.", "set a {dur} timer.", "timer for {dur}.",
        "start a {dur} timer for {label}.", "set a timer for {dur} for the {label}.",
        "can you time {dur} for my {label}?", "count down {dur}.", "remind me in {dur}.",
        "start a countdown of {dur}.", "put a timer on for {dur}.",
        "set a {label} timer for {dur}.", "I need a timer for {dur}.",
        "let me know when {dur} is up.", "{dur} timer please.", "time my {label}, {dur}.",
        "start a timer, {dur}.", "set the timer to {dur}.",
        "give me a {dur} timer for the {label}.", "tell me when {dur} have passed.",
        "remind me to check the {label} in {dur}.", "timer, {dur}, {label}.",
        "start timing {dur}.", "set a timer called {label} for {dur}.",
        "alert me in {dur}.", "ping me in {dur}.", "{label} timer, {dur}.",
        "make a timer for {dur}.", "run a timer for {dur} please.",
        "go off in {dur}.", "set me a timer, {dur}, for the {label}.",
    ),
    "set_alarm": (
        "set an alarm for {clock}.", "wake me up at {clock}.", "alarm at {clock}.",
        "set my alarm for {clock} tomorrow.", "can you wake me at {clock}?",
        "I need an alarm at {clock}.", "set an alarm for {clock} please.",
        "get me up at {clock}.", "put an alarm on for {clock}.", "make an alarm for {clock}.",
        "alarm for {clock} tomorrow morning.", "set a wake up call for {clock}.",
        "I want to wake up at {clock}.", "wake me at {clock} tomorrow.",
        "set the alarm to {clock}.", "new alarm, {clock}.", "alarm {clock}.",
        "please set an alarm at {clock}.", "I have to be up by {clock}, set an alarm.",
        "create an alarm for {clock}.", "can you set an alarm for {clock} on {weekday}?",
        "add an alarm at {clock}.", "set an alarm {clock} tonight.",
        "make sure I'm up at {clock}.", "ring at {clock}.",
    ),
    "list_timers": (
        "what timers do I have?", "list my timers.", "show my timers.",
        "how much time is left on my timer?", "how long is left on the {label} timer?",
        "are any timers running?", "what alarms are set?", "do I have any alarms?",
        "check my timers.", "how's my timer doing?", "read me my timers.",
        "what's left on the timer?", "any timers on?", "which alarms do I have set?",
        "when does my timer go off?", "is my {label} timer still running?",
        "how many timers are going?", "what alarms do I have for tomorrow?",
        "list all my alarms.", "how long until my timer rings?",
        "is there a timer running?", "what time is my alarm set for?",
        "how much longer on the {label}?", "show me all timers and alarms.",
        "did I set an alarm?", "timer status.", "how far along is my {label} timer?",
        "what timers are active?",
    ),
    "cancel_timer": (
        "cancel the timer.", "cancel my {label} timer.", "stop the timer.",
        "turn off the alarm.", "delete my alarm.", "never mind the {label} timer.",
        "kill the timer.", "get rid of the {label} timer.", "cancel all my timers.",
        "remove the alarm for tomorrow.", "stop the {label} timer please.",
        "I don't need the timer anymore.", "clear my timers.", "cancel the alarm I set.",
        "turn off the {label} timer.", "scrap that timer.", "switch off the timer.",
        "cancel the timer I set for {dur}.", "delete the {label} timer.", "remove all alarms.",
        "cancel the alarm for {clock}.", "forget the timer.", "call off the {label} timer.",
        "stop the countdown.", "abort the timer.", "cancel it, cancel the timer.",
        "no more timer please.", "shut off my alarm.",
    ),
    "calculate": (
        "what's {a} {plus} {b}?", "what is {a} {times} {c}?", "{b} {minus} {a}?",
        "what's {big} {over} {c}?", "how much is {a} {times} {c}?", "calculate {a} {plus} {b}.",
        "can you add {a} and {b}?", "what's {p} of {b}?", "what's half of {b}?",
        "what is {a} squared?", "what's the square root of {sq}?", "{a} to the power of {power}?",
        "multiply {a} by {c}.", "divide {big} by {c}.", "subtract {a} from {b}.",
        "what do you get if you add {a} to {b}?", "what's a {p} tip on {money}?",
        "what is {a} {plus} {b} {plus} {c}?", "how much is {p} off {money}?",
        "what's {c} cubed?", "if I split {money} {k} ways how much is each?",
        "what's {a} {times} {c} {minus} {b}?", "quick math, {a} {times} {c}.",
        "work out {big} divided by {c}.", "what's a third of {b}?", "double {b}.",
        "what's twice {b}?", "add up {a}, {b} and {c}.", "{a} {times} {c} equals what?",
        "what's {p} of {big}?", "take {a} away from {b}.", "{big} {plus} {b} is what?",
        "square {c}.", "what's {c} times itself?", "how much is {b} {over} {k}?",
    ),
    "convert_units": (
        "how many {to} in {v} {from}?", "convert {v} {from} to {to}.",
        "what's {v} {from} in {to}?", "{v} {from} in {to}?", "how many {to} is {v} {from}?",
        "change {v} {from} into {to}.", "how much is {v} {from} in {to}?",
        "I need {v} {from} in {to}.", "turn {v} {from} into {to}.",
        "how many {to} are there in a {from1}?", "what's {v} {from} to {to}?",
        "{v} {from} is how many {to}?",
        "what's a {from1} in {to}?", "can you convert {v} {from} into {to}?",
        "{v} {from} to {to}.", "what is {v} {from} converted to {to}?",
        "how many {to} make {v} {from}?", "give me {v} {from} in {to}.",
        "{v} {from}, what's that in {to}?", "what does {v} {from} come to in {to}?",
        "express {v} {from} in {to}.", "how do {v} {from} translate into {to}?",
        "roughly how many {to} is {v} {from}?",
    ),
    "country_info": (
        "what's the capital of {country}?", "what is {country}'s capital?",
        "capital of {country}?", "which city is the capital of {country}?",
        "tell me the capital city of {country}.", "name the capital of {country}.",
        "what's the population of {country}?", "how many people live in {country}?",
        "how many people are in {country}?", "how big is the population of {country}?",
        "{country} population?", "what's {country}'s population these days?",
        "what language do they speak in {country}?", "what languages are spoken in {country}?",
        "what's the official language of {country}?", "what do people speak in {country}?",
        "which language is spoken in {country}?", "what language would I need in {country}?",
        "what's the currency of {country}?", "what money do they use in {country}?",
        "what currency does {country} use?", "what's {country}'s currency called?",
        "which currency should I bring to {country}?", "what do they pay with in {country}?",
        "what's the main language in {country}?",
        "how many people does {country} have?", "what currency is used in {country}?",
    ),
}  # fmt: skip

NONE_TEMPLATES: dict[str, tuple[str, ...]] = {
    # General topics, with a few that sound like the tools' business (an explanation, not a
    # lookup: "tell me about time zones").
    "topic": (
        "tell me about {topic}.", "what is {topic}?", "how does {topic} work?",
        "can you explain {topic}?", "why is {topic} important?",
        "what's interesting about {topic}?",
        "give me a fun fact about {topic}.", "what do you think about {topic}?",
        "I want to learn about {topic}.", "explain {topic} like I'm five.",
        "what's the history of {topic}?", "who came up with {topic}?",
        "is {topic} hard to understand?", "tell me more about {topic}.",
    ),
    "place": (
        "what's the weather like in {place}?", "what should I see in {place}?",
        "what's {place} famous for?", "what's the best time to visit {place}?",
        "what food should I try in {place}?", "how do I get to {place}?",
        "is {place} expensive?", "tell me about the history of {place}.",
        "how long is the flight to {place}?", "what's the nightlife like in {place}?",
        "what's the best time of year to go to {place}?", "do people tip in {place}?",
        "what do people eat for breakfast in {place}?", "what's it like to live in {place}?",
        "is {place} safe for tourists?", "what sports are popular in {place}?",
        "what should I pack for a trip to {place}?", "what's the culture like in {place}?",
        "how old is {place}?", "why do people love {place}?",
        "what souvenirs should I buy in {place}?", "plan me a weekend in {place}.",
    ),
    "when": (
        "what time {event}?", "roughly what time {event}?", "what's the best time to {activity}?",
        "what time do people usually {routine}?", "when is the best time of day to {activity}?",
        "how much time does it take to {task}?", "how long does it take to {task}?",
        "is morning or evening better to {activity}?", "what time should I {activity}?",
    ),
    "cook": (
        "how long should I {cook}?", "how long do you {cook}?", "how many minutes to {cook}?",
        "what's the right time to {cook}?", "how do I know when to stop when I {cook}?",
    ),
    "measure": (
        "how far is {far}?", "how tall is {tall}?", "how heavy is {heavy}?",
        "how hot is {hot}?", "how big is {big_thing}?", "how fast can {fast} go?",
        "how many {part} does {creature} have?", "how many {animals} are left in the world?",
        "what's the population of {animals}?", "how deep is {deep}?",
    ),
}  # fmt: skip

NONE_SLOTS: dict[str, tuple[str, ...]] = {
    "place": CITIES + COUNTRIES,
    "topic": (
        "photosynthesis", "black holes", "the Roman Empire", "jazz", "chess", "volcanoes",
        "the stock market", "meditation", "dinosaurs", "the internet", "vaccines",
        "climate change", "coffee", "yoga", "Shakespeare", "the French Revolution",
        "electric cars", "bitcoin", "the Olympics", "sourdough bread", "origami",
        "the immune system", "quantum physics", "impressionism", "the Silk Road",
        "hip hop", "recycling", "artificial intelligence", "the pyramids", "gravity",
        "time zones", "the calendar", "daylight saving time", "the metric system", "the euro",
        "clocks", "alarm clocks", "percentages", "square roots", "multiplication", "fractions",
        "the kilogram", "Greenwich Mean Time", "leap years", "the Gregorian calendar",
        "sundials", "stopwatches", "exchange rates", "capital cities", "currencies",
        "the Celsius scale", "Fahrenheit", "algebra", "the speed of light", "the census",
        "world population growth", "the Spanish language", "sign language", "inflation",
        "the pomodoro technique", "jet lag", "the International Date Line", "atomic clocks",
    ),
    "event": (
        "does the sun set", "does the sun rise tomorrow", "does the Super Bowl usually start",
        "does the stock market open", "do most banks close on Fridays",
        "does the post office usually close", "does the first train usually leave",
        "do shops close on Sundays in Germany", "do most people eat dinner in Spain",
        "do roosters start crowing", "does the moon come up tonight",
        "do kids usually start school", "does the parade start",
    ),
    "activity": (
        "visit Japan", "go to the gym", "drink coffee", "plant tomatoes", "buy a car",
        "post on Instagram", "go to sleep", "study", "see the northern lights", "go skiing",
        "water my plants", "take vitamins", "eat breakfast", "go for a run", "book flights",
        "visit Iceland", "see cherry blossoms", "walk my dog", "meditate", "call my boss",
    ),
    "routine": (
        "eat lunch in France", "wake up", "go to bed", "start work in Japan",
        "have dinner in Italy", "take a nap in Spain", "go to church on Sunday",
    ),
    "task": (
        "learn French", "fly to Tokyo", "walk a mile", "grow a beard", "digest food",
        "get to Mars", "read War and Peace", "learn piano", "get over jet lag",
        "run a marathon", "drive across Canada", "build a house", "get a passport",
        "become a doctor", "bake bread from scratch", "learn to code",
    ),
    "cook": (
        "boil an egg", "bake a potato", "cook rice", "steep green tea", "rest a steak",
        "let bread dough rise", "microwave popcorn", "roast a chicken", "grill salmon",
        "boil pasta", "bake cookies", "marinate chicken", "brew coffee in a French press",
        "knead dough", "simmer a stew", "hard boil eggs", "cook a turkey", "fry bacon",
    ),
    "far": (
        "the moon", "the sun", "Mars", "the nearest star", "the horizon", "Pluto",
        "the edge of the universe", "the International Space Station", "Jupiter",
    ),
    "tall": (
        "Mount Everest", "the Eiffel Tower", "a giraffe", "the tallest building in the world",
        "the Statue of Liberty", "a redwood tree", "an average man", "Big Ben",
    ),
    "heavy": (
        "a blue whale", "the earth", "an elephant", "a cloud", "the human brain", "a car",
        "the moon", "a grizzly bear",
    ),
    "hot": ("the sun", "lava", "Venus", "a lightning bolt", "the center of the earth"),
    "big_thing": (
        "Canada", "the Pacific Ocean", "the universe", "the Sahara", "a blue whale",
        "Russia", "Texas", "Jupiter", "the Amazon rainforest",
    ),
    "fast": ("a cheetah", "a bullet train", "a hummingbird", "light", "a Formula One car"),
    "part": ("legs", "eyes", "hearts", "teeth", "bones", "wings", "arms"),
    "creature": (
        "a spider", "an octopus", "a shark", "a bee", "the human body", "a starfish",
        "a centipede", "an ant", "a crab", "a cat",
    ),
    "animals": (
        "ants", "bees", "tigers", "pandas", "blue whales", "elephants", "penguins",
        "polar bears", "cats", "koalas", "gorillas",
    ),
    "deep": ("the ocean", "the Mariana Trench", "Lake Baikal", "the Grand Canyon"),
}  # fmt: skip

# Whole sentences, each its own template: chit-chat, advice, follow-ups, and hard negatives.
NONE_SENTENCES: dict[str, tuple[str, ...]] = {
    "chat": (
        "tell me a joke.", "how are you today?", "what's your name?", "thank you so much.",
        "that's really cool.", "I'm bored.", "good morning.", "good night.", "I had a long day.",
        "can you sing me a song?", "what's your favorite color?", "do you like music?",
        "I just got a new puppy.", "I'm feeling a bit stressed about work.",
        "my flight got cancelled.", "tell me a story about a dragon.", "what can you do?",
        "are you a robot?", "who made you?", "I love pizza.", "I'm so tired.", "hello there.",
        "nice to meet you.", "you're funny.", "that's not what I meant.", "okay thanks.",
        "never mind.", "I don't know what to cook tonight.", "recommend a good movie.",
        "give me a riddle.", "tell me something interesting.", "what should I do this weekend?",
        "I'm learning to play guitar.", "it's raining again.", "do you have feelings?",
        "what do you think about cats?", "say something nice.", "I passed my exam.",
        "my cat knocked over a glass.", "what's a good book to read?", "sing happy birthday.",
        "how's it going?", "can we talk for a bit?", "I'm hungry.", "tell me a fun fact.",
        "what's up?", "goodbye.", "hi.", "that's hilarious.", "I'm nervous about my interview.",
        "write a short poem about the sea.", "recommend a podcast.", "make me laugh.",
        "what's your favorite food?", "are you there?", "I feel lonely today.",
        "what would you do with a million dollars?", "give me a compliment.",
        "I'm going on vacation next week.", "my friend is visiting tomorrow.",
        "do you dream?", "what's your favorite season?", "I can't decide what to wear.",
        "help me pick a name for my cat.", "I burned my toast.", "what's the meaning of my name?",
        "I want to get fit this year.", "tell me a bedtime story.", "what's a good hobby?",
        "I'm thinking of learning to paint.", "can you keep a secret?", "I miss my family.",
        "what's your favorite movie?", "let's play a game.", "I just woke up.",
        "I'm cooking dinner for my parents.", "what should I name my plant?",
        "I think it's going to snow.", "I finally finished my project.",
        "do you like the rain?", "what's the funniest animal?", "cheer me up.",
    ),
    "knowledge": (
        "why is the sky blue?", "who painted the Mona Lisa?", "how do airplanes fly?",
        "what causes earthquakes?", "what is the largest ocean?", "who wrote Hamlet?",
        "how do bees make honey?", "why do cats purr?", "what is DNA?",
        "who was the first president of the United States?", "how does the heart work?",
        "what's the tallest mountain in the world?", "how do vaccines work?",
        "why do we dream?", "what are black holes made of?", "when did World War Two end?",
        "how are rainbows formed?", "what's the difference between a frog and a toad?",
        "why is the ocean salty?", "how do magnets work?", "what is a noun?",
        "who discovered penicillin?", "what's the meaning of life?", "why do leaves change color?",
        "what do pandas eat?", "how do I make pancakes?", "how do I get rid of hiccups?",
        "what's a good recipe for banana bread?", "how do I change a flat tire?",
        "how can I sleep better?", "how do I write a cover letter?",
        "what's a healthy breakfast?", "how do I start running?", "how do I save money?",
        "what's the best way to learn a language?", "how do I tie a tie?",
        "what does serendipity mean?", "define photosynthesis.", "what's the opposite of brave?",
        "how do you spell necessary?", "what rhymes with orange?", "translate hello into French.",
        "is coffee bad for you?", "should I buy an electric car?", "what is love?",
        "are dogs smarter than cats?", "what's the best pizza topping?",
        "how do I fix a leaky faucet?", "what is the stock market?", "what is a verb?",
        "how did the Romans build roads?", "who built the pyramids?", "what is democracy?",
    ),
    "follow_up": (
        "why is that?", "tell me more.", "really?", "what do you mean?", "can you explain that?",
        "and then what happened?", "how come?", "say that again.", "what else?",
        "is that true?", "go on.", "can you give me an example?", "why not?", "how so?",
        "what about the other one?", "that doesn't sound right.", "interesting, why?",
        "could you say it more simply?", "and what about dogs?", "wait, what?",
        "how do you know that?", "can you repeat that?", "keep going.", "what happened next?",
    ),
    "hard": (
        "what time does the sun set?", "what's the best time to visit Japan?",
        "how many people live in a city near me?", "what time do kids usually go to bed?",
        "how long should I boil an egg?", "what is the history of the calendar?",
        "who invented the clock?", "what's a good name for a timer app?", "is math hard?",
        "how far is the moon?", "what does percent mean?", "why is Spain called Spain?",
        "what language is spoken by dolphins?", "is the pound strong?",
        "tell me about time zones.", "how many legs does a spider have?",
        "what's the population of ants?", "why do we have daylight saving time?",
        "what time period did the dinosaurs live in?", "I had a great time yesterday.",
        "time flies, doesn't it?", "do you have time for a story?",
        "how much time should I spend studying?", "how many hours of sleep do I need?",
        "why does February have twenty eight days?", "what's a good idea for a first date?",
        "how do scientists date fossils?", "why are there seven days in a week?",
        "where do the names of the months come from?", "is a date a fruit?",
        "what's a leap year?", "who invented the alarm clock?", "is it bad to hit snooze?",
        "what's the best alarm sound to wake up to?", "how do I cancel a subscription?",
        "should I cancel my gym membership?", "my alarm didn't go off this morning.",
        "how do kitchen timers work?", "why do I wake up before my alarm?",
        "who invented algebra?", "why is zero important?", "what's the biggest number?",
        "how do I get better at mental math?", "what is pi?", "what is calculus used for?",
        "how do you calculate compound interest?", "what's the difference between mean and median?",
        "how many bones are in the human body?", "how many planets are there?",
        "can you explain fractions to me?", "why do I need to learn math?",
        "what's your favorite number?", "is seven a lucky number?",
        "who was the best mathematician?",
        "why does the US use miles?", "what's the metric system?", "who invented the kilogram?",
        "how hot is the sun?", "how cold is it on Mars?", "how much water should I drink a day?",
        "how many miles should I run a day?", "why is a foot called a foot?",
        "what's heavier, a pound of feathers or a pound of bricks?",
        "why do Americans use Fahrenheit?",
        "how do I lose ten pounds?", "is it cold outside?", "what's the weather tomorrow?",
        "what's the best programming language?", "what language should I learn first?",
        "how many languages are there in the world?", "what is venture capital?",
        "what's the history of the euro?", "why do countries have different currencies?",
        "is bitcoin a real currency?", "what country has the most people?",
        "what's the best country to live in?", "what is France famous for?",
        "what do people in Japan eat for breakfast?", "when did Germany become a country?",
        "why is the capital of Australia not Sydney?", "what's the biggest city in the world?",
        "how do I say thank you in Japanese?", "what's a capital letter?",
        "how many countries are in Africa?", "are cities getting bigger?",
        "what's the oldest language?", "why is English so hard to learn?",
        "how much money should I save each month?", "is it worth converting my attic?",
        "how do I convert a PDF to Word?", "should I convert to a Roth IRA?",
        "how do I set up a new phone?", "set the table for dinner, what do I need?",
        "what's the best way to manage my time?", "how can I stop being late?",
        "what's the time signature of a waltz?", "who sang Time After Time?",
        "is it rude to be five minutes late?", "what's the date of the next full moon?",
        "what year did the Titanic sink?", "when is Mother's Day?",
        "how old is the universe?", "what's the speed of sound?",
        "what's a good watch to buy?",
        "how do hourglasses work?", "why is the clock tower in London called Big Ben?",
        "can you recommend a calendar app?", "what should I put on my to do list today?",
        "how many people went to the Olympics?", "what's the capital gains tax?",
        "why do the British drive on the left?", "what's the national animal of Scotland?",
        "what does a currency trader do?", "how did the dollar get its name?",
        "what's the weather like in Tokyo?", "tell me a joke about timers.",
        "how long is a football field?", "what's the average height of a man?",
        "what's the world record for the mile?",
        "divide and conquer, what does that mean?", "what does it mean to multiply your money?",
        "what's the square mile in London?", "what's a country mile?",
        "how many degrees is a right angle?", "what's a half marathon?",
        "why is a dozen twelve?", "is it healthy to count calories?",
        "what's the difference between weight and mass?", "what timezone is best for a meeting?",
        "why do clocks go clockwise?", "how did people tell time before clocks?",
        "what happens to your body when you change time zones?", "what's a time capsule?",
        "is time travel possible?", "what's the fourth dimension, is it time?",
        "who decided a day has twenty four hours?", "why is midnight called midnight?",
        "what's the best time to post a job ad?", "when does spring start?",
        "what's the longest day of the year?", "why do we celebrate New Year's?",
        "what's a good alarm clock for heavy sleepers?", "why do I feel tired after a nap?",
        "is it better to wake up early or stay up late?", "how many naps should a baby take?",
        "what's the history of the stopwatch?", "what is a countdown in a rocket launch?",
        "why is it called a snooze button?", "can you remind me why we argued?",
        "how long does it take for paint to dry?", "how long do eggs last in the fridge?",
        "how long should a workout be?", "how long can a person go without sleep?",
        "how long is a marathon?", "how long do cats live?",
        "is maths or math correct?",
        "how many times has Brazil won the World Cup?",
        "what's the most common number people pick?", "is it true that eighty percent of people "
        "dream in color?", "what percent of the ocean is explored?",
        "how much of the brain do we use?", "who was Pythagoras?", "what is a square?",
        "how do you draw a perfect circle?", "how many sides does a hexagon have?",
        "what's a prime number?", "why is the number thirteen unlucky?",
        "what's the tallest dog breed?", "how much can an ant lift?",
        "how fast does hair grow?", "how big was the biggest dinosaur?",
        "how long is the Great Wall of China?", "how far can an eagle see?",
        "how cold does it get in Antarctica?", "what's the hottest place on earth?",
        "how far away is the nearest galaxy?", "how deep can a submarine go?",
        "what's the difference between a mile and a nautical mile?",
        "why does the UK use stones for weight?", "what's a furlong?",
        "how much does a gallon of milk cost?", "how many cups of coffee is too many?",
        "what does the capital of a column look like?",
        "why is Paris called the city of light?",
        "how did Canada get its name?", "why is Greenland called Greenland?",
        "what's the language of flowers?", "what's the most beautiful language?",
        "what's body language?", "do animals have a language?", "is sign language universal?",
        "how do babies learn language?", "what's the money in Monopoly called?",
        "why are coins round?", "who printed the first paper money?",
        "what is the gold standard?", "how do I open a bank account?",
        "how many people can fit in a stadium?", "how many people have walked on the moon?",
        "why is India so populated?", "is the world overpopulated?",
        "how many people speak Spanish?", "who lives longest, the Japanese?",
        "what's the happiest country?", "which country has the best food?",
        "what's Brazil known for?", "is Japan a good place to work?",
        "what's the story behind the flag of Canada?", "why is Italy shaped like a boot?",
    ),
}  # fmt: skip

# How many requests each template group makes (sentence groups: one per sentence).
TOOL_COUNT = 320
NONE_COUNTS = {"topic": 440, "place": 330, "when": 150, "cook": 80, "measure": 130}

# Said before any turn, before a question, before a command (the command then asks).
FILLERS = ("um", "uh", "hey", "okay", "so", "hi", "hey there", "okay so", "alright", "oh")
ASKING = ("quick question", "I'd like to know", "can you tell me", "I was wondering")
WRAPPERS = ("can you", "could you", "please", "would you")
_IMPERATIVE = frozenset((
    "set", "start", "tell", "give", "convert", "calculate", "cancel", "stop", "show", "list",
    "wake", "remind", "turn", "change", "work", "add", "multiply", "divide", "subtract", "check",
    "read", "delete", "clear", "count", "explain", "put", "make", "get", "define", "translate",
    "recommend", "plan",
))  # fmt: skip


def _spoken(sentence: str, rng: random.Random) -> str:
    """A written template sentence as a recognizer writes the spoken turn."""
    body, mark = sentence[:-1], sentence[-1]
    parts = [rng.choice(FILLERS) + ","] if rng.random() < 0.25 else []
    if body.split(" ", 1)[0] in _IMPERATIVE and rng.random() < 0.3:
        parts.append(rng.choice(WRAPPERS))
        mark = "." if parts[-1] == "please" else "?"
    elif mark == "?" and rng.random() < 0.12:
        parts.append(rng.choice(ASKING) + ",")
    if "please" not in " ".join([*parts, body]) and rng.random() < 0.1:
        body += rng.choice((" please", " thanks", ", thank you")) if mark == "." else " please"
    text = " ".join([*parts, body]).rstrip(".")  # "7 a.m." then the end mark: no "7 a.m.."
    style = rng.random()
    if style < 0.45:  # Whisper: a capital, commas and the end mark
        return text[0].upper() + text[1:] + mark
    if style < 0.8:  # a streaming recognizer: lower case, no punctuation
        return re.sub(r"[,.?!](?=\s|$)", "", text).lower()
    return text + mark


def _key(text: str) -> str:
    """What two texts that differ only in case and punctuation share."""
    return " ".join(re.sub(r"[^\w' ]", " ", text.lower()).split())


def _fill(template: str, rng: random.Random, slots: dict[str, tuple[str, ...]]) -> str:
    values = _conversion(rng) if "{to}" in template else {}
    for name in re.findall(r"\{(\w+)\}", template):
        if name not in values:
            values[name] = rng.choice(slots[name]) if name in slots else SLOTS[name](rng)
    return template.format(**values)


def _group(
    name: str,
    label: str,
    templates: Sequence[str],
    count: int,
    rng: random.Random,
    slots: dict[str, tuple[str, ...]],
    seen: set[str],
) -> list[Request]:
    """``count`` new requests from ``templates`` in turn, each a fresh draw of slots and
    surface; a template whose draws keep repeating earlier texts is skipped."""
    out: list[Request] = []
    for i in range(count):
        index = i % len(templates)
        for _ in range(20):
            text = _spoken(_fill(templates[index], rng, slots), rng)
            if _key(text) not in seen:
                seen.add(_key(text))
                out.append(Request(text, label, f"{name}/{index}"))
                break
    return out


def requests(seed: int = 0) -> list[Request]:
    """Every training request, shuffled; the same seed gives the same list."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[Request] = []
    for tool, templates in TOOL_TEMPLATES.items():
        out += _group(tool, tool, templates, TOOL_COUNT, rng, {}, seen)
    for name, templates in NONE_TEMPLATES.items():
        out += _group(f"none_{name}", NONE, templates, NONE_COUNTS[name], rng, NONE_SLOTS, seen)
    for name, sentences in NONE_SENTENCES.items():
        out += _group(f"none_{name}", NONE, sentences, len(sentences), rng, {}, seen)
    rng.shuffle(out)
    return out


def training_requests(seed: int = 0) -> list[tuple[str, str]]:
    """(user text, label) pairs: ``requests(seed)`` without the template ids."""
    return [(r.text, r.label) for r in requests(seed)]


def held_out_split(
    reqs: Sequence[Request], fraction: float = 0.15, seed: int = 0
) -> tuple[list[Request], list[Request]]:
    """(train, held out): per label, ``fraction`` of its templates (at least one) and every
    request made from them are held out, so validation measures phrasings never trained on."""
    rng = random.Random(seed)
    held: set[str] = set()
    for label in sorted({r.label for r in reqs}):
        ids = sorted({r.template for r in reqs if r.label == label})
        held |= set(rng.sample(ids, max(1, math.ceil(fraction * len(ids)))))
    return [r for r in reqs if r.template not in held], [r for r in reqs if r.template in held]


def main() -> None:
    reqs = requests()
    train, held = held_out_split(reqs)
    counts = Counter(r.label for r in reqs)
    held_counts = Counter(r.label for r in held)
    rng = random.Random(0)
    print(f"{len(reqs)} requests, {len(train)} train, {len(held)} held out (by template)")
    for label in LABELS:
        mine = [r.text for r in reqs if r.label == label]
        print(f"\n{label}: {counts[label]} ({held_counts[label]} held out)")
        for text in rng.sample(mine, 3):
            print(f"  {text}")


if __name__ == "__main__":
    main()
