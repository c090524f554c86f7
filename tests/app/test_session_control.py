"""Typed turns and per-session settings over the websocket, with fake models."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from websockets.asyncio.client import connect

from dllm_voice.app.config import Config
from dllm_voice.app.conversation.control import (
    MAX_TEXT_CHARS,
    SETTINGS,
    apply_settings,
    describe,
    user_text,
)
from tests.app.test_server import Running
from tests.app.test_server_playback import serve  # noqa: F401 - fixture


def item(text: str) -> dict[str, Any]:
    content = [{"type": "input_text", "text": text}]
    return {"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                         "content": content}}  # fmt: skip


async def until(ws: Any, kind: str, seen: list[dict[str, Any]], timeout: float = 20) -> dict:
    """Read events (counting audio messages as {"type": "audio"}) until one of type ``kind``."""
    async with asyncio.timeout(timeout):
        while True:
            msg = await ws.recv()
            ev = {"type": "audio"} if isinstance(msg, bytes) else json.loads(msg)
            seen.append(ev)
            if ev["type"] == kind:
                return ev


def test_typed_turn_is_answered_in_text_and_voice(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()

    async def talk() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        async with connect(run.ws_url) as ws:
            created = await until(ws, "session.created", seen)
            keys = [s["key"] for s in created["session"]["settings"]]
            assert keys == list(SETTINGS)
            await ws.send(json.dumps({"type": "response.create"}))
            err = await until(ws, "error", seen)
            assert "conversation.item.create first" in err["error"]["message"]
            await ws.send(json.dumps(item("How are you today?")))
            made = await until(ws, "conversation.item.created", seen)
            assert made["item"]["content"][0]["text"] == "How are you today?"
            await ws.send(json.dumps({"type": "response.create"}))
            await until(ws, "response.done", seen)
            await until(ws, "latency", seen)
        return seen

    seen = asyncio.run(talk())
    done = next(e for e in seen if e["type"] == "response.done")["response"]
    assert done["status"] == "completed"
    assert done["output_text"] == "You said: How are you today. Fine, thanks."
    assert any(e["type"] == "audio" for e in seen)
    latency = seen[-1]
    assert latency["typed"] and latency["stages"]["text_to_voice"] > 0
    assert [s["stage"] for s in latency["spans"]][0] == "lm first clause"


def test_typed_turn_interrupts_the_answer_under_way(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()

    async def talk() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        async with connect(run.ws_url) as ws:
            await until(ws, "session.created", seen)
            await ws.send(json.dumps(item("Tell me a long story please")))
            await ws.send(json.dumps({"type": "response.create"}))
            await until(ws, "audio", seen)
            await ws.send(json.dumps(item("Stop, what time is it?")))
            await ws.send(json.dumps({"type": "response.create"}))
            first = await until(ws, "response.done", seen)
            second = await until(ws, "response.done", seen)
            return [first["response"], second["response"]]

    first, second = asyncio.run(talk())
    assert first["status"] == "cancelled" and second["status"] == "completed"
    assert "what time is it" in second["output_text"]


def test_session_update_checks_values_like_the_config_file(
    serve: Callable[..., Running],  # noqa: F811
) -> None:
    run = serve()

    async def talk() -> tuple[list[dict[str, Any]], Any]:
        seen: list[dict[str, Any]] = []
        async with connect(run.ws_url) as ws:
            await until(ws, "session.created", seen)
            update = {"lm.decoder": "ar", "lm.threshold": 0.7, "vad.speech_end_ms": 800}
            await ws.send(json.dumps({"type": "session.update", "session": update}))
            await until(ws, "session.updated", seen)
            (conn,) = run.server.active
            session = conn.session
            for bad in ({"lm.threshold": 2}, {"lm.decoder": "fast"}, {"lm.path": "x.gguf"}):
                await ws.send(json.dumps({"type": "session.update", "session": bad}))
                await until(ws, "error", seen)
        return seen, session

    seen, session = asyncio.run(talk())
    updated = next(e for e in seen if e["type"] == "session.updated")["session"]["settings"]
    values = {s["key"]: s["value"] for s in updated}
    assert values["lm.decoder"] == "ar" and values["vad.speech_end_ms"] == 800
    assert session.cfg.lm.threshold == 0.7 and session.lm_thread.session.cfg.decoder == "ar"
    assert session.vad.cfg.speech_end_ms == 800
    errors = [e["error"] for e in seen if e["type"] == "error"]
    assert [e["type"] for e in errors] == ["invalid_request_error"] * 3
    assert errors[0]["message"] == (
        "session.update: lm.threshold = 2.0 is out of range (allowed: 0.0 .. 1.0)"
    )
    assert (
        "lm.decoder = 'fast' is not allowed (choose one of: 'ar', 'hybrid'" in errors[1]["message"]
    )
    assert "'lm.path' cannot change in a session" in errors[2]["message"]


def test_settings_and_items_are_checked() -> None:
    cfg = apply_settings(Config(), {"tts.length_scale": 1.3, "vad.pause_ms": 250})
    assert cfg.tts.length_scale == 1.3 and cfg.vad.pause_ms == 250
    threshold = next(s for s in describe(cfg) if s["key"] == "lm.threshold")
    assert (threshold["min"], threshold["max"], threshold["type"]) == (0.0, 1.0, "float")
    for bad, says in [
        ({"vad.pause_ms": "long"}, "vad.pause_ms = 'long' has the wrong type (expected int)"),
        ({"tts.length_scale": 9}, "tts.length_scale = 9.0 is out of range (allowed: 0.3 .. 3.0)"),
        ([], '"session" must be an object of settings'),
    ]:
        with pytest.raises(ValueError, match=None) as err:
            apply_settings(Config(), bad)
        assert says in str(err.value)
    assert user_text(item("  Hi there ")) == "Hi there"
    for event, says in [
        ({"item": {"role": "assistant", "content": []}}, "role must be 'user'"),
        (item(""), "the text is empty"),
        (item("x" * (MAX_TEXT_CHARS + 1)), f"at most {MAX_TEXT_CHARS}"),
        ({"item": {"role": "user", "content": [{"type": "input_audio"}]}}, "only input_text"),
    ]:
        with pytest.raises(ValueError) as err:
            user_text(event)
        assert says in str(err.value)


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather forecast for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_a_client_tool_round_trip(serve: Callable[..., Running]) -> None:  # noqa: F811
    run = serve()

    async def talk() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        async with connect(run.ws_url) as ws:
            await until(ws, "session.created", seen)
            bad = {"type": "session.update", "session": {"tools": [{"name": "no spaces allowed"}]}}
            await ws.send(json.dumps(bad))
            assert "tool name" in (await until(ws, "error", seen))["error"]["message"]
            update = {"type": "session.update", "session": {"tools": [WEATHER]}}
            await ws.send(json.dumps(update))
            updated = await until(ws, "session.updated", seen)
            assert updated["session"]["tools"] == ["get_weather"]
            await ws.send(json.dumps(item("What's the weather like?")))
            await ws.send(json.dumps({"type": "response.create"}))
            delta = await until(ws, "response.function_call_arguments.delta", seen)
            call = await until(ws, "response.function_call_arguments.done", seen)
            assert call["name"] == "get_weather" and call["call_id"] == delta["call_id"]
            first = await until(ws, "response.done", seen)
            assert first["response"]["status"] == "completed"
            assert first["response"]["output_text"] == ""

            def output(call_id: str) -> str:
                return json.dumps({"type": "conversation.item.create", "item": {
                    "type": "function_call_output", "call_id": call_id,
                    "output": "Sunny and 21 degrees."}})  # fmt: skip

            await ws.send(output("call_unknown"))
            assert "no call" in (await until(ws, "error", seen))["error"]["message"]
            await ws.send(output(call["call_id"]))
            await until(ws, "conversation.item.created", seen)
            await ws.send(json.dumps({"type": "response.create"}))
            second = await until(ws, "response.done", seen)
            await ws.send(output(call["call_id"]))  # answered already
            assert "no call" in (await until(ws, "error", seen))["error"]["message"]
        return [first, second]

    first, second = asyncio.run(talk())
    assert "Sunny and 21 degrees" in second["response"]["output_text"]
    assert second["response"]["status"] == "completed"
