"""Timers and alarms: set, list and cancel them; each one speaks through ``ctx.schedule`` when it
goes off. A conversation's timers live in ``ctx.state["timers"]``."""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from dllm_voice.app.tools.builtin import sounds
from dllm_voice.app.tools.builtin.clock import spoken_time
from dllm_voice.app.tools.builtin.numbers import CORRECTED, corrected, digits, say_number
from dllm_voice.app.tools.registry import ToolContext, ToolError, tool

_DAY_S = 24 * 3600.0


@dataclass(frozen=True)
class Timer:
    """A timer or an alarm that is set."""

    key: int  # ctx.schedule's id
    ends_at: float  # on ctx.now()'s clock
    name: str  # "pasta timer", "5 minute timer", "7:30 AM alarm"
    names: frozenset[str]  # what the user may call it: "pasta", "5 minutes", "alarm", "7:30 am"
    alarm: bool = False


class Timers:
    """One conversation's pending timers and alarms, oldest first. Set, listed and canceled
    from the session's worker threads, so every access holds a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Timer] = []

    def add(self, timer: Timer) -> None:
        with self._lock:
            self._items.append(timer)

    def pending(self, now: float) -> list[Timer]:
        """Those not gone off yet (the ones that went off are forgotten)."""
        with self._lock:
            self._items = [t for t in self._items if t.ends_at > now]
            return list(self._items)

    def take(self, label: str, now: float) -> list[Timer]:
        """Remove and return the timers ``label`` names: "" the newest, "all" every one."""
        with self._lock:
            self._items = [t for t in self._items if t.ends_at > now]
            if label == "all":
                taken = list(self._items)
            else:
                name = _plain(label)
                taken = [t for t in self._items if not label or name in t.names][-1:]
                heard = None if taken else _heard_as(name, self._items)
                taken = taken or ([heard] if heard else [])
            self._items = [t for t in self._items if t not in taken]
            return taken


def _heard_as(name: str, timers: list[Timer]) -> Timer | None:
    """The one timer a one-word ``name`` no timer has is heard as: the nearest in sound among
    the user's own few timers' names, within half the name's phonemes ("faster" 2.0 from
    "pasta", "x" 1.0 from "eggs"), and nearer than any other timer's; else None. A recognizer
    mishears a name ("the faster timer") far more often than a user names a timer never set."""
    if not re.fullmatch(r"[a-z']+", name):
        return None
    ranked = sorted(
        (sounds.distance(name, word), n)
        for n, t in enumerate(timers)
        for word in {w for names in t.names for w in names.split()} - {"timer", "alarm", "reminder"}
        if word.isalpha()
    )
    if not ranked:
        return None
    best, n = ranked[0]
    rivals = [m for d, m in ranked if d == best and m != n]
    size = min((len(p) for p in sounds.phonemes(name)), default=0)
    return timers[n] if best <= size / 2 and not rivals else None


def _plain(label: str) -> str:
    """A name as ``Timer.names`` holds it: "The Pasta timer" -> "pasta"."""
    words = re.sub(r"^(?:the|my|your) ", "", label.strip().lower())
    return re.sub(r"(?<=\S) (?:timer|alarm)$", "", words)


def _timers(ctx: ToolContext) -> Timers:
    timers = ctx.state.setdefault("timers", Timers())
    if not isinstance(timers, Timers):
        raise TypeError(f"ctx.state['timers'] holds a {type(timers).__name__}")
    return timers


def spoken_duration(seconds: float) -> str:
    """How long ``seconds`` is, said: "5 minutes", "1 hour and 30 minutes", "2.5 seconds"; an
    hour or more to the minute."""
    if seconds < 60:
        n = say_number(seconds)
        return f"{n} second" if n == "1" else f"{n} seconds"
    whole = round(seconds) if seconds < 3600 else 60 * round(seconds / 60)  # to the minute
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    counts = [(hours, "hour"), (minutes, "minute"), (secs, "second")]
    parts = [f"{n} {unit}" + ("s" if n != 1 else "") for n, unit in counts if n]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"


# Parsers: the arguments from the user's words.

_CANCEL = re.compile(
    r"\b(?:cancel|stop|delete|remove|clear|turn off|switch off|shut off|kill|dismiss|abort|"
    r"disable|get rid of|never ?mind|forget|drop|scrap|ditch|call off|silence|no more|"
    r"(?:turn|switch|shut) (?:\w+ ){1,2}off|(?:don'?t|do not|no longer) need)\b"
)
_ASKS = re.compile(
    r"\b(?:how (?:much|long|many)|time left|left on|remaining|what timers|any timers|"
    r"when (?:does|do|will|is|are)|still (?:going|running|on|set)|how much longer)\b"
)
_COOKING = r"(?:making|cooking|baking|boiling|roasting|steaming|frying|brewing|heating)"
# A length said on its own after what is cooking: "I'm baking cookies, 12 minutes please",
# "I'm boiling eggs, give me seven minutes".
_COOKING_FOR = re.compile(
    rf"\bi'?m {_COOKING}\b.*[,.] (?:give (?:me|it|them) )?(?:for |about )?\d+(?:\.\d+)? ?"
    r"(?:hours?|minutes?|mins?|seconds?"
    r"|secs?)(?:,? please)?\W*$"
)
# Asked to be told when a time is up, in other words than "timer": "remind me in 10 minutes",
# "the eggs need 6 minutes, let me know", "can you time 4 minutes"; a request that starts
# "time for" a length is Whisper's "timer for" ("Time for 1 hour 20 minutes, please.").
_NOTIFY = re.compile(
    r"^time for (?=\d|an? (?:hour|minute)\b)|"
    r"\b(?:timer|reminder|countdown|count(?:ing)? (?:me )?down|"
    r"(?:remind|buzz|ping|alert|nudge|notify|beep|ring|wake|signal|call) (?:me|us)|"
    r"tell (?:me|us)(?: when\b|(?=\W*$))|let (?:me|us) know|keep track|"
    r"time (?:me|it|this|that|them|these|those|my|the|\d+)|start (?:timing|the clock)"
    r"|go(?:es)? off in)\b"
)
_UNIT = r"(hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s)\b"
# "an hour", but not the "a m" of "7 a m": an article takes a unit's whole word.
_DURATION = re.compile(rf"(?:\b(\d+(?:\.\d+)?)\s*|\b(an?)\s+(?=[a-z]{{3}})){_UNIT}")
_NOT_LABEL = frozenset(
    """a an the my this that your new another one it me us now please timer alarm minute minutes
    second seconds hour hours min mins sec secs countdown set start make quick and next following
    rest like about around roughly exactly just time phone clock watch same other way moment end
    meantime kitchen oven more at in on of to off up out by with from into over down all any
    nothing something anything everything
    """.split()  # noqa: SIM905 - a word table
)
_LAST_NAME = re.compile(r",\s*(?:the |my )?([a-z]+(?: [a-z]+){0,2})[.!]?\s*$")
# What ends a request without naming the timer ("…, thank you.", "…, go.").
_SIGN_OFF = frozenset(
    """please thanks thank okay ok right alright so then go begin starting quick quickly yes
    yeah cheers bye mate
    """.split()  # noqa: SIM905 - a word table
)
_NAMED = re.compile(
    r"\b(?:called|named|labell?ed|for)\s+(?:the |my |a |an )?"
    r"((?!(?:for|called|named|labell?ed)\b)[a-z][a-z']*"
    r"(?: (?!for\b|timer\b|please\b|now\b)[a-z']+)*)"
)


def _seconds(text: str) -> tuple[float, str] | None:
    """The duration in ``text`` (in digits) and ``text`` without it; None if there is none.
    A length corrected with words between ("five minutes for the pasta, no, eight minutes"):
    the lengths said after the correction are the timer's, not added to the one before."""
    found = list(_DURATION.finditer(text))
    fixed = [m.end() for m in CORRECTED.finditer(text)]
    if fixed and any(m.start() < fixed[-1] for m in found) and found[-1].start() >= fixed[-1]:
        found = [m for m in found if m.start() >= fixed[-1]]
    if not found:
        return None
    units = {"h": 3600, "m": 60, "s": 1}
    total = sum(float(m[1] or 1) * units[m[3][0]] for m in found)
    return total, _DURATION.sub(" ", text)


