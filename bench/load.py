"""Load benchmark: N simulated clients talking to one `main.py serve` at once over /ws.

Each client streams a microphone as the web page does: 20 ms PCM16 16 kHz frames paced by the
wall clock, silence whenever it is not speaking. It asks --turns questions (testkit/questions.py's,
spoken by Piper at run time; each client its own, --seed shuffles which), each after the
previous answer's ``response.done`` and --gap-s of silence. Start patterns: ``simultaneous``
(every client starts speaking at the same instant) and ``staggered`` (first words spread evenly
over --stagger-s). Per N and pattern it prints:

* voice to voice, client side: the wall-clock time of the question's last sample to the first
  audio message of the answer that completed, over all turns and over the first turns only (the
  ones the pattern starts together; later turns drift apart); and the server's own from each
  session's trace (``audio_out_first`` - ``speech_end.end_ms``) with the trace's stage medians;
* final transcript: the question's last sample to ``...transcription.completed``;
* errors: error events by type, closes other than the client's own 1000, turns without a
  completed answer, cancelled answers, tracebacks in the server's log;
* CPU in cores (CPU time over wall time): the server process, this process (the clients), the
  whole machine (other jobs share it);
* how late the clients' frames went out: a late frame is this process's delay, not the server's.

The server is a child process (bench/soak.py's), so its CPU time is its own and the clients'
Python never holds its GIL; it runs with server.max_sessions at the largest N. Clients send no
playback reports: the server models their playback by the wall clock (docs/protocol.md).

    .venv/bin/python -m bench.load [--n 1,2,3,4,6] [--pattern simultaneous,staggered]
        [--turns 2] [--seed 0] [--stagger-s 1.5] [--gap-s 1.0] [--warmup 1]
        [--set section.key=value ...] [--out FILE]

Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from bench.soak import Server, free_port
from bench.user_voices import RATE_HZ, UserVoices
from bench.voice import _stats
from dllm_voice.app.observe.trace import read_trace
from dllm_voice.app.observe.trace_tools import summarize, turn_rows
from dllm_voice.app.server.protocol import AUDIO_HEADER
from testkit.questions import QUESTIONS

FRAME = RATE_HZ // 50  # 20 ms, the web page's frame
LEAD_S = 0.5  # silence every client streams before the first question starts
TAIL_S = 0.5  # silence after the last answer, before the client closes
TURN_TIMEOUT_S = 60.0  # a question with no completed answer by then counts as unanswered
PATTERNS = ("simultaneous", "staggered")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Turn:
    """One question of a client, with the client's clock (loop.time() seconds) at each step."""

    question: str
    speech_end_s: float | None = None  # when the question's last sample was captured
    final_s: float | None = None  # the first final transcript after that
    transcript: str = ""
    audio_s: dict[int, float] = field(default_factory=dict)  # gen -> its first audio after it
    answered_s: float | None = None  # response.done, completed
    answer_gen: int | None = None
    cancelled: int = 0  # answers cancelled in this turn
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def v2v_ms(self) -> float | None:
        first = self.audio_s.get(self.answer_gen) if self.answered_s is not None else None
        if first is None or self.speech_end_s is None:
            return None
        return 1000.0 * (first - self.speech_end_s)

    @property
    def final_ms(self) -> float | None:
        if self.final_s is None or self.speech_end_s is None:
            return None
        return 1000.0 * (self.final_s - self.speech_end_s)


