"""Websocket protocol with fake models: playback reports decide heard_text, big and stopped
input audio, an answer the client never plays."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import connect

from dllm_voice.app.config import Config
from dllm_voice.app.observe.metrics import ServerMetrics
from dllm_voice.app.server.connection import Connection
from dllm_voice.app.server.protocol import AUDIO_HEADER
from dllm_voice.audio.sources import PushSource
from tests.app.fakes import FakeComponents, buzz, silence
from tests.app.test_server import Running, make_cfg

QUESTION = "What is the capital of France?"
# 10 words of 200 ms: "You said:" | "What is the capital of France." | "Fine, thanks." (clauses)
ANSWER = "You said: What is the capital of France. Fine, thanks."
TTS_HZ = 22050


def fake_cfg(tmp_path: Path, **server: Any) -> Config:
    cfg = make_cfg(tmp_path, **server)
    # The buzz is speech to webrtcvad but not to Silero: these tests are about the protocol.
    return dataclasses.replace(cfg, vad=dataclasses.replace(cfg.vad, silero=False))


@pytest.fixture
def serve(serve: Callable[..., Running]) -> Callable[..., Running]:
    """tests/app/conftest.py's, on fake models that ask QUESTION and answer at 200 ms a word."""

    def start(**server: Any) -> Running:
        comps = FakeComponents([QUESTION], lm={"tail": "Fine, thanks."}, ms_per_word=200)
        return serve(comps, **server)

    return start


