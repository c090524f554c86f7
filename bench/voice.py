"""Voice-to-voice benchmark: generated utterances through the live pipeline, paced in real time.

N questions (written here) are synthesized at bench time in several voices (Piper joe at two
speaking rates, espeak-ng en-us / en-gb / a female variant), some with a mid-sentence pause so
speculation meets resumed speech. They play as one conversation through the full pipeline
(webrtcvad -> Whisper -> LM -> Piper) from a real-time source. Then B barge-in scenarios: a
question, and 1 s into the answer an interruption. Prints JSON: voice-to-voice p50/p95, the
stage breakdown, speculation outcomes, barge-in stop latency p50/p95, machine load.

    .venv/bin/python bench/voice.py [--n 12] [--barge 5] [--set lm.decoder=hybrid] [--trace F]
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
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.config import load_config  # noqa: E402
from app.runner import Segment, TimelineSource, run_session  # noqa: E402
from app.trace import Tracer  # noqa: E402
from app.trace_tools import percentile, summarize, turn_rows  # noqa: E402
from audio.resample import resample  # noqa: E402

# (text, pause after word k or None): a pause of PAUSE_MS splits the sentence there.
QUESTIONS = [
    ("What is the capital of France?", None),
    ("How many legs does a spider have?", None),
    ("Tell me a fun fact about the moon.", 4),
    ("What color is the sky on a clear day?", None),
    ("Can you recommend a good book to read?", None),
    ("Why do cats purr?", None),
    ("What is the boiling point of water?", 3),
    ("Give me a quick tip for sleeping better.", None),
    ("Who wrote Romeo and Juliet?", None),
    ("How far away is the sun?", None),
    ("What should I cook for dinner tonight?", 4),
    ("Is it going to be a good day today?", None),
]
INTERRUPTIONS = [
    "Wait, tell me about Spain instead.",
    "Stop, I have another question.",
    "Sorry, can you say that more simply?",
]
VOICES = ["piper", "espeak:en-us", "piper-slow", "espeak:en-gb", "espeak:en-us+f3"]
PAUSE_MS = 330  # > vad.pause_ms (200), < vad.speech_end_ms (500): a pause, not an end


def _trim(pcm: np.ndarray, floor: int = 300) -> np.ndarray:
    loud = np.flatnonzero(np.abs(pcm) > floor)
    return pcm[loud[0] : loud[-1] + 1] if len(loud) else pcm


class Voices:
    """Speech at 16 kHz from Piper (two rates) and espeak-ng voices."""

    def __init__(self, cfg) -> None:
        from audio.tts import PiperTTS

        self.piper = {
            "piper": PiperTTS(cfg.tts, 16000),
            "piper-slow": PiperTTS(replace(cfg.tts, length_scale=1.2), 16000),
        }
        self.espeak = shutil.which("espeak-ng")

    def say(self, text: str, voice: str) -> np.ndarray:
        if voice in self.piper:
            return _trim(np.concatenate(list(self.piper[voice].synthesize(text))))
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

    def utterance(self, text: str, voice: str, split: int | None) -> np.ndarray:
        if split is None:
            return self.say(text, voice)
        words = text.split()
        gap = np.zeros(16000 * PAUSE_MS // 1000, np.int16)
        a, b = " ".join(words[:split]), " ".join(words[split:])
        return np.concatenate([self.say(a, voice), gap, self.say(b, voice)])


async def _session(comps, cfg, segments, tracer, realtime_sink: bool):
    from audio.sinks import CallbackSink

    async def discard(_: bytes) -> None:
        return None

    sink = CallbackSink(discard, comps.tts.sample_rate_hz, realtime=realtime_sink)
    source = TimelineSource(
        segments,
        sample_rate_hz=cfg.audio.sample_rate_hz,
        frame_ms=cfg.audio.frame_ms,
        realtime=True,
        tail_ms=cfg.vad.speech_end_ms + 500,
    )
    try:
        return await run_session(comps, cfg, source, sink, tracer)
    finally:
        await sink.aclose()


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None}
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 1),
        "p95": round(percentile(values, 95), 1),
        "max": round(max(values), 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=12, help="utterances (conversation turns)")
    ap.add_argument("--barge", type=int, default=5, help="barge-in scenarios")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="answer length cap")
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--trace", default="", help="also write the JSONL trace here")
    args = ap.parse_args()

    from app.components import Components

    cfg = load_config(args.config, args.overrides)
    cfg = replace(cfg, lm=replace(cfg.lm, max_new_tokens=args.max_new_tokens))
    t0 = time.perf_counter()
    comps = Components.load(cfg)
    load_s = time.perf_counter() - t0
    voices = Voices(cfg)
    tracer = Tracer(args.trace or None, session="bench", keep=True)
    try:
        segments = []
        for i in range(args.n):
            text, split = QUESTIONS[i % len(QUESTIONS)]
            voice = VOICES[i % len(VOICES)]
            segments.append(Segment(voices.utterance(text, voice, split), f"{voice}: {text}"))
        t0 = time.perf_counter()
        asyncio.run(_session(comps, cfg, segments, tracer, realtime_sink=False))
        conv_s = time.perf_counter() - t0
        conv_events = list(tracer.events)

        stops: list[float] = []
        barge_ok = 0
        for b in range(args.barge):
            tracer.session = f"barge{b}"
            text, _ = QUESTIONS[b % len(QUESTIONS)]
            first = voices.say(text, VOICES[b % len(VOICES)])
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

    s = summarize(conv_events)
    rows = turn_rows(conv_events)
    v2v = [r["stages"]["voice_to_voice"] for r in rows if "voice_to_voice" in r["stages"]]
    result = {
        "bench": "voice",
        "utterances": args.n,
        "voices": VOICES,
        "decoder": cfg.lm.decoder,
        "max_new_tokens": args.max_new_tokens,
        "load_s": round(load_s, 1),
        "conversation_s": round(conv_s, 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "voice_to_voice_ms": _stats(v2v),
        "stages_ms": {
            k: {m: round(v[m], 1) for m in ("p50", "p95", "max")} for k, v in s["stages"].items()
        },
        "speculation": {**s["speculations"], "hit_rate": s["speculation_hit_rate"]},
        "turn_outcomes": {
            k: sum(r["speculation"] == k for r in rows) for k in ("hit", "refined", "none")
        },
        "barge_in": {"scenarios": args.barge, "confirmed": barge_ok, "stop_ms": _stats(stops)},
        "turns": [
            {
                "said": seg.label,
                "heard": r["user"],
                "answer": r["answer"],
                "voice_to_voice_ms": round(r["stages"].get("voice_to_voice", float("nan")), 1),
                "speculation": r["speculation"],
            }
            for seg, r in zip(segments, rows, strict=False)
        ],
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
