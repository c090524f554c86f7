"""The calculator: arithmetic said in words or typed in symbols ("15% of 80", "half of 90",
"square root of 144", "7 squared", "2 to the power of 10"), evaluated by simpleeval (never
``eval``), the answer spoken with the question ("12 plus 29 is 41.")."""

from __future__ import annotations

import ast
import math
import re

import simpleeval

from dllm_voice.app.tools.builtin import sounds
from dllm_voice.app.tools.builtin.numbers import CORRECTED, corrected, digits, say_number
from dllm_voice.app.tools.registry import ToolError, tool

# "add 5 and 3" -> "5 plus 3": the verb forms become the operator forms, for the sum and for
# the answer's words.
_VERBS = [
    (re.compile(r"^(?:(?:the )?sum (?:of|on)|add) (.+?) (?:and|to|plus) (.+)$"), r"\1 plus \2"),
    (re.compile(r"^subtract (.+?) from (.+)$"), r"\2 minus \1"),
    (
        re.compile(r"^(?:multiply|(?:the )?product (?:of|on)) (.+?) (?:by|and|times) (.+)$"),
        r"\1 times \2",
    ),
    (re.compile(r"^divide (.+?) by (.+)$"), r"\1 divided by \2"),
]
_TO_PYTHON = [
    # Whisper writes "15 percent of 80" as "15% of 80%": a percent of a percent is not asked.
    (r"(\d+(?:\.\d+)?) ?(%|percent\b) of (\d+(?:\.\d+)?) ?(?:%|percent\b)", r"\1 \2 of \3"),
    # "80 plus 15 percent" is 80 and its 15 percent, as on a calculator (92, not 80.15).
    (
        r"(\d+(?:\.\d+)?) (?:plus|\+) (\d+(?:\.\d+)?) ?(?:%|percent\b)(?! of\b)",
        r"\1 * (1 + \2 / 100)",
    ),
    (
        r"(\d+(?:\.\d+)?) (?:minus|-) (\d+(?:\.\d+)?) ?(?:%|percent\b)(?! of\b)",
        r"\1 * (1 - \2 / 100)",
    ),
    (r"\b(?:the )?square root of\b|√", " sqrt "),
    (r"\b(?:the )?cube root of\b", " cbrt "),
    (r"\b(?:the )?factorial of (\d+(?:\.\d+)?)|\b(\d+(?:\.\d+)?) factorial\b", r" fact(\1\2) "),
    (r"\bsquared\b", " ** 2 "),
    (r"\bcubed\b", " ** 3 "),
    (r"\bto the (\d+)(?:st|nd|rd|th)? power\b", r" ** \1 "),
    (r"\b(?:raised )?to the power(?: of)?\b|\braised to\b|\*\*|\^", " ** "),
    (r"(?<=\d)\s*(?:%|percent\b|per cent\b)(?!\s*[\d(])", " / 100 "),  # else "%" is modulo
    (r"\b(\d+) (\d+)(?:nd|rd|th)s\b", r"(\1 / \2)"),  # "2 thirds" ("2 3rds" after digits)
    (r"(?:\b(?:a|an|1) |^)(\d+)(?:nd|rd|th)\b", r"(1 / \1)"),  # "a third"
    (r"\b(?:twice|double)\b", " 2 * "),
    (r"\btriple\b", " 3 * "),
    (r"\btimes\b|\bmultiplied by\b|(?<=[\d)])\s*[x×]\s*(?=[\d(])|(?<!\*)\*(?!\*)", " * "),
    (r"\bdivided by\b|\bover\b|÷|/", " / "),
    (r"\bplus\b|\+", " + "),
    (r"\bminus\b|\bnegative\b|−|-", " - "),
    (r"\bmod(?:ulo)?\b", " % "),
    (r"\bof\b", " * "),
    (r"\b(sqrt|cbrt)\s+(-\s*)?(\d+(?:\.\d+)?)", r"\1(\2\3)"),  # of the number after it
]
_ONLY_ARITHMETIC = re.compile(r"^(?:[\d.\s+\-*/%()]|sqrt|cbrt|fact)*$")


