"""Reading latency traces: per-stage summary, Chrome/Perfetto export, HTML waterfall of turns.

Stage durations come from pairs of events of the same answer (same session, turn, gen):

  endpoint     speech_end (detected)  - end of the user's actual speech (``speech_end.end_ms``;
               an ``early_release`` event, when there is one, stands in for speech_end)
  asr_final    asr_final              - speech_end
  lm_ttft      lm_first_token         - lm_start
  lm_clause    lm_first_clause        - lm_start
  tts_first    tts_first_audio        - lm_first_clause
  release      audio_out_first        - later of (tts_first_audio, asr_final)
  voice_to_voice  audio_out_first     - end of the user's actual speech
  barge_in_stop   playback_stopped.stop_ms (last agent sample played - onset of user speech)
"""

from __future__ import annotations

import html as html_lib
import json
import math
import sys
from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table

from app.trace import read_trace

Event = dict[str, Any]
STAGES = (
    "endpoint",
    "asr_final",
    "lm_ttft",
    "lm_clause",
    "tts_first",
    "release",
    "voice_to_voice",
    "barge_in_stop",
)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]; nan for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _by_turn(events: list[Event]) -> dict[tuple[str, int], list[Event]]:
    turns: dict[tuple[str, int], list[Event]] = defaultdict(list)
    for ev in events:
        turns[(str(ev.get("session", "")), int(ev.get("turn", 0)))].append(ev)
    return turns


def _first(evs: list[Event], name: str, gen: int | None = None) -> Event | None:
    for ev in evs:
        if ev["event"] == name and (gen is None or ev.get("gen") == gen):
            return ev
    return None


def turn_rows(events: list[Event]) -> list[dict[str, Any]]:
    """One row per finished answer (``turn_done``): its stage durations and outcome."""
    rows = []
    for (session, turn), evs in sorted(_by_turn(events).items()):
        for done in (e for e in evs if e["event"] == "turn_done"):
            gen = done.get("gen")
            t = {name: _first(evs, name, gen) for name in ("lm_start", "lm_first_token")}
            t |= {n: _first(evs, n, gen) for n in ("lm_first_clause", "tts_first_audio")}
            t |= {"audio_out_first": _first(evs, "audio_out_first", gen)}
            end = _first(evs, "early_release") or _first(evs, "speech_end")
            final = _first(evs, "asr_final")
            spec = [e for e in evs if e["event"] == "speculation"]
            stages: dict[str, float] = {}

            def span(name: str, a: Event | None, b: Event | None, stages=stages) -> None:
                if a is not None and b is not None:
                    stages[name] = b["t_ms"] - a["t_ms"]

            if end is not None and "end_ms" in end:
                stages["endpoint"] = end["t_ms"] - end["end_ms"]
            span("asr_final", _first(evs, "speech_end"), final)
            span("lm_ttft", t["lm_start"], t["lm_first_token"])
            span("lm_clause", t["lm_start"], t["lm_first_clause"])
            span("tts_first", t["lm_first_clause"], t["tts_first_audio"])
            if t["audio_out_first"] is not None:
                ready = [e["t_ms"] for e in (t["tts_first_audio"], final) if e is not None]
                if ready:
                    stages["release"] = t["audio_out_first"]["t_ms"] - max(ready)
                if end is not None and "end_ms" in end:
                    stages["voice_to_voice"] = t["audio_out_first"]["t_ms"] - end["end_ms"]
            rows.append(
                {
                    "session": session,
                    "turn": turn,
                    "gen": gen,
                    "status": done.get("status", ""),
                    "user": final.get("text", "") if final else "",
                    "answer": done.get("text", ""),
                    "speculation": spec[-1].get("result", "none") if spec else "none",
                    "saved_ms": spec[-1].get("saved_ms", 0.0) if spec else 0.0,
                    "stages": stages,
                }
            )
    return rows


