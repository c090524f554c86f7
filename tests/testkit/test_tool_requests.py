"""The tool benchmark (testkit/tool_requests.py) and the chooser's training set
(lab/tool_requests.py): the benchmark's coverage and form, and that none of it, its held-out
set included, is trained on."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from lab import tool_requests as lab
from testkit.tool_requests import (
    HARD_NEGATIVES,
    HELD_OUT,
    HELD_OUT_HARD_NEGATIVES,
    REQUESTS,
    ToolRequest,
)

BOTH = (*REQUESTS, *HELD_OUT)

# Each built-in tool's parameters and their types.
SCHEMA: dict[str, dict[str, type]] = {
    "get_time": {"place": str},
    "get_date": {"place": str},
    "set_timer": {"seconds": float, "label": str},
    "set_alarm": {"at": str},
    "list_timers": {},
    "cancel_timer": {"label": str},
    "calculate": {"expression": str},
    "convert_units": {"value": float, "from_unit": str, "to_unit": str},
    "country_info": {"country": str, "fact": str},
}
UNITS = {
    "mile", "kilometer", "degF", "degC", "pound", "kilogram", "foot", "meter", "inch",
    "centimeter", "ounce", "gram", "gallon", "liter", "mile_per_hour", "kilometer_per_hour",
    "cup", "milliliter",
}  # fmt: skip
FACTS = {"capital", "population", "languages", "currency"}


def of(*tools: str) -> list[ToolRequest]:
    return [r for r in REQUESTS if r.tool in tools]


def key(text: str) -> str:
    """What texts that read the same share: lower case, numbers in words, no punctuation
    ("Set 2, please." and "set two please")."""
    text = re.sub(r"\d[\d,]*", lambda m: lab.words(int(m.group().replace(",", ""))), text)
    return " ".join(re.sub(r"[^a-z' ]", " ", text.lower()).split())


def test_counts_per_category() -> None:
    assert sum(r.tool is None for r in REQUESTS) >= 34
    assert len(of(*SCHEMA)) >= 56
    time = of("get_time", "get_date")
    assert len(time) >= 8 and {r.tool for r in time} == {"get_time", "get_date"}
    assert sum(r.arguments != {"place": ""} for r in time) >= 4
    timers = of("set_timer", "set_alarm", "list_timers", "cancel_timer")
    assert len(timers) >= 8 and len({r.tool for r in timers}) == 4
    sums = [str(r.arguments["expression"]) for r in of("calculate") if r.arguments]
    assert len(sums) >= 14
    # percentages, halves, squares, square roots
    for form in (r"\d+ / 100 \* \d+", r"\d+ / 2", r"\d+ \*\* 2", r"\d+ \*\* 0\.5"):
        assert any(re.fullmatch(form, s) for s in sums), form
    assert len(of("convert_units")) >= 12
    facts = Counter(r.arguments["fact"] for r in of("country_info") if r.arguments)
    assert sum(facts.values()) >= 12 and set(facts) == FACTS
    assert len(HARD_NEGATIVES) >= 12 and all(r in REQUESTS for r in HARD_NEGATIVES)


def test_the_held_out_set_covers_every_tool_and_asks_for_none_too() -> None:
    assert {r.tool for r in HELD_OUT} == {*SCHEMA, None}
    assert sum(r.tool is None for r in HELD_OUT) >= 12
    assert all(r in HELD_OUT and r.tool is None for r in HELD_OUT_HARD_NEGATIVES)


def test_texts_are_unique_and_speakable() -> None:
    texts = [r.text for r in BOTH]
    assert len({key(t) for t in texts}) == len(texts)
    for text in texts:
        assert re.fullmatch(r"[A-Z][A-Za-z ,.?!'-]*[.?!]", text), text


@pytest.mark.parametrize("request_", BOTH, ids=lambda r: r.text[:40])
def test_arguments_follow_the_schema(request_: ToolRequest) -> None:
    if request_.tool is None:
        assert request_.arguments is None
        return
    args = request_.arguments
    assert args is not None and request_.tool in SCHEMA
    params = SCHEMA[request_.tool]
    assert set(args) == set(params)
    for name, kind in params.items():
        assert type(args[name]) is kind, name
    if request_.tool == "calculate":
        expression = str(args["expression"])
        assert re.fullmatch(r"\d+(\.\d+)?( (\+|-|\*|/|\*\*) \d+(\.\d+)?)+", expression)
        assert isinstance(eval(expression, {"__builtins__": {}}), int | float)
    elif request_.tool == "convert_units":
        assert {args["from_unit"], args["to_unit"]} <= UNITS
    elif request_.tool == "country_info":
        assert args["fact"] in FACTS
        assert str(args["country"]) in request_.text
    elif request_.tool == "set_alarm":
        assert re.fullmatch(r"(1[0-2]|[1-9]):[0-5]\d (AM|PM)", str(args["at"]))
    elif request_.tool in ("get_time", "get_date") and args["place"]:
        assert str(args["place"]) in request_.text


def test_no_benchmark_text_is_in_the_training_set() -> None:
    trained = {key(r.text) for seed in (0, 1) for r in lab.requests(seed)}
    assert not [r.text for r in BOTH if key(r.text) in trained]


def slot_patterns() -> dict[str, str]:
    """Per lab slot, what a value of it looks like once keyed: up to ten words of the ones its
    values use (numbers said any way), after a space; optional where a value keys to nothing
    ("+")."""
    numbers = {*key(" ".join(map(lab.words, range(100)))).split(), "hundred", "thousand"}
    numbers |= {"a", "and", "point", "half", "minus"}
    rng = random.Random(0)
    values = {name: [draw(rng) for _ in range(400)] for name, draw in lab.SLOTS.items()}
    for name, table in lab.NONE_SLOTS.items():
        values[name] = [*values.get(name, ()), *table]
    units = [name for names in lab.UNIT_NAMES.values() for pair in names for name in pair]
    values |= {"v": ["2"], "from": units, "from1": units, "to": units}
    out = {}
    for name, said in values.items():
        vocab = "|".join(sorted({w for v in said for w in key(v).split()} | numbers))
        optional = "?" if any(not key(v) for v in said) else ""
        out[name] = rf"(?: (?:{vocab})(?: (?:{vocab})){{0,9}}){optional}"
    return out


def test_no_benchmark_text_has_a_training_template_shape() -> None:
    """Nor is any a lab template with other slot values, or with its fillers and wrappers."""
    slots = slot_patterns()
    lead = "|".join(key(w) for w in (*lab.FILLERS, *lab.ASKING, *lab.WRAPPERS))
    templates = [
        *(t for group in lab.TOOL_TEMPLATES.values() for t in group),
        *(t for group in lab.NONE_TEMPLATES.values() for t in group),
        *(t for group in lab.NONE_SENTENCES.values() for t in group),
    ]
    same = []
    for template in templates:
        names = iter(re.findall(r"\{(\w+)\}", template))
        words = key(re.sub(r"\{\w+\}", " qqslotqq ", template)).split()
        body = "".join(slots[next(names)] if w == "qqslotqq" else " " + re.escape(w) for w in words)
        shape = re.compile(rf"(?: (?:{lead}))*{body}(?: please| thanks| thank you)?")
        same += [(r.text, template) for r in BOTH if shape.fullmatch(" " + key(r.text))]
    assert not same, "\n".join(f"{text!r} is {template!r}" for text, template in same)


def test_training_set_is_deterministic_and_split_by_template() -> None:
    reqs = lab.requests(seed=3)
    assert reqs == lab.requests(seed=3)
    assert lab.training_requests(seed=3) == [(r.text, r.label) for r in reqs]
    counts = Counter(r.label for r in reqs)
    assert set(counts) == set(lab.LABELS)
    assert all(250 <= counts[t] <= 400 for t in lab.TOOLS) and counts[lab.NONE] >= 1400
    train, held = lab.held_out_split(reqs, fraction=0.15, seed=3)
    assert sorted(train + held, key=repr) == sorted(reqs, key=repr)
    assert not {r.template for r in train} & {r.template for r in held}
    assert {r.label for r in held} == set(lab.LABELS)
    assert 0.1 < len(held) / len(reqs) < 0.25