def _factorial(n: float) -> int:
    if n != int(n) or n < 0:
        raise ToolError("A factorial needs a whole number, zero or more.")
    if n > 170:  # 171! is past a float
        raise ToolError("That number is too big for me.")
    return math.factorial(int(n))


_EVAL = simpleeval.SimpleEval(
    functions={"sqrt": math.sqrt, "cbrt": math.cbrt, "fact": _factorial}, names={}
)


def _rephrase(text: str) -> str:
    text = re.sub(r"^(?:what(?:'s| is) |the )", "", text.strip())
    text = re.sub(r"\s*(?:=|equals)?[\s?.!]*$", "", text)  # "12 + 29 = ?"
    for verb, form in _VERBS:
        text = verb.sub(form, text)
    return text


# A number said in pairs of digits, which ``digits`` leaves apart: "one forty-four" (1 44) is 144,
# "nineteen ninety-nine" (19 99) 1999; nothing else puts two numbers side by side in a sum.
_SAID_IN_PAIRS = re.compile(r"(?<![\d.])\b([1-9]\d?) ([1-9]\d)\b(?![.\d]|\s*(?:st|nd|rd|th)\b)")


def to_python(expression: str) -> str:
    """``expression`` as a Python arithmetic expression; ToolError if it is not one."""
    text = _rephrase(_SAID_IN_PAIRS.sub(r"\1\2", digits(expression)))
    for pattern, repl in _TO_PYTHON:
        text = re.sub(pattern, repl, text)
    text = re.sub(r"\b(?:the|a|an|by|and)\b", " ", text)
    text = " ".join(text.split())
    try:
        if _ONLY_ARITHMETIC.match(text) and re.search(r"\d", text):
            ast.parse(text, mode="eval")
            return text
    except SyntaxError:
        pass
    raise ToolError(f"I can't work out '{expression.strip()}'.")


def _spoken(expression: str) -> str:
    """The question as the answer repeats it, in the user's words: "12+29" -> "12 plus 29"."""
    text = _rephrase(expression)
    text = re.sub(r"\bsqrt\s*\(([^)]*)\)", r"the square root of \1", text)
    for symbol, words in [
        (r"\*\*|\^", "to the power of"),
        (r"(?<=[\d)])\s*[x×]\s*(?=[\d(])|\*", "times"),
        (r"/|÷", "divided by"),
        (r"\+", "plus"),
        (r"(?<![a-z])-|−", "minus"),
        (r"(?<=\d)\s*%(?=\s*\d)", "mod"),
        (r"%", "percent"),
        (r"[()]", ""),
    ]:
        text = re.sub(symbol, f" {words} ", text)
    text = " ".join(text.split())
    return text[:1].upper() + text[1:]


def _evaluate(expression: str) -> float:
    python = to_python(expression)
    try:
        value = _EVAL.eval(python)
    except ZeroDivisionError as e:
        raise ToolError("I can't divide by zero.") from e
    except ValueError as e:  # math.sqrt of a negative number
        raise ToolError("I can't take the square root of a negative number.") from e
    except (simpleeval.NumberTooHigh, OverflowError) as e:
        raise ToolError("That number is too big for me.") from e
    except (simpleeval.InvalidExpression, TypeError) as e:
        raise ToolError(f"I can't work out '{expression.strip()}'.") from e
    if isinstance(value, complex):
        raise ToolError("That has no real answer.")
    try:
        return float(value)
    except OverflowError as e:  # an int too big for a float
        raise ToolError("That number is too big for me.") from e


# The parser: the longest run of number and operator words in the user's words.

