"""Voice-to-voice benchmark: generated utterances through the live pipeline, paced in real time,
with the fixed end-of-turn rule and the adaptive one side by side in one run.

N questions (written here) are synthesized at bench time in several voices (Piper joe at two
speaking rates, espeak-ng en-us / en-gb / a female variant) and play as one conversation
through the full pipeline (webrtcvad -> Whisper -> LM -> Piper) from a real-time source, once
per end-of-turn rule: ``fixed`` (vad.pause_ms 200, the turn ends after vad.speech_end_ms of
silence) and ``adaptive`` (the configured rule: the LM's end-of-turn score at a 90 ms pause).
Then P utterances with a 300-700 ms pause in mid-sentence ("What is the capital of ...
Germany?"), answers played in real time, per rule: an answer whose audio starts before the
user's second part is premature; one heard and cut when the user goes on is a blurt (also
when it started just after their onset). Then B barge-in scenarios (adaptive): a question, and
1 s into the answer an interruption. Prints JSON: voice-to-voice p50/p95 per rule and their
ratio, stage medians, end-of-turn decisions, premature answers, blurts, reopened turns,
barge-in stop latency, machine load.

    .venv/bin/python -m bench.voice [--n 24] [--paused 20] [--barge 3] [--set lm.decoder=ar]

``--asks short``: testkit's 32 short complete questions and requests (2-6 words) instead of the
questions; each rule's ``over_1s`` counts the answers heard over 1 s after the speech ended.
``--variant fast:vad.pause_ms=60,end_of_turn.complete_ms=170``: the adaptive rule again with
those settings, after the others in the same process (settings compared side by side).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import wave
from dataclasses import replace
from io import BytesIO

import numpy as np

from dllm_voice.app.config import load_config
from dllm_voice.app.observe.trace import Tracer
from dllm_voice.app.observe.trace_tools import percentile, summarize, turn_rows
from dllm_voice.app.terminal.runner import Segment, TimelineSource, run_session
from dllm_voice.audio.resample import resample
from testkit.questions import PAUSED, QUESTIONS, SHORT

GAPS_MS = (300, 400, 500, 600, 700)  # the mid-sentence pauses, in turn
INTERRUPTIONS = [
    "Wait, tell me about Spain instead.",
    "Stop, I have another question.",
    "Sorry, can you say that more simply?",
]
VOICES = ["piper", "espeak:en-us", "piper-slow", "espeak:en-gb", "espeak:en-us+f3"]
# The rule before the LM's score: a pause at 200 ms, the turn's end at vad.speech_end_ms.
FIXED = ("end_of_turn.mode=fixed", "vad.pause_ms=200")


def _trim(pcm: np.ndarray, floor: int = 300) -> np.ndarray:
    loud = np.flatnonzero(np.abs(pcm) > floor)
    return pcm[loud[0] : loud[-1] + 1] if len(loud) else pcm


class Voices:
    """Speech at 16 kHz from Piper (two rates) and espeak-ng voices."""

    def __init__(self, cfg) -> None:
        from dllm_voice.audio.tts import PiperTTS

        self.piper = {
            "piper": PiperTTS(cfg.tts, 16000),
            "piper-slow": PiperTTS(replace(cfg.tts, length_scale=1.2), 16000),
        }
        self.espeak = shutil.which("espeak-ng")

    def say(self, text: str, voice: str) -> np.ndarray:
        if voice in self.piper:
            # The user's level is the bench's, not the agent's output gain: peaks at full scale.
            pcm = _trim(np.concatenate(list(self.piper[voice].synthesize(text))))
            return (pcm * (32767 / max(1, int(np.abs(pcm.astype(np.int32)).max())))).astype(
                np.int16
            )
        if self.espeak is None:
            return self.say(text, "piper")
        out = subprocess.run(
            [self.espeak, "-v", voice.split(":", 1)[1], "--stdout", text],
            check=True,
            capture_output=True,
        ).stdout
        with wave.open(BytesIO(out)) as w:
            pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
            rate = w.getframerate()
        return _trim(resample(pcm, rate, 16000))


async def _session(comps, cfg, segments, tracer, realtime_sink: bool) -> list[float]:
    """The segments as one conversation; returns when each segment began (monotonic ms)."""
    from dllm_voice.audio.sinks import CallbackSink

    async def discard(_: bytes) -> None:
        return None

    sink = CallbackSink(discard, comps.tts.sample_rate_hz, realtime=realtime_sink)
    source = TimelineSource(
        segments,
        sample_rate_hz=cfg.audio.sample_rate_hz,
        frame_ms=cfg.audio.frame_ms,
        realtime=True,
        tail_ms=cfg.end_of_turn.incomplete_ms + 500,
    )
    try:
        await run_session(comps, cfg, source, sink, tracer)
    finally:
        await sink.aclose()
    return list(source.starts)


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None}
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 1),
        "p95": round(percentile(values, 95), 1),
        "max": round(max(values), 1),
        "over_1s": sum(v > 1000 for v in values),
    }


def _v2v(events: list[dict]) -> list[float]:
    rows = turn_rows(events)
    return [r["stages"]["voice_to_voice"] for r in rows if "voice_to_voice" in r["stages"]]


def _decisions(events: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        if e["event"] == "end_of_turn":
            out[e["decision"]] = out.get(e["decision"], 0) + 1
    return out


def _premature(events: list[dict], starts: list[float], second_at_ms: list[float]) -> list[bool]:
    """Per paused utterance: did an answer's audio start before the user's second part?"""
    bounds = [*starts[1:], float("inf")][: len(starts)]
    out = []
    for start, end, second in zip(starts, bounds, second_at_ms, strict=True):
        onset = start + second
        out.append(
            any(
                e["event"] == "audio_out_first" and start <= e["t_ms"] < min(onset, end)
                for e in events
            )
        )
    return out


def _rule(comps, cfg, tracer, name, questions, paused) -> dict:
    """One end-of-turn rule over the questions, then over the paused utterances."""
    tracer.session = f"{name}-questions"
    n0 = len(tracer.events)
    asyncio.run(_session(comps, cfg, questions, tracer, realtime_sink=False))
    q_events = tracer.events[n0:]
    tracer.session = f"{name}-paused"
    n0 = len(tracer.events)
    starts = asyncio.run(_session(comps, cfg, [s for s, _ in paused], tracer, True))
    p_events = tracer.events[n0:]
    premature = _premature(p_events, starts, [second for _, second in paused])
    summary = summarize(q_events)
    return {
        "voice_to_voice_ms": _stats(_v2v(q_events)),
        "stages_ms": {k: round(v["p50"], 1) for k, v in summary["stages"].items()},
        "end_of_turn": _decisions(q_events),
        "speculation": {**summary["speculations"], "hit_rate": summary["speculation_hit_rate"]},
        "paused": {
            "utterances": len(paused),
            "premature": sum(premature),
            "premature_rate": round(sum(premature) / max(1, len(paused)), 3),
            "reopened": sum(e["event"] == "reopen" for e in p_events),
            # an answer heard, then cut by the user going on (also after their onset)
            "blurts": sum(e["event"] == "reopen_cancel" and bool(e["audible"]) for e in p_events),
            "end_of_turn": _decisions(p_events),
            "voice_to_voice_ms": _stats(_v2v(p_events)),
            "premature_turns": [s.label for (s, _), p in zip(paused, premature, strict=True) if p],
        },
        "answers": [
            {"said": seg.label, "heard": r["user"], "v2v_ms": r["stages"].get("voice_to_voice")}
            for seg, r in zip(questions, turn_rows(q_events), strict=False)
        ],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=24, help="questions (conversation turns)")
    ap.add_argument(
        "--asks", choices=("questions", "short"), default="questions",
        help="the questions: these, or testkit's short complete asks (2-6 words)",
    )  # fmt: skip
    ap.add_argument("--paused", type=int, default=20, help="utterances with a mid-sentence pause")
    ap.add_argument("--barge", type=int, default=3, help="barge-in scenarios")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="answer length cap")
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--trace", default="", help="also write the JSONL trace here")
    ap.add_argument(
        "--rules", default="fixed,adaptive", help="end-of-turn rules to run (comma-separated)"
    )
    ap.add_argument(
        "--variant", action="append", default=[], metavar="NAME:KEY=V[,KEY=V]",
        help="also run the adaptive rule with these settings, in the same process",
    )  # fmt: skip
    args = ap.parse_args()

    from dllm_voice.app.conversation.components import Components

    cfgs = {
        "fixed": load_config(args.config, [*args.overrides, *FIXED]),
        "adaptive": load_config(args.config, args.overrides),
    }
    for v in args.variant:
        name, _, sets = v.partition(":")
        cfgs[name] = load_config(args.config, [*args.overrides, *sets.split(",")])
    cfgs = {
        k: replace(c, lm=replace(c.lm, max_new_tokens=args.max_new_tokens)) for k, c in cfgs.items()
    }
    cfg = cfgs["adaptive"]  # the barge-in scenarios' rule
    names = [*args.rules.split(","), *(v.partition(":")[0] for v in args.variant)]
    cfgs = {k: c for k, c in cfgs.items() if k in names}
    t0 = time.perf_counter()
    comps = Components.load(cfg)
    load_s = time.perf_counter() - t0
    voices = Voices(cfg)
    asked = SHORT if args.asks == "short" else QUESTIONS
    questions = []
    for i in range(args.n):
        text, voice = asked[i % len(asked)], VOICES[i % len(VOICES)]
        questions.append(Segment(voices.say(text, voice), f"{voice}: {text}"))
    paused = []
    for i in range(args.paused):
        (a, b), voice = PAUSED[i % len(PAUSED)], VOICES[i % len(VOICES)]
        gap = GAPS_MS[i % len(GAPS_MS)]
        first = voices.say(a, voice)
        pcm = np.concatenate([first, np.zeros(16000 * gap // 1000, np.int16), voices.say(b, voice)])
        second_at = 1000.0 * len(first) / 16000 + gap
        paused.append((Segment(pcm, f"{voice}: {a} [{gap} ms] {b}"), second_at))
    tracer = Tracer(args.trace or None, session="bench", keep=True)
    try:
        t0 = time.perf_counter()
        rules = {name: _rule(comps, c, tracer, name, questions, paused) for name, c in cfgs.items()}
        rules_s = time.perf_counter() - t0
        stops: list[float] = []
        barge_ok = 0
        for b in range(args.barge):
            tracer.session = f"barge{b}"
            first = voices.say(QUESTIONS[b % len(QUESTIONS)], VOICES[b % len(VOICES)])
            second = voices.say(INTERRUPTIONS[b % len(INTERRUPTIONS)], "piper")
            n0 = len(tracer.events)
            segs = [Segment(first), Segment(second, barge_in_at_ms=1000)]
            asyncio.run(_session(comps, cfg, segs, tracer, realtime_sink=True))
            evs = tracer.events[n0:]
            stops += [e["stop_ms"] for e in evs if e["event"] == "playback_stopped"]
            barge_ok += any(e["event"] == "barge_in" for e in evs)
    finally:
        tracer.close()
        comps.close()

    none = {"p50": None}
    fixed = rules.get("fixed", {}).get("voice_to_voice_ms", none)
    adaptive = rules.get("adaptive", {}).get("voice_to_voice_ms", none)
    result = {
        "bench": "voice",
        "questions": args.n,
        "asks": args.asks,
        "paused_utterances": args.paused,
        "voices": VOICES,
        "decoder": cfg.lm.decoder,
        "max_new_tokens": args.max_new_tokens,
        "fixed_rule": list(FIXED),
        "load_s": round(load_s, 1),
        "rules_s": round(rules_s, 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "v2v_p50_adaptive_over_fixed": (
            round(adaptive["p50"] / fixed["p50"], 3) if fixed["p50"] and adaptive["p50"] else None
        ),
        "rules": rules,
        "barge_in": {"scenarios": args.barge, "confirmed": barge_ok, "stop_ms": _stats(stops)},
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