def _label(text: str) -> str:
    """A timer's name in ``text`` (its duration taken out): "the pasta timer", "a timer
    called tea", "a timer for the eggs" -> "pasta", "tea", "eggs"; else ""."""
    for named in reversed(list(_NAMED.finditer(text))):
        if named[1].split()[0] not in _NOT_LABEL:
            return named[1]
    before = re.search(r"\b([a-z']+)\s+(?:timer|reminder)\b", text)
    if before and before[1] not in _NOT_LABEL:
        return before[1]
    # What the time is for, said as the thing itself: "the eggs need 6 minutes", "give the
    # rice 18 minutes", "the laundry's done, stop the timer".
    for thing in re.finditer(r"\b(?:the|my|our)\s+([a-z]+)(?:'s)?\b", text):
        if thing[1] not in _NOT_LABEL:
            return thing[1]
    # The name said last, on its own: "timer, 8 minutes, soft boiled eggs".
    last = _LAST_NAME.search(text)
    if last and not set(last[1].split()) & (_NOT_LABEL | _SIGN_OFF):
        return last[1]
    return ""


def _parse_set_timer(text: str) -> dict[str, object] | None:
    text = corrected(text)
    words = digits(text)
    if not (_NOTIFY.search(words) or _COOKING_FOR.search(words)) or _CANCEL.search(words):
        return None
    found = _seconds(words)
    if found is None or _ASKS.search(words) or re.search(r"\balarm\b", words):
        return None
    if re.search(r"\b(?:negative|minus)\s+(?=\d)", words):  # the tool says it cannot
        return {"seconds": -found[0]}
    reminder = _reminder(words, text)
    if reminder:
        return {"seconds": found[0], "reminder": reminder}
    label = _label(found[1]) or _what_lasts(words)
    return {"seconds": found[0], "label": label} if label else {"seconds": found[0]}