_NUMBER_WORDS = frozenset(
    """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty
    ninety hundred thousand million billion trillion point half quarter quarters dozen third
    thirds fourth fourths fifth fifths sixth sixths seventh sevenths eighth eighths ninth ninths
    tenth tenths
    """.split()  # noqa: SIM905 - a word table
)
_OPERATORS = frozenset(
    """plus minus times x multiplied divided over power squared cubed square cube root percent
    mod modulo raised add subtract multiply divide sum product negative twice double triple
    factorial
    + - * ** / ^ × ÷ % √
    """.split()  # noqa: SIM905 - a word table
)
_GLUE = frozenset({"by", "to", "the", "of", "from", "and", "a", "an"})
_FRACTIONS = frozenset(
    """half quarter quarters third thirds fourth fourths fifth fifths sixth sixths seventh
    sevenths eighth eighths ninth ninths tenth tenths
    """.split()  # noqa: SIM905 - a word table
)
_TOKEN = re.compile(r"\d+(?:[.,]\d+)*(?:st|nd|rd|th)?|[a-z]+(?:-[a-z]+)*|\*\*|[-+*/^()×÷%√]")


def _kind(token: str) -> str:
    if token[0].isdigit() or all(w in _NUMBER_WORDS for w in token.split("-")):
        return "number"
    if token in _OPERATORS:
        return "operator"
    return "glue" if token in _GLUE or token in "()" else ""


