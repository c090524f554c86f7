"""The tool loop in a conversation, with fake models and fake tools: a call runs once the turn
is committed, its sentence is spoken, a slow one gets a filler, a timeout and a failure are
said and traced, the result stays in history when the user interrupts, and a turn's
side-effecting call never runs twice."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

from dllm_voice.app.config import Config
from dllm_voice.app.observe.trace import Tracer
from dllm_voice.app.observe.trace_tools import summarize
from dllm_voice.app.terminal.runner import Segment, TimelineSource, run_session
from dllm_voice.app.tools import calls
from dllm_voice.app.tools.builtin import units
from dllm_voice.app.tools.chooser import Choice, ToolChooser
from dllm_voice.app.tools.config import ToolsConfig
from dllm_voice.app.tools.registry import ToolBox, ToolContext, ToolError, tool
from dllm_voice.app.tools.toolset import Toolset
from tests.app.fakes import ClockSink, FakeComponents, buzz

CFG = replace(Config(), vad=replace(Config().vad, silero=False))
RAN: list[tuple[str, float]] = []  # (tool, monotonic ms) of every call that ran


@tool()
def flip_coin() -> str:
    """Flip a coin."""
    RAN.append(("flip_coin", time.monotonic() * 1e3))
    return "Heads, this time."


@tool()
def slow_search(query: str = "") -> str:
    """Search the archive."""
    time.sleep(0.4)
    RAN.append(("slow_search", time.monotonic() * 1e3))
    return "Found it."


@tool(timeout_s=0.2)
def stuck_lookup() -> str:
    """A lookup that hangs."""
    time.sleep(1.0)
    return "never said"


@tool()
def broken_gadget() -> str:
    """A gadget with a bug."""
    raise RuntimeError("the gadget broke")


@tool()
def unknown_place(place: str = "") -> str:
    """Find a place."""
    raise ToolError("I don't know that place.")


@tool(read_only=True)
def read_gauge() -> str:
    """Read the gauge."""
    RAN.append(("read_gauge", time.monotonic() * 1e3))
    return "The gauge reads seven."


@tool(side_effects=True)
def order_pizza() -> str:
    """Order a pizza."""
    RAN.append(("order_pizza", time.monotonic() * 1e3))
    return "Your pizza is ordered, and it will be there in about half an hour."


def toolset(**cfg: object) -> Toolset:
    tools = [
        flip_coin,
        read_gauge,
        slow_search,
        stuck_lookup,
        broken_gadget,
        unknown_place,
        order_pizza,
    ]
    box = ToolBox.of(t.__tool__ for t in tools)  # type: ignore[attr-defined]
    return Toolset(replace(ToolsConfig(), **cfg), box, ToolChooser(None, 0.5))


def run(script, segments, tools: Toolset, ms_per_word: int = 30, **asr):
    comps = FakeComponents(script, lm={"tail": "Fine, thanks."}, ms_per_word=ms_per_word, **asr)
    comps.tools = tools
    events: list[dict] = []
    tracer = Tracer(None, session="t")
    sink = ClockSink(comps.tts.sample_rate_hz)
    source = TimelineSource(segments, realtime=True, tail_ms=1200, lead_ms=90)
    try:
        session = asyncio.run(
            asyncio.wait_for(run_session(comps, CFG, source, sink, tracer, events.append), 30)
        )
    finally:
        comps.close()
    return session, tracer.events, [e for e in events if e["type"] != "trace"]


def done(events):
    return [e["response"] for e in events if e["type"] == "response.done"]


def test_a_named_tool_runs_once_after_the_turn_ends_and_its_sentence_is_spoken():
    RAN.clear()
    _, trace, events = run(["Flip a coin for me."], [Segment(buzz(800))], toolset())
    (resp,) = done(events)
    assert resp["status"] == "completed" and resp["output_text"] == "Heads, this time."
    assert [name for name, _ in RAN] == ["flip_coin"]
    final = next(e for e in trace if e["event"] == "asr_final")
    assert RAN[0][1] >= final["t_ms"]  # a speculation prepared it; only the turn runs it
    call = next(e for e in trace if e["event"] == "tool_call")
    assert call["tool"] == "flip_coin" and call["how"] == "named"
    result = next(e for e in trace if e["event"] == "tool_result")
    assert result["error"] is None and result["ms"] >= 0
    kinds = [e["type"] for e in events]
    assert kinds.index("tool.call") < kinds.index("tool.result") < kinds.index("response.done")
    assert summarize(trace)["stages"]["tool"]["p50"] == result["ms"]  # trace summary's tool row


def test_a_read_only_tool_runs_on_the_speculation_and_its_sentence_is_voiced_ahead():
    RAN.clear()
    _, trace, events = run(["Read the gauge."], [Segment(buzz(800))], toolset())
    (resp,) = done(events)
    assert resp["status"] == "completed" and resp["output_text"] == "The gauge reads seven."
    assert [name for name, _ in RAN] == ["read_gauge"]
    final = next(e for e in trace if e["event"] == "asr_final")
    assert RAN[0][1] < final["t_ms"]  # run on the pause's guess, not after the final
    voiced = next(e for e in trace if e["event"] == "tts_first_audio")
    assert voiced["t_ms"] < final["t_ms"]  # its sentence synthesized before the turn ended
    hit = next(e for e in trace if e["event"] == "speculation")
    assert hit["result"] == "hit"
    result = next(e for e in trace if e["event"] == "tool_result")
    assert result["ahead"] and result["error"] is None
    kinds = [e["type"] for e in events]
    spoken = kinds.index("response.audio_transcript.delta")
    assert kinds.index("tool.call") < kinds.index("tool.result") < spoken
    assert spoken < kinds.index("response.done")


def test_a_read_only_call_on_a_guess_the_final_overturns_leaves_nothing_behind():
    RAN.clear()
    session, trace, events = run(
        [("Read the gauge.", "How are you today?")], [Segment(buzz(900))], toolset()
    )
    assert [e["result"] for e in trace if e["event"] == "speculation"] == ["refined"]
    assert [name for name, _ in RAN] == ["read_gauge"]  # run on the guess, harmlessly
    assert not [e for e in events if e["type"].startswith("tool.")]
    assert not [e for e in trace if e["event"] in ("tool_call", "tool_result")]
    user = next(m for m in session.tm.history.messages if m.role == "user")
    assert "read_gauge" not in user.content
    (resp,) = done(events)
    assert "gauge" not in resp["output_text"]


def test_a_slow_tool_gets_a_filler_and_a_stuck_one_times_out():
    _, trace, events = run(
        ["Search the archive.", "Do the stuck lookup."],
        [Segment(buzz(800)), Segment(buzz(800))],
        toolset(filler_ms=100),
    )
    slow, stuck = done(events)
    assert slow["output_text"] == "One moment. Found it."
    assert stuck["output_text"].endswith(calls.TIMEOUT_SAID)
    assert [e["event"] for e in trace].count("tool_filler") == 2
    errors = [e for e in trace if e["event"] == "error" and e["stage"] == "tool"]
    assert len(errors) == 1 and "timed out" in errors[0]["message"]


def test_a_failing_tool_is_an_apology_and_the_conversation_goes_on():
    _, trace, events = run(
        ["Use the broken gadget.", "How are you?"],
        [Segment(buzz(800)), Segment(buzz(800))],
        toolset(),
    )
    broken, fine = done(events)
    assert broken["output_text"] == calls.FAILED_SAID
    assert fine["status"] == "completed" and "Fine, thanks." in fine["output_text"]
    error = next(e for e in trace if e["event"] == "error")
    assert "the gadget broke" in error["message"]


def test_a_result_stays_in_history_when_the_user_interrupts_its_answer():
    RAN.clear()
    session, _, events = run(
        ["Order a pizza please.", "Wait, stop."],
        [Segment(buzz(800)), Segment(buzz(900), barge_in_at_ms=400)],
        toolset(),
        ms_per_word=200,
    )
    first = done(events)[0]
    assert first["status"] == "cancelled" and first["heard_text"] != first["output_text"]
    user = next(m for m in session.tm.history.messages if m.role == "user")
    assert "order_pizza says: Your pizza is ordered" in user.content
    assert [name for name, _ in RAN] == ["order_pizza"]


def test_a_side_effecting_call_of_a_turn_never_runs_twice():
    RAN.clear()
    ledger, ctx = calls.Ledger(), ToolContext()
    t = order_pizza.__tool__  # type: ignore[attr-defined]

    async def turn(n: int) -> calls.Outcome:
        call = calls.Call(t, {}, "named", 1.0, "parser")
        if (seen := ledger.get(n, call)) is not None:
            return replace(seen, repeated=True)
        outcome = await calls.run(call, ctx, 5.0)
        ledger.put(n, call, outcome)
        return outcome

    first, again, next_turn = (asyncio.run(turn(n)) for n in (1, 1, 2))
    assert not first.repeated and again.repeated and not next_turn.repeated
    assert [name for name, _ in RAN] == ["order_pizza", "order_pizza"]


def test_a_tool_error_is_said_in_its_own_words():
    t = unknown_place.__tool__  # type: ignore[attr-defined]
    out = asyncio.run(
        calls.run(calls.Call(t, {"place": "Atlantis"}, "named", 1.0, "parser"), ToolContext(), 5)
    )
    assert out.said == "I don't know that place." and out.error == out.said


def test_tool_choice_none_and_a_named_choice():
    box = toolset().box
    chooser = ToolChooser(None, 0.5)
    assert chooser.choose(box.with_choice("none"), None, "Flip a coin.") is None
    forced = chooser.choose(box.with_choice("flip_coin"), None, "What is love?")
    assert isinstance(forced, Choice) and forced.tool.name == "flip_coin"
    assert chooser.choose(box, None, "What is love?") is None


def test_a_timer_set_by_a_tool_speaks_through_its_context():
    said = threading.Event()
    ctx = ToolContext(say=lambda text: said.set())
    ctx.schedule(0.05, "Time is up.")
    assert said.wait(2)


class GaugeReader(ToolChooser):
    """The built-in parsers' way for read_gauge: its words read as its whole call."""

    def choose(self, box, state, text, alternatives=(), slower=None):
        if "gauge" in text.lower():
            return Choice(box.tools["read_gauge"], 0.9, "head+words", {})
        return super().choose(box, state, text, alternatives, slower)


