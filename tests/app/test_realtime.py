"""/v1/realtime with the official openai SDK's realtime client, on fake models: every event the
server sends validates against the SDK's own server-event types."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
from openai import AsyncOpenAI
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from dllm_voice.audio.g711 import ulaw_encode
from dllm_voice.audio.resample import resample
from tests.app.fakes import buzz, silence
from tests.app.test_server import Running
from tests.app.test_server_playback import ANSWER, QUESTION, serve  # noqa: F401 - fixture
from tests.app.test_session_control import WEATHER

SERVER_EVENT = TypeAdapter(RealtimeServerEvent)
SPEECH_16K = np.concatenate([silence(300), buzz(1200), silence(1500)])


def client(run: Running, key: str = "unused") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"http://{urlsplit(run.url).netloc}/v1", api_key=key)


class Reader:
    """A connection's events, each checked against the SDK's types and kept in order."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.seen: list[dict[str, Any]] = []

    async def until(self, kind: str, timeout: float = 20) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                event = json.loads(await self.conn.recv_bytes())
                SERVER_EVENT.validate_python(event)
                self.seen.append(event)
                if event["type"] == kind:
                    return event

    def kinds(self) -> list[str]:
        return [e["type"] for e in self.seen]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.seen if e["type"] == kind]

    def audio(self) -> bytes:
        return b"".join(
            base64.b64decode(e["delta"]) for e in self.of("response.output_audio.delta")
        )


@contextlib.asynccontextmanager
async def opened(run: Running) -> AsyncIterator[tuple[Any, Reader]]:
    """A session through the SDK's realtime client, read past its ``session.created``."""
    async with client(run).realtime.connect(model="x") as conn:
        r = Reader(conn)
        await r.until("session.created")
        yield conn, r


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def send_speech(conn: Any, pcm: bytes, chunk: int, encode: Callable[[bytes], bytes]) -> None:
    """``pcm`` in real time, ``chunk`` bytes of it a message (100 ms)."""
    for i in range(0, len(pcm), chunk):
        await conn.input_audio_buffer.append(
            audio=base64.b64encode(encode(pcm[i : i + chunk])).decode()
        )
        await asyncio.sleep(0.05)