# Arithmetic said as a task rather than a sum, over the request in digits ("cut 350 in half",
# "I have 63 apples and eat 19", "split 120 three ways"): each pattern and the expression it
# means.
_N = r"(-?\d+(?:\.\d+)?)"
_THING = r"(?: [a-z]+)?"  # what is counted: "63 apples"
_LOSE = (
    r"(?:eat|ate|lose|lost|spend|spent|pay|paid|use|used|sell|sold|drop|dropped|break|broke"
    r"|give away|gave away)"
)
_GAIN = (
    r"(?:get|got|buy|bought|find|found|add|added|receive|received|earn|earned|win|won|make|made)"
)
# What one starts with: "I have 63 apples", "I got paid 900".
_HOLD = r"(?:have|had|got(?: paid)?|was paid|earned|earn|start with|started with)"
# "Divided by" alone is an operator the run of the words reads as said.
_SHARE = (
    r"(?:split|shared?|divided?(?! by)|deal|dealt|distributed?|hand(?:ed)? out|give out)"
    r"(?: them| it)?(?: up| out)?(?: evenly| equally)?"
)
_AMONG = r"(?:among|amongst|between|by|into|across|with|for|to)"
# Where a command starts: the first word, or after a filler or a subject ("hey, square 46",
# "when you square 7").
_COMMAND = r"(?:^|\b(?:you|i|we|please|now|then|hey|hi|um|uh|ok|okay|so|alright|oh) )"
# "save 40 a week for 12 weeks", "25 dollars an hour for 8 hours": an amount each period times
# the periods; arithmetic, though it may name time.
_PER_PERIOD = re.compile(
    rf"{_N}(?: [a-z]+)? (?:a|an|per|each) (minute|hour|night|day|week|month|year) for {_N} \2s?\b"
)
_TASKS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(rf"\b(?:cut|split|divide|break|chop) {_N}{_THING} (?:in|into) (?:half|2)\b"),
        r"\1 / 2",
    ),
    (
        re.compile(rf"\b(?:cut|split|divide|break|chop) {_N}{_THING} (?:in|into) (?:3rds|3)\b"),
        r"\1 / 3",
    ),
    (
        re.compile(rf"\b(?:cut|split|divide|break|chop) {_N}{_THING} (?:in|into) (?:quarters|4)\b"),
        r"\1 / 4",
    ),
    (re.compile(rf"\bhalve {_N}"), r"\1 / 2"),
    (re.compile(rf"\b(?:the )?square of {_N}"), r"\1 ** 2"),
    (re.compile(rf"\b(?:the )?cube of {_N}"), r"\1 ** 3"),
    # Only as a command ("square 7", "when you square 7"): "back to square 1" is not one.
    (re.compile(rf"{_COMMAND}square {_N}"), r"\1 ** 2"),
    (re.compile(rf"{_COMMAND}cube {_N}"), r"\1 ** 3"),
    (re.compile(rf"{_N} times itself\b"), r"\1 ** 2"),
    # "81, take its square root" ("it square root" as Whisper writes it).
    (
        re.compile(
            rf"{_N}\.?,? (?:now )?(?:take|find|get|give me) (?:its?|the) (square|cube) root\b"
        ),
        r"the \2 root of \1",
    ),
    (re.compile(rf"{_N} take away {_N}"), r"\1 - \2"),
    (
        re.compile(rf"\b(?:take|subtract|remove|deduct)(?: away)? {_N}(?: away)? from {_N}"),
        r"\2 - \1",
    ),
    (
        re.compile(rf"\b{_HOLD} {_N}{_THING} and (?:then )?{_LOSE} {_N}"),
        r"\1 - \2",
    ),
    (
        re.compile(rf"\b{_HOLD} {_N}{_THING} and (?:then )?{_GAIN} {_N}"),
        r"\1 + \2",
    ),
    (re.compile(rf"\b{_SHARE} {_N}{_THING} {_N} ways\b"), r"\1 / \2"),
    (re.compile(rf"{_N}(?: [a-z]+){{0,2}} {_SHARE} {_N} ways\b"), r"\1 / \2"),
    (re.compile(rf"{_N}(?: [a-z]+){{0,2}} {_SHARE} {_AMONG} {_N}"), r"\1 / \2"),
    (re.compile(rf"\b{_SHARE} {_N}{_THING} {_AMONG} {_N}"), r"\1 / \2"),
    # "3 people split a bill of 90": the amount over the sharers.
    (
        re.compile(
            rf"\b(\d+) (?:people|persons|friends|guys|kids|roommates|colleagues|of us) "
            rf"{_SHARE}(?: [a-z]+){{0,3}} {_N}"
        ),
        r"\2 / \1",
    ),
    # "on": Whisper's "of" after "product" and "sum" ("the product on 250 and four").
    (re.compile(rf"\b(?:the )?product (?:of|on) {_N} (?:and|by|times|with) {_N}"), r"\1 * \2"),
    (re.compile(rf"\bmultiply {_N} (?:and|by|times|with) {_N}"), r"\1 * \2"),
    # A price said as dollars and cents: "4 coffees at 3 50 each".
    (
        re.compile(rf"{_N}{_THING} (?:at|for) (\d+) ([1-9]\d)(?: each| apiece| a piece)"),
        r"\1 * \2.\3",
    ),
    (
        re.compile(rf"{_N}{_THING} (?:at|for) {_N}(?: each| apiece| a piece| per [a-z]+)"),
        r"\1 * \2",
    ),
    (_PER_PERIOD, r"\1 * \3"),
    # "a pizza costs 12 dollars and I buy 3, what's the total": a price times a count.
    (
        re.compile(
            rf"\bcosts? {_N}(?: [a-z]+)?,? and (?:i|we) (?:buy|get|order|need) {_N}\b"
            r"(?!.*\b(?:left|change|remain))"
        ),
        r"\1 * \2",
    ),
    # "a pizza costs 18 dollars and I have 50, how much change": the money given less the price.
    (
        re.compile(
            rf"\bcosts? {_N}(?: [a-z]+)?,? and (?:i|we) (?:have|pay with|paid with"
            rf"|(?:give|gave|hand|handed)(?: over)?(?: the [a-z]+| him| her| them)?) {_N}\b"
            r"(?=.*\b(?:change|left)\b)"
        ),
        r"\2 - \1",
    ),
    (
        re.compile(
            rf"\b(?:pay|paid|give|gave|hand over|handed over)(?: with)? {_N}(?: [a-z]+)? for "
            rf"(?:[a-z]+ ){{1,4}}(?:that |which )?costs? {_N}\b(?=.*\bchange\b)"
        ),
        r"\1 - \2",
    ),
    # "a ticket costs 14, how much are 5 tickets": the same, asked.
    (
        re.compile(
            rf"\bcosts? {_N}(?: [a-z]+)?,? how much (?:are|is|for|would|will|do|does)"
            rf"(?: [a-z]+)?? {_N}\b"
        ),
        r"\1 * \2",
    ),
    (re.compile(rf"\bdifference between {_N} and {_N}"), r"\1 - \2"),
    (re.compile(rf"\b(?:increase|raise|add) {_N} by {_N} ?(?:percent\b|%)"), r"\1 plus \2 percent"),
    (
        re.compile(rf"\b(?:decrease|reduce|lower|cut|discount) {_N} by {_N} ?(?:percent\b|%)"),
        r"\1 minus \2 percent",
    ),
]
_SUM = re.compile(
    # "And 65 and 38.", "And up 14 22 and 31.": Whisper's "add" at the start of a request of
    # numbers alone.
    rf"^and(?: up| together)? {_N}(?:,? (?:and )?-?\d+(?:\.\d+)?)*(?:,? and -?\d+(?:\.\d+)?)"
    r"(?: for me| please)?\W*$|"
    rf"\b(?:add(?: up| together)?|sum(?: up)?|total(?: up)?|(?:the )?(?:sum|total) (?:of|on)) "
    rf"{_N}(?:,? (?:and |plus |to )?-?\d+(?:\.\d+)?)+"
)
_AVERAGE = re.compile(rf"\b(?:average|mean) of {_N}(?:,? (?:and )?-?\d+(?:\.\d+)?)+")
_MONEY = re.compile(r"\$|\b(?:dollars?|bucks|euros?)\b")
_OPERATOR_WORDS = re.compile(
    r"\b(?:plus|minus|times|divided|over|multiplied|power|squared|cubed|root|mod)\b|[-+*/^×÷]"
)
# What a percentage of an amount is asked about, when the two are not joined by "of".
_RATE_OF_AMOUNT = re.compile(
    r"\b(?:tip|tips|off|discount|discounted|save|saving|savings|tax|taxes|interest|commission"
    r"|bill|costs?|price|markup|raise|fee|deposit|how much)\b"
)
# "10 percent off": the price paid when asked for it or said as "10 percent off 50", else the
# saving ("it's 10 percent off, how much do I save").
_PAID = re.compile(
    r"\b(?:pay|paying|final|after|sale price|new price|price now|costs? now|come to|comes to)\b"
)


