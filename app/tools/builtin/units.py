"""Unit conversion with pint: temperature, length, mass, volume, speed, time and area, by the
names people say ("kilometres", "miles per hour", "degrees Fahrenheit", "cups")."""

from __future__ import annotations

import contextlib
import functools
import math
import re
from dataclasses import dataclass
from typing import Any

import pint

from dllm_voice.app.tools.builtin import sounds
from dllm_voice.app.tools.builtin.numbers import corrected, digits, say_number
from dllm_voice.app.tools.registry import Guess, ToolError, tool

# Spoken names pint reads otherwise ("c" is the speed of light) or not at all.
_ALIASES = {
    "c": "degC",
    "f": "degF",
    "k": "kelvin",
    "celcius": "degC",
    "centigrade": "degC",
    "farenheit": "degF",
    "celsiuses": "degC",  # Whisper's plurals ("to Celsiuses")
    "fahrenheits": "degF",
    "kmh": "kilometer / hour",
    "kilo": "kilogram",
    "kilos": "kilogram",
    "fl oz": "fluid_ounce",
}
_IRREGULAR = {"foot": "feet", "inch": "inches", "stone": "stone", "hertz": "hertz"}


@functools.cache
def _units() -> pint.UnitRegistry[Any]:
    return pint.UnitRegistry()  # ~0.2-0.7 s, on first use


def warm() -> None:
    """Load pint's registry and the pronouncing dictionary now rather than on the first
    conversion."""
    _units()
    sounds.warm()


def _normal(name: str) -> str:
    """A spoken unit name as pint reads it: "degrees Fahrenheit" -> "fahrenheit", "square
    feet" -> "feet ** 2", "miles an hour" -> "miles / hour"."""
    text = " ".join(name.lower().replace(".", " ").split())
    text = re.sub(r"^(?:a|an|one|the) ", "", text)
    text = re.sub(r"gramme(s?)\b", r"gram\1", text)  # British spelling; pint knows "litre"
    text = re.sub(r"\bdegrees? (?=[a-z])", "", text)
    text = re.sub(r"\b(?:square|sq) ([a-z]+)", r"\1 ** 2", text)
    text = re.sub(r"\bcubic ([a-z]+)", r"\1 ** 3", text)
    text = re.sub(r"\b([a-z]+) squared\b", r"\1 ** 2", text)
    text = re.sub(r"\b([a-z]+) cubed\b", r"\1 ** 3", text)
    text = re.sub(r" (?:per|an|a) (?=[a-z])|\s*/\s*", " / ", text)
    return _ALIASES.get(text, text)


def _unit(name: str) -> pint.Unit:
    """The unit ``name`` names; ToolError if none."""
    if re.fullmatch(r"[A-Za-z]+(?:_[A-Za-z]+)*", name.strip()) and name.strip() != name.lower():
        with contextlib.suppress(pint.errors.PintError):  # pint's own name: degF, mile_per_hour
            return _units().parse_units(name.strip())
    text = _normal(name)
    part = r"[a-z_]+(?: [a-z_]+)*(?: \*\* [23])?"
    if re.fullmatch(rf"{part}(?: / {part})?|deg[CF]", text):
        # "fluid ounces" is pint's fluid_ounce; else a space is a product ("kilowatt hours").
        for candidate in (re.sub(r"(?<=[a-z]) (?=[a-z])", "_", text), text):
            try:
                return _units().parse_units(candidate)
            except pint.errors.PintError:
                continue
    raise ToolError(f"I don't know the unit '{name.strip()}'.")


def spoken_unit(unit: pint.Unit, count: str) -> str:
    """How the agent says ``unit`` after the number ``count``: "miles per hour",
    "degrees Celsius", "square feet", "1 kilogram"."""
    text = str(unit).replace("_per_", " / ")
    text = re.sub(r"(\w+) \*\* 2", r"square \1", text)
    text = re.sub(r"(\w+) \*\* 3", r"cubic \1", text)
    text = text.replace(" / ", " per ").replace("_", " ")
    if count == "1":
        return text
    head, per, tail = text.partition(" per ")
    words = head.split()
    at = 0 if words[0] == "degree" else len(words) - 1  # "degrees Celsius", "square feet"
    word = words[at]
    if word in _IRREGULAR:
        words[at] = _IRREGULAR[word]
    elif word.endswith(("s", "x", "ch", "sh")):
        words[at] = word + "es"
    elif re.search(r"[^aeiou]y$", word):
        words[at] = word[:-1] + "ies"
    else:
        words[at] = word + "s"
    return " ".join(words) + per + tail