def _remind(when: str) -> re.Pattern[str]:
    """ "remind me to X in 10 minutes", "remind me in 10 minutes to X", "a reminder at 5 pm to X":
    the time (``when`` starts it) may stand on either side of what it is for."""
    return re.compile(
        rf"\b(?:remind (?:me|us)|reminder)(?: {when}[\w.:]*(?: [\w.:]+){{0,4}}?)?,?"
        r" (?:to|that i (?:need to|have to|should|must)) (?P<what>.+?)"
        rf"(?=\W+{when}|\W*$)"
    )


_REMIND_IN = _remind(r"(?:in|after|for) (?:\d|an?\b|half)")
_REMIND_AT = _remind(
    r"(?:at (?:\d|noon|midnight)|tomorrow|tonight|(?:this|in the) (?:morning|afternoon|evening))"
)
# The user's words for themselves, turned to the agent's for the user: "call my mom" -> "call
# your mom".
_YOURS = {"my": "your", "me": "you", "mine": "yours", "myself": "yourself", "our": "your",
          "us": "you", "ours": "yours"}  # fmt: skip


def _reminder(words: str, text: str, asked: re.Pattern[str] = _REMIND_IN) -> str:
    """What "remind me to ..." asks to be reminded of, in the agent's words, with the names the
    user wrote capitalized kept so ("call Bob", not the first word); else "". ``words``:
    ``text`` as digits()."""
    found = asked.search(words)
    if found is None:
        return ""
    names: dict[str, str] = {}
    for name in re.finditer(r"(?<=\W)[A-Z][\w'.]*", text.strip()):
        names[name[0].lower()] = name[0]  # "dr." as said inside the words
        names[name[0].lower().rstrip(".")] = name[0].rstrip(".")  # "bob" before the full stop
    said = [_YOURS.get(w) or names.get(w, w) for w in found["what"].split()]
    return " ".join(said).strip(" ,.!?")


def _what_lasts(words: str) -> str:
    """The thing a length is said of: "a 25 minute nap" -> "nap", "I'm making rice, set a
    timer ..." -> "rice"; else ""."""
    thing = re.search(r"\b\d+(?:\.\d+)?[ -](?:hour|minute|second|min|sec) ([a-z]+)\b", words)
    thing = thing or re.search(
        rf"\bi'?m {_COOKING} (?:some |the |a |an |my )?(?!(?:for|in|now|it|this|that)\b)([a-z]+)\b",
        words,
    )
    return thing[1] if thing and thing[1] not in _NOT_LABEL else ""