def test_words_that_read_as_a_whole_call_end_the_turn_at_once():
    # No final mark: the fake LM scores the words 0.001, a turn that would wait 1.5 s.
    tools = toolset()
    tools.chooser = GaugeReader(None, 0.5)
    _, trace, events = run(["Read the gauge for me"], [Segment(buzz(800))], tools)
    (end,) = [e for e in trace if e["event"] == "end_of_turn"]
    assert end["called"] and end["decision"] == "complete"
    assert end["wait_ms"] == CFG.end_of_turn.complete_ms
    (first,) = [e for e in trace if e["event"] == "audio_out_first"]
    assert first["v2v_ms"] < CFG.end_of_turn.hold_ms  # heard at once, not held
    (resp,) = done(events)
    assert resp["output_text"] == "The gauge reads seven."


def test_words_with_no_whole_call_wait_as_their_score_says():
    _, trace, _ = run(["Read the gauge for me"], [Segment(buzz(800))], toolset())
    (end,) = [e for e in trace if e["event"] == "end_of_turn"]
    assert not end["called"] and end["decision"] == "incomplete"


class GaugeHearer(ToolChooser):
    """Reads read_gauge's call in any hearing of the turn, the slower ones last."""

    def choose(self, box, state, text, alternatives=(), slower=None):
        heard = (text, *alternatives)
        if not any("gauge" in h for h in heard) and slower is not None:
            heard = slower()
            if any("gauge" in h for h in heard):
                return Choice(box.tools["read_gauge"], 0.9, "head+slower", {})
        return super().choose(box, state, text, alternatives, slower)


