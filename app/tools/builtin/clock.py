"""The clock tools: the time and the date, here or in a named place."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

from dllm_voice.app.tools.builtin.places import mention, named_place, place_of
from dllm_voice.app.tools.registry import Guess, ToolContext, tool

# English whatever the process's locale (strftime's %A would follow it).
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = """January February March April May June July August September October November
    December""".split()  # noqa: SIM905 - a word table

_END = (
    r"(?=,?\s+(?:back(?: home)? (?:in|at)|in|at|over|for|now|right|there|currently|please"
    r"|today|where)\b"
    r"|\s+on\b[^,.?!]*,? in\b"  # "on the west coast, in Los Angeles"
    r"|,? (?:thanks|thank you|by any chance)\W*$|\s*[?.!]?\s*$|\s*[?.!;]\s)"
)
_TIME_ASKED = re.compile(
    # "What is time?" asks what time is, not what time it is.
    rf"\bwhat(?!(?:'s| is|s) (?:time|hour)(?:\W*$| for\b))(?:'s| is|s)?(?: the)?"
    rf"(?: current| local| right| exact| correct)? (?:time|hours?)"  # Whisper's "what hours is it"
    rf"(?: is it| it is|'s it| is| like)?{_END}"
    rf"|\b(?:the|current|local) (?:time|hour){_END}"
    r"|(?:^|[,.!?]\s*)(?:and |so )?(?:the )?time (?:in|at|over in)\b"
    r"|^(?:the )?time,? (?:please|now)\W*$"
    r"|^(?:[a-z']+,? ){0,4}time,? (?:right )?now(?: please)?\W*$"
    r"|\bwhat o'?clock is it\b|\bwhat(?:'s| does) the clock say\b|\bcheck the clock\b"
    r"|\bwhat time (?:would|will|could|might) it be\b|\bwhat time (?:have|has|do) (?:we|you) got\b"
    r"|\bhow late is it\b|\bwhat hour is it\b|\btime check\b"
    rf"|\bwhat time (?:do|does) (?:they|people|folks|you|it) (?:have|show|say){_END}",
    re.I,
)
# The time of day somewhere, asked about in other words ("is it the middle of the night in
# Sydney"): only with a place, as "is it too late" is not a question for the clock.
_PART_OF_DAY = re.compile(
    r"\bis it (?:still |already |yet )?(?:too )?(?:late|early|night|nighttime|night time|"
    r"morning|afternoon|evening|daytime|day time|dark|light|bedtime|midnight|"
    r"(?:breakfast|lunch|dinner|supper) ?time|(?:office|business|working) hours|"
    r"the middle of the night)\b(?! to\b)|\b(?:are|is) (?:they|he|she|people|everyone) "
    r"(?:still )?(?:awake|asleep|up)\b",
    re.I,
)
_DAY_NAMES = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|the weekend)"
# A day of the month as said: "the 5th", "the fifth", "the twenty-first".
_NTH = (
    r"(?:\d{1,2}(?:st|nd|rd|th)|(?:twenty-|thirty-)?(?:first|second|third|fourth|fifth|sixth"
    r"|seventh|eighth|ninth)|tenth|eleventh|twelfth|(?:thir|four|fif|six|seven|eigh|nine)teenth"
    r"|twentieth|thirtieth)"
)
_DATE_ASKED = re.compile(
    r"\bwhat(?:'s| is|s)?(?: the)?(?: today's)? date\b(?!\s+(?:of|for|when|did|does|do|palms?)\b)"
    r"|\b(?:the|today's) date\b(?!\s+(?:of|for|when|did|does|do|palms?)\b)|\bdate today\b"
    r"|\b(?:what|which) (?:day|weekday|date|month|year)(?: o[fn] the (?:week|month|year))?"
    r" (?:is (?:it|today)|it is|are we)\b"
    r"|\bwhat(?:'s| is|s) (?:the day )?today\b|\bthe day and (?:the )?date\b"
    r"|\bcheck the date\b|\bday o[fn] the week\b(?! (?:was|were|will|did)\b)"
    r"(?! (?:is|does|do|falls?) (?!it\b|today\b))"  # "… is Christmas": another day's
    rf"|\bis (?:it|today) (?:still |already )?{_DAY_NAMES}\b"
    rf"|\bhas {_DAY_NAMES} (?:started|begun|come)\b"
    rf"|\bis today the {_NTH}\b|\bis it the {_NTH} (?:today|of (?:the|this) month)\b",
    re.I,
)
# The date "for" a place, written with a capital: "the date for the wedding" asks for another
# date (and Berlin has a Wedding).
_DATE_FOR_PLACE = re.compile(r"\b(?:the|today's|current) date for (?-i:[A-Z])", re.I)
# Another time or date than now, or timers and alarms: not these tools.
_NOT_NOW = re.compile(
    r"\b(?:tomorrow|yesterday|next|last|ago|from now|until|till|timers?|alarms?|difference)\b",
    re.I,
)


def _sentence(text: str, found: re.Match[str]) -> str:
    """The sentence of ``text`` that holds ``found``: "I fly to Rome tomorrow; what's the time
    there?" asks for now, though another sentence names another day."""
    start = max(text.rfind(mark, 0, found.start()) for mark in ".;!?") + 1
    ends = [i for i in (text.find(mark, found.end()) for mark in ".;!?") if i >= 0]
    return text[start : min(ends, default=len(text))]