# Words pint reads as units that, said in a request, are something else ("a turn", "the
# point"), and the short symbols people do say or type; any other symbol pint reads is taken
# for a word ("in" is inches to pint, "cat" a centi-atmosphere).
_NOT_UNITS = frozenset(
    """are point points turn turns hand hands count bit bits line lines link links chain chains
    shot shots barn barns cycle cycles rod rods pi percent dozen gross number
    """.split()  # noqa: SIM905 - a word table
)
_SYMBOLS = frozenset(
    """km kms cm mm kg kgs mg g lb lbs oz ft mi ml l mph kph kmh c f k hr hrs min mins sec secs
    yd yds qt tbsp tsp gal
    """.split()  # noqa: SIM905 - a word table
)
_LONGEST = 4  # words in a spoken unit: "kilometers per hour", "degrees fahrenheit"


def _word_is_unit(word: str) -> bool:
    if word in _SYMBOLS or word in _ALIASES:
        return True
    if word in _NOT_UNITS:
        return False
    try:
        readings = _units().parse_unit_name(word)
    except pint.errors.PintError:
        return False
    return any(
        word.startswith(prefix) and _spelled_out(word.removeprefix(prefix), name)
        for prefix, name, _ in readings
    )


def _spelled_out(word: str, name: str) -> bool:
    """``word`` is the unit ``name`` or another of its names, not its symbol ("metres" for
    meter; "ha" and "has" are hectare's symbol)."""
    forms = {word, word.removesuffix("s"), word.removesuffix("es")}
    if name in forms:
        return True
    try:
        return _units().get_symbol(word) not in forms
    except pint.errors.PintError:
        return False


def spoken_unit_of(words: str) -> pint.Unit | None:
    """The unit ``words`` name as a whole, the way people say units ("miles", "degrees
    Fahrenheit", "miles per hour", "square feet", "fluid ounces"); None for anything else,
    though pint may read it ("in", "cat", "miles in": a mile-inch)."""
    normal = _normal(words)
    if normal in ("degC", "degF"):
        return _unit(words)
    for part in normal.split(" / "):
        base = re.sub(r" \*\* [23]$", "", part)
        if " " in base:  # one name of several words: "fluid ounce", "light year"
            if not re.fullmatch(r"[a-z]+(?: [a-z]+)+", base):
                return None
            try:
                _units().parse_units(base.replace(" ", "_"))
            except pint.errors.PintError:
                return None
        elif not _word_is_unit(base):
            return None
    try:
        return _unit(words)
    except ToolError:
        return None


@dataclass(frozen=True)
class _Mention:
    """A unit named in a request: its words, where (token indexes), and the number said before
    it (None: none, as in "a mile")."""

    words: str
    unit: pint.Unit
    start: int
    end: int
    value: float | None


_TOKEN = re.compile(r"-?\d+(?:\.\d+)?|[a-z]+")
# Between "how many <unit>" and the unit measured: the question's linking words only ("how
# many feet are there in a mile", not "how many hours do you sleep in a day").
_LINKING = frozenset(
    """are is there in into inside make makes made up equal equals go goes fit fits to does do it
    take takes of a an one per how many much
    """.split()  # noqa: SIM905 - a word table
)
_INTO = frozenset({"in", "into", "to", "as", "terms"})  # "... in kilometers", "in terms of"
_COMPARED = frozenset({"than", "over", "under", "above", "below", "exceed", "exceeds"})


