"""Spoken numbers both ways: words to digits for the tools' parsers, and a number the way the
agent should say it ("46.5 million", "37.8", "41")."""

from __future__ import annotations

import math
import re

from text_to_num import alpha2digit

_NUM = r"\d+(?:\.\d+)?"

# What alpha2digit leaves alone: articles, fractions and counting words.
_ARTICLE = re.compile(r"\b(?:a|an) (?=\d{3,}\b)")  # "a hundred" is "a 100" after alpha2digit
_AND_FRACTION = re.compile(rf"\b({_NUM}) and (?:an? |3 )(half|quarter|quarters)\b")
_FRACTIONS = {"half": 0.5, "quarter": 0.25, "quarters": 0.75}
_POINT = re.compile(r"\bpoint (\d+)\b")
_UNIT_AND_HALF = re.compile(rf"\b(an?|{_NUM}) ([a-z]+) and an? half\b")  # "an hour and a half"
_HALF = re.compile(r"\b(?:half an?|an? half|(?:one|1) half|half(?= of\b))\b")
_QUARTER = re.compile(r"\b(?:an?|one|1) quarter\b(?! (?:past|to|after|till)\b)")
_THREE_QUARTERS = re.compile(r"\b3 quarters\b(?! (?:past|to|after|till)\b)")
# "half of a cup"; "a quarter in an hour" is Whisper's hearing of "a quarter of an hour".
_FRACTION_OF_ONE = re.compile(
    r"\b(0\.5|0\.25|0\.75) (?:of an? (?=[a-z])|(?:in|on) an? (?=(?:hour|minute|day)s?\b))"
)
_DOZEN = re.compile(rf"\b(an?|{_NUM}) dozen\b")
_COUPLE = re.compile(r"\ba couple(?: of)?\b")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
# Whisper writes "three hundred and fifty" as "300 and 50" (and "a hundred and twenty dollars"
# as "100 and $20"): joined as the words are ("and" after a scale word joins a number's words),
# except where "and" joins two operands ("between 100 and 37", "the sum of 300 and 50").
_HUNDREDS_AND = re.compile(r"\b(\d*[1-9]00) and (\$?)([1-9]\d?)\b(?!\.\d)")
_TWO_OPERANDS = re.compile(r"\b(?:between|add|multiply|of)\s+$")
# Hidden from alpha2digit, which reads "ninety second" as "92nd" and "two hundred fifty and
# four" as 254: "second" is a unit of time far more often than an ordinal in requests, and
# "and" joins a number's words only after its scale word ("a hundred and five").
_SECOND = re.compile(r"\bsecond\b")
_LONE_AND = re.compile(r"(?<!\bhundred)(?<!\bthousand)(?<!\bmillion)(?<!\bbillion) and\b")
_HIDDEN = (("second", "sec_ond"), (" and", " _and_"))
_HYPHEN = re.compile(r"(?<=[a-z])-(?=[a-z])")  # "three-mile", "forty-five"

_SCALES = [(1e12, "trillion"), (1e9, "billion"), (1e6, "million")]


def _fmt(x: float) -> str:
    return f"{x:.6f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def digits(text: str) -> str:
    """``text`` with its spoken numbers in digits: "one and a half hours" -> "1.5 hours",
    "a hundred" -> "100", "a dozen" -> "12", "half of ninety" -> "0.5 of 90".

    Lower-cased; one-word numbers are converted too ("one" -> "1"), which the tools' parsers
    want and prose may not.
    """
    out = _HYPHEN.sub(" ", text.lower()).replace("°", " degrees ")
    out = _LONE_AND.sub(" _and_", _SECOND.sub("sec_ond", out))
    out = alpha2digit(out, "en", threshold=0)
    for word, hidden in _HIDDEN:
        out = out.replace(hidden, word)
    out = _THOUSANDS.sub("", out)
    out = _HUNDREDS_AND.sub(_hundreds_and, out)
    out = _ARTICLE.sub("", out)
    out = _POINT.sub(r"0.\1", out)
    # A half is added to its number before a lone "half" becomes 0.5, and 0.5 exists before
    # "0.5 dozen" is multiplied out.
    out = _AND_FRACTION.sub(lambda m: _fmt(float(m[1]) + _FRACTIONS[m[2]]), out)
    out = _UNIT_AND_HALF.sub(lambda m: f"{_fmt(_count(m[1]) + 0.5)} {m[2]}", out)
    out = _HALF.sub("0.5", out)
    out = _QUARTER.sub("0.25", out)
    out = _THREE_QUARTERS.sub("0.75", out)
    out = _FRACTION_OF_ONE.sub(r"\1 ", out)
    out = _DOZEN.sub(lambda m: _fmt(_count(m[1]) * 12), out)
    return _COUPLE.sub("2", out)