class Client:
    """One websocket session: a sender paced by the wall clock, a receiver, and the turns."""

    def __init__(self, url: str, questions: list[tuple[str, np.ndarray]]) -> None:
        self.url = url
        self.questions = questions
        self.ws: ClientConnection | None = None
        self.session_id = ""
        self.turns: list[Turn] = []
        self.errors: Counter[str] = Counter()
        self.close_code: int | None = None  # set when the server closed first
        self.late_ms: list[float] = []  # per frame, how far past its capture time it went out
        self._queue: list[tuple[np.ndarray, Turn, int]] = []  # pcm, turn, first sample
        self._base = 0.0
        self._pos = 0  # samples sent

    async def open(self) -> None:
        self.ws = await connect(self.url, max_size=None)
        first = json.loads(await self.ws.recv())
        if first["type"] == "session.created":
            self.session_id = first["session"]["id"]
        elif first["type"] == "error":  # refused (server_busy): the close follows
            self.errors[first["error"]["type"]] += 1

    def _sample_at(self, t: float) -> int:
        """The first frame boundary at or after clock time ``t``, in samples."""
        return FRAME * max(0, int(np.ceil((t - self._base) * RATE_HZ / FRAME)))

    async def run(self, base: float, start_s: float, gap_s: float) -> None:
        """Stream from ``base``; the first question starts ``start_s`` later."""
        assert self.ws is not None
        self._base = base
        if not self.session_id:
            await self.ws.close()
            self.close_code = self.ws.close_code
            self.turns = [Turn(text) for text, _ in self.questions]
            return
        sender = asyncio.create_task(self._send())
        receiver = asyncio.create_task(self._receive())
        loop = asyncio.get_running_loop()
        try:
            for k, (text, pcm) in enumerate(self.questions):
                at = base + start_s if k == 0 else loop.time() + gap_s
                turn = Turn(text)
                self.turns.append(turn)
                self._queue.append((pcm, turn, self._sample_at(at)))
                wait = at - loop.time() + len(pcm) / RATE_HZ + TURN_TIMEOUT_S
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(turn.done.wait(), max(0.0, wait))
                if receiver.done():
                    break
            if not receiver.done():
                await asyncio.sleep(TAIL_S)
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            await self.ws.close()
            await asyncio.gather(receiver, return_exceptions=True)
        self.turns += [Turn(text) for text, _ in self.questions[len(self.turns) :]]

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        current: tuple[np.ndarray, int] | None = None  # pcm, its first sample
        while True:
            frame = np.zeros(FRAME, np.int16)
            if current is None and self._queue and self._queue[0][2] <= self._pos:
                pcm, turn, _ = self._queue.pop(0)
                current = (pcm, self._pos)
                turn.speech_end_s = self._base + (self._pos + len(pcm)) / RATE_HZ
            if current is not None:
                pcm, begin = current
                piece = pcm[self._pos - begin : self._pos - begin + FRAME]
                frame[: len(piece)] = piece
                if self._pos - begin + FRAME >= len(pcm):
                    current = None
            # A frame goes out once its last sample has been captured, as a browser sends it.
            due = self._base + (self._pos + FRAME) / RATE_HZ
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.late_ms.append(max(0.0, 1000.0 * (loop.time() - due)))
            await self.ws.send(frame.tobytes())
            self._pos += FRAME

    async def _receive(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for message in self.ws:
                now = loop.time()
                turn = self.turns[-1] if self.turns else None
                spoken = turn is not None and turn.speech_end_s is not None
                if isinstance(message, bytes):
                    if spoken and now >= turn.speech_end_s:
                        gen = AUDIO_HEADER.unpack_from(message)[0]
                        turn.audio_s.setdefault(gen, now)
                    continue
                event = json.loads(message)
                kind = event["type"]
                if kind == "error":
                    self.errors[event["error"]["type"]] += 1
                elif kind == "conversation.item.input_audio_transcription.completed":
                    if spoken and now >= turn.speech_end_s and turn.final_s is None:
                        turn.final_s, turn.transcript = now, event["transcript"]
                elif kind == "response.done" and turn is not None:
                    response = event["response"]
                    if response["status"] != "completed":
                        turn.cancelled += 1
                    elif spoken and turn.answered_s is None:
                        turn.answered_s, turn.answer_gen = now, response["gen"]
                        turn.done.set()
        except ConnectionClosed:
            pass
        if self.ws.close_code != 1000 or self.ws.protocol.close_rcvd_then_sent:
            self.close_code = self.ws.close_code
        if self.turns:
            self.turns[-1].done.set()


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _machine_busy_s() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _sessions(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
        return json.loads(resp.read())["sessions"]


def starts(pattern: str, n: int, stagger_s: float) -> list[float]:
    """Each client's first words, in seconds after LEAD_S of streamed silence."""
    if pattern == "simultaneous" or n == 1:
        return [0.0] * n
    return [stagger_s * i / (n - 1) for i in range(n)]


def scenario_summary(clients: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one scenario from its clients' turns (``Turn``s under ``turns``, plus
    ``errors``, ``close_code`` and ``late_ms``) and its sessions' trace rows (``turn_rows``)."""
    turns = [t for c in clients for t in c["turns"]]
    v2v = [t.v2v_ms for t in turns if t.v2v_ms is not None]
    firsts = [c["turns"][0].v2v_ms for c in clients if c["turns"]]
    finals = [t.final_ms for t in turns if t.final_ms is not None]
    stage = lambda name: [r["stages"][name] for r in rows if name in r["stages"]]
    errors: Counter[str] = Counter()
    for c in clients:
        errors.update(c["errors"])
    late = [ms for c in clients for ms in c["late_ms"]]
    return {
        "turns": len(turns),
        "answered": sum(t.answered_s is not None for t in turns),
        "v2v_ms": _stats(v2v),
        # The first questions start together (or staggered); later ones drift apart.
        "v2v_ms_first_turn": _stats([v for v in firsts if v is not None]),
        "v2v_ms_by_client": [
            [None if t.v2v_ms is None else round(t.v2v_ms) for t in c["turns"]] for c in clients
        ],
        "final_transcript_ms": _stats(finals),
        "server_v2v_ms": _stats(stage("voice_to_voice")),
        "server_endpoint_ms": _stats(stage("endpoint")),
        "server_asr_final_ms": _stats(stage("asr_final")),
        "errors": {
            "error_events": dict(errors),
            "abnormal_closes": [c["close_code"] for c in clients if c["close_code"] is not None],
            "unanswered_turns": sum(t.answered_s is None for t in turns),
            "cancelled_answers": sum(t.cancelled for t in turns),
        },
        "send_late_ms": {
            "p95": round(float(np.percentile(late, 95)), 1) if late else None,
            "max": round(max(late), 1) if late else None,
        },
    }


async def _scenario(
    url: str, questions: list[list[tuple[str, np.ndarray]]], offsets: list[float], gap_s: float
) -> list[Client]:
    clients = [Client(url, qs) for qs in questions]
    await asyncio.gather(*(c.open() for c in clients))
    base = asyncio.get_running_loop().time() + 0.1
    await asyncio.gather(
        *(c.run(base, LEAD_S + off, gap_s) for c, off in zip(clients, offsets, strict=True))
    )
    return clients


def run_scenario(
    server: Server,
    port: int,
    traces: Path,
    questions: list[list[tuple[str, np.ndarray]]],
    offsets: list[float],
    gap_s: float,
) -> dict[str, Any]:
    """One scenario against the running server; its figures, CPU and server log counts."""
    me, srv = psutil.Process(), psutil.Process(server.proc.pid)
    log0 = server.log_counts()
    cpu0, me0, busy0, t0 = _cpu_s(srv), _cpu_s(me), _machine_busy_s(), time.monotonic()
    clients = asyncio.run(_scenario(server.url, questions, offsets, gap_s))
    wall = time.monotonic() - t0
    cpu = {
        "server_cores": round((_cpu_s(srv) - cpu0) / wall, 2),
        "bench_cores": round((_cpu_s(me) - me0) / wall, 2),
        "machine_busy_cores": round((_machine_busy_s() - busy0) / wall, 2),
    }
    deadline = time.monotonic() + 30
    while _sessions(port) and time.monotonic() < deadline:  # every session's trace is closed
        time.sleep(0.2)
    events = []
    for c in clients:
        path = traces / f"serve-{c.session_id}.jsonl"
        if c.session_id and path.exists():
            events += read_trace(str(path))
    rows = turn_rows(events)
    out = scenario_summary(
        [
            {"turns": c.turns, "errors": c.errors, "close_code": c.close_code, "late_ms": c.late_ms}
            for c in clients
        ],
        rows,
    )
    stages = summarize(events)["stages"]
    out["server_stages_p50_ms"] = {k: round(v["p50"], 1) for k, v in stages.items()}
    out["errors"]["server_tracebacks"] = server.log_counts()["tracebacks"] - log0["tracebacks"]
    out["cpu"] = cpu
    out["wall_s"] = round(wall, 1)
    out["loadavg_1m"] = round(os.getloadavg()[0], 2)
    return out


def _ratios(scenarios: list[dict[str, Any]]) -> None:
    """Each scenario's client voice to voice over N=1's of the same pattern, same run."""
    for s in scenarios:
        one = next((o for o in scenarios if o["pattern"] == s["pattern"] and o["n"] == 1), None)
        if one is None:
            continue
        s["v2v_vs_n1"] = {
            q: round(s["v2v_ms"][q] / one["v2v_ms"][q], 2)
            if s["v2v_ms"].get(q) and one["v2v_ms"].get(q)
            else None
            for q in ("p50", "p95")
        }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="1,2,3,4,6", help="client counts, comma-separated")
    ap.add_argument("--pattern", default=",".join(PATTERNS), help="simultaneous,staggered")
    ap.add_argument("--turns", type=int, default=2, help="questions per client")
    ap.add_argument("--seed", type=int, default=0, help="which questions each client asks")
    ap.add_argument("--stagger-s", type=float, default=1.5, help="spread of staggered starts")
    ap.add_argument("--gap-s", type=float, default=1.0, help="silence after an answer")
    ap.add_argument("--warmup", type=int, default=1, help="turns of one client first, not counted")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    counts = [int(x) for x in args.n.split(",")]
    patterns = args.pattern.split(",")
    if bad := [p for p in patterns if p not in PATTERNS]:
        ap.error(f"unknown pattern {bad[0]!r}: {', '.join(PATTERNS)}")

    t_start = time.monotonic()
    texts = list(QUESTIONS)
    random.Random(args.seed).shuffle(texts)
    voices = UserVoices()
    # Client c asks the same questions whatever N, so scenarios differ in load only.
    asks = [
        [(t, voices.say(t, "piper")) for t in texts[c * args.turns : (c + 1) * args.turns]]
        for c in range(max(counts))
    ]
    if any(len(a) < args.turns for a in asks):
        ap.error(f"--turns x the largest N exceeds the {len(texts)} questions")
    sets = [
        f"server.max_sessions={max(counts)}",
        "server.max_sessions_per_client=0",
        *args.sets,
    ]
    tmp = Path(tempfile.mkdtemp(prefix="load-"))
    traces = tmp / "traces"
    port = free_port()
    load_avg = os.getloadavg()
    t0 = time.monotonic()
    server = Server(port, traces, sets, {})
    result: dict[str, Any] = {
        "bench": "load",
        "argv": sys.argv[1:],
        "sets": sets,
        "turns_per_client": args.turns,
        "seed": args.seed,
        "stagger_s": args.stagger_s,
        "gap_s": args.gap_s,
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "server_start_s": round(time.monotonic() - t0, 1),
        "loadavg_before": [round(x, 2) for x in load_avg],
    }
    scenarios = []
    try:
        if args.warmup:
            warm = [[(t, voices.say(t, "piper")) for t in texts[-args.warmup :]]]
            out = run_scenario(server, port, traces, warm, [0.0], args.gap_s)
            result["warmup"] = {"v2v_ms": out["v2v_ms"], "errors": out["errors"]}
        for pattern in patterns:
            for n in counts:
                offsets = starts(pattern, n, args.stagger_s)
                out = run_scenario(server, port, traces, asks[:n], offsets, args.gap_s)
                scenarios.append({"pattern": pattern, "n": n, "starts_s": offsets, **out})
                e = out["errors"]
                log(
                    f"{pattern} N={n}: v2v p50 {out['v2v_ms']['p50']} p95 {out['v2v_ms']['p95']}"
                    f" ms, {out['answered']}/{out['turns']} answered, errors "
                    f"{e['error_events'] or 0}, {out['cpu']['server_cores']} server cores,"
                    f" {out['wall_s']} s"
                )
        result["server_log"] = server.log_counts()
    finally:
        server.stop()
    _ratios(scenarios)
    result["scenarios"] = scenarios
    result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_s"] = round(time.monotonic() - t_start, 1)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