def _words_of(text: str) -> list[str]:
    """The request's words for reading a conversion: numbers in digits, lower case, a minus
    sign on negative numbers, "km/h" as "km per hour"."""
    # A race named by its name gives its distance where the request says no number of its own
    # ("a marathon of 42 kilometers" is 42).
    named = not re.search(r"\d", digits(_RACE.sub("", text)))
    raced = _RACE.sub(
        lambda m: (
            f"{_RACES.get(m[0].lower()) or m[1] or m[2]} km" if named or m[1] or m[2] else m[0]
        ),
        text,
    )
    words = re.sub(r"\b(km|mi)/h\b", r"\1 per hour", digits(raced))
    words = words.replace("/", " per ").replace("'", "")
    words = re.sub(r"\b(?:minus|negative) (?=\d)", "-", words)
    words = _FEET_INCHES.sub(lambda m: f"{12 * int(m[1]) + int(m[2])} inches", words)
    return _TOKEN.findall(words)


# Races named by their distance: "a 10K run", "a 5k", "a half marathon" (a marathon: 42.195 km).
_RACES = {"marathon": "42.195", "half marathon": "21.0975", "half-marathon": "21.0975"}
_RACE = re.compile(
    r"(?:(?<=\ba )|(?<=\bthe ))(\d+)k\b|\b(\d+)k(?= (?:run|race|walk|course)\b)"
    r"|\bhalf[ -]marathon\b|(?<!half )(?<!half-)\bmarathon\b",
    re.I,
)


# A height in two units, as people say one: "six feet two", "5 foot 10 inches" -> 74, 70 inches.
_FEET_INCHES = re.compile(r"\b(\d) (?:feet|foot|ft) (1[01]|\d)(?: inch(?:es)?)?\b(?![.\d])")


def _mentions(tokens: list[str]) -> list[_Mention]:
    """The units named in ``tokens``, left to right, each the longest name at its place."""
    found: list[_Mention] = []
    i = 0
    while i < len(tokens):
        for n in range(min(_LONGEST, len(tokens) - i), 0, -1):
            words = tokens[i : i + n]
            if words[0] in ("a", "an", "one", "the") or any(w[-1].isdigit() for w in words):
                continue
            unit = spoken_unit_of(" ".join(words))
            if unit is not None:
                found.append(_Mention(" ".join(words), unit, i, i + n, _number_before(tokens, i)))
                i += n
                break
        else:
            i += 1
    return found


def _number_before(tokens: list[str], i: int) -> float | None:
    before = tokens[i - 1] if i > 0 else ""
    return float(before) if before[-1:].isdigit() else None


def _target(tokens: list[str], mentions: list[_Mention]) -> _Mention | None:
    """The unit asked for: "how many <unit>", else the last "in/to/into/as <unit>" with no
    number of its own, else the second of two quantities compared ("is 20 kilos over 40
    pounds")."""
    for m in mentions:
        if (
            m.start >= 2
            and tokens[m.start - 2] == "how"
            and tokens[m.start - 1] in ("many", "much")
        ):
            return m
    into = [m for m in mentions if m.start > 0 and tokens[m.start - 1] in _INTO and m.value is None]
    if into:
        return into[-1]
    counted = [m for m in mentions if m.value is not None]
    if len(counted) >= 2 and _COMPARED & set(tokens[counted[0].end : counted[-1].start]):
        return counted[-1]
    # "six feet, how much is that meters": a unit with no number after the question.
    asked = [m for m in mentions if m.value is None and "how" in tokens[: m.start]]
    return asked[-1] if asked and counted else None


def _source(tokens: list[str], mentions: list[_Mention], target: _Mention) -> _Mention | None:
    """The quantity to convert: the first one counted with a number; else a unit the
    question links to its target ("how many feet in a mile", "a cup in ounces")."""
    others = [m for m in mentions if m is not target and _comparable(m.unit, target.unit)]
    counted = [m for m in others if m.value is not None]
    if counted:
        return counted[0]
    for m in others:
        between = tokens[min(m.end, target.end) : max(m.start, target.start)]
        if set(between) <= _LINKING:
            return m
    return None


def _comparable(a: pint.Unit, b: pint.Unit) -> bool:
    if a == b:
        return False
    a, b = _fluid(a, b), _fluid(b, a)
    return bool(a.dimensionality == b.dimensionality)