def latency_event(turn_events: list[Event], gen: int) -> dict[str, Any] | None:
    """The session's ``latency`` event for answer ``gen``, from its turn's trace events."""
    rows = [r for r in turn_rows(turn_events) if r["gen"] == gen]
    if not rows:
        return None
    row = rows[-1]
    return {
        "type": "latency",
        "turn": row["turn"],
        "gen": gen,
        "voice_to_voice_ms": row["stages"].get("voice_to_voice"),
        "speculation": row["speculation"],
        "stages": row["stages"],
    }


def summarize(events: list[Event]) -> dict[str, Any]:
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


def summary(path: str) -> Table:
    """The rich table ``python main.py trace summary FILE`` prints."""
    s = summarize(read_trace(path))
    rate = s["speculation_hit_rate"]
    spec = s["speculations"]
    table = Table(
        title=f"{path}: {s['turns']} answers ({s['completed']} completed, {s['cancelled']} "
        f"cancelled), {s['barge_ins']} barge-ins ({s['barge_ins_rejected']} rejected)",
        caption=f"speculation: {spec['hit']} hit, {spec['refined']} refined, {spec['miss']} miss"
        + (f" (hit rate {rate:.0%})" if rate is not None else ""),
    )
    table.add_column("stage (ms)")
    for col in ("n", "p50", "p95", "max"):
        table.add_column(col, justify="right")
    for name, st in s["stages"].items():
        style = "bold" if name in ("voice_to_voice", "barge_in_stop") else None
        table.add_row(
            name, str(st["n"]), *(f"{st[k]:.0f}" for k in ("p50", "p95", "max")), style=style
        )
    return table


# ---- exports ----------------------------------------------------------------------------------

# Spans drawn for each turn: (label, start event, end event, colour).
_SPANS = (
    ("user speech", "speech_start", "speech_end", "#6c8ebf"),
    ("endpoint", None, "speech_end", "#b0b0b0"),
    ("asr final", "speech_end", "asr_final", "#82b366"),
    ("lm", "lm_start", "lm_done", "#d79b00"),
    ("tts first", "lm_first_clause", "tts_first_audio", "#9673a6"),
    ("playback", "audio_out_first", "turn_done", "#b85450"),
)


def _spans(evs: list[Event]) -> list[tuple[str, float, float, str]]:
    """(label, start_ms, end_ms, colour) for one turn's events."""
    out = []
    for label, a, b, colour in _SPANS:
        eb = _first(evs, b)
        if eb is None:
            continue
        if a is None:  # endpoint: from the actual end of speech to its detection
            start = eb.get("end_ms")
        else:
            ea = _first(evs, a)
            start = None if ea is None else ea.get("onset_ms", ea["t_ms"])
        end = eb.get("end_ms", eb["t_ms"]) if label == "user speech" else eb["t_ms"]
        if start is not None and end >= start:
            out.append((label, float(start), float(end), colour))
    return out