def test_a_call_heard_only_slower_is_made_and_the_hearing_traced():
    RAN.clear()
    tools = toolset()
    tools.chooser = GaugeHearer(None, 0.5)
    heard = ("Read the gorge for me.", "Read the gauge for me.")
    _, trace, events = run(
        ["Read the gorge for me."], [Segment(buzz(800))], tools,
        slower={"Read the gorge for me.": heard},
    )  # fmt: skip
    (resp,) = done(events)
    assert resp["output_text"] == "The gauge reads seven."
    assert [name for name, _ in RAN] == ["read_gauge"]
    slower = [e for e in trace if e["event"] == "asr_slower"]
    assert slower and slower[0]["texts"] == list(heard) and slower[0]["ms"] >= 0
    call = next(e for e in trace if e["event"] == "tool_call")
    assert call["how"] == "head+slower"


def test_a_recognizer_that_fails_to_hear_the_turn_slower_leaves_the_answer_to_the_lm():
    tools = toolset()
    tools.chooser = GaugeHearer(None, 0.5)
    failure = RuntimeError("decoder gone")
    _, trace, events = run(
        ["Read the gorge for me."], [Segment(buzz(800))], tools,
        slower={"Read the gorge for me.": failure},
    )  # fmt: skip
    (resp,) = done(events)
    assert resp["status"] == "completed" and "gauge" not in resp["output_text"]
    errors = [e for e in trace if e["event"] == "error"]
    assert errors and errors[0]["stage"] == "asr" and "decoder gone" in errors[0]["message"]
    assert [e["texts"] for e in trace if e["event"] == "asr_slower"][0] == []


class UnitReader(ToolChooser):
    """The built-in parsers' way for convert_units alone; keeps the words it was given."""

    def __init__(self) -> None:
        super().__init__(None, 0.5)
        self.read: list[str] = []

    def choose(self, box, state, text, alternatives=(), slower=None):
        self.read.append(text)
        args = units.parse_conversion(text)
        return Choice(box.tools["convert_units"], 0.9, "head+words", args) if args else None


def unit_tools() -> tuple[Toolset, UnitReader]:
    reader = UnitReader()
    return Toolset(ToolsConfig(), ToolBox.of([units.convert_units.__tool__]), reader), reader


def test_a_turn_that_goes_on_from_one_the_user_cut_is_read_with_it():
    # The first answer is heard, then cut by the rest of the user's request.
    tools, reader = unit_tools()
    _, trace, events = run(
        ["Two cups of milk.", "Roughly how many milliliters?"],
        [Segment(buzz(800)), Segment(buzz(900), barge_in_at_ms=300)],
        tools,
        ms_per_word=200,
    )
    first, second = done(events)
    assert first["status"] == "cancelled" and first["heard_text"]
    assert reader.read[-2:] == [
        "Roughly how many milliliters?",
        "Two cups of milk. Roughly how many milliliters?",
    ]
    call = next(e for e in trace if e["event"] == "tool_call")
    assert call["arguments"] == {"value": 2.0, "from_unit": "cups", "to_unit": "milliliters"}
    assert second["output_text"].startswith("2 cups is")