def _read(tokens: list[str]) -> dict[str, object] | None:
    mentions = _mentions(tokens)
    target = _target(tokens, mentions)
    source = _source(tokens, mentions, target) if target is not None else None
    if target is None or source is None:
        return None
    value = 1.0 if source.value is None else source.value
    return {"value": value, "from_unit": source.words, "to_unit": target.words}


def parse_conversion(text: str) -> dict[str, object] | None:
    """A conversion asked for: "How many kilometers are in three miles?" -> {"value": 3.0,
    "from_unit": "miles", "to_unit": "kilometers"}; also "a three mile run is how many
    kilometers", "it's 100 degrees fahrenheit, what's that in celsius", and a word the
    recognizer wrote for a unit or a number that sounds like it ("five gallons into
    leaders": ``_heard_as``). None unless both units are known ones of one kind (length,
    mass, ...)."""
    text = corrected(text)
    tokens = _words_of(text)
    heard = _heard_as(tokens)
    read = (_read(heard) if heard != tokens else None) or _read(tokens)
    return read or _money(text) or _asked_anyway(tokens)


# Money in one currency asked for in another: no exchange rate is kept offline, so the call
# says so where the LM would make one up. "pound" is money only beside another currency.
_CURRENCY = (
    r"(dollars?|bucks|euros?|pounds?|quid|yen|yuan|rupees?|pesos?|francs?|rubles?|roubles?"
    r"|dirhams?|krona|kronor|krone|shekels?|baht|rand)"
)
_MONEY_IN = re.compile(
    rf"(\d+(?:\.\d+)?) {_CURRENCY}\b.*?\b(?:to|into|in) (?:(?:us|american|canadian|australian"
    rf"|british|japanese|indian|mexican|swiss) )?{_CURRENCY}\b"
)
_MONEY_HOW_MANY = re.compile(
    rf"\bhow many {_CURRENCY} (?:is|are|for|in|make|do i get for|would i get for)"
    rf" (?:a |an )?(\d+(?:\.\d+)?)? ?{_CURRENCY}\b"
)


def _money(text: str) -> Guess | None:
    """A currency conversion ("100 dollars in euros", "how many yen for 50 euros"), read as
    one the tool answers with what it cannot do."""
    words = re.sub(r"\$\s?(\d[\d.]*)", r"\1 dollars", digits(text))
    words = re.sub(r"\b(\d+)k\b", r"\g<1>000", words)  # "10k dollars"
    found = _MONEY_IN.search(words)
    if found is not None:
        value, source, target = float(found[1]), found[2], found[3]
    else:
        asked = _MONEY_HOW_MANY.search(words)
        if asked is None:
            return None
        value, source, target = float(asked[2] or 1), asked[3], asked[1]
    if source.rstrip("s") == target.rstrip("s"):
        return None
    return Guess(value=value, from_unit=source, to_unit=target)


# "Convert 5 blargs to meters", "convert 10 kilograms to meters": a conversion asked for in so
# many words that no unit pair reads, said back as what the tool does not know or cannot do.
_CONVERT = re.compile(
    r"^(?:(?:please|can you|could you|now|ok|okay|so)\s)*convert (-?\d+(?:\.\d+)?)"
    r" ([a-z]+(?: [a-z]+)?) (?:to|into|in) ([a-z]+(?: [a-z]+)??)(?: please)?$"
)


def _asked_anyway(tokens: list[str]) -> Guess | None:
    """The conversion ``_CONVERT`` finds where one of its two units is a known one."""
    found = _CONVERT.match(" ".join(tokens))
    if found is None or not any(_mentions(found[i].split()) for i in (2, 3)):
        return None
    return Guess(value=float(found[1]), from_unit=found[2], to_unit=found[3])


# Units people say, the words a misheard one is matched against: pint's thousands of names
# would make most words sound like one ("laps" like "lbs").
_SAID_UNITS = """meter meters kilometer kilometers centimeter centimeters millimeter millimeters
    mile miles foot feet inch inches yard yards gram grams kilogram kilograms pound pounds
    ounce ounces ton tons stone stones liter liters milliliter milliliters gallon gallons quart
    quarts pint pints cup cups tablespoon tablespoons teaspoon teaspoons celsius fahrenheit
    kelvin second seconds minute minutes hour hours day days week weeks acre acres hectare
    hectares""".split()  # noqa: SIM905 - a word table
