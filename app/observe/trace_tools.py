"""Reading latency traces: per-stage summary, Chrome/Perfetto export, HTML waterfall of turns.

Stage durations come from pairs of events of the same answer (same session, turn, gen):

  endpoint     speech_end (detected)  - end of the user's actual speech (``speech_end.end_ms``;
               in a reopened turn, the last speech_end before the answer's audio)
  asr_final    asr_final              - speech_end
  lm_ttft      lm_first_token         - lm_start
  lm_clause    lm_first_clause        - lm_start
  tts_first    tts_first_audio        - lm_first_clause
  release      audio_out_first        - later of (tts_first_audio, asr_final)
  voice_to_voice  audio_out_first     - end of the user's actual speech
  text_to_voice   audio_out_first     - a typed turn's arrival (``text_input``), instead of the
                  three spoken-turn stages above it
  barge_in_stop   playback_stopped.stop_ms (last agent sample played - onset of user speech)

The waterfalls (``trace export``, the web page's ``latency`` event) draw the same stages of the
answer that was given: a speculation dropped in the turn is never drawn in its place.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from typing import TypedDict

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from dllm_voice.app.conversation import events
from dllm_voice.app.conversation.events import Event
from dllm_voice.app.observe.trace import TraceEvent, read_trace

STAGES = (
    "endpoint",
    "asr_final",
    "lm_ttft",
    "tool",
    "lm_clause",
    "tts_first",
    "release",
    "voice_to_voice",
    "text_to_voice",
    "barge_in_stop",
)


class TurnRow(TypedDict):
    """One finished answer: who said what, how it ended, and its stage durations (ms)."""

    session: str
    turn: int
    gen: int | None
    status: str
    typed: bool
    user: str
    answer: str
    heard: str
    speculation: str
    saved_ms: float
    realtime: bool | None
    stages: dict[str, float]


class StageStats(TypedDict):
    n: int
    p50: float
    p95: float
    max: float


class Summary(TypedDict):
    """What ``trace summary`` shows; JSON-able."""

    turns: int
    completed: int
    cancelled: int
    barge_ins: int
    barge_ins_rejected: int
    speculations: dict[str, int]
    speculation_turns: int
    not_realtime: int
    speculation_hit_rate: float | None
    stages: dict[str, StageStats]


# Chrome's trace-event format names its keys in camel case.
class ChromeTrace(TypedDict):
    traceEvents: list[dict[str, object]]
    displayTimeUnit: str


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]; nan for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _by_turn(events: list[TraceEvent]) -> dict[tuple[str, int], list[TraceEvent]]:
    turns: dict[tuple[str, int], list[TraceEvent]] = defaultdict(list)
    for ev in events:
        turns[(str(ev.get("session", "")), int(ev.get("turn", 0)))].append(ev)
    return turns


def _first(evs: list[TraceEvent], name: str, gen: int | None = None) -> TraceEvent | None:
    for ev in evs:
        if ev["event"] == name and (gen is None or ev.get("gen") == gen):
            return ev
    return None


def _turn_end(evs: list[TraceEvent], gen: int | None = None) -> TraceEvent | None:
    """The event that ended the user's turn (end of speech, or typed text) for answer
    ``gen``: a reopened turn ends twice, and each answer counts from the last end before its
    audio (or its end)."""
    ends = [e for e in evs if e["event"] in ("speech_end", "text_input") and "end_ms" in e]
    if gen is not None and len(ends) > 1:
        mark = _first(evs, "audio_out_first", gen) or _first(evs, "turn_done", gen)
        if mark is not None:
            before = [e for e in ends if e["t_ms"] <= mark["t_ms"]]
            return before[-1] if before else ends[0]
    return ends[0] if ends else None


def turn_rows(events: list[TraceEvent]) -> list[TurnRow]:
    """One row per finished answer (``turn_done``): its stage durations and outcome."""
    rows: list[TurnRow] = []
    for (session, turn), evs in sorted(_by_turn(events).items()):
        for done in (e for e in evs if e["event"] == "turn_done"):
            gen = done.get("gen")
            t = {name: _first(evs, name, gen) for name in ("lm_start", "lm_first_token")}
            t |= {n: _first(evs, n, gen) for n in ("lm_first_clause", "tts_first_audio")}
            t |= {"audio_out_first": _first(evs, "audio_out_first", gen)}
            end = _turn_end(evs, gen)
            typed = end is not None and end["event"] == "text_input"
            final = _first(evs, "asr_final")
            spec = [e for e in evs if e["event"] == "speculation"]
            said = end if typed else final
            answer: str = done.get("text", "")
            stages: dict[str, float] = {}

            def span(
                name: str,
                a: TraceEvent | None,
                b: TraceEvent | None,
                stages: dict[str, float] = stages,
            ) -> None:
                if a is not None and b is not None:
                    stages[name] = b["t_ms"] - a["t_ms"]

            if end is not None and not typed:
                stages["endpoint"] = end["t_ms"] - end["end_ms"]
            span("asr_final", _first(evs, "speech_end"), final)
            span("lm_ttft", t["lm_start"], t["lm_first_token"])
            if (tool := _first(evs, "tool_result", gen)) is not None:
                stages["tool"] = tool["ms"]  # the call's own run, a filler's wait included
            span("lm_clause", t["lm_start"], t["lm_first_clause"])
            span("tts_first", t["lm_first_clause"], t["tts_first_audio"])
            if t["audio_out_first"] is not None:
                ready = [e["t_ms"] for e in (t["tts_first_audio"], final) if e is not None]
                if ready:
                    stages["release"] = t["audio_out_first"]["t_ms"] - max(ready)
                if end is not None:
                    key = "text_to_voice" if typed else "voice_to_voice"
                    stages[key] = t["audio_out_first"]["t_ms"] - end["end_ms"]
            rows.append(
                {
                    "session": session,
                    "turn": turn,
                    "gen": gen,
                    "status": done.get("status", ""),
                    "typed": typed,
                    "user": (said or {}).get("text", ""),
                    "answer": answer,
                    "heard": done.get("heard", answer),
                    "speculation": spec[-1].get("result", "none") if spec else "none",
                    "saved_ms": spec[-1].get("saved_ms", 0.0) if spec else 0.0,
                    "realtime": realtime(evs),
                    "stages": stages,
                }
            )
    return rows


def latency_event(turn_events: list[TraceEvent], gen: int) -> Event | None:
    """The session's ``latency`` event for answer ``gen``, from its turn's trace events:
    its stage durations and its waterfall, times relative to the end of the user's turn."""
    rows = [r for r in turn_rows(turn_events) if r["gen"] == gen]
    if not rows:
        return None
    row = rows[-1]
    evs = [e for e in turn_events if int(e.get("turn", 0)) == row["turn"]]
    end = _turn_end(evs, gen)
    origin = end["end_ms"] if end is not None else min(e["t_ms"] for e in evs)
    spans: list[dict[str, object]] = [
        {"stage": label, "start_ms": round(a - origin, 1), "end_ms": round(b - origin, 1)}
        for label, a, b, _ in answer_spans(evs, gen)
    ]
    stages = row["stages"]
    return events.latency(
        row["turn"], gen, stages.get("voice_to_voice"), row["speculation"], row["typed"],
        row["realtime"], stages, spans,
    )  # fmt: skip