def _task(words: str) -> str | None:
    """The expression of a task said in ``words`` (the request in digits), or None."""
    for pattern, expression in _TASKS:
        found = pattern.search(words)
        if found:
            return found.expand(expression)
    added = _SUM.search(words)
    if added:
        return " + ".join(re.findall(r"-?\d+(?:\.\d+)?", added[0]))
    averaged = _AVERAGE.search(words)
    if averaged:
        numbers = re.findall(r"-?\d+(?:\.\d+)?", averaged[0])
        return f"({' + '.join(numbers)}) / {len(numbers)}"
    return _percentage(words)


def _percentage(words: str) -> str | None:
    """A percentage of the one other number said ("the bill is 60, what's a 20 percent tip"
    -> "20 percent of 60"), when no operator joins them."""
    numbers = re.findall(r"(?<![\d.])(\d+(?:\.\d+)?)( ?(?:percent\b|%))?", words)
    percents = [n for n, p in numbers if p]
    if len(numbers) != 2 or len(percents) != 1 or _OPERATOR_WORDS.search(words):
        return None
    if re.search(r"(?:percent|%) of \d", words) or not _RATE_OF_AMOUNT.search(words):
        return None  # said as an expression (kept in the user's words), or not an amount
    rate, amount = percents[0], next(n for n, p in numbers if not p)
    saving = re.search(r"\b(?:save|saving|savings)\b", words)
    # "20 percent off (of) 50" names the price it leaves, as a shop's sign does.
    price = _PAID.search(words) or re.search(r"(?:percent|%) off (?:of )?\d", words)
    if re.search(r"\b(?:off|discount|discounted)\b", words) and price and not saving:
        return f"{amount} minus {rate} percent"
    return f"{rate} percent of {amount}"


# The request's last word, after an operator that follows a number: "seven times it" is what
# Whisper wrote for "seven times eight".
_LAST_OPERAND = re.compile(
    r"(\d|\b[a-z]+)\W* (?:plus|minus|times|multiplied by|divided by|over) ([a-z]+)\W*$"
)
_SAID_DIGITS = sorted(w for w in _NUMBER_WORDS if digits(w).isdigit() and int(digits(w)) < 100)
# Words that end a sum as themselves, however near a number they sound: "five times that",
# "three times more", "ten times better" (a comparative's "-er" too).
_NOT_OPERANDS = frozenset(
    """that this those these more less most least worse each me you him us them then there
    here again so too""".split()  # noqa: SIM905 - a word table
)


