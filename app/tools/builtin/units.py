"""Unit conversion with pint: temperature, length, mass, volume, speed, time and area, by the
names people say ("kilometres", "miles per hour", "degrees Fahrenheit", "cups")."""

from __future__ import annotations

import contextlib
import functools
import math
import re
from typing import Any

import pint

from dllm_voice.app.tools.builtin.numbers import digits, say_number
from dllm_voice.app.tools.registry import ToolError, tool

# Spoken names pint reads otherwise ("c" is the speed of light) or not at all.
_ALIASES = {
    "c": "degC",
    "f": "degF",
    "k": "kelvin",
    "celcius": "degC",
    "centigrade": "degC",
    "farenheit": "degF",
    "kmh": "kilometer / hour",
    "fl oz": "fluid_ounce",
}
_IRREGULAR = {"foot": "feet", "inch": "inches", "stone": "stone", "hertz": "hertz"}


@functools.cache
def _units() -> pint.UnitRegistry[Any]:
    return pint.UnitRegistry()  # ~0.7 s, on first use


def _normal(name: str) -> str:
    """A spoken unit name as pint reads it: "degrees Fahrenheit" -> "fahrenheit", "square
    feet" -> "feet ** 2", "miles an hour" -> "miles / hour"."""
    text = " ".join(name.lower().replace(".", " ").split())
    text = re.sub(r"^(?:a|an|one|the) ", "", text)
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


_NUM = r"(?:minus |negative |-)?\d+(?:\.\d+)?"
_HOW_MANY = re.compile(
    r"\bhow (?:many|much) (?P<to>[a-z][a-z .*/]*?)"
    r"(?: (?:are|is|makes?|equals?|go|fit)(?: there)?(?: in| into| inside)?"
    r"| (?:in|into|inside|to|per|make up))"
    rf" (?:(?P<value>{_NUM}|an?|one) )?(?P<from>[a-z][a-z .*/]*)$"
)
_AS_OTHER = re.compile(
    r"(?:^|\b(?:convert|change|turn|switch|express|is|what's|whats)\s+)"
    rf"(?P<value>{_NUM}|an?|one) "
    r"(?P<from>[a-z][a-z .*/]*?) (?:to|into|in|as|is how many|equals how many|in terms of) "
    r"(?P<to>[a-z][a-z .*/]*)$"
)


def parse_conversion(text: str) -> dict[str, object] | None:
    """A conversion asked for: "How many kilometers are in three miles?" -> {"value": 3.0,
    "from_unit": "miles", "to_unit": "kilometers"}; None unless both units are known ones."""
    words = digits(text).strip(" ?.!")
    words = re.sub(r"[,?!]|\s+(?:please|for me|exactly|roughly|approximately)$", "", words)
    found = _HOW_MANY.search(words) or _AS_OTHER.search(words)
    if found is None:
        return None
    value_words = found["value"] or "1"
    value = (
        1.0
        if value_words in ("a", "an", "one")
        else float(re.sub(r"^(?:minus |negative )", "-", value_words))
    )
    from_unit, to_unit = found["from"].strip(), found["to"].strip()
    try:
        _unit(from_unit)
        _unit(to_unit)
    except ToolError:
        return None
    return {"value": value, "from_unit": from_unit, "to_unit": to_unit}


@tool(parse=parse_conversion, timeout_s=5.0)
def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert ``value`` from one unit to another: temperature, length, mass, volume, speed,
    time or area ("miles" to "kilometers", "degrees Fahrenheit" to "degrees Celsius")."""
    if not math.isfinite(value):
        raise ToolError("I need a number to convert.")
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