# Whisper writes a softly said "a.m." as "m." ("6.30 m."); a "p.m." keeps its p.
_AM = r"(?<=\d)\s*(?:a\.? ?)?m\b\.?|\b(?:in the|this|tomorrow) morning\b"
_PM = (
    r"(?<=\d)\s*p\.? ?m\b\.?|\b(?:in the|this|tomorrow) (?:afternoon|evening)\b|\bat night\b"
    r"|\btonight\b"
)
_PAST = re.compile(  # "pass": Whisper's "half-pass six"
    r"\b(half|quarter|\d{1,2})(?: minutes?)? (past|pass|after|to|till|before) (\d{1,2})\b"
)
# A time of day: not a number of a duration, nor the first of two said before one ("four
# twenty minutes"), nor, a bare number, a count of alarms ("set one alarm or many?"; "the 18:30
# alarm" is a time).
_CLOCK = re.compile(
    r"\b(\d{1,2})(?:[:. ]([0-5]\d))?( o'?clock)?\b"
    r"(?!(?:[ :.]\d+)? ?(?:minutes?|mins?|hours?|hrs?|seconds?|secs?)\b)"
    r"(?(2)|(?(3)|(?! (?:(?:more|other|different|separate) )?(?:alarms?|timers?)\b)))"
)


def _clock_time(text: str) -> tuple[int, int, str] | None:
    """(hour, minute, "am"/"pm"/"") in ``text``: "7:30 am", "19:00", "seven thirty", "half past
    six", "quarter to eight", "noon"; None if there is none."""
    # Whisper's "a quarter pass seven": read before the numbers, as "a quarter" alone is 0.25.
    t = digits(re.sub(r"\b(half|quarter)[ -]pass\b", r"\1 past", text, flags=re.I))
    if re.search(r"\b(?:noon|midday)\b", t):
        return 12, 0, "pm"
    if re.search(r"\bmidnight\b", t):
        return 0, 0, ""
    half = "am" if re.search(_AM, t) else ("pm" if re.search(_PM, t) else "")
    t = re.sub(r"\b(\d{1,2}) oh (\d)\b", r"\1:0\2", t)  # "seven oh five"
    t = re.sub(r"\b(\d{1,2})(\d{2}) hours\b", r"\1:\2", t)  # "1900 hours"
    t = re.sub(r"\b(\d{1,2})(\d{2})(?= ?[ap]\.? ?m\b)", r"\1:\2", t)  # "730 am"
    # Whisper's "at 615" for 6:15, "for 1130" for 11:30 (not "for 2026").
    t = re.sub(r"\b(at|for|to|by) ([1-9]|1[0-2])([0-5]\d)\b", r"\1 \2:\3", t)
    past = _PAST.search(t)
    if past:
        minutes = {"half": 30, "quarter": 15}.get(past[1]) or int(past[1])
        hour = int(past[3])
        if past[2] in ("to", "till", "before"):
            hour, minutes = (hour - 1) % 24, 60 - minutes
        return (hour, minutes, half) if 0 < minutes < 60 and hour < 24 else None
    clock = _CLOCK.search(t)
    if clock is None:
        return None
    hour, minute = int(clock[1]), int(clock[2] or 0)
    half = half if hour <= 12 else ""  # "21:30 tomorrow morning" is 21:30
    if hour > 23 or (half and not 1 <= hour <= 12):
        return None
    return hour, minute, half


# An alarm in other words: something that rings, buzzes or wakes at a time of day.
_RING_AT = re.compile(
    r"\b(?:ring|buzz|beep|ping|go off|remind me|alert me|call me|wake)\b.* at (?:\d|noon|midnight)"
    r"|^(?:\W*\w+){0,2}\W*at (?:\d[\d:]*(?: [ap] ?m)?|noon|midnight)\W+(?:please )?"
    r"(?:remind|alert|call|wake) (?:me|us)\b"
)