def test_a_spoken_question_through_the_openai_sdk(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()

    async def talk() -> Reader:
        async with client(run).realtime.connect(model="gpt-realtime") as conn:
            r = Reader(conn)
            created = await r.until("session.created")
            assert created["session"]["model"] == "gpt-realtime"
            assert created["session"]["audio"]["output"]["format"] == {
                "type": "audio/pcm",
                "rate": 24000,
            }
            await conn.session.update(session={
                "type": "realtime", "instructions": "Be brief.", "output_modalities": ["audio"],
                "audio": {"input": {"turn_detection": {
                    "type": "server_vad", "silence_duration_ms": 400}}},
            })  # fmt: skip
            updated = await r.until("session.updated")
            assert updated["session"]["instructions"] == "Be brief."
            speech = resample(SPEECH_16K, 16000, 24000).tobytes()
            await send_speech(conn, speech, 4800, lambda b: b)
            await r.until("response.done")
        return r

    r = asyncio.run(talk())
    kinds = r.kinds()
    started, stopped, committed = (r.of(k)[0] for k in (
        "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed"))  # fmt: skip
    assert started["item_id"] == stopped["item_id"] == committed["item_id"]
    final = r.of("conversation.item.input_audio_transcription.completed")[0]
    assert final["item_id"] == committed["item_id"] and final["transcript"] == QUESTION
    order = [
        "response.created", "response.output_item.added", "response.content_part.added",
        "response.output_audio_transcript.delta", "response.output_audio.delta",
        "response.output_audio.done", "response.output_audio_transcript.done",
        "response.content_part.done", "response.output_item.done", "response.done",
    ]  # fmt: skip
    assert [kinds.index(k) for k in order] == sorted(kinds.index(k) for k in order)
    assert "".join(e["delta"] for e in r.of("response.output_audio_transcript.delta")) == ANSWER
    # 10 words of 200 ms at 24 kHz, 2 bytes a sample (the resampler's few samples of delay aside)
    assert abs(len(r.audio()) - 2 * 24000 * 2.0) < 2 * 240
    done = r.of("response.done")[0]["response"]
    assert done["status"] == "completed" and done["usage"]["output_tokens"] > 0
    assert done["output"][0]["content"][0]["transcript"] == ANSWER
    assert not {"latency", "trace", "agent.state", "pong"} & set(kinds)


def test_typed_text_only_then_one_spoken_response(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()

    async def talk() -> tuple[Reader, Reader]:
        async with opened(run) as (conn, r):
            await conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
            await r.until("session.updated")
            await conn.conversation.item.create(item=user("How are you today?"))
            added = await r.until("conversation.item.added")
            assert added["item"]["content"][0]["text"] == "How are you today?"
            await conn.response.create()
            await r.until("response.done", timeout=1.5)  # text only: no 2 s of speech to play
            spoken = Reader(conn)
            await conn.conversation.item.create(item=user("And tomorrow?"))
            await conn.response.create(response={"output_modalities": ["audio"]})
            await spoken.until("response.done")
        return r, spoken

    text, spoken = asyncio.run(talk())
    assert "response.output_audio.delta" not in text.kinds()
    assert "".join(e["delta"] for e in text.of("response.output_text.delta")).startswith(
        "You said:"
    )
    assert text.of("response.output_text.done")[0]["text"].endswith("Fine, thanks.")
    assert len(spoken.audio()) > 24000  # more than half a second of speech
    assert spoken.of("response.done")[0]["response"]["output_modalities"] == ["audio"]


def test_cancel_and_truncate_keep_what_was_played(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()

    async def talk() -> Reader:
        async with opened(run) as (conn, r):
            await conn.conversation.item.create(item=user("Tell me a long story please"))
            await conn.response.create()
            delta = await r.until("response.output_audio.delta")
            await asyncio.sleep(0.7)
            await conn.conversation.item.truncate(
                item_id=delta["item_id"], content_index=0, audio_end_ms=500
            )
            truncated = await r.until("conversation.item.truncated")
            assert truncated["audio_end_ms"] == 500
            await conn.response.cancel()
            await r.until("response.done")
        return r

    r = asyncio.run(talk())
    done = r.of("response.done")[0]["response"]
    assert done["status"] == "cancelled" and done["status_details"]["type"] == "cancelled"
    said = "".join(e["delta"] for e in r.of("response.output_audio_transcript.delta"))
    heard = done["output"][0]["content"][0]["transcript"]
    assert heard and said.startswith(heard) and len(heard.split()) <= 4  # 500 ms: 3 words


def test_a_client_function_call_round_trip(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()

    async def talk() -> tuple[Reader, Reader]:
        async with opened(run) as (conn, r):
            await conn.session.update(
                session={"type": "realtime", "tools": [WEATHER], "tool_choice": "auto"}
            )
            updated = await r.until("session.updated")
            assert updated["session"]["tools"] == [WEATHER]
            await conn.conversation.item.create(item=user("What's the weather like?"))
            await conn.response.create()
            await r.until("response.done")
            call = r.of("response.function_call_arguments.done")[0]
            await conn.conversation.item.create(item={
                "type": "function_call_output", "call_id": call["call_id"],
                "output": "Sunny and 21 degrees."})  # fmt: skip
            answer = Reader(conn)
            await answer.until("conversation.item.added")
            await conn.response.create()
            await answer.until("response.done")
        return r, answer

    r, answer = asyncio.run(talk())
    item = r.of("response.output_item.done")[0]["item"]
    assert item["type"] == "function_call" and item["name"] == "get_weather"
    assert (
        item["status"] == "completed"
        and item["call_id"] == r.of("response.function_call_arguments.done")[0]["call_id"]
    )
    assert r.of("response.done")[0]["response"]["output"][0]["type"] == "function_call"
    transcript = answer.of("response.output_audio_transcript.done")[0]["transcript"]
    assert "Sunny and 21 degrees" in transcript


def test_push_to_talk_in_g711(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()

    async def talk() -> Reader:
        async with opened(run) as (conn, r):
            await conn.session.update(session={"type": "realtime", "audio": {
                "input": {"format": {"type": "audio/pcmu"}, "turn_detection": None},
                "output": {"format": {"type": "audio/pcma"}}}})  # fmt: skip
            updated = await r.until("session.updated")
            assert updated["session"]["audio"]["input"]["turn_detection"] is None
            speech = resample(buzz(1200), 16000, 8000).tobytes()
            await send_speech(conn, speech, 1600, lambda b: ulaw_encode(np.frombuffer(b, np.int16)))
            await asyncio.sleep(0.5)
            assert "input_audio_buffer.speech_started" not in r.kinds()  # no VAD: the client's turn
            await conn.input_audio_buffer.commit()
            await conn.response.create()  # before the transcript: waits for it
            await r.until("response.done")
        return r

    r = asyncio.run(talk())
    final = r.of("conversation.item.input_audio_transcription.completed")[0]
    assert final["transcript"] == QUESTION
    assert final["item_id"] == r.of("input_audio_buffer.committed")[0]["item_id"]
    # A-law at 8 kHz: one byte a sample, 10 words of 200 ms
    assert abs(len(r.audio()) - 8000 * 2.0) < 80


def test_errors_in_the_apis_shape(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()

    async def talk() -> list[dict[str, Any]]:
        errors = []
        async with opened(run) as (conn, r):
            for event in [
                {"type": "no.such.event", "event_id": "evt_1"},
                {"type": "input_audio_buffer.commit", "event_id": "evt_2"},
                {"type": "session.update", "event_id": "evt_3", "session": {"type": "realtime",
                 "instructions": "changed", "audio": {"output": {"speed": 9}}}},
                {"type": "conversation.item.retrieve", "event_id": "evt_4", "item_id": "item_none"},
                {"type": "response.create", "event_id": "evt_5"},
            ]:  # fmt: skip
                await conn.send(event)
                errors.append((await r.until("error"))["error"])
            await conn.session.update(session={"type": "realtime"})
            updated = await r.until("session.updated")
            assert updated["session"]["instructions"] != "changed"  # the bad update took nothing
        return errors

    errors = asyncio.run(talk())
    assert [e["event_id"] for e in errors] == ["evt_1", "evt_2", "evt_3", "evt_4", "evt_5"]
    assert all(e["type"] == "invalid_request_error" for e in errors)
    assert "unknown event type" in errors[0]["message"]
    assert "push-to-talk" in errors[1]["message"]
    assert "speed" in errors[2]["message"]


def test_the_key_as_bearer_or_browser_subprotocol(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve(token="s3cret")
    url = f"ws://{urlsplit(run.url).netloc}/v1/realtime?model=m"

    async def sessions() -> tuple[str, str | None]:
        async with client(run, key="s3cret").realtime.connect(model="x") as conn:
            created = await Reader(conn).until("session.created")
        protocols = ["realtime", "openai-insecure-api-key.s3cret"]
        async with connect(url, subprotocols=protocols) as ws:  # type: ignore[arg-type]
            assert json.loads(await ws.recv())["type"] == "session.created"
            chosen = ws.subprotocol
        return created["type"], chosen

    assert asyncio.run(sessions()) == ("session.created", "realtime")

    async def wrong() -> None:
        async with client(run, key="guess").realtime.connect(model="x"):
            pass

    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(wrong())
    assert refused.value.response.status_code == 403


def test_items_are_retrieved_and_deleted(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()

    async def talk() -> Reader:
        async with opened(run) as (conn, r):
            await conn.conversation.item.create(item={**user("Forget this one."), "id": "mine_1"})
            await r.until("conversation.item.done")
            await conn.conversation.item.retrieve(item_id="mine_1")
            got = await r.until("conversation.item.retrieved")
            assert got["item"]["content"][0]["text"] == "Forget this one."
            await conn.conversation.item.delete(item_id="mine_1")
            assert (await r.until("conversation.item.deleted"))["item_id"] == "mine_1"
            await conn.response.create()  # the deleted item no longer waits for an answer
            assert "no typed user item" in (await r.until("error"))["error"]["message"]
            await conn.conversation.item.retrieve(item_id="mine_1")
            assert "no item" in (await r.until("error"))["error"]["message"]
        return r

    asyncio.run(talk())


def test_a_spoken_turn_waits_for_response_create(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()

    async def talk() -> Reader:
        async with opened(run) as (conn, r):
            await conn.session.update(session={"type": "realtime", "audio": {"input": {
                "turn_detection": {"type": "server_vad", "create_response": False}}}})  # fmt: skip
            await r.until("session.updated")
            speech = resample(SPEECH_16K, 16000, 24000).tobytes()
            await send_speech(conn, speech, 4800, lambda b: b)
            await r.until("conversation.item.input_audio_transcription.completed")
            await asyncio.sleep(0.5)
            assert "response.created" not in r.kinds()  # committed, not answered
            await conn.response.create()
            await r.until("response.done")
        return r

    r = asyncio.run(talk())
    done = r.of("response.done")[0]["response"]
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["transcript"] == ANSWER


def test_a_beta_client_gets_the_beta_names(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()
    url = f"ws://{urlsplit(run.url).netloc}/v1/realtime?model=x"

    async def talk() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        async with connect(url, additional_headers={"OpenAI-Beta": "realtime=v1"}) as ws:
            seen.append(json.loads(await ws.recv()))
            await ws.send(json.dumps({"type": "conversation.item.create", "item": user("Hi")}))
            await ws.send(json.dumps({"type": "response.create"}))
            async with asyncio.timeout(20):
                while seen[-1]["type"] != "response.done":
                    seen.append(json.loads(await ws.recv()))
        return seen

    seen = asyncio.run(talk())
    kinds = [e["type"] for e in seen]
    assert seen[0]["session"]["input_audio_format"] == "pcm16"
    beta = {"conversation.item.created", "response.audio.delta", "response.audio.done",
            "response.audio_transcript.delta", "response.audio_transcript.done"}  # fmt: skip
    assert beta <= set(kinds)
    assert not {"conversation.item.added", "conversation.item.done"} & set(kinds)
    assert not any(k.startswith("response.output_audio") for k in kinds)
    output = seen[-1]["response"]["output"][0]["content"][0]
    assert output["type"] == "audio" and output["transcript"].endswith("Fine, thanks.")