def summarize(events: list[TraceEvent]) -> Summary:
    """Everything ``trace summary`` shows, as a JSON-able dict (bench/voice.py prints it)."""
    rows = turn_rows(events)
    per_stage: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        for name, ms in row["stages"].items():
            per_stage[name].append(ms)
    per_stage["barge_in_stop"] = [
        e["stop_ms"] for e in events if e["event"] == "playback_stopped" and "stop_ms" in e
    ]
    results = [e.get("result") for e in events if e["event"] == "speculation"]
    # Hit rate per answered turn that speculated at all: its last speculation decides (a turn
    # may drop a guess on resume or on a better partial, then hit with the next one).
    started = {(str(e["session"]), e["turn"]) for e in events if e["event"] == "speculation_start"}
    tried = [r for r in rows if (r["session"], r["turn"]) in started]
    return {
        "turns": len(rows),
        "completed": sum(r["status"] == "completed" for r in rows),
        "cancelled": sum(r["status"] == "cancelled" for r in rows),
        "barge_ins": sum(e["event"] == "barge_in" for e in events),
        "barge_ins_rejected": sum(e["event"] == "barge_in_resume" for e in events),
        "speculations": {r: results.count(r) for r in ("hit", "refined", "miss")},
        "speculation_turns": len(tried),
        "not_realtime": sum(r["realtime"] is False for r in rows),
        "speculation_hit_rate": (
            sum(r["speculation"] == "hit" for r in tried) / len(tried) if tried else None
        ),
        "stages": {
            name: {
                "n": len(v),
                "p50": percentile(v, 50),
                "p95": percentile(v, 95),
                "max": max(v),
            }
            for name in STAGES
            if (v := per_stage.get(name))
        },
    }


def _speculation_line(spec: dict[str, int], turns: int, rate: float | None) -> str:
    """Guesses and answered turns counted apart: a turn may drop a guess (the user went on)
    and still answer with its next one, so 1 dropped and a 100 % hit rate agree."""
    if rate is None:
        return "speculation: no answered turn speculated"
    guesses = spec["hit"] + spec["refined"] + spec["miss"]
    return (
        f"speculation: {round(rate * turns)} of {turns} answered turns that speculated played "
        f"their guess ({rate:.0%}); of {guesses} guesses {spec['hit']} played as is, "
        f"{spec['refined']} refined by the final transcript, {spec['miss']} dropped "
        "(the user went on)"
    )


