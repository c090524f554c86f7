"""`python main.py` on a real sound server with a real echo path: false barge-ins, interruption
stop time and voice to voice, measured at the sound server.

A PulseAudio user daemon (testkit/pulse.py) gives the agent a virtual speaker (`agent_out`) and
microphone (`mic_in`'s monitor); a module-loopback carries the speaker back into the microphone
at --echo-gain-db after --echo-delay-ms, as laptop speakers do. Per echo mode (`--modes`, each
a fresh main.py in a tmux terminal):

1. --answers questions (Piper and espeak-ng voices, generated now), each after the agent has
   gone quiet: voice to voice from the end of the question's samples in the microphone to the
   agent's first sample on the speaker; a false barge-in is an answer the agent's own echo cut
   (cancelled) or paused (held), or a turn started by the echo alone.
2. --interruptions: a question, then 1 s into the answer an interruption played over the agent:
   stop time from the interruption's onset in the microphone (found by cross-correlation, so
   the echo mixed in does not move it) to the end of the agent's last sound before it is quiet
   (an answer already quiet at the onset, finished or paused, has none), and pause time from
   that onset to main.py's barge_in_hold (the trace's clock is the recordings' monotonic clock):
   the stop time reads short when the pause falls between two of the agent's words.

Also counted: speaker underruns (main.py's log) and sound-library lines on the terminal.

--mic-path N measures the microphone's path alone, without main.py: N tone bursts played into
the virtual microphone, each from its onset at the sound server to the arrival of the first
30 ms frame that holds it from the app's own `MicSource`; with --stall-ms the main thread then
holds the GIL that long in each burst (as a model call can), so the audio callback waits, and
lost samples show as onsets closer together in the frames than at the sound server.

    .venv/bin/python -m bench.live [--answers 10] [--interruptions 5] [--modes auto,off]
        [--echo-gain-db -10 | --no-echo] [--echo-delay-ms 40] [--set section.key=value ...]
        [--keep DIR]
    .venv/bin/python -m bench.live --mic-path 30 [--stall-ms 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from testkit.pulse import (
    MIC_SINK,
    RATE,
    LiveSession,
    SoundServer,
    SoundServerError,
    write_wav,
)
from testkit.questions import QUESTIONS
from testkit.speech import speech_pcm

INTERRUPTIONS = [
    "Wait, tell me about Spain instead.",
    "Stop, I have another question.",
    "Sorry, can you say that more simply?",
]
VOICES = ["piper", "espeak:en-us", "espeak:en-gb", "espeak:en-us+f3"]
NOISE = re.compile(r"alsa|underrun|portaudio|jack|traceback", re.IGNORECASE)


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "max": None}
    v = sorted(values)
    return {
        "n": len(v),
        "p50": round(statistics.median(v)),
        "p95": round(v[min(len(v) - 1, int(0.95 * len(v)))]),
        "max": round(v[-1]),
    }


def _run_mode(mode: str, args: argparse.Namespace, root: Path) -> dict:
    sets = [x for s in args.set for x in ("--set", s)]
    live = LiveSession(
        root,
        ["--set", f"echo.mode={mode}", *sets],
        echo_gain_db=args.echo_gain_db,
        echo_delay_ms=args.echo_delay_ms,
    )
    v2v, v2v_trace, stops, trace_stops, missed, quiet = [], [], [], [], 0, 0
    # Times are read off the recordings once they are whole: a recorder's clock offset (the
    # least transport delay seen so far) still moves by tens of ms during the run, so a clip is
    # also looked for from 0.5 s before it was played.
    asked, interrupted = [], []  # (clip, when it was played) of the questions, interruptions
    turns = 0
    try:
        time.sleep(1.0)
        for i in range(args.answers):
            text = QUESTIONS[i % len(QUESTIONS)]
            clip = speech_pcm(text, VOICES[i % len(VOICES)])
            asked.append((clip, live.say(clip)))
            turns += 1
            live.wait_idle(turns, timeout_s=90)
            turns = live.turns()
        answers_events = live.chat.events()
        for b in range(args.interruptions):
            text = QUESTIONS[(b + 2) % len(QUESTIONS)]
            clip = speech_pcm(text, VOICES[b % len(VOICES)])
            started = live.say(clip)
            first = live.wait_agent_sound(started, timeout_s=60)
            stop = speech_pcm(INTERRUPTIONS[b % len(INTERRUPTIONS)], VOICES[(b + 1) % len(VOICES)])
            time.sleep(max(0.0, first + 1.0 - time.monotonic()))
            interrupted.append((clip, started, stop, live.say(stop)))
            turns += 2
            live.wait_idle(turns, timeout_s=90)
            turns = live.turns()
        screen = live.chat.screen()
    finally:
        code = live.close()
    events = live.chat.events()
    holds = [e["t_ms"] / 1000 for e in events if e["event"] == "barge_in_hold"]
    for clip, started in asked:
        _, end = live.heard(clip, started - 0.5)
        first = live.agent_sound(end)
        if first is not None:
            v2v.append(1000 * (first - end))
    pauses, early = [], 0
    for clip, started, stop, said in interrupted:
        _, asked_end = live.heard(clip, started - 0.5)
        first = live.agent_sound(asked_end) or asked_end
        onset, stop_end = live.heard(stop, said - 0.5)
        window_end = min(stop_end, onset + 1.0)  # the next answer may start at stop_end
        last = live.agent_last_sound(first, window_end)
        if last is None or last >= window_end - 0.05:
            missed += 1  # the agent talked through the whole interruption
        elif last <= onset:
            quiet += 1
        else:
            stops.append(1000 * (last - onset))
        held = [t for t in holds if first <= t <= window_end]
        if held and held[0] < onset:
            early += 1  # paused by its own echo before the user spoke
        elif held:
            pauses.append(1000 * (held[0] - onset))
    for ev in answers_events:
        if ev["event"] == "audio_out_first" and ev.get("v2v_ms") is not None:
            v2v_trace.append(ev["v2v_ms"])
    for ev in events[len(answers_events) :]:
        if ev["event"] == "playback_stopped":
            trace_stops.append(ev["stop_ms"])
    finals = [e for e in answers_events if e["event"] == "asr_final" and e.get("text")]
    log = (root / "trace.log").read_text(errors="replace")
    underruns = [int(n) for n in re.findall(r"speaker: (\d+) underruns", log)]
    speaking = [int(n) for n in re.findall(r"(\d+) while speaking", log)]
    return {
        "echo_mode": mode,
        "answers": args.answers,
        "false_barge_ins": {
            "cancelled": sum(
                e["event"] == "turn_done" and e["status"] == "cancelled" for e in answers_events
            ),
            "paused": sum(e["event"] == "barge_in_hold" for e in answers_events),
            "turns_from_echo": max(0, len(finals) - args.answers),
            "paused_before_an_interruption": early,
        },
        "v2v_ms_sound_server": _stats(v2v),
        "v2v_ms_trace": _stats(v2v_trace),
        "interruptions": args.interruptions,
        "interruption_missed": missed,
        "interruption_agent_quiet": quiet,
        "stops_ms_sound_server": [round(s) for s in stops],
        "stop_ms_sound_server": _stats(stops),
        "stop_ms_trace": _stats(trace_stops),
        "pauses_ms_sound_server": [round(p) for p in pauses],
        "pause_ms_sound_server": _stats(pauses),
        "speaker_underruns": underruns[0] if underruns else None,
        "speaker_underruns_while_speaking": speaking[0] if speaking else None,
        "terminal_noise_lines": len([ln for ln in screen.splitlines() if NOISE.search(ln)]),
        "exit_code": code,
    }


def _onsets(pcm: np.ndarray) -> list[int]:
    """First sample of each tone burst (-30 dBFS; bursts are >= 0.5 s apart)."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 1000)
    out: list[int] = []
    for at in loud:
        if not out or at >= out[-1] + RATE // 2:
            out.append(int(at))
    return out