# The words of the question asked of someone else: "how do I say what time is it in Spanish";
# how to work a clock: "how do I check the clock on my oven".
_SAYING = re.compile(
    r"\bhow (?:do|would|can|should) (?:i|you|we) (?:say|write|spell|ask)\b"
    r"|\bhow (?:do|would|can|should|to) (?:(?:i|you|we) )?"
    r"(?:set|check|read|change|adjust|reset|fix)\b[^?.!]*\b(?:clock|watch)\b",
    re.I,
)


def _parse(asked: re.Pattern[str], text: str) -> dict[str, object] | None:
    found = asked.search(text)
    if found is None or _NOT_NOW.search(_sentence(text, found)) or _SAYING.search(text):
        return None
    place = named_place(text)
    # A place no gazetteer knows is written as a name where the text is cased: "the time in
    # the song by Pink Floyd" is not a clock's question.
    known = mention(text) is not None
    if place and text != text.lower() and not place[:1].isupper() and not known:
        return None
    return ({"place": place} if known else Guess(place=place)) if place else {}


def parse_time(text: str) -> dict[str, object] | None:
    """A question for the time: "what time is it in new york" -> {"place": "new york"};
    "what's the time" -> {}; "is it night in seoul" -> {"place": "seoul"}; None if it is not
    one."""
    asked = _PART_OF_DAY.search(text) and not _NOT_NOW.search(text)
    found = mention(text) if asked else None
    return {"place": found[0]} if found else _parse(_TIME_ASKED, text)


def parse_date(text: str) -> dict[str, object] | None:
    """A question for the date: "what day is it in sydney" -> {"place": "sydney"}; "what's
    the date today" -> {}; None if it is not one."""
    found = _DATE_FOR_PLACE.search(text) and not _NOT_NOW.search(text) and named_place(text)
    if not found:
        return _parse(_DATE_ASKED, text)
    return {"place": found} if mention(text) is not None else Guess(place=found)


def _now(ctx: ToolContext, place: str) -> tuple[datetime, str]:
    """The wall-clock time at ``place`` ("" here) and the words that say where (" in Tokyo")."""
    if not place.strip():
        return datetime.fromtimestamp(ctx.now()).astimezone(), ""
    where = place_of(place)
    return datetime.fromtimestamp(ctx.now(), ZoneInfo(where.zone)), f" {where.where}"


def spoken_time(t: datetime) -> str:
    """The time as said: "9:41 PM"; a whole hour is "9 PM"."""
    hour = t.hour % 12 or 12
    half = "AM" if t.hour < 12 else "PM"
    return f"{hour} {half}" if t.minute == 0 else f"{hour}:{t.minute:02d} {half}"


def spoken_date(t: datetime) -> str:
    """The date as said: "Saturday, December 5, 2026"."""
    return f"{_DAYS[t.weekday()]}, {_MONTHS[t.month - 1]} {t.day}, {t.year}"


@tool(parse=parse_time, read_only=True, timeout_s=5.0)
def get_time(place: str = "", *, ctx: ToolContext) -> str:
    """Tell the current time, here or in a city, country, US state or time zone.

    ``place`` empty: this machine's local time.
    """
    t, where = _now(ctx, place)
    return f"It's {spoken_time(t)}{where}."


@tool(parse=parse_date, read_only=True, timeout_s=5.0)
def get_date(place: str = "", *, ctx: ToolContext) -> str:
    """Tell today's date and day of the week, here or in a city, country or time zone."""
    t, where = _now(ctx, place)
    if not where:
        return f"Today is {spoken_date(t)}."
    return f"It's {spoken_date(t)}{where}."
