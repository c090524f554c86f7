"""Tool benchmark: testkit/tool_requests.py's requests, typed and spoken, each scored against the
exact call it needs.

``typed``: each text through ``app.terminal.ask.answer`` (one LM and Toolset, a fresh ToolContext
per request). ``spoken``: each text synthesized at run time (Piper and espeak-ng voices in turn)
and played in real time through the live pipeline, one VoiceSession per batch, each turn
waiting for the agent's answer to end; the trace events give the transcript, the call, its
result, what the agent said and voice to voice. The session's timers are cancelled and
forgotten before each spoken turn, so every request meets a fresh tool context, as typed; a
request to cancel a timer meets the timers it is about (``pending_timers``), so its answer
tells a wrong label from the right one.

Per mode: tool-choice precision (right calls among calls made on tool requests) and recall;
false calls on no-tool turns, and on the hard negatives alone; exact arguments among right
calls (defaults filled from the signature; numbers within 1e-6, calculate's expressions by
value, units by the unit the tool reads, strings case- and space-insensitive); answers correct
(what the agent said equals the tool's sentence for the expected call at the same wall-clock
time, both normalized with numbers in digits; the clock tools' within a minute; calculate's
value only, as its sentence repeats the user's words); voice to voice on tool and no-tool
turns (spoken), the tool turns' also by the end-of-turn decision they waited on, and the calls
run ahead (a read-only tool on the speculation); median tokens per forward of LM-decoded
arguments; tool ms; every failure.

    .venv/bin/python -m bench.tools [--limit N] [--mode typed|spoken|both] [--out f.json]
        [--requests main|held-out] [--set section.key=value ...]

``--limit``: the first N requests interleaved by tool, so the mix is kept. ``--requests
held-out``: testkit's second set (38 requests), spoken in other voices, for a figure that no
setting was chosen on. Prints one JSON
object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import math
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pint
import simpleeval

from bench.user_voices import RATE_HZ, UserVoices
from dllm_voice.app.config import Config, load_config
from dllm_voice.app.conversation.text import normalize
from dllm_voice.app.observe.trace import Tracer
from dllm_voice.app.observe.trace_tools import percentile
from dllm_voice.app.terminal.runner import Segment, TimelineSource, run_session
from dllm_voice.app.tools import calls
from dllm_voice.app.tools.builtin.calculator import to_python
from dllm_voice.app.tools.builtin.catalog import BUILTIN
from dllm_voice.app.tools.builtin.numbers import digits
from dllm_voice.app.tools.builtin.units import _unit
from dllm_voice.app.tools.registry import Tool, ToolContext, ToolError
from testkit.tool_requests import (
    HARD_NEGATIVES,
    HELD_OUT,
    HELD_OUT_HARD_NEGATIVES,
    REQUESTS,
    ToolRequest,
)

if TYPE_CHECKING:
    from dllm_voice.app.conversation.session import VoiceSession

DEFAULTS = ("lm.max_new_tokens=48",)  # no-tool answers are not scored: short ones save time
MODES = {"typed": ("typed",), "spoken": ("spoken",), "both": ("typed", "spoken")}
VOICES = ("piper", "espeak:en-us", "piper-slow", "espeak:en-gb", "espeak:en-us+f3")
# The held-out set in voices the main one is not spoken in (Piper has one voice: its own rate).
HELD_OUT_VOICES = ("espeak:en-gb-x-rp", "piper", "espeak:en-us+m3", "espeak:en-us-nyc")
SETS = {
    "main": (REQUESTS, HARD_NEGATIVES, VOICES),
    "held-out": (HELD_OUT, HELD_OUT_HARD_NEGATIVES, HELD_OUT_VOICES),
}
BATCH = 12  # spoken requests per VoiceSession
TURN_LIMIT_S = 60.0  # a batch is given up after its speech plus this per request
CLOCK_TOOLS = ("get_time", "get_date")
CALL_KEYS = ("tool", "arguments", "how", "p", "args_by", "tokens_per_forward")
TOOLS: dict[str, Tool] = {t.name: t for group in BUILTIN.values() for t in group}
_EVAL = simpleeval.SimpleEval(functions={"sqrt": math.sqrt, "cbrt": math.cbrt}, names={})


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Got:
    """What the agent did with one request: ``heard`` the text it answered (typed: the request),
    ``at`` the wall clock at the answer's end, ``call`` the CALL_KEYS and ms (None: no call)."""

    heard: str
    said: str
    at: float
    call: dict[str, Any] | None = None
    v2v_ms: float | None = None
    ending: str | None = None  # spoken: the end-of-turn decision the answer waited on
    slower_ms: float | None = None  # spoken: the longest hearing of the turn slower, if any