def _mic_path(n: int, stall_ms: int, root: Path) -> dict:
    server = SoundServer(root)
    # PortAudio reads the sound server's address when sounddevice is first imported.
    os.environ.update({k: server.env[k] for k in ("XDG_RUNTIME_DIR", "PULSE_SERVER")})
    from dllm_voice.audio.config import AudioConfig
    from dllm_voice.audio.sources import MicSource

    rec = server.record(f"{MIC_SINK}.monitor")
    try:
        rec.wait_ready()
        mic = MicSource(AudioConfig())
        tone = 0.3 * 32767 * np.sin(2 * np.pi * 1000 * np.arange(RATE // 5) / RATE)
        gap = np.zeros(RATE // 5, np.int16)
        wav = root / "burst.wav"
        write_wav(wav, np.concatenate([gap, tone.astype(np.int16), gap]))
        frames: list[tuple[float, np.ndarray]] = []
        t0 = time.perf_counter()
        sum(range(1_000_000))  # C code that keeps the GIL: its speed sets the stall's length
        per_ms = 1_000_000 / (1000 * (time.perf_counter() - t0))
        stalls: list[float] = []

        async def run() -> None:
            async def read() -> None:
                async for frame in mic:
                    frames.append((time.monotonic(), frame))

            reader = asyncio.create_task(read())
            await asyncio.sleep(1.0)
            for i in range(n):
                server.play(wav)
                if stall_ms:
                    await asyncio.sleep(0.3)  # into the burst
                    t = time.monotonic()
                    sum(range(int(stall_ms * per_ms)))
                    stalls.append(1000 * (time.monotonic() - t))
                await asyncio.sleep(0.9 + 0.011 * i)  # onsets at every phase of a frame
            await asyncio.sleep(0.5)
            await mic.aclose()
            reader.cancel()

        asyncio.run(run())
    finally:
        pcm = rec.stop()
        server.stop()
    got = np.concatenate([f for _, f in frames])
    path = []
    for at in _onsets(pcm):
        t_on = rec.time_of(at)
        loud = [t for t, f in frames if t >= t_on - 0.02 and np.abs(f).max() > 1000]
        if loud:
            path.append(1000 * (loud[0] - t_on))
    sent, heard = np.diff(_onsets(pcm)), np.diff(_onsets(got))
    k = min(len(sent), len(heard))
    return {
        "bursts": n,
        "path_ms": _stats(path),
        "stall_ms": round(statistics.median(stalls)) if stalls else 0,
        "overflows": mic.overflows,
        "samples_lost_between_onsets_max": int(np.max(np.abs(sent[:k] - heard[:k]), initial=0)),
        "portaudio_blocksize": mic._stream.blocksize,
        "portaudio_latency_ms": round(1000 * mic._stream.latency, 1),
    }


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the daemon and main.py stop
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--answers", type=int, default=10)
    ap.add_argument("--interruptions", type=int, default=5)
    ap.add_argument("--modes", default="auto,off", help="echo.mode values, comma-separated")
    ap.add_argument("--echo-gain-db", type=float, default=-10.0)
    ap.add_argument("--no-echo", dest="echo_gain_db", action="store_const", const=None)
    ap.add_argument("--echo-delay-ms", type=int, default=40)
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--keep", metavar="DIR", help="keep each mode's trace and log under DIR")
    ap.add_argument("--mic-path", type=int, default=0, metavar="N", help="measure the mic alone")
    ap.add_argument("--stall-ms", type=int, default=0)
    args = ap.parse_args()
    if args.mic_path:
        with tempfile.TemporaryDirectory(prefix="mic-path-") as tmp:
            try:
                out = _mic_path(args.mic_path, args.stall_ms, Path(tmp))
            except SoundServerError as e:
                print(json.dumps({"error": f"no sound server: {e}"}))
                return 1
        out["load"] = os.getloadavg()[0]
        print(json.dumps(out, indent=1))
        return 0
    out = {
        "echo_gain_db": args.echo_gain_db,
        "echo_delay_ms": args.echo_delay_ms,
        "set": args.set,
        "load_before": os.getloadavg()[0],
        "modes": [],
    }
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory(prefix=f"live-{mode}-", dir=args.keep) as tmp:
            root = Path(tmp)
            if args.keep:  # the trace, main.py's log and the utterances stay for reading
                root = Path(args.keep) / f"live-{mode}"
                root.mkdir(parents=True, exist_ok=True)
            try:
                out["modes"].append(_run_mode(mode, args, root))
            except SoundServerError as e:
                print(json.dumps({"error": f"no sound server: {e}"}))
                return 1
            except AssertionError as e:  # main.py exited or stalled: the other modes still run
                out["modes"].append({"echo_mode": mode, "error": str(e).strip().splitlines()})
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