def _heard_operand(lower: str) -> str:
    """``lower`` with its last operand read as a number by its sound, where it is a word that
    is none ("seven times it" -> "seven times eight"); a word no nearer than 1.5 phonemes, where
    no other number is within 0.5 of it ("seven times made"): after an operator at a sum's end
    only a number stands."""
    found = _LAST_OPERAND.search(lower)
    if found is None or _kind(found[1]) != "number" or _kind(found[2]) == "number":
        return lower
    word = found[2]
    if word in _NOT_OPERANDS or word.endswith("er"):
        return lower
    number = sounds.sounds_like(word, _SAID_DIGITS) or sounds.nearest(
        word, _SAID_DIGITS, most=1.5, margin=0.5
    )
    if number is None:
        return lower
    return lower[: found.start(2)] + number + lower[found.end(2) :]


# "Add it hundred and fifty to twelve hundred": a word before "hundred" or "thousand" that is
# no number is read by its sound as one of one to nine ("it" is 0.5 from "eight"; "a" 1.5).
_BEFORE_SCALE = re.compile(r"\b([a-z]+) (hundred|thousand)\b")
_ONES = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
# "Take 48 from 100 and free": the word after a hundred's "and" that is no number, read as one
# under a hundred by its sound ("free" is 0.5 from "three").
_AFTER_SCALE = re.compile(r"\b(hundred|thousand|\d+00) and ([a-z]+)\b")


def _heard_scale(lower: str) -> str:
    def before(found: re.Match[str]) -> str:
        if _kind(found[1]):
            return found[0]
        number = sounds.sounds_like(found[1], _ONES)
        return f"{number} {found[2]}" if number else found[0]

    def after(found: re.Match[str]) -> str:
        if _kind(found[2]):
            return found[0]
        number = sounds.sounds_like(found[2], _SAID_DIGITS)
        return f"{found[1]} and {number}" if number else found[0]

    return _AFTER_SCALE.sub(after, _BEFORE_SCALE.sub(before, lower))


# Whisper's "on" for "of" after a percent or a fraction, before a number: "fifteen percent on
# sixty", "half on three hundred".
_ON_FOR_OF = re.compile(rf"\b((?:percent|{'|'.join(sorted(_FRACTIONS))})\b|%) on (?=([a-z0-9]+))")


# Whisper's "What's eight cubes?" for "... cubed": a number's power asked, as a noun ("I have
# eight cubes" asks nothing).
_POWER_NOUN = re.compile(
    r"^((?:what(?:'s| is)|how much is|calculate|compute|work out) (?:[a-z]+ )?)?([a-z0-9-]+) "
    r"(square|cube)s?(?=\W*$)"
)


def _heard(lower: str) -> str:
    """``lower`` with the numbers Whisper wrote as other words read by their sound, its "on"
    for "of" (``_ON_FOR_OF``) and a power as a noun (``_POWER_NOUN``)."""
    lower = _heard_scale(_heard_operand(lower))
    power = _POWER_NOUN.search(lower)
    if power and power[1] and _kind(power[2]) == "number":
        lower = f"{power[1]}{power[2]} {power[3]}d" + lower[power.end() :]
    return _ON_FOR_OF.sub(lambda m: f"{m[1]} of " if _kind(m[2]) == "number" else m[0], lower)


def _restated(text: str) -> str:
    """``text`` with a corrected sum replaced by its restatement, from the last place the
    correction's first word was said before it ("twelve times seven, no, twelve times eight",
    "15 percent of 80, sorry, of 90"); else with a number said again in its place
    (``corrected``)."""
    found = CORRECTED.search(text)
    if found is None or not re.match(r"[a-z0-9]", text[found.end() :], re.I):
        return text
    before, after = text[: found.start()], text[found.end() :]
    first = re.escape(after.split()[0].strip(",.;!?").lower())
    at = [m.start() for m in re.finditer(rf"\b{first}\b", before.lower())]
    return before[: at[-1]] + after if at else corrected(text)


