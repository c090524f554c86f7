"""/v1/realtime against /ws: voice to voice through the official openai SDK's realtime client and
through our own protocol, the same questions on one server, alternating, in one run; and what
the Realtime formats' resampling costs per chunk.

Each turn streams a question (testkit/questions.py's, spoken by Piper at run time, then 1.5 s
of silence) in real time, 100 ms a message: /ws as binary PCM16 at 16 kHz, /v1/realtime as
base64 PCM16 at 24 kHz in input_audio_buffer.append. Voice to voice, client side: the wall-clock
time of the question's last sample to the first audio of the answer (a binary message on /ws,
``response.output_audio.delta`` on /v1/realtime). The server is `main.py serve` in a child
process (bench/soak.py's), so neither client's Python shares its GIL.

    .venv/bin/python -m bench.realtime [--turns 6] [--set section.key=value ...]

Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from openai import AsyncOpenAI
from websockets.asyncio.client import connect

from bench.soak import TOKEN, Server, free_port
from dllm_voice.app.server.realtime.formats import AudioFormat, to_client, to_pipeline
from dllm_voice.audio.resample import resample
from testkit.questions import QUESTIONS
from testkit.speech import speech_pcm

CHUNK_S = 0.1
TAIL_MS = 1500


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def paced(chunks: list[bytes], send: Any) -> float:
    """Send ``chunks`` 100 ms apart; returns when the last one went out (monotonic s)."""
    t0 = time.monotonic()
    for i, chunk in enumerate(chunks):
        await asyncio.sleep(max(0.0, t0 + i * CHUNK_S - time.monotonic()))
        await send(chunk)
    return t0


def chunks_of(pcm: np.ndarray, rate: int) -> list[bytes]:
    n = int(rate * CHUNK_S)
    return [pcm[i : i + n].tobytes() for i in range(0, len(pcm), n)]


async def ws_turn(url: str, speech16: np.ndarray, speech_s: float) -> float:
    async with connect(url, max_size=None) as ws:
        await ws.recv()  # session.created
        got = asyncio.get_running_loop().create_future()

        async def read() -> None:
            async for message in ws:
                if isinstance(message, bytes) and not got.done():
                    got.set_result(time.monotonic())
                elif isinstance(message, str) and json.loads(message)["type"] == "response.done":
                    return

        reader = asyncio.create_task(read())
        t0 = await paced(chunks_of(speech16, 16000), ws.send)
        first = await asyncio.wait_for(got, 60)
        await asyncio.wait_for(reader, 60)
    return 1000 * (first - (t0 + speech_s))


async def realtime_turn(base_url: str, speech24: np.ndarray, speech_s: float) -> float:
    client = AsyncOpenAI(base_url=base_url, api_key=TOKEN)
    async with client.realtime.connect(model="gpt-realtime") as conn:
        got = asyncio.get_running_loop().create_future()

        async def read() -> None:
            async for event in conn:
                if event.type == "response.output_audio.delta" and not got.done():
                    got.set_result(time.monotonic())
                elif event.type == "response.done":
                    return

        async def append(chunk: bytes) -> None:
            await conn.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())

        reader = asyncio.create_task(read())
        t0 = await paced(chunks_of(speech24, 24000), append)
        first = await asyncio.wait_for(got, 60)
        await asyncio.wait_for(reader, 60)
    return 1000 * (first - (t0 + speech_s))


def resampling_cost(repeats: int = 300) -> dict[str, float]:
    """Median µs to convert one chunk: 100 ms in (24 kHz -> 16 kHz; 8 kHz μ-law -> 16 kHz) and
    one 20 ms piece out (22.05 kHz -> 24 kHz; -> 8 kHz A-law)."""
    rng = np.random.default_rng(0)
    out: dict[str, float] = {}
    cases = [
        ("in_pcm16_24k_100ms", to_pipeline(AudioFormat("audio/pcm"), 16000), 2400, 2),
        ("in_pcmu_8k_100ms", to_pipeline(AudioFormat("audio/pcmu"), 16000), 800, 1),
        ("out_pcm16_24k_20ms", to_client(AudioFormat("audio/pcm"), 22050), 441, 2),
        ("out_pcma_8k_20ms", to_client(AudioFormat("audio/pcma"), 22050), 441, 2),
    ]
    for name, conv, n, width in cases:
        data = rng.integers(-8000, 8000, n, dtype=np.int16).tobytes()[: n * width]
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            conv.feed(data)
            times.append(time.perf_counter() - t)
        out[name] = round(1e6 * statistics.median(times), 1)
    return out


async def run(turns: int, server: Server, port: int) -> dict[str, Any]:
    ws_url = server.url
    base_url = f"http://127.0.0.1:{port}/v1"
    rows: dict[str, list[float]] = {"ws": [], "realtime": []}
    for i in range(turns):
        text = QUESTIONS[i % len(QUESTIONS)]
        speech = speech_pcm(text, "piper", rate_hz=16000, lead_ms=300)
        speech_s = len(speech) / 16000
        padded = np.concatenate([speech, np.zeros(16000 * TAIL_MS // 1000, np.int16)])
        order = ["ws", "realtime"] if i % 2 == 0 else ["realtime", "ws"]
        for kind in order:
            if kind == "ws":
                ms = await ws_turn(ws_url, padded, speech_s)
            else:
                ms = await realtime_turn(base_url, resample(padded, 16000, 24000), speech_s)
            rows[kind].append(round(ms, 1))
            log(f"turn {i + 1} {kind}: {ms:.0f} ms  ({text})")
    p50 = {k: statistics.median(v) for k, v in rows.items()}
    return {
        "voice_to_voice_ms": rows,
        "p50_ms": p50,
        "realtime_over_ws": round(p50["realtime"] / p50["ws"], 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--set", action="append", default=[], dest="sets")
    args = ap.parse_args()
    cost = resampling_cost()
    log(f"resampling, median µs a chunk: {cost}")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp) / "traces"
        traces.mkdir()
        server = Server(port, traces, args.sets, {})
        try:
            result = asyncio.run(run(args.turns, server, port))
        finally:
            server.stop()
    print(json.dumps({"resampling_us": cost, **result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