def summary(path: str) -> Group:
    """What ``python main.py trace summary FILE`` prints: a head line, the stage table, the
    speculation line (lines, not the table's title and caption, which wrap at its width)."""
    s = summarize(read_trace(path))
    rate = s["speculation_hit_rate"]
    head = (
        f"{path}: {s['turns']} answer{'s' * (s['turns'] != 1)} ({s['completed']} completed, "
        f"{s['cancelled']} cancelled), {s['barge_ins']} barge-ins "
        f"({s['barge_ins_rejected']} rejected)"
    )
    lines = [head]
    if s["not_realtime"]:
        lines.append(
            f"not real time: {s['not_realtime']} of {s['turns']} answered turns had their speech "
            "fed faster than it plays (run without --realtime); their endpoint and "
            "voice-to-voice are compute times"
        )
    table = Table()
    table.add_column("stage (ms)")
    for col in ("n", "p50", "p95", "max"):
        table.add_column(col, justify="right")
    for name, st in s["stages"].items():
        style = "bold" if name in ("voice_to_voice", "barge_in_stop") else None
        table.add_row(
            name,
            str(st["n"]),
            *(f"{ms:.0f}" for ms in (st["p50"], st["p95"], st["max"])),
            style=style,
        )
    spec = _speculation_line(s["speculations"], s["speculation_turns"], rate)
    return Group(*(Text(line) for line in lines), table, Text(spec))


# ---- the stages of one answer ---------------------------------------------------------------

# The stages drawn for each answer: (label, start event, end event, colour). Events of the
# answer (lm_*, tts_*, audio_out_first, turn_done) are those of its own generation.
_SPANS = (
    ("user speech", "speech_start", "speech_end", "#6c8ebf"),
    ("endpoint", None, "speech_end", "#b0b0b0"),
    ("asr final", "speech_end", "asr_final", "#82b366"),
    ("lm first clause", "lm_start", "lm_first_clause", "#d79b00"),
    ("tool", "tool_call", "tool_result", "#6d8764"),
    ("tts first audio", "lm_first_clause", "tts_first_audio", "#9673a6"),
    ("playback", "audio_out_first", "turn_done", "#b85450"),
)
_ANSWER_EVENTS = frozenset(
    (
        "lm_start",
        "lm_first_clause",
        "tool_call",
        "tool_result",
        "tts_first_audio",
        "audio_out_first",
        "turn_done",
    )
)
# Speech whose wall-clock length is under half its audio length was fed faster than real time
# (``run`` without --realtime: 1.8 s of speech in 28 ms): its times are compute times only.
_REALTIME_MIN = 0.5


def _time(ev: TraceEvent, key: str) -> float:
    """The event's ``key`` time (``onset_ms``, ``end_ms``), or its own when it has none."""
    own: float = ev["t_ms"]
    return float(ev.get(key, own))


def _speech(evs: list[TraceEvent]) -> tuple[float, float] | None:
    """(audio ms, wall-clock ms) of a turn's speech; None when the trace cannot tell (no
    speech, or a trace without the audio clock on speech_start)."""
    start, end = _first(evs, "speech_start"), _first(evs, "speech_end")
    if start is None or end is None or "audio_ms" not in start or "audio_ms" not in end:
        return None
    audio = float(end["audio_ms"] - start["audio_ms"])
    return audio, _time(end, "end_ms") - _time(start, "onset_ms")


def realtime(evs: list[TraceEvent]) -> bool | None:
    """Whether a turn's speech arrived in real time; None when the trace cannot tell."""
    speech = _speech(evs)
    if speech is None:
        return None
    audio, wall = speech
    return audio <= 0 or wall >= _REALTIME_MIN * audio


def answer_spans(evs: list[TraceEvent], gen: int | None) -> list[tuple[str, float, float, str]]:
    """(label, start_ms, end_ms, colour) of the stages of answer ``gen`` in one turn's events
    (``gen`` None: the first of each event, for a turn that was never answered)."""
    out: list[tuple[str, float, float, str]] = []
    for label, a, b, colour in _SPANS:
        if a is None:  # endpoint: from the actual end of speech to its detection
            ev = _turn_end(evs, gen)
            if ev is not None and ev["event"] != "text_input":
                out.append((label, float(ev["end_ms"]), float(ev["t_ms"]), colour))
            continue
        eb = _first(evs, b, gen if b in _ANSWER_EVENTS else None)
        ea = _first(evs, a, gen if a in _ANSWER_EVENTS else None)
        if ea is None or eb is None:
            continue
        start = _time(ea, "onset_ms")
        end = _time(eb, "end_ms") if label == "user speech" else float(eb["t_ms"])
        if end >= start:
            out.append((label, start, end, colour))
    return out


# ---- CLI entry points (main.py) ---------------------------------------------------------------


def load_events(path: str) -> list[TraceEvent] | None:
    try:
        return read_trace(path)
    except OSError as exc:
        print(f"error: cannot read trace {path}: {exc.strerror or exc}", file=sys.stderr)
        return None


def trace_summary(path: str) -> int:
    """``python main.py trace summary FILE``."""
    if load_events(path) is None:
        return 1
    Console(soft_wrap=True).print(summary(path))  # a pipe's 80 columns cut lines mid-phrase
    return 0