def ordered(requests: tuple[ToolRequest, ...]) -> list[ToolRequest]:
    """The requests interleaved by expected tool (no tool too), so any prefix keeps the mix."""
    groups: dict[str | None, list[ToolRequest]] = {}
    for r in requests:
        groups.setdefault(r.tool, []).append(r)
    keyed = [
        ((i + 0.5) / len(group), k, r)
        for k, group in enumerate(groups.values())
        for i, r in enumerate(group)
    ]
    return [r for _, _, r in sorted(keyed, key=lambda x: x[:2])]


def pending_timers(req: ToolRequest, ctx: ToolContext) -> None:
    """Before a request to cancel a timer, the timers it is about, newest last: the one it names
    (an alarm where it speaks of one) beside another, so that "You have no timers." answers
    no cancel request and a wrong label is heard as one ("You have no past timer.")."""
    if req.tool != "cancel_timer" or req.arguments is None:
        return
    assert TOOLS["set_timer"].fn is not None and TOOLS["set_alarm"].fn is not None
    TOOLS["set_timer"].fn(3000.0, "bread", ctx=ctx)
    label = str(req.arguments.get("label", ""))
    if re.search(r"\balarm\b", req.text, re.I):
        TOOLS["set_alarm"].fn("7 AM", ctx=ctx)
    else:
        TOOLS["set_timer"].fn(600.0, "" if label == "all" else label, ctx=ctx)


def run_typed(cfg: Config, requests: list[ToolRequest]) -> list[Got]:
    from dllm_voice.app.terminal.ask import answer
    from dllm_voice.app.tools.toolset import Toolset
    from dllm_voice.model.engine import LM

    lm = LM.load(cfg.lm)
    tools = Toolset.load(cfg.tools, lm.parameter_count())
    out = []
    for n, req in enumerate(requests, 1):
        ctx = ToolContext()
        try:
            pending_timers(req, ctx)
            asked = answer(lm, tools, req.text, cfg.conversation.system_prompt, ctx)
        finally:
            ctx.close()
        got = Got(req.text, asked.text, time.time())
        if asked.call is not None and asked.outcome is not None:
            c, stats = asked.call, asked.call.arg_stats
            tpf = round(stats.tokens_per_forward, 2) if stats else None
            values = (c.tool.name, c.arguments, c.how, round(c.p, 3), c.args_by, tpf)
            got.call = {**dict(zip(CALL_KEYS, values, strict=True)), "ms": asked.outcome.ms}
        out.append(got)
        log(f"[typed {n}/{len(requests)}] {req.text!r} -> {got.call}")
    return out


