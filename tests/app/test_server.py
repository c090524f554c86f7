"""Websocket server, real models: the page, a spoken turn, bad input, limits, disconnect."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
from websockets.asyncio.client import connect

from dllm_voice.app.config import Config
from dllm_voice.app.server.protocol import AUDIO_HEADER
from dllm_voice.app.server.server import VoiceServer
from testkit.speech import speech_pcm

QUESTION = "What is the capital of France?"


def make_cfg(tmp_path: Path, **server: Any) -> Config:
    cfg = Config()
    return dataclasses.replace(
        cfg,
        server=dataclasses.replace(cfg.server, port=0, **server),
        trace=dataclasses.replace(cfg.trace, path=str(tmp_path / "traces")),
        lm=dataclasses.replace(cfg.lm, max_new_tokens=40),
    )


class Running:
    """A VoiceServer on a free port in a background event loop thread."""

    def __init__(self, server: VoiceServer) -> None:
        self.server = server
        self.url = ""
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()
        ready = threading.Event()

        async def main() -> None:
            def on_ready(url: str) -> None:
                self.url = url
                ready.set()

            await server.serve_forever(on_ready, self.stop)

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(main(),))
        self.thread.start()
        assert ready.wait(30), "server did not start"

    @property
    def ws_url(self) -> str:
        """/ws with the token the page's URL carries (if any)."""
        page = urlsplit(self.url)
        return f"ws://{page.netloc}/ws" + (f"?{page.query}" if page.query else "")

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture
def running(components: Any, tmp_path: Path) -> Iterator[Running]:
    run = Running(VoiceServer(make_cfg(tmp_path), components))
    yield run
    run.close()


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def test_serves_the_page_and_nothing_else(running: Running) -> None:
    status, ctype, body = get(running.url)
    assert status == 200 and ctype.startswith("text/html")
    assert b"<title>Voice agent</title>" in body and b"/ws" in body
    assert b"https://" not in body.replace(b'"https:"', b"")  # no CDN: the page is self-contained
    assert get(running.url + "missing.html")[0] == 404
    assert get(running.url + "..%2Fconfig.py")[0] == 404
    assert get(running.url + "../server.py")[0] == 404
    status, ctype, body = get(running.url + "healthz")
    assert status == 200 and ctype == "application/json"
    assert json.loads(body) == {"status": "ok", "sessions": 0}


async def events_until(ws: Any, done: str, timeout_s: float) -> AsyncIterator[Any]:
    async with asyncio.timeout(timeout_s):
        async for message in ws:
            yield message
            if isinstance(message, str) and json.loads(message)["type"] == done:
                return


def test_spoken_turn_with_bad_messages_in_between(running: Running) -> None:
    pcm = speech_pcm(QUESTION, lead_ms=300, tail_ms=1000)

    async def talk() -> tuple[list[dict[str, Any]], list[bytes]]:
        events: list[dict[str, Any]] = []
        audio: list[bytes] = []
        async with connect(running.ws_url) as ws:
            created = json.loads(await ws.recv())
            assert created["type"] == "session.created"
            assert created["session"]["input_sample_rate_hz"] == 16000
            await ws.send("{not json")
            await ws.send(json.dumps({"type": "no.such.event"}))
            await ws.send(json.dumps([1, 2]))
            await ws.send(b"\x01")  # one odd byte: kept until its pair arrives, never a crash
            await ws.send(b"\x00")
            for i in range(0, len(pcm), 320):  # 20 ms messages, as the web client sends
                await ws.send(pcm[i : i + 320].tobytes())
            async for message in events_until(ws, "response.done", 120):
                if isinstance(message, bytes):
                    audio.append(message)
                else:
                    events.append(json.loads(message))
        return events, audio

    events, audio = asyncio.run(talk())
    kinds = [e["type"] for e in events]
    errors = [e["error"]["message"] for e in events if e["type"] == "error"]
    assert len(errors) == 3, errors
    assert "neither binary audio nor JSON" in errors[0]
    assert "unknown event type 'no.such.event'" in errors[1]
    final = next(e for e in events if e["type"].endswith("transcription.completed"))
    assert "capital of france" in final["transcript"].lower()
    answer = "".join(e["delta"] for e in events if e["type"] == "response.audio_transcript.delta")
    assert "paris" in answer.lower()
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index("response.done")
    done = events[-1]
    assert done["type"] == "response.done"
    samples = np.concatenate([np.frombuffer(m[AUDIO_HEADER.size :], "<i2") for m in audio])
    gens = {AUDIO_HEADER.unpack(m[: AUDIO_HEADER.size])[0] for m in audio}
    assert len(gens) == 1  # one answer, one generation id on all its audio
    assert samples.size > 0.5 * 22050 and np.abs(samples).max() > 1000  # real speech came back
    status, ctype, body = get(running.url + "metrics")
    assert status == 200 and ctype.startswith("text/plain")
    metrics = body.decode()
    for line in (
        'dllm_voice_answers_total{status="completed"} 1.0',
        'dllm_voice_errors_total{type="invalid_request_error"} 3.0',
        "dllm_voice_voice_to_voice_seconds_count 1.0",
        "dllm_voice_barge_ins_total 0.0",
    ):
        assert line in metrics, line


def test_session_limit_and_disconnect_mid_answer(components: Any, tmp_path: Path) -> None:
    run = Running(VoiceServer(make_cfg(tmp_path, max_sessions=1), components))
    pcm = speech_pcm(QUESTION, lead_ms=200, tail_ms=800)

    async def scenario() -> dict[str, Any]:
        async with connect(run.ws_url) as first:
            assert json.loads(await first.recv())["type"] == "session.created"
            async with connect(run.ws_url) as second:
                busy = json.loads(await second.recv())
            await first.send(pcm.tobytes())
            async for message in events_until(first, "response.created", 60):
                del message  # leave as soon as the agent starts answering
        for _ in range(100):  # the server notices the disconnect and frees the slot
            if not run.server.active:
                break
            await asyncio.sleep(0.05)
        async with connect(run.ws_url) as third:
            assert json.loads(await third.recv())["type"] == "session.created"
        return busy

    try:
        busy = asyncio.run(scenario())
    finally:
        run.close()
    assert busy["type"] == "error" and busy["error"]["type"] == "server_busy"
    # One file: the third session had no turn.
    (first_trace,) = (tmp_path / "traces").glob("serve-*.jsonl")
    lines = [json.loads(line) for line in first_trace.read_text().splitlines()]
    assert any(e["event"] == "speech_start" for e in lines)  # flushed although cut off