def to_chrome(events: list[Event]) -> dict[str, Any]:
    """Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev): one track per turn."""
    t0 = min((e["t_ms"] for e in events), default=0.0)
    sessions = {s: i + 1 for i, s in enumerate(dict.fromkeys(str(e["session"]) for e in events))}
    out: list[dict[str, Any]] = []
    for (session, turn), evs in sorted(_by_turn(events).items()):
        pid, tid = sessions[session], turn
        out.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": pid,
                "tid": tid,
                "args": {"name": f"turn {turn}"},
            }
        )
        for label, start, end, _ in _spans(evs):
            out.append(
                {
                    "ph": "X",
                    "name": label,
                    "pid": pid,
                    "tid": tid,
                    "ts": (start - t0) * 1000.0,
                    "dur": (end - start) * 1000.0,
                }
            )
        for ev in evs:
            args = {k: v for k, v in ev.items() if k not in ("session", "turn", "event", "t_ms")}
            out.append(
                {
                    "ph": "i",
                    "s": "t",
                    "name": ev["event"],
                    "pid": pid,
                    "tid": tid,
                    "ts": (ev["t_ms"] - t0) * 1000.0,
                    "args": args,
                }
            )
    for session, pid in sessions.items():
        out.append(
            {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"session {session}"}}
        )
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def to_html(events: list[Event], title: str = "voice turns") -> str:
    """A self-contained page (inline SVG, no scripts) drawing each turn as a waterfall."""
    rows = {(r["session"], r["turn"]): r for r in turn_rows(events)}
    blocks = []
    for key, evs in sorted(_by_turn(events).items()):
        spans = _spans(evs)
        if not spans:
            continue
        t0 = min(s for _, s, _, _ in spans)
        t1 = max(e for _, _, e, _ in spans)
        scale = 800.0 / max(t1 - t0, 1.0)
        bars = []
        for i, (label, start, end, colour) in enumerate(spans):
            x, w, y = 130 + (start - t0) * scale, max((end - start) * scale, 1.5), 8 + i * 22
            bars.append(
                f'<text x="4" y="{y + 13}">{html_lib.escape(label)}</text>'
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="16" fill="{colour}">'
                f"<title>{html_lib.escape(label)}: {end - start:.0f} ms</title></rect>"
                f'<text x="{x + w + 4:.1f}" y="{y + 13}">{end - start:.0f} ms</text>'
            )
        for ev in evs:
            if ev["event"] in ("barge_in", "barge_in_hold", "playback_stopped", "pause"):
                x = 130 + (ev["t_ms"] - t0) * scale
                bars.append(
                    f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{8 + len(spans) * 22}" '
                    f'stroke="#c00" stroke-dasharray="3,2"><title>{ev["event"]}</title></line>'
                )
        row = rows.get(key, {})
        v2v = row.get("stages", {}).get("voice_to_voice")
        head = f"session {key[0]} turn {key[1]}"
        if v2v is not None:
            head += f" — voice-to-voice {v2v:.0f} ms"
        if row:
            head += f" — speculation {row['speculation']}, {row['status']}"
        said = html_lib.escape(f"{row.get('user', '')} → {row.get('answer', '')}")
        text = f"<p>{said}</p>"
        height = 16 + len(spans) * 22
        blocks.append(
            f"<h3>{html_lib.escape(head)}</h3>{text}"
            f'<svg width="1000" height="{height}" font-size="12">{"".join(bars)}</svg>'
        )
    style = (
        "body{font-family:sans-serif;margin:20px}h3{margin:18px 0 2px}p{margin:2px 0;color:#555}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html_lib.escape(title)}</title>"
        f"<style>{style}</style></head><body><h2>{html_lib.escape(title)}</h2>"
        + "".join(blocks)
        + "</body></html>\n"
    )


# ---- CLI entry points (main.py) ---------------------------------------------------------------


def _load(path: str) -> list[Event] | None:
    try:
        return read_trace(path)
    except OSError as exc:
        print(f"error: cannot read trace {path}: {exc.strerror or exc}", file=sys.stderr)
        return None


def trace_summary(path: str) -> int:
    """``python main.py trace summary FILE``."""
    if _load(path) is None:
        return 1
    Console().print(summary(path))
    return 0


def trace_export(path: str, chrome: str | None, html: str | None) -> int:
    """``python main.py trace export FILE --chrome OUT.json --html OUT.html``."""
    events = _load(path)
    if events is None:
        return 1
    try:
        if chrome:
            with open(chrome, "w", encoding="utf-8") as f:
                json.dump(to_chrome(events), f)
            print(f"wrote {chrome} (open in ui.perfetto.dev or chrome://tracing)")
        if html:
            with open(html, "w", encoding="utf-8") as f:
                f.write(to_html(events, title=path))
            print(f"wrote {html}")
    except OSError as exc:
        print(f"error: cannot write export: {exc}", file=sys.stderr)
        return 1
    return 0