# A bare hour from 4 to 11 said with a wake-up or "tomorrow" is the morning's: "wake me at seven"
# at 1 PM means 7 AM, where the tool reads a bare "7" as whichever 7 comes first. Earlier hours
# are as likely a nap's or an afternoon's ("an alarm at two tomorrow").
_MORNING = re.compile(r"\b(?:wake|waking|get me up|(?:be|get) up|tomorrow)\b")


# Advice asked, not an alarm: "What time should I go to bed if I wake up at six?"; an alarm
# told of, not asked for: "My alarm went off at six, no joke."
_ADVICE = re.compile(
    r"\b(?:what time|when|how early|how late) (?:should|must|would) (?:i|we)\b"
    r"|\b(?:went off|rang|(?:did ?n[o']?t|never) (?:go off|ring))\b"
)


def _parse_set_alarm(text: str) -> dict[str, object] | None:
    text = corrected(text)
    lower = text.lower()
    asked = re.search(
        r"\b(?:alarm|wake me|wake us|get me up|wake ?-?up call|wake up at|i'?m up"
        r"|(?:need|have|got|want|wanna|'d like|would like) to (?:be|get) up|wanna (?:be|get) up)\b",
        lower,
    ) or _RING_AT.search(digits(lower))
    if not asked or _CANCEL.search(lower) or _ADVICE.search(lower):
        return None
    wanted = _clock_time(lower)
    if wanted is None or _ASKS.search(lower):
        return None
    hour, minute, half = wanted
    if not half and 4 <= hour <= 11 and _MORNING.search(lower):
        half = "am"
    at = f"{hour}:{minute:02d}" + (f" {half.upper()}" if half else "")
    reminder = _reminder(digits(lower), text, _REMIND_AT)
    return {"at": at, "reminder": reminder} if reminder else {"at": at}


def _parse_list(text: str) -> dict[str, object] | None:
    lower = text.lower()
    # "How much time is left?" with nothing after: of the timers, not of a game or a film.
    if re.search(r"\bhow (?:much (?:time|longer)|long)(?: is| do i have)? left\W*$", lower):
        return {}
    if re.search(
        r"\bhow (?:much longer|(?:long|much time)(?: is)? left) (?:on|for) (?:the|my) [a-z]+\W*$",
        lower,
    ):
        return {}
    # "How long until my tea is ready?": what is timed, not a date ("until Christmas").
    if re.search(
        r"\bhow (?:long|much longer|much time) (?:until|till|before) (?:the|my) [a-z]+"
        r" (?:is|are|will be) (?:ready|done|finished)\W*$",
        lower,
    ):
        return {}
    if not re.search(r"\b(?:timers?|alarms?)\b", lower) or _CANCEL.search(lower):
        return None
    topic = (
        r"\b(?:about|for) (?:timers|alarms)\b|\balarm clocks?\b|\btimer apps?\b"
        r"|\b(?:timers?|alarms?) (?:look|looks|work|works|sound|sounds) like\b"
        r"|\bhow (?:does|do) (?:an? |the )?(?:timers?|alarms?) work\b"
        r"|\b(?:name|call|rename) (?:my|our|the|a|an) (?:timers?|alarms?)\b"
        r"|\binvent(?:ed|ion|or)?\b|\bhistory\b"
    )
    if re.search(topic, lower):
        return None  # timers as a topic, not the user's
    setting = r"(?<!did i )(?<!have i )\b(?:set|start|make) (?:a|an|the|my|up|me)\b|\bwake me\b"
    if re.search(setting, lower):
        return None
    # "what" and "which" of the timers themselves, not of "a good alarm sound" or "what alarm
    # tone is least annoying".
    kind = r"(?! (?:sounds?|tones?|ringtones?|songs?|noises?|music|clocks?|apps?|types?|brands?))"
    listing = (
        r"\b(?:list|show|check|read|tell me|any|do i have|how(?:'s| is)|is there|"
        r"are there|did i set|status|how far along|run ?down|overview|summary|recap|go over)\b"
        r"|\b(?:what|which)\b(?:'s| is| are)?(?: [a-z']+){0,3}? (?:my|our|the)(?: [a-z]+)?"
        rf" (?:timers?|alarms?)\b{kind}"
        rf"|\b(?:what|which)(?:'s| is| are)? (?:timers?|alarms?)\b{kind}"
    )
    return {} if _ASKS.search(lower) or re.search(listing, lower) else None