class RequestTimeline(TimelineSource):
    """A TimelineSource that cancels and forgets the session's timers before each request, then
    sets the ones a cancel request is about (``requests``: each segment's label's request)."""

    def __init__(self, *args: Any, requests: dict[str, ToolRequest], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.requests = requests

    def bind(self, session: VoiceSession) -> None:
        super().bind(session)
        self._fresh_tools(self.segments[0])  # the others', once the turn before is over

    def _fresh_tools(self, seg: Segment) -> None:
        if self.session is not None:
            ctx = self.session.tools.ctx
            ctx.close()
            ctx.state.clear()
            pending_timers(self.requests[seg.label], ctx)

    def _ready_for(self, seg: Segment) -> Any:
        ready = super()._ready_for(seg)

        def ready_with_fresh_tools() -> bool:
            if not ready():
                return False
            self._fresh_tools(seg)
            return True

        return ready_with_fresh_tools


async def _converse(
    comps: Any, cfg: Config, segments: list[Segment], requests: dict[str, ToolRequest]
) -> list[dict[str, Any]]:
    """The segments as one conversation; its trace events, each with the index of the segment
    whose audio began last (``playing``) and the wall clock (``wall``)."""
    from dllm_voice.audio.sinks import CallbackSink

    async def discard(_: bytes) -> None:
        return None

    sink = CallbackSink(discard, comps.tts.sample_rate_hz, realtime=False)
    source = RequestTimeline(
        segments,
        sample_rate_hz=cfg.audio.sample_rate_hz,
        frame_ms=cfg.audio.frame_ms,
        realtime=True,
        tail_ms=cfg.end_of_turn.incomplete_ms + 500,
        requests=requests,
    )
    events: list[dict[str, Any]] = []

    def record(ev: dict[str, Any]) -> None:
        if ev["type"] == "trace":
            playing = len(source.starts) - 1
            events.append({**ev["event"], "playing": playing, "wall": time.time()})

    limit_s = sum(len(s.pcm) for s in segments) / RATE_HZ + TURN_LIMIT_S * len(segments)
    try:
        with Tracer(None, session="tools", keep=False) as tracer:
            await asyncio.wait_for(run_session(comps, cfg, source, sink, tracer, record), limit_s)
    except TimeoutError:
        log(f"a batch timed out after {limit_s:.0f} s")
    finally:
        await sink.aclose()
    return events


def _spoken_got(evs: list[dict[str, Any]], filler: str) -> Got:
    """One request's outcome from the events while its audio was the latest played: the last
    final, the last answer (a completed one first) without its filler, and that answer's call."""

    def of(kind: str, **match: object) -> list[dict[str, Any]]:
        return [e for e in evs if e["event"] == kind and match.items() <= e.items()]

    finals = [e["text"].strip() for e in of("asr_final") if e.get("text", "").strip()]
    done = of("turn_done")
    answer = next((e for e in reversed(done) if e["status"] == "completed"), None)
    answer = answer or (done[-1] if done else {"gen": None, "text": "", "wall": time.time()})
    said = answer["text"]
    if of("tool_filler", gen=answer["gen"]):
        said = said.removeprefix(filler).strip()
    first = of("audio_out_first", gen=answer["gen"])
    got = Got(finals[-1] if finals else "", said, answer["wall"])
    got.v2v_ms = first[0]["v2v_ms"] if first else None
    endings = of("end_of_turn")
    got.ending = endings[-1]["decision"] if endings else None
    got.slower_ms = max((e["ms"] for e in of("asr_slower")), default=None)
    made = [e for e in of("tool_call") if answer["gen"] in (None, e["gen"])]
    if made:
        result = of("tool_result", call_id=made[-1]["call_id"])
        ran = {"ms": result[0]["ms"], "ahead": result[0]["ahead"]} if result else {"ms": None}
        got.call = {k: made[-1][k] for k in CALL_KEYS} | ran
    return got


def run_spoken(
    cfg: Config,
    requests: list[ToolRequest],
    voice_names: tuple[str, ...] = VOICES,
    trace: Path | None = None,
) -> list[Got]:
    """Each request spoken through the pipeline, BATCH to a session; ``trace``: also append
    every trace event there (JSONL, with its request's index), to read a miss afterwards."""
    from dllm_voice.app.conversation.components import Components

    comps = Components.load(cfg)
    voices = UserVoices()
    out: list[Got] = []
    try:
        for start in range(0, len(requests), BATCH):
            batch = requests[start : start + BATCH]
            segments = [
                Segment(voices.say(r.text, voice_names[(start + i) % len(voice_names)]), r.text)
                for i, r in enumerate(batch)
            ]
            events = asyncio.run(_converse(comps, cfg, segments, {r.text: r for r in batch}))
            if trace is not None:
                write_trace(trace, events, start)
            for i in range(len(batch)):
                got = _spoken_got([e for e in events if e["playing"] == i], cfg.tools.filler)
                out.append(got)
                log(f"[spoken {start + i + 1}/{len(requests)}] {got.heard!r} -> {got.call}")
    finally:
        comps.close()
    return out


def write_trace(path: Path, events: list[dict[str, Any]], first: int) -> None:
    """Append ``events`` (one batch's, ``playing`` counted from its first request) to ``path``
    as JSONL, each with ``request``: the index of the request whose audio came last."""
    with path.open("a", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps({**e, "request": first + e["playing"]}, default=str) + "\n")


def answer_for(
    tool: Tool, arguments: dict[str, Any], at: float, req: ToolRequest | None = None
) -> str:
    """What the agent says for a call of ``tool`` at wall-clock time ``at``, in a fresh context
    (with ``req``'s pending timers)."""
    ctx = ToolContext(now=lambda: at)
    try:
        if req is not None:
            pending_timers(req, ctx)
        call = calls.Call(tool, dict(arguments), "head", 1.0, "parser")
        outcome = asyncio.run(calls.run(call, ctx, tool.timeout_s))
    finally:
        ctx.close()
    return outcome.said if outcome.said is not None else json.dumps(outcome.output)


def references(req: ToolRequest, at: float) -> list[str]:
    """The expected call's sentences at ``at`` (the clock tools' a minute either side too)."""
    assert req.tool is not None and req.arguments is not None
    shifts = (0.0, -60.0, 60.0) if req.tool in CLOCK_TOOLS else (0.0,)
    return [answer_for(TOOLS[req.tool], req.arguments, at + s, req) for s in shifts]


def _with_defaults(tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    assert tool.fn is not None
    params = inspect.signature(tool.fn).parameters.items()
    empty = inspect.Parameter.empty
    defaults = {k: p.default for k, p in params if p.default is not empty and k != tool.context_arg}
    return {**defaults, **arguments}


def _value(expression: str) -> float | None:
    try:
        return float(_EVAL.eval(to_python(expression)))
    except (ToolError, simpleeval.InvalidExpression, ArithmeticError, ValueError, TypeError):
        return None


def _same(tool: str, key: str, want: object, have: object) -> bool:
    if tool == "calculate" and isinstance(want, str) and isinstance(have, str):
        a, b = _value(want), _value(have)
        return a is not None and b is not None and abs(a - b) <= 1e-6
    if tool == "convert_units" and key.endswith("_unit"):  # one of each is one of the other
        try:
            return abs((1.0 * _unit(str(have))).to(_unit(str(want))).magnitude - 1.0) <= 1e-6
        except (ToolError, pint.errors.PintError):
            return False
    if isinstance(want, int | float) and isinstance(have, int | float):
        return abs(want - have) <= 1e-6
    if isinstance(want, str) and isinstance(have, str):
        return " ".join(want.lower().split()) == " ".join(have.lower().split())
    return want == have


def exact_arguments(tool: Tool, expected: dict[str, Any], got: dict[str, Any]) -> bool:
    want, have = _with_defaults(tool, expected), _with_defaults(tool, got)
    return want.keys() == have.keys() and all(_same(tool.name, k, want[k], have[k]) for k in want)


def _answer_words(tool: str, said: str) -> str:
    """``said`` normalized, numbers in digits; of calculate's sentence only the value after its
    last "is" (the sentence repeats the question in the user's words)."""
    text = normalize(digits(said))
    return text.rsplit(" is ", 1)[-1] if tool == "calculate" else text


def check(req: ToolRequest, got: Got) -> dict[str, Any]:
    """One request's row: what was expected, what came, and each check (None: not asked)."""
    call = got.call or {"tool": None, "arguments": {}}
    row: dict[str, Any] = {
        "text": req.text,
        "heard": got.heard,
        "expected": {"tool": req.tool, "arguments": req.arguments},
        "got": {
            **call,
            "said": got.said,
            "v2v_ms": got.v2v_ms,
            "ending": got.ending,
            "slower_ms": got.slower_ms,
        },
        **dict.fromkeys(("right_tool", "exact_arguments", "answer_correct", "false_call")),
    }
    if req.tool is None or req.arguments is None:
        row["false_call"] = call["tool"] is not None
        return row
    row["right_tool"] = call["tool"] == req.tool
    if row["right_tool"]:
        row["exact_arguments"] = exact_arguments(TOOLS[req.tool], req.arguments, call["arguments"])
    refs = references(req, got.at)
    row["expected"]["said"] = refs[0]
    right = {_answer_words(req.tool, r) for r in refs}
    row["answer_correct"] = _answer_words(req.tool, got.said) in right
    return row


def _rate(hits: list[bool]) -> dict[str, Any]:
    n = len(hits)
    return {"n": n, "hits": sum(hits), "rate": round(sum(hits) / n, 3) if n else None}


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "p50": None, "p95": None}
    p50, p95 = (round(percentile(values, q), 1) for q in (50, 95))
    return {"n": len(values), "p50": p50, "p95": p95}


def summarize(
    rows: list[dict[str, Any]], spoken: bool, hard_negatives: tuple[ToolRequest, ...]
) -> dict[str, Any]:
    asked = [r for r in rows if r["expected"]["tool"] is not None]
    unasked = [r for r in rows if r["expected"]["tool"] is None]
    hard = {r.text for r in hard_negatives}
    made = [r["got"] for r in rows if r["got"]["tool"] is not None]
    by_lm = [c["tokens_per_forward"] for c in made if c["args_by"] == "lm"]
    tpf = [x for x in by_lm if x is not None]
    out: dict[str, Any] = {
        "requests": len(rows),
        "tool_requests": len(asked),
        "no_tool_requests": len(unasked),
        "choice_precision": _rate([r["right_tool"] for r in asked if r["got"]["tool"]]),
        "choice_recall": _rate([r["right_tool"] for r in asked]),
        "false_calls": _rate([r["false_call"] for r in unasked]),
        "false_calls_hard_negatives": _rate(
            [r["false_call"] for r in unasked if r["text"] in hard]
        ),
        "exact_arguments": _rate([r["exact_arguments"] for r in asked if r["right_tool"]]),
        "answer_correct": _rate([r["answer_correct"] for r in asked]),
        "lm_arguments": {
            "calls": len(by_lm),
            "tokens_per_forward_median": round(statistics.median(tpf), 2) if tpf else None,
        },
        "tool_ms_p50": _stats([c["ms"] for c in made if c["ms"] is not None])["p50"],
    }
    if spoken:
        v2v = lambda turns: _stats([ms for r in turns if (ms := r["got"]["v2v_ms"]) is not None])
        out["v2v_ms"] = {"tool": v2v(asked), "no_tool": v2v(unasked)}
        # where tool turns' time goes: the end-of-turn decision each waited on
        endings = sorted({str(r["got"]["ending"]) for r in asked})
        out["v2v_ms_tool_by_ending"] = {
            e: v2v([r for r in asked if str(r["got"]["ending"]) == e]) for e in endings
        }
        out["calls_run_ahead"] = sum(bool(c.get("ahead")) for c in made)
        # the turns heard again slower (no hearing at full speed read a call): how long that took
        slow = lambda turns: _stats(
            [ms for r in turns if (ms := r["got"]["slower_ms"]) is not None]
        )
        out["heard_slower_ms"] = {"tool": slow(asked), "no_tool": slow(unasked)}
    return out


def _failed(row: dict[str, Any]) -> bool:
    checks = (row["right_tool"], row["exact_arguments"], row["answer_correct"])
    return bool(row["false_call"]) or False in checks


def run_mode(
    mode: str, cfg: Config, requests: list[ToolRequest], name: str, trace: Path | None = None
) -> dict[str, Any]:
    log(f"{mode}: {len(requests)} requests ({name})")
    _, hard, voice_names = SETS[name]
    t0 = time.perf_counter()
    spoken = mode == "spoken"
    got = run_spoken(cfg, requests, voice_names, trace) if spoken else run_typed(cfg, requests)
    wall_s = round(time.perf_counter() - t0, 1)
    rows = [check(r, g) for r, g in zip(requests, got, strict=True)]
    failures = [r for r in rows if _failed(r)]
    return {"wall_s": wall_s, **summarize(rows, spoken, hard), "failures": failures}


def _machine() -> dict[str, Any]:
    found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
    cpu = found[1].strip() if found else ""
    return {"cpu": cpu, "cores": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()]}


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0, help="the first N interleaved requests")
    ap.add_argument("--mode", choices=list(MODES), default="both")
    ap.add_argument(
        "--requests", choices=list(SETS), default="main",
        help="main: the 109 requests; held-out: the second set, in other voices",
    )  # fmt: skip
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--out", default="", help="also write the JSON here")
    ap.add_argument("--trace", default="", help="spoken: also append the trace events here")
    return ap.parse_args()


def main() -> int:
    args = _args()
    overrides = [*DEFAULTS, *args.overrides]
    cfg = load_config(args.config, overrides)
    requests = ordered(SETS[args.requests][0])[: args.limit or None]
    result: dict[str, Any] = {
        "bench": "tools", "requests": args.requests, "overrides": overrides,
        "decoder": cfg.lm.decoder,
    }  # fmt: skip
    trace = Path(args.trace) if args.trace else None
    for mode in MODES[args.mode]:
        result[mode] = run_mode(mode, cfg, requests, args.requests, trace)
    result["machine"] = _machine()
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
