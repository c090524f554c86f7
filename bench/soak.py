"""Soak of `python main.py serve`: connect/disconnect cycles, full spoken turns, protocol fuzz
cases and the handshake refusals against one server process; prints JSON.

    .venv/bin/python -m bench.soak [--warmup 100] [--cycles 1000] [--turns 100] [--fuzz 10000]
        [--env MALLOC_ARENA_MAX=2 ...] [--set section.key=value ...] [--out FILE]

The server runs as its own process on 127.0.0.1 (a token, a fresh trace folder), so its RSS,
threads and open files (psutil) are the server's alone. RSS is sampled after the warm-up cycles,
every `--every` cycles after, every 20 turns and after the fuzz cases; `--env` passes
environment variables to the server (MALLOC_ARENA_MAX=2, MALLOC_TRIM_THRESHOLD_=..., to tell
the allocator's behaviour from a leak). Turns are spoken questions (Piper), five per session;
fuzz cases are testkit/protocol_fuzz.py's, one session each, counted by outcome (answered, or
the close code) and error type. Tracebacks and failures are counted from the server's log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

ROOT = Path(__file__).resolve().parent.parent

TOKEN = "soak-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`main.py serve` in a child process, its log in a file."""

    SETTLE_S = 1.0  # the last session's teardown (its 94 MB KV cache) ends before a sample

    def __init__(self, port: int, traces: Path, sets: list[str], env: dict[str, str]) -> None:
        self.url = f"ws://127.0.0.1:{port}/ws?token={TOKEN}"
        self.log = traces.parent / "serve.log"
        args = [
            sys.executable,
            str(ROOT / "main.py"),
            "--set",
            f"server.port={port}",
            "--set",
            f"server.token={TOKEN}",
            "--set",
            f"trace.path={traces}",
            "--set",
            "server.max_sessions_per_client=0",
        ]
        for item in sets:
            args += ["--set", item]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [*args, "serve"], stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env}
            )
        self.ps = psutil.Process(self.proc.pid)
        deadline = time.monotonic() + 300
        while "Open http" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"serve did not start:\n{self.log.read_text()[-2000:]}")
            time.sleep(0.5)

    def sample(self) -> dict[str, float]:
        time.sleep(self.SETTLE_S)
        return {
            "rss_mb": round(self.ps.memory_info().rss / 2**20, 1),
            "threads": self.ps.num_threads(),
            "fds": self.ps.num_fds(),
        }

    def log_counts(self) -> dict[str, int]:
        text = self.log.read_text(errors="replace")
        return {"tracebacks": text.count("Traceback"), "failed": text.count(" failed")}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


async def cycle(url: str) -> None:
    async with connect(url) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"


async def refusals(url: str) -> dict[str, int]:
    out = {}
    bare = url.split("?")[0]
    for name, target, origin in (
        ("foreign_origin", url, "http://evil.example"),
        ("missing_token", bare, None),
    ):
        try:
            async with connect(target, origin=origin):
                out[name] = 101
        except InvalidStatus as exc:
            out[name] = exc.response.status_code
    return out


async def turns(url: str, n: int, server: Server, per_session: int = 5) -> dict[str, Any]:
    from testkit.questions import QUESTIONS
    from testkit.speech import speech_pcm

    done: Counter[str] = Counter()
    times = []
    samples = []
    for start in range(0, n, per_session):
        async with connect(url, max_size=None) as ws:
            await ws.recv()
            for i in range(start, min(n, start + per_session)):
                pcm = speech_pcm(QUESTIONS[i % len(QUESTIONS)], lead_ms=300, tail_ms=1200)
                t0 = time.monotonic()
                await ws.send(pcm.tobytes())
                async with asyncio.timeout(120):
                    async for message in ws:
                        if isinstance(message, str):
                            event = json.loads(message)
                            if event["type"] == "response.done":
                                done[event["response"]["status"]] += 1
                                break
                times.append(time.monotonic() - t0)
        if (start + per_session) % 20 == 0:
            samples.append({"turns": start + per_session, **server.sample()})
    times.sort()
    median = round(times[len(times) // 2], 2)
    return {"responses": dict(done), "median_turn_s": median, "samples": samples}


def fuzz(url: str, n: int) -> dict[str, Any]:
    from hypothesis import Phase, given, settings

    from testkit.protocol_fuzz import messages, run_case, surely_invalid

    outcomes: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    missing = 0

    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate])
    @given(case=messages)
    def one(case: list[str | bytes]) -> None:
        nonlocal missing
        out = asyncio.run(run_case(url, case))
        if out.close_code is not None:
            outcomes[f"closed {out.close_code}"] += 1
        else:
            outcomes["answered" if out.answered else "no answer"] += 1
            invalid = sum(map(surely_invalid, case))
            missing += max(0, invalid - out.errors.get("invalid_request_error", 0))
        errors.update(out.errors)

    one()
    return {"cases": n, "outcomes": dict(outcomes), "errors": dict(errors), "unanswered": missing}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--every", type=int, default=100, help="cycles between RSS samples")
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--fuzz", type=int, default=10000)
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    traces = tmp / "traces"
    env = dict(item.split("=", 1) for item in args.env)
    server = Server(free_port(), traces, args.sets, env)
    result: dict[str, Any] = {"env": env, "sets": args.sets}
    try:
        result["start"] = server.sample()
        result["refused"] = asyncio.run(refusals(server.url))
        for _ in range(args.warmup):
            asyncio.run(cycle(server.url))
        result["after_warmup"] = server.sample()
        samples = []
        t0 = time.monotonic()
        for i in range(1, args.cycles + 1):
            asyncio.run(cycle(server.url))
            if i % args.every == 0:
                samples.append({"cycles": i, **server.sample()})
        result["cycles"] = {
            "n": args.cycles,
            "ms_per_cycle": round(1000 * (time.monotonic() - t0) / max(1, args.cycles), 1),
            "samples": samples,
            "rss_growth_mb": round(samples[-1]["rss_mb"] - result["after_warmup"]["rss_mb"], 1)
            if samples
            else 0.0,
            "trace_files": len(list(traces.glob("*.jsonl"))),
        }
        if args.turns:
            result["turns"] = asyncio.run(turns(server.url, args.turns, server))
            result["after_turns"] = server.sample()
            result["turns"]["trace_files"] = len(list(traces.glob("*.jsonl")))
        if args.fuzz:
            t0 = time.monotonic()
            result["fuzz"] = fuzz(server.url, args.fuzz)
            result["fuzz"]["s"] = round(time.monotonic() - t0, 1)
            result["after_fuzz"] = server.sample()
        result["server_log"] = server.log_counts()
    finally:
        server.stop()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