# "Cancel everything.", said alone: of what the agent keeps running, its timers and alarms.
_CANCEL_ALL = re.compile(
    r"^(?:(?:okay|ok|so|and|please|now),? )*(?:cancel|clear|delete|stop|remove|turn off|kill)"
    r" (?:everything|all of (?:them|those|it)|them all|all that)(?:,? (?:please|now))*\W*$"
)


def _hour_of_day(hour: int, half: str) -> int:
    """0-23 from ``_clock_time``'s hour and half ("" where the hour says it or none was said)."""
    return hour if hour > 12 else hour % 12 + (12 if half == "pm" else 0)


def _without_half(spoken: str) -> str:
    """``spoken_time``'s "6:30 PM" as "6:30"."""
    return spoken.removesuffix(" AM").removesuffix(" PM")


# "Cancelled the rice timer.": Whisper's "cancel the" said as one word, at the request's start.
_CANCELLED = re.compile(r"^(?:(?:okay|ok|so|and|please|now),? )*cancell?ed (?:the|my|that|this)\b")


def _parse_cancel(text: str) -> dict[str, object] | None:
    words = digits(text)
    if _CANCEL_ALL.match(words.strip()):
        return {"label": "all"}
    asked = _CANCEL.search(words) or _CANCELLED.match(words.strip().lower())
    if not asked or not re.search(r"\b(?:timers?|alarms?|countdown|reminders?)\b", words):
        return None
    if re.search(r"\b(?:all|every|both)\b", words):
        return {"label": "all"}
    if re.search(r"\balarm\b", words):
        wanted = _clock_time(words)
        if wanted is None:
            return {"label": "alarm"}
        hour, minute, half = wanted
        said = spoken_time(datetime(2000, 1, 1, _hour_of_day(hour, half), minute))
        # "the alarm for six thirty": either half of the day, as set_alarm names it too.
        return {"label": f"{said if half or hour > 12 else _without_half(said)} alarm"}
    found = _seconds(words)
    # "the reminder about the bank", "my reminder to call Bob": the last word names it.
    about = re.search(
        r"\breminder (?:about|to|for|of) ([a-z' ]+?)(?: (?:please|now|anymore))?\W*$", words
    )
    label = spoken_duration(found[0]) if found else about[1].split()[-1] if about else _label(words)
    return {"label": label} if label else {}


# The tools.


def _reminder_names(todo: str) -> set[str]:
    """What the user may call a reminder: "cancel the dentist reminder" names "call the
    dentist" by its last word."""
    return {"reminder", todo.lower(), todo.lower().split()[-1]}


@tool(parse=_parse_set_timer, side_effects=True, timeout_s=2.0)
def set_timer(seconds: float, label: str = "", reminder: str = "", *, ctx: ToolContext) -> str:
    """Start a countdown timer of ``seconds`` (up to 24 hours), optionally named ("pasta"), or a
    reminder of something to do ("call your mother").

    It speaks when it is done.
    """
    if not math.isfinite(seconds) or seconds <= 0:
        raise ToolError("A timer has to be longer than zero seconds.")
    if seconds > _DAY_S:
        raise ToolError("I can only set timers up to 24 hours.")
    length = spoken_duration(seconds)
    todo = " ".join(reminder.split()).strip(" ,.!?")
    if todo:
        key = ctx.schedule(seconds, f"It's time to {todo}.")
        names = _reminder_names(todo)
        _timers(ctx).add(Timer(key, ctx.now() + seconds, f"reminder to {todo}", frozenset(names)))
        return f"I'll remind you to {todo} in {length}."
    single = re.fullmatch(r"(\S+) (hour|minute|second)s?", length)
    adjective = f"{single[1]} {single[2]}" if single else ""  # "a 5 minute timer"
    label = _plain(label)
    if label:
        name = f"{label} timer"
    else:
        name = f"{adjective} timer" if adjective else f"timer for {length}"
    key = ctx.schedule(seconds, f"Your {name} is done.")
    names = {label} if label else {adjective, length, "timer"} - {""}
    _timers(ctx).add(Timer(key, ctx.now() + seconds, name, frozenset(names)))
    return f"{label.capitalize()} timer set for {length}." if label else f"Timer set for {length}."