class Player:
    """A client's player in miniature: plays the audio it receives back to back in real time, up
    to `stop_ms` into each generation; drops what it holds on output_audio_buffer.cleared and
    truncates there; reports its position every 100 ms (offsets as received, as the protocol
    counts them)."""

    def __init__(self, stop_ms: float = math.inf) -> None:
        self.stop = int(min(stop_ms, 1e9) * TTS_HZ / 1000)
        self.received: dict[int, int] = {}
        self.position: dict[int, int] = {}
        self.queue: deque[list[int]] = deque()  # [gen, first unplayed offset, end offset]
        self.t = time.monotonic()

    def _play(self) -> None:
        now = time.monotonic()
        budget, self.t = int((now - self.t) * TTS_HZ), now
        while budget > 0 and self.queue:
            seg = self.queue[0]
            take = min(budget, seg[2] - seg[1], max(0, self.stop - seg[1]))
            if take <= 0:
                break  # stopped at stop_ms: nothing after it plays
            seg[1] += take
            budget -= take
            self.position[seg[0]] = seg[1]
            if seg[1] == seg[2]:
                self.queue.popleft()

    def audio(self, gen: int, n: int) -> None:
        self._play()
        start = self.received.get(gen, 0)
        self.received[gen] = start + n
        self.position.setdefault(gen, start)
        self.queue.append([gen, start, start + n])

    def event(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        if event["type"] != "output_audio_buffer.cleared":
            return []
        self._play()
        gen = event["gen"]
        self.queue = deque(seg for seg in self.queue if seg[0] != gen)
        at = 1000 * self.position.get(gen, 0) / TTS_HZ
        return [
            {"type": "conversation.item.truncate", "item_id": f"resp_{gen}", "audio_end_ms": at}
        ]

    def tick(self) -> list[dict[str, Any]]:
        self._play()
        return [
            {"type": "output_audio_buffer.played", "gen": gen, "audio_end_ms": 1000 * at / TTS_HZ}
            for gen, at in self.position.items()
        ]


Later = list[tuple[float, Callable[[Player], list[Any]]]]


async def converse(
    url: str,
    messages: list[bytes | str],
    player: Player | None = None,
    later: Later = (),
    realtime: bool = False,
    timeout_s: float = 30.0,
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """Send `messages` (20 ms apart when realtime), then read until response.done.

    `player` (if any) plays the audio and sends its reports; each `later` entry (ms since the
    first audio, fn(player) -> messages) sends more. Returns the events and the samples of
    audio received per generation.
    """
    events: list[dict[str, Any]] = []
    received: dict[int, int] = {}
    first_audio: float | None = None
    later = sorted(later, key=lambda entry: entry[0])
    async with connect(url, max_size=None) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"

        async def send_all() -> None:
            for m in messages:
                await ws.send(m)
                if realtime:
                    await asyncio.sleep(0.02)

        async def send(items: list[Any]) -> None:
            for item in items:
                await ws.send(item if isinstance(item, bytes | str) else json.dumps(item))

        sender = asyncio.create_task(send_all())
        tick = time.monotonic()
        async with asyncio.timeout(timeout_s):
            while True:
                try:
                    message = await asyncio.wait_for(ws.recv(), 0.02)
                except TimeoutError:
                    message = None
                if isinstance(message, bytes):
                    (gen,) = AUDIO_HEADER.unpack(message[: AUDIO_HEADER.size])
                    n = (len(message) - AUDIO_HEADER.size) // 2
                    received[gen] = received.get(gen, 0) + n
                    first_audio = first_audio or time.monotonic()
                    if player is not None:
                        player.audio(gen, n)
                elif message is not None:
                    events.append(json.loads(message))
                    if events[-1]["type"] == "response.done":
                        break
                    if player is not None:
                        await send(player.event(events[-1]))
                elapsed = 1000 * (time.monotonic() - first_audio) if first_audio else -1.0
                while later and elapsed >= later[0][0]:
                    await send(later.pop(0)[1](player))  # type: ignore[arg-type]
                if player is not None and time.monotonic() - tick >= 0.1:
                    tick = time.monotonic()
                    await send(player.tick())
        await sender
    return events, received


def chunks(pcm: np.ndarray, n: int = 320) -> list[bytes]:
    return [pcm[i : i + n].tobytes() for i in range(0, len(pcm), n)]


def turn_audio() -> np.ndarray:
    return np.concatenate([silence(300), buzz(900), silence(900)])


def response(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e["type"] == "response.done")["response"]


def errors(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["error"] for e in events if e["type"] == "error"]


def test_reports_of_full_playback_complete_the_answer(serve: Callable[..., Running]) -> None:
    run = serve()
    events, received = asyncio.run(converse(run.ws_url, [turn_audio().tobytes()], Player()))
    resp = response(events)
    assert resp["status"] == "completed" and resp["heard_text"] == ANSWER, resp
    assert received[resp["gen"]] == 10 * 200 * TTS_HZ // 1000  # all of it, nothing dropped
    assert not errors(events)


def test_truncate_sets_heard_text_of_a_cancelled_answer(serve: Callable[..., Running]) -> None:
    run = serve()

    def stop(player: Player) -> list[dict[str, Any]]:
        (gen,) = player.received
        truncate = {"item_id": f"resp_{gen}", "content_index": 0, "audio_end_ms": 1000}
        return [{"type": "conversation.item.truncate", **truncate}, {"type": "response.cancel"}]

    bad = [
        json.dumps({"type": "output_audio_buffer.played", "gen": "1", "audio_end_ms": 5}),
        json.dumps({"type": "output_audio_buffer.played", "gen": 1, "audio_end_ms": -5}),
        json.dumps({"type": "conversation.item.truncate", "item_id": "x", "audio_end_ms": 5}),
        json.dumps({"type": "conversation.item.truncate", "item_id": "resp_1", "audio_end_ms": 5,
                    "content_index": 1}),
    ]  # fmt: skip
    messages = [*bad, turn_audio().tobytes()]
    # The player stops 1 s into the answer; 300 ms later the user stops the answer there.
    events, _ = asyncio.run(converse(run.ws_url, messages, Player(1000), [(1300, stop)]))
    resp = response(events)
    assert resp["status"] == "cancelled" and resp["output_text"] == ANSWER
    # 1 s = "You said:" (0.4 s) and half of the 6-word clause: the words under way count.
    assert resp["heard_text"] == "You said: What is the", resp
    messages = [e["message"] for e in errors(events)]
    assert len(messages) == 4 and "gen must be" in messages[0] and "audio_end_ms" in messages[1]
    assert "item_id" in messages[2] and "content_index" in messages[3]


def test_cough_pauses_then_resumes_and_reports_follow_the_resumed_audio(
    serve: Callable[..., Running],
) -> None:
    run = serve()
    cough = buzz(150).tobytes()  # speech long enough to pause playback, too short to cancel
    events, received = asyncio.run(
        converse(run.ws_url, [turn_audio().tobytes()], Player(), [(600, lambda p: [cough])])
    )
    resp = response(events)
    kinds = [e["type"] for e in events]
    assert "output_audio_buffer.cleared" in kinds and not errors(events)
    assert resp["status"] == "completed" and resp["heard_text"] == ANSWER, resp
    # The resumed answer starts where the last report left it: some audio came twice.
    assert received[resp["gen"]] > 10 * 200 * TTS_HZ // 1000


def test_answer_the_client_never_plays_is_cancelled_with_nothing_heard(
    serve: Callable[..., Running],
) -> None:
    run = serve(playback_stall_ms=1000)
    t0 = time.monotonic()
    events, _ = asyncio.run(converse(run.ws_url, [turn_audio().tobytes()], Player(stop_ms=0)))
    resp = response(events)
    assert resp["status"] == "cancelled" and resp["heard_text"] == "", resp
    (err,) = errors(events)
    assert err["type"] == "playback_stalled" and "resp_" in err["message"]
    assert time.monotonic() - t0 < 10  # bounded: the stall limit, not the answer's length


def test_without_reports_the_estimate_counts_what_reached_the_socket(
    serve: Callable[..., Running],
) -> None:
    run = serve()
    events, received = asyncio.run(converse(run.ws_url, chunks(turn_audio()), realtime=True))
    resp = response(events)
    assert resp["status"] == "completed" and resp["heard_text"] == ANSWER
    assert received[resp["gen"]] == 10 * 200 * TTS_HZ // 1000


@pytest.mark.parametrize("encoding", ["binary", "base64"])
def test_max_size_message_is_taken_whole(serve: Callable[..., Running], encoding: str) -> None:
    run = serve()
    # Speech first, then silence up to the 1 MiB limit: 32.8 s binary, 24.5 s as base64.
    n = (1 << 19) if encoding == "binary" else 3 * ((1 << 20) - 100) // 8
    pcm = np.zeros(n, np.int16)
    pcm[4800 : 4800 + 14400] = buzz(900)
    if encoding == "binary":
        message: bytes | str = pcm.tobytes()
    else:
        audio = base64.b64encode(pcm.tobytes()).decode()
        message = json.dumps({"type": "input_audio_buffer.append", "audio": audio})
    assert len(message) <= 1 << 20
    events, _ = asyncio.run(converse(run.ws_url, [message], Player()))
    kinds = [e["type"] for e in events]
    assert not errors(events) and response(events)["status"] == "completed"
    start = next(e for e in events if e["type"] == "input_audio_buffer.speech_started")
    stop = next(e for e in events if e["type"] == "input_audio_buffer.speech_stopped")
    assert start["audio_start_ms"] < 400 and 1100 <= stop["audio_end_ms"] <= 1900
    # The speech opens the message: a buffer that keeps only the newest audio loses it.
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index("response.done")


def test_client_that_stops_sending_mid_turn_still_gets_its_answer(
    serve: Callable[..., Running],
) -> None:
    run = serve()
    speech_only = np.concatenate([silence(300), buzz(900)])  # and then nothing, not even silence
    events, _ = asyncio.run(converse(run.ws_url, chunks(speech_only), realtime=True))
    stop = next(e for e in events if e["type"] == "input_audio_buffer.speech_stopped")
    assert 1150 <= stop["audio_end_ms"] <= 1300  # the real end of speech, as with silence sent
    assert response(events)["status"] == "completed"


def test_input_overflow_is_an_error_event_not_only_a_log(tmp_path: Path) -> None:
    server = SimpleNamespace(cfg=fake_cfg(tmp_path), metrics=ServerMetrics())
    conn = Connection(None, server)  # type: ignore[arg-type]  # no socket: messages only
    conn.source = PushSource(max_buffer_ms=300)  # a consumer that never reads
    conn.handle_message(np.zeros(16000, np.int16).tobytes())
    (event,) = [json.loads(conn.out.get_nowait())]
    assert event["type"] == "error"
    metrics = server.metrics.render().decode()
    assert 'dllm_voice_errors_total{type="input_audio_buffer_overflow"} 1.0' in metrics
    assert "dllm_voice_dropped_audio_seconds_total 0.69" in metrics  # the 690 ms it said
    assert event["error"]["type"] == "input_audio_buffer_overflow"
    assert "dropped the oldest 690 ms" in event["error"]["message"]
