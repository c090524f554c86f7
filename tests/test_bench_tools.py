"""bench/tools.py: the argument rules, the request order, its trace, and one short typed run
(slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.tools import TOOLS, answer_for, exact_arguments, ordered, references, write_trace
from testkit.tool_requests import REQUESTS

ROOT = Path(__file__).resolve().parent.parent


def test_exact_arguments_compare_values_not_spellings():
    calc, convert, clock = TOOLS["calculate"], TOOLS["convert_units"], TOOLS["get_time"]
    assert exact_arguments(calc, {"expression": "225 ** 0.5"}, {"expression": "square root of 225"})
    assert not exact_arguments(calc, {"expression": "12 + 29"}, {"expression": "12 plus 30"})
    miles = {"value": 3.0, "from_unit": "mile", "to_unit": "kilometer"}
    assert exact_arguments(convert, miles, {**miles, "value": 3, "from_unit": "miles"})
    assert not exact_arguments(convert, miles, {**miles, "to_unit": "meters"})
    speed = {"value": 100.0, "from_unit": "kilometer_per_hour", "to_unit": "mile_per_hour"}
    assert exact_arguments(convert, speed, {**speed, "from_unit": "kilometers per hour"})
    assert exact_arguments(clock, {"place": ""}, {})  # the default filled in
    assert exact_arguments(clock, {"place": "New York"}, {"place": " new  york"})


def test_a_cancel_request_meets_the_timers_it_is_about():
    """With no timer set every cancel says "You have no timers.", a wrong label too; a label
    that only sounds like the timer's name ("past") cancels it, as the tool does for the user."""
    (pasta,) = [r for r in REQUESTS if r.tool == "cancel_timer" and "pasta" in r.text]
    assert references(pasta, 1e9) == ["Canceled your pasta timer."]
    wrong = answer_for(TOOLS["cancel_timer"], {"label": "rice"}, 1e9, pasta)
    assert wrong == "You have no rice timer."
    heard = answer_for(TOOLS["cancel_timer"], {"label": "past"}, 1e9, pasta)
    assert heard == "Canceled your pasta timer."


def test_any_prefix_keeps_the_mix():
    first = ordered(REQUESTS)[:40]
    assert sorted(map(id, ordered(REQUESTS))) == sorted(map(id, REQUESTS))
    no_tool = sum(r.tool is None for r in REQUESTS) / len(REQUESTS)
    assert abs(sum(r.tool is None for r in first) / 40 - no_tool) < 0.05
    assert len({r.tool for r in first}) == len({r.tool for r in REQUESTS})


@pytest.mark.slow
def test_short_typed_run_prints_the_metrics(tmp_path):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "bench.tools", "--limit", "3", "--mode", "typed",
           "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout)
    assert r == json.loads(out.read_text())
    assert "spoken" not in r and r["machine"]["cores"] >= 1
    t = r["typed"]
    assert (t["requests"], t["tool_requests"] + t["no_tool_requests"]) == (3, 3)
    keys = ("choice_precision", "choice_recall", "false_calls", "false_calls_hard_negatives",
            "exact_arguments", "answer_correct", "lm_arguments", "tool_ms_p50")  # fmt: skip
    assert set(keys) <= set(t)
    assert t["choice_recall"]["n"] == t["tool_requests"] and t["false_calls"]["n"] >= 1
    for row in t["failures"]:  # each one with what was asked for and what came
        assert {"text", "expected", "got"} <= set(row)


def test_a_batch_trace_names_each_event_s_request(tmp_path):
    path = tmp_path / "trace.jsonl"
    write_trace(path, [{"event": "asr_final", "playing": 0}, {"event": "pause", "playing": 2}], 12)
    write_trace(path, [{"event": "turn_done", "playing": 1}], 24)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["event"], r["request"]) for r in rows] == [
        ("asr_final", 12), ("pause", 14), ("turn_done", 25),
    ]  # fmt: skip