@tool(parse=_parse_set_alarm, side_effects=True, timeout_s=2.0)
def set_alarm(at: str, reminder: str = "", *, ctx: ToolContext) -> str:
    """Set an alarm for the next time the clock shows ``at`` ("7:30 AM", "19:00", "7 pm"),
    optionally as a reminder of something to do then ("call your mother")."""
    wanted = _clock_time(at)
    if wanted is None:
        raise ToolError(f"I don't understand the time '{at}'.")
    hour, minute, half = wanted
    if hour > 12 or hour == 0:
        hours = [hour]
    elif half:
        hours = [_hour_of_day(hour, half)]
    else:  # "7": whichever of 7 AM and 7 PM comes first
        hours = [hour % 12, hour % 12 + 12]
    now = datetime.fromtimestamp(ctx.now())  # local and naive: timestamp() then follows DST
    starts = [now.replace(hour=h, minute=minute, second=0, microsecond=0) for h in hours]
    start = min(s if s > now else s + timedelta(days=1) for s in starts)
    when = spoken_time(start)
    day = " tomorrow" if start.date() != now.date() else ""
    # "the alarm for six thirty" names it without its half of the day.
    names = {"alarm", when.lower(), f"{when.lower()} alarm", _without_half(when).lower()}
    todo = " ".join(reminder.split()).strip(" ,.!?")
    if todo:
        key = ctx.schedule(start.timestamp() - ctx.now(), f"It's {when}. Time to {todo}.")
        names |= _reminder_names(todo)
        timer = Timer(key, start.timestamp(), f"reminder to {todo}", frozenset(names), alarm=True)
        _timers(ctx).add(timer)
        return f"I'll remind you to {todo} at {when}{day}."
    key = ctx.schedule(start.timestamp() - ctx.now(), f"It's {when}. Your alarm is going off.")
    _timers(ctx).add(Timer(key, start.timestamp(), f"{when} alarm", frozenset(names), alarm=True))
    return f"Alarm set for {when}{day}."


@tool(parse=_parse_list, read_only=True, timeout_s=2.0)
def list_timers(*, ctx: ToolContext) -> str:
    """Say the timers and alarms that are set and how long each has left."""
    now = ctx.now()
    pending = _timers(ctx).pending(now)
    if not pending:
        return "You have no timers."
    n, alarms = len(pending), sum(t.alarm for t in pending)
    noun = "alarm" if alarms == n else ("timer" if alarms == 0 else "timers and alarms")
    noun += "s" if n > 1 and alarms in (0, n) else ""
    each = []
    for t in pending:
        left = spoken_duration(math.ceil(t.ends_at - now))
        each.append(f"the {t.name}, " + (f"in {left}" if t.alarm else f"with {left} left"))
    listed = each[0] if n == 1 else "; ".join(each[:-1]) + f"; and {each[-1]}"
    return f"You have {'one' if n == 1 else n} {noun}: {listed}."


@tool(parse=_parse_cancel, side_effects=True, timeout_s=2.0)
def cancel_timer(label: str = "", *, ctx: ToolContext) -> str:
    """Cancel a timer or alarm by its name ("pasta", "5 minutes", "alarm"); empty: the most
    recent one; "all": every one."""
    now = ctx.now()
    timers = _timers(ctx)
    if not timers.pending(now):
        raise ToolError("You have no timers.")
    taken = timers.take(label, now)
    if not taken:
        kind = "alarm" if re.search(r"\b(?:alarm|am|pm)$", label.lower()) else "timer"
        what = _plain(label)
        raise ToolError(f"You have no {what if what in ('alarm', 'timer') else f'{what} {kind}'}.")
    stopped = [t for t in taken if ctx.unschedule(t.key)]
    if label == "all":
        return f"Canceled {len(stopped)} timer{'s' if len(stopped) != 1 else ''}."
    if not stopped:
        return f"Your {taken[0].name} already went off."
    return f"Canceled your {taken[0].name}."
