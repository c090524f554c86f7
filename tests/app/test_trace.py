"""Tracer (thread safety, flush on crash) and trace tools (summary, Chrome export, HTML)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from rich.console import Console

from dllm_voice.app.observe.trace import Tracer, read_trace
from dllm_voice.app.observe.trace_export import to_chrome, to_html, trace_export
from dllm_voice.app.observe.trace_tools import (
    latency_event,
    summarize,
    summary,
    trace_summary,
    turn_rows,
)

ROOT = Path(__file__).resolve().parents[2]


def write_two_turns(path: Path) -> None:
    """Turn 1: speculation hit, v2v 400 ms. Turn 2: refined, then barged in after 120 ms."""
    with Tracer(str(path), session="t") as tr:
        ev = tr.event
        ev("speech_start", turn=1, gen=0, t_ms=1000, onset_ms=900)
        ev("pause", turn=1, gen=0, t_ms=2000)
        ev("speculation_start", turn=1, gen=1, t_ms=2100, text="hi there")
        ev("lm_start", turn=1, gen=1, t_ms=2100)
        ev("lm_first_token", turn=1, gen=1, t_ms=2200)
        ev("lm_first_clause", turn=1, gen=1, t_ms=2300)
        ev("tts_first_audio", turn=1, gen=1, t_ms=2400)
        ev("speech_end", turn=1, gen=1, t_ms=2300, end_ms=1800)
        ev("asr_final", turn=1, gen=1, t_ms=2200 + 0, text="Hi there.", compute_ms=150)
        ev("speculation", turn=1, gen=1, t_ms=2200, result="hit", saved_ms=300)
        ev("audio_out_first", turn=1, gen=1, t_ms=2200 + 0)
        ev("lm_done", turn=1, gen=1, t_ms=2600)
        ev("turn_done", turn=1, gen=1, t_ms=4000, status="completed", text="Hello!")
        ev("speech_start", turn=2, gen=1, t_ms=5000, onset_ms=4900)
        ev("speech_end", turn=2, gen=1, t_ms=6000, end_ms=5500)
        ev("speculation_start", turn=2, gen=2, t_ms=5800, text="Tell me")
        ev("asr_final", turn=2, gen=1, t_ms=6200, text="Tell me more.")
        ev("speculation", turn=2, gen=3, t_ms=6200, result="refined", saved_ms=20)
        ev("lm_start", turn=2, gen=3, t_ms=6200)
        ev("lm_first_token", turn=2, gen=3, t_ms=6300)
        ev("lm_first_clause", turn=2, gen=3, t_ms=6400)
        ev("tts_first_audio", turn=2, gen=3, t_ms=6500)
        ev("audio_out_first", turn=2, gen=3, t_ms=6510)
        ev("barge_in_hold", turn=2, gen=3, t_ms=7000)
        ev("playback_stopped", turn=2, gen=3, t_ms=7001, stop_ms=120)
        ev("barge_in", turn=2, gen=3, t_ms=7300)
        ev("turn_done", turn=2, gen=3, t_ms=7300, status="cancelled", text="Sure")


def test_summary_numbers(tmp_path):
    path = tmp_path / "t.jsonl"
    write_two_turns(path)
    s = summarize(read_trace(str(path)))
    assert s["turns"] == 2 and s["completed"] == 1 and s["cancelled"] == 1
    assert s["barge_ins"] == 1
    assert s["speculations"] == {"hit": 1, "refined": 1, "miss": 0}
    assert s["speculation_hit_rate"] == 0.5
    v2v = s["stages"]["voice_to_voice"]
    assert v2v["n"] == 2 and v2v["max"] == 1010 and v2v["p50"] == (400 + 1010) / 2
    assert s["stages"]["barge_in_stop"]["p50"] == 120
    assert s["stages"]["endpoint"]["p50"] == 500
    console = Console(record=True, width=120)
    console.print(summary(str(path)))
    out = console.export_text()
    assert "voice_to_voice" in out
    assert "1 of 2 answered turns that speculated played their guess (50%)" in " ".join(out.split())


def test_exports(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    write_two_turns(path)
    events = read_trace(str(path))
    chrome = to_chrome(events)
    spans = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert {e["name"] for e in spans} >= {"user speech", "asr final", "lm first clause", "playback"}
    assert all(e["dur"] >= 0 for e in spans)
    page = to_html(events)
    assert (
        page.count("<svg") == 2 and "stroke-dasharray" in page and "voice-to-voice 400 ms" in page
    )
    assert "<script" not in page and "http" not in page  # self-contained
    out_json, out_html = tmp_path / "c.json", tmp_path / "w.html"
    assert trace_export(str(path), chrome=str(out_json), html=str(out_html)) == 0
    assert json.loads(out_json.read_text())["traceEvents"]
    assert trace_summary(str(path)) == 0
    assert trace_summary(str(tmp_path / "missing.jsonl")) == 1
    assert "cannot read trace" in capsys.readouterr().err


def dropped_then_answered(tr: Tracer, fed_ms: float) -> None:
    """A guess (gen 1) whose audio came late and was dropped, then the answer (gen 2): 1.8 s of
    speech that took ``fed_ms`` to arrive."""
    ev = tr.event
    ev("speech_start", turn=1, gen=0, t_ms=1000, onset_ms=1000, audio_ms=300)
    ev("speculation_start", turn=1, gen=1, t_ms=1100, text="what is")
    ev("lm_start", turn=1, gen=1, t_ms=1100)
    ev("lm_first_clause", turn=1, gen=1, t_ms=1200)
    ev("speech_end", turn=1, gen=1, t_ms=1000 + fed_ms + 500, end_ms=1000 + fed_ms, audio_ms=2100)
    ev("asr_final", turn=1, gen=1, t_ms=1000 + fed_ms + 600, text="What is the time?")
    ev("speculation", turn=1, gen=1, t_ms=1000 + fed_ms + 600, result="miss", saved_ms=0)
    ev("tts_first_audio", turn=1, gen=1, t_ms=1000 + fed_ms + 3837)
    ev("lm_start", turn=1, gen=2, t_ms=1000 + fed_ms + 610)
    ev("lm_first_clause", turn=1, gen=2, t_ms=1000 + fed_ms + 700)
    ev("tts_first_audio", turn=1, gen=2, t_ms=1000 + fed_ms + 971)
    ev("audio_out_first", turn=1, gen=2, t_ms=1000 + fed_ms + 980)
    ev("turn_done", turn=1, gen=2, t_ms=1000 + fed_ms + 2000, status="completed", text="Noon.")


def test_waterfall_draws_the_answer_not_the_dropped_guess(tmp_path):
    tr = Tracer(None, session="t")
    dropped_then_answered(tr, fed_ms=1800)
    events = tr.events
    (row,) = turn_rows(events)
    assert row["stages"]["tts_first"] == 271 and row["realtime"] is True
    page = to_html(events)
    assert "tts first audio: 271 ms" in page and "3837" not in page and "not real time" not in page
    assert "ms from end of turn" in page  # the time axis
    chrome = [e for e in to_chrome(events)["traceEvents"] if e["ph"] == "X"]
    tts = next(e for e in chrome if e["name"] == "tts first audio")
    assert tts["dur"] == 271_000 and tts["args"]["gen"] == 2
    lat = latency_event(events, 2)
    spans = {s["stage"]: (s["start_ms"], s["end_ms"]) for s in lat["spans"]}
    assert spans["endpoint"] == (0, 500) and spans["tts first audio"] == (700, 971)
    assert spans["user speech"] == (-1800, 0) and spans["playback"] == (980, 2000)
    assert [s["stage"] for s in lat["spans"]] == [
        "user speech", "endpoint", "asr final", "lm first clause", "tts first audio", "playback"
    ]  # fmt: skip


def test_speech_fed_faster_than_real_time_is_marked(tmp_path):
    tr = Tracer(None, session="t")
    dropped_then_answered(tr, fed_ms=28)  # `run` without --realtime
    (row,) = turn_rows(tr.events)
    assert row["realtime"] is False and latency_event(tr.events, 2)["realtime"] is False
    assert "not real time: 1800 ms of speech were fed faster than they play" in to_html(tr.events)
    path = tmp_path / "fast.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in tr.events))
    console = Console(record=True, width=80, soft_wrap=True)
    console.print(summary(str(path)))
    out = console.export_text()
    assert "not real time: 1 of 1 answered turns had their speech fed faster than it plays" in out
    assert "1 answer (1 completed, 0 cancelled)" in out.splitlines()[0]  # one line, not wrapped


def test_typed_turn_counts_text_to_voice():
    tr = Tracer(None, session="t")
    ev = tr.event
    ev("text_input", turn=1, gen=0, t_ms=1000, end_ms=1000, text="Hello there")
    ev("lm_start", turn=1, gen=1, t_ms=1001)
    ev("lm_first_clause", turn=1, gen=1, t_ms=1200)
    ev("tts_first_audio", turn=1, gen=1, t_ms=1400)
    ev("audio_out_first", turn=1, gen=1, t_ms=1410)
    ev("turn_done", turn=1, gen=1, t_ms=2000, status="completed", text="Hi!")
    (row,) = turn_rows(tr.events)
    assert row["typed"] and row["user"] == "Hello there"
    assert row["stages"]["text_to_voice"] == 410 and "voice_to_voice" not in row["stages"]
    lat = latency_event(tr.events, 1)
    assert lat["voice_to_voice_ms"] is None and lat["typed"]
    assert [s["stage"] for s in lat["spans"]] == ["lm first clause", "tts first audio", "playback"]
    assert summarize(tr.events)["stages"]["text_to_voice"]["p50"] == 410


def test_tracer_thread_safe(tmp_path):
    path = tmp_path / "t.jsonl"
    tr = Tracer(str(path), session="x")

    def worker(k: int) -> None:
        for i in range(200):
            tr.event("asr_partial", turn=k, gen=i, text="é" * 50)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tr.close()
    tr.close()  # twice is fine
    events = read_trace(str(path))
    assert len(events) == 800
    assert all(e["session"] == "x" and e["text"] == "é" * 50 for e in events)


def test_trace_survives_a_crash(tmp_path):
    path = tmp_path / "crash.jsonl"
    code = (
        "from dllm_voice.app.observe.trace import Tracer\n"
        f"tr = Tracer({str(path)!r}, session='c')\n"
        "tr.event('speech_start', turn=1, gen=0)\n"
        "tr.event('speech_end', turn=1, gen=0)\n"
        "raise RuntimeError('boom')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1 and "boom" in proc.stderr
    assert [e["event"] for e in read_trace(str(path))] == ["speech_start", "speech_end"]


def test_frames_stale_only_when_interruptible():
    import numpy as np

    from dllm_voice.app.conversation.frames import ClauseFrame, EndOfAnswerFrame, TTSAudioFrame

    assert ClauseFrame(3, "Hi.", 0).stale(current_gen=4)
    assert not ClauseFrame(4, "Hi.", 0).stale(current_gen=4)
    assert TTSAudioFrame(3, np.zeros(10, np.int16), "Hi.", 0).stale(current_gen=4)
    assert not EndOfAnswerFrame(3, "cancelled").stale(current_gen=4)  # bookkeeping survives
