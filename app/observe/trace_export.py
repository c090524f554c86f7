"""Exports of latency traces: Chrome/Perfetto trace events and an HTML waterfall of turns.

Each answer is drawn as its stages (trace_tools.py's STAGES, between the events of its own
generation); a speculation dropped in the turn is never drawn in its place.
"""

from __future__ import annotations

import html as html_lib
import json
import math
import sys

from dllm_voice.app.observe.trace import TraceEvent
from dllm_voice.app.observe.trace_tools import (
    ChromeTrace,
    _by_turn,
    _speech,
    _turn_end,
    answer_spans,
    load_events,
    realtime,
    turn_rows,
)


def _answers(evs: list[TraceEvent]) -> list[int | None]:
    """The generations answered in one turn's events ([None] when none was)."""
    return [e.get("gen") for e in evs if e["event"] == "turn_done"] or [None]


def _ticks(span_ms: float) -> float:
    """A round time-axis step giving 4-8 ticks over ``span_ms``."""
    for step in (10, 20, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 20000, 50000):
        if span_ms / step <= 8:
            return float(step)
    return 10.0 ** math.ceil(math.log10(span_ms / 8))


def to_chrome(events: list[TraceEvent]) -> ChromeTrace:
    """Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev): one track per turn."""
    t0 = min((e["t_ms"] for e in events), default=0.0)
    sessions = {s: i + 1 for i, s in enumerate(dict.fromkeys(str(e["session"]) for e in events))}
    out: list[dict[str, object]] = []
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
        for gen in _answers(evs):
            for label, start, end, _ in answer_spans(evs, gen):
                out.append(
                    {
                        "ph": "X",
                        "name": label,
                        "pid": pid,
                        "tid": tid,
                        "ts": (start - t0) * 1000.0,
                        "dur": (end - start) * 1000.0,
                        "args": {"gen": gen},
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


def _waterfall_svg(evs: list[TraceEvent], spans: list[tuple[str, float, float, str]]) -> str:
    """One answer's stages as bars on a time axis (ms from the end of the user's turn)."""
    end = _turn_end(evs)
    origin = end["end_ms"] if end is not None else min(s for _, s, _, _ in spans)
    t0 = min(min(s for _, s, _, _ in spans), origin)
    t1 = max(e for _, _, e, _ in spans)
    left, width = 140, 760
    scale = width / max(t1 - t0, 1.0)
    step = _ticks(t1 - t0)
    axis_y = 8 + len(spans) * 22
    parts = []
    tick = math.ceil((t0 - origin) / step) * step
    while tick <= t1 - origin:
        x = left + (origin + tick - t0) * scale
        parts.append(
            f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{axis_y}" stroke="#ddd"/>'
            f'<text x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle" fill="#666">'
            f"{tick:+.0f}</text>"
        )
        tick += step
    for i, (label, start, stop, colour) in enumerate(spans):
        x, w, y = left + (start - t0) * scale, max((stop - start) * scale, 1.5), 8 + i * 22
        parts.append(
            f'<text x="4" y="{y + 13}">{html_lib.escape(label)}</text>'
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="16" fill="{colour}">'
            f"<title>{html_lib.escape(label)}: {stop - start:.0f} ms</title></rect>"
            f'<text x="{x + w + 4:.1f}" y="{y + 13}">{stop - start:.0f} ms</text>'
        )
    for ev in evs:
        if ev["event"] in ("barge_in", "barge_in_hold", "playback_stopped", "pause"):
            x = left + (ev["t_ms"] - t0) * scale
            parts.append(
                f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{axis_y}" '
                f'stroke="#c00" stroke-dasharray="3,2"><title>{ev["event"]}</title></line>'
            )
    parts.append(f'<text x="4" y="{axis_y + 14}" fill="#666">ms from end of turn</text>')
    height = axis_y + 20
    return (
        f'<svg width="{left + width + 100}" height="{height}" font-size="12">{"".join(parts)}</svg>'
    )


def to_html(events: list[TraceEvent], title: str = "voice turns") -> str:
    """A self-contained page (inline SVG, no scripts) drawing each answer as a waterfall."""
    rows = {(r["session"], r["turn"], r["gen"]): r for r in turn_rows(events)}
    blocks = []
    for (session, turn), evs in sorted(_by_turn(events).items()):
        for gen in _answers(evs):
            spans = answer_spans(evs, gen)
            if not spans:
                continue
            row = rows.get((session, turn, gen))
            stages = row["stages"] if row is not None else {}
            head = f"session {session} turn {turn}"
            if (v2v := stages.get("voice_to_voice")) is not None:
                head += f" — voice-to-voice {v2v:.0f} ms"
            if (t2v := stages.get("text_to_voice")) is not None:
                head += f" — typed, text-to-voice {t2v:.0f} ms"
            if row is not None:
                head += f" — speculation {row['speculation']}, {row['status']}"
            note = ""
            speech = _speech(evs)
            if realtime(evs) is False and speech is not None:
                note = (
                    f'<p class="warn">not real time: {speech[0]:.0f} ms of speech were fed faster '
                    "than they play (run without --realtime); the user speech, endpoint and "
                    "voice-to-voice times are compute times</p>"
                )
            user, answer = (row["user"], row["answer"]) if row is not None else ("", "")
            said = html_lib.escape(f"{user} → {answer}")
            blocks.append(
                f"<h3>{html_lib.escape(head)}</h3>{note}<p>{said}</p>" + _waterfall_svg(evs, spans)
            )
    style = (
        "body{font-family:sans-serif;margin:20px}h3{margin:18px 0 2px}p{margin:2px 0;color:#555}"
        ".warn{color:#b35c00}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html_lib.escape(title)}</title>"
        f"<style>{style}</style></head><body><h2>{html_lib.escape(title)}</h2>"
        + "".join(blocks)
        + "</body></html>\n"
    )


# ---- CLI entry point (main.py) ------------------------------------------------------------


def trace_export(path: str, chrome: str | None, html: str | None) -> int:
    """``python main.py trace export FILE --chrome OUT.json --html OUT.html``."""
    events = load_events(path)
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