_SAID_NUMBERS = {
    word: digits(word)
    for word in """zero one two three four five six seven eight nine ten eleven twelve thirteen
    fourteen fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy
    eighty ninety""".split()  # noqa: SIM905 - a word table
}


def _said_units() -> list[tuple[str, pint.Unit]]:
    return _said_units_of(_units())


@functools.cache
def _said_units_of(registry: pint.UnitRegistry[Any]) -> list[tuple[str, pint.Unit]]:
    return [(name, registry.parse_units(_normal(name))) for name in _SAID_UNITS]


# Words that stand where a number or a unit would as themselves, however near one they sound
# ("to", "for", "an": a ton).
_PLAIN = frozenset(
    """a an the of to too for in into on at and than then once won its it my your what how
    many much that this those these is are per do does did i you we they have has""".split()  # noqa: SIM905 - a word table
)


def _heard_as(tokens: list[str]) -> list[str]:
    """``tokens`` with the words a conversion expects respelled by their sound: a word that
    sounds like a number just before a unit said without one ("aid ounces", "a free mile
    run"); where a unit is counted ("five leaders") or asked for ("into leaders", "how many
    cops") but none stands, the unit of a named one's kind that sounds nearest."""
    mentions = _mentions(tokens)
    out = list(tokens)
    for m in mentions:
        before = tokens[m.start - 1] if m.start > 0 else ""
        if m.value is None and before.isalpha() and before not in _PLAIN:
            number = sounds.sounds_like(before, list(_SAID_NUMBERS))
            if number is not None:
                out[m.start - 1] = _SAID_NUMBERS[number]
    # A unit asked for only beside a counted quantity ("the best time of day to walk" is no
    # conversion); a counted word beside any unit.
    said = _mentions(out)
    named = {i for m in said for i in range(m.start, m.end)}
    for i, word in enumerate(out):
        if i == 0 or i in named or not word.isalpha() or word in _PLAIN:
            continue
        asked = out[i - 1] in _INTO or out[i - 2 : i] in (["how", "many"], ["how", "much"])
        counted = out[i - 1][-1].isdigit()
        if not (asked or counted):
            continue
        beside = said if counted else [m for m in said if m.value is not None]
        kind = [
            name for name, unit in _said_units() if any(_comparable(m.unit, unit) for m in beside)
        ]
        found = sounds.sounds_like(word, kind)
        if found is not None:
            out[i] = found
            break
    return out


@tool(parse=parse_conversion, read_only=True, timeout_s=5.0)
def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert ``value`` from one unit to another: temperature, length, mass, volume, speed,
    time or area ("miles" to "kilometers", "degrees Fahrenheit" to "degrees Celsius")."""
    if not math.isfinite(value):
        raise ToolError("I need a number to convert.")
    if all(re.fullmatch(_CURRENCY, unit.strip().lower()) for unit in (from_unit, to_unit)):
        raise ToolError(
            f"I have no exchange rates, so I can't convert {from_unit.strip()} to "
            f"{to_unit.strip()}."
        )
    source, target = _unit(from_unit), _unit(to_unit)
    source, target = _fluid(source, target), _fluid(target, source)
    try:
        result = float(_units().Quantity(value, source).to(target).magnitude)
    except pint.errors.DimensionalityError as e:
        raise ToolError(f"I can't convert {from_unit.strip()} to {to_unit.strip()}.") from e
    before, after = say_number(value), say_number(result)
    said = f"{before} {spoken_unit(source, before)} is {after} {spoken_unit(target, after)}."
    return said[:1].upper() + said[1:]


def _fluid(unit: pint.Unit, other: pint.Unit) -> pint.Unit:
    """Ounces next to a volume ("2 cups in ounces") are fluid ounces."""
    volume = _units().liter.dimensionality
    if str(unit) == "ounce" and other.dimensionality == volume:
        return _units().fluid_ounce
    return unit