# The name of a number asked ("What's the square root of negative one called?"), not its value.
_NAME_ASKED = re.compile(
    r"\b(?:is|it's|are) called\W*$|^what(?:'s| is) [^?]* called\W*$"
    r"|\bwhat (?:do|does|would) (?:you|we|they|people|mathematicians) call\b"
)


def parse_calculation(text: str) -> dict[str, object] | None:
    """The expression in the user's words: "What's twelve plus twenty-nine?" ->
    {"expression": "twelve plus twenty-nine"}; a task in digits: "cut three hundred and fifty
    in half" -> {"expression": "350 / 2"}; None if there is none."""
    text = _restated(text)
    lower = " ".join(_MONEY.sub(" ", text.lower()).split())
    timed = re.search(r"\b(?:timers?|alarms?|convert|minutes?|hours?|seconds?)\b", lower)
    if timed and not _PER_PERIOD.search(digits(lower)):
        return None
    if re.search(r"\bin (?:binary|hex(?:adecimal)?|octal|roman numerals|base \w+)\b", lower):
        return None  # a number written another way: the LM's to answer
    if re.search(
        r"\b(?:in|as|into) an? (?:[a-z]+ )?(?:poem|song|story|haiku|rhyme|riddle|joke|limerick)\b",
        lower,
    ):
        return None  # something to write, the sum only its subject
    if _NAME_ASKED.search(lower):
        return None
    lower = _heard(lower)
    # The money words part the numbers around them ("a hundred and twenty dollars four ways"
    # is 120 and 4, not 124) and then go.
    parted = digits(_heard(_MONEY.sub(" , ", text.lower())))
    expression = _task(" ".join(re.sub(r"[^\w.%$+*/^×÷-]+", " ", parted).split()))
    expression = expression or _run(lower)
    if expression is None:
        return None
    try:
        to_python(expression)
    except ToolError:
        return None
    return {"expression": expression}


def _run(lower: str) -> str | None:
    """The longest run of number and operator words in ``lower``, as written; None if no run
    has both."""
    tokens = list(_TOKEN.finditer(lower))
    best: tuple[int, int, int] | None = None  # (weight, first, last)
    i = 0
    while i < len(tokens):
        j = i
        while j < len(tokens) and _kind(tokens[j][0]):
            j += 1
        run = [t[0] for t in tokens[i:j]]
        while run and _kind(run[-1]) == "glue" and run[-1] != ")":
            run.pop()
        first = i
        while (
            run
            and _kind(run[0]) == "glue"
            and run[0] != "("
            and not (run[0] in ("a", "an") and len(run) > 1 and run[1] in _FRACTIONS | {"dozen"})
        ):
            run.pop(0)
            first += 1
        kinds = [_kind(t) for t in run]
        # "of" is an operator after a fraction or a percent ("half of 90", "15 percent of 80").
        of = any(
            t == "of" and k > 0 and run[k - 1] in _FRACTIONS | {"percent", "%"}
            for k, t in enumerate(run)
        )
        # A percent alone is no sum ("my phone is at 15 percent").
        operators = {t for t, k in zip(run, kinds, strict=True) if k == "operator"}
        # A sign on one number is no sum either ("minus ten cells is in Fahrenheit").
        signed = kinds.count("number") == 1 and operators <= {"minus", "negative", "plus", "-", "+"}
        if "number" in kinds and (operators - {"percent", "%"} or of) and not signed:
            weight = len(run)
            if best is None or weight > best[0]:
                best = (weight, first, first + len(run) - 1)
        i = max(j, i + 1)
    if best is None:
        return None
    return lower[tokens[best[1]].start() : tokens[best[2]].end()]


@tool(parse=parse_calculation, read_only=True, timeout_s=2.0)
def calculate(expression: str) -> str:
    """Work out an arithmetic expression, in words or symbols: "12 plus 29", "15% of 80",
    "square root of 144", "2 to the power of 10"."""
    return f"{_spoken(expression)} is {say_number(_evaluate(expression))}."