# A value said again to correct it: "for twenty minutes, sorry, twenty-five minutes", "seven,
# no, eight in the morning", "three meters, I mean four meters": the corrected value (a number,
# its unit or two words) before the marker, the new one (with at most three words) ending the
# request. A sum or anything else after the marker is left to the parsers ("5 plus 3, no, 5
# plus 4" is not a value said again).
_MARKERS = (
    r"(?:(?:no|nope|sorry|oops|wait|actually|i mean|rather|or rather|make (?:it|that)"
    r"|scratch that)[,.;!]? )+"
)
# Where a correction begins, after the words it corrects: "…, no, ", "…. Sorry, I mean ".
CORRECTED = re.compile(rf"[,.;!?] {_MARKERS}", re.I)
_VALUE = r"-?\d+(?:[:.]\d+)*(?: \d+(?:[:.]\d+)*)*"
# A new value of two parts is a length ("1 hour 20 minutes"), not a sum ("5 plus 4").
_OPERATOR = r"(?:plus|minus|times|x|divided|over|and|by)"
_SAID_AGAIN = re.compile(
    rf"{_VALUE}((?: [a-z]+){{0,2}})[,.;!?]? {_MARKERS}"
    rf"(?={_VALUE}((?:,? (?!{_OPERATOR}\b|please\b)[a-z]+){{0,4}})(?: {_VALUE}(?: [a-z]+){{0,3}})?"
    r"(?:,? please)?\W*$)"
)


def corrected(text: str) -> str:
    """``text`` with a value the user corrected replaced by the one said after it, in digits and
    lower case ("set a timer for 25 minutes."); ``text`` itself where nothing was corrected. The
    new value keeps the old one's words where it has none ("10 minutes. No, make it 12.")."""
    words = digits(text)
    found = _SAID_AGAIN.search(words)
    if found is None:
        return text
    rest = words[found.end() :]
    if found[1] and not found[2]:
        value = re.match(_VALUE, rest)
        assert value is not None  # the lookahead matched one there
        rest = rest[: value.end()] + found[1] + rest[value.end() :]
    cased = {w.lower(): w for w in re.findall(r"[A-Za-z']+", text) if not w.islower()}
    return re.sub(r"[a-z']+", lambda w: cased.get(w[0], w[0]), words[: found.start()] + rest)


def _hundreds_and(m: re.Match[str]) -> str:
    if _TWO_OPERANDS.search(m.string[: m.start()]):
        return m[0]
    return f"{m[2]}{int(m[1]) + int(m[3])}"


def _count(word: str) -> float:
    return 1.0 if word in ("a", "an") else float(word)


def say_number(x: float) -> str:
    """``x`` as the agent says it: whole numbers as they are up to a million, then "46.5
    million"; other numbers to about three significant digits ("37.8", "3.14", "0.333")."""
    if math.isnan(x):
        return "not a number"
    if math.isinf(x):
        return "infinity" if x > 0 else "minus infinity"
    if x < 0:
        spoken = say_number(-x)
        return spoken if spoken == "0" else f"minus {spoken}"
    if x >= 1e6:
        # Three significant digits first, so that 999.96 million is "1 billion".
        mantissa, exponent = f"{x:.2e}".split("e")
        rounded = float(f"{mantissa}e{exponent}")
        for scale, word in _SCALES:
            if rounded >= scale and rounded < 1000 * scale:
                return f"{_trim(f'{rounded / scale:.3g}')} {word}"
        return f"{_trim(mantissa)} times 10 to the power of {int(exponent)}"
    if x == int(x):
        return str(int(x))
    if x >= 10:
        return _trim(f"{x:.1f}")
    if x >= 1:
        return _trim(f"{x:.2f}")
    # Below one: three significant digits, written out (never "1e-05").
    places = 2 - math.floor(math.log10(x))
    return _trim(f"{x:.{places}f}")


def _trim(number: str) -> str:
    return number.rstrip("0").rstrip(".") if "." in number else number
