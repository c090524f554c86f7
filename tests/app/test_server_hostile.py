"""A hostile client, with fake models: numbers that are not finite, a flood of typed items, text
that is not Unicode. Each is an `error` event; no traceback, and the session goes on."""

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
    MAX_WAITING_CHARS,
    Refused,
    SessionControl,
)
from testkit.protocol_fuzz import ErrorLog
from tests.app.fakes import FakeComponents
from tests.app.test_server import Running


def item(text: str) -> str:
    message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return json.dumps({"type": "conversation.item.create", "item": message})


class Session:
    """The typed turns a session was given."""

    def __init__(self) -> None:
        self.turns: list[str] = []

    def text_turn(self, text: str) -> str | None:
        self.turns.append(text)
        return None


def test_typed_items_waiting_for_an_answer_are_bounded() -> None:
    sent: list[dict[str, Any]] = []
    session = Session()
    control = SessionControl(Config(), session, sent.append)
    control.create_item("x" * 1500)
    with pytest.raises(Refused) as err:
        control.create_item("y" * 500)  # 1500 + a space + 500
    assert str(err.value) == (
        f"conversation.item.create: 2001 characters would wait for response.create; at most "
        f"{MAX_WAITING_CHARS} in all (send response.create first)"
    )
    control.create_item("y" * 499)  # 2000 exactly
    control.create_response()
    assert session.turns == ["x" * 1500 + " " + "y" * 499]
    control.create_item("z" * MAX_TEXT_CHARS)  # nothing waits after an answer
    assert [e["item"]["id"] for e in sent] == ["item_1", "item_2", "item_3"]


@pytest.fixture
def running(serve: Callable[..., Running]) -> tuple[Running, FakeComponents]:
    comps = FakeComponents(["hi"], lm={"tail": "Fine."}, ms_per_word=50)
    return serve(comps), comps


async def replies(ws: Any, until: str, timeout_s: float = 20) -> list[dict[str, Any]]:
    """The events up to and including the first of type `until` (audio skipped)."""
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout_s):
        async for message in ws:
            if isinstance(message, str):
                out.append(json.loads(message))
                if out[-1]["type"] == until:
                    return out
    raise AssertionError(f"closed before {until}")


def errors(events: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [e["error"] for e in events if e["type"] == "error"]


def test_numbers_that_are_not_finite_are_refused(running: tuple[Running, Any]) -> None:
    run, _ = running

    async def talk() -> tuple[list[dict[str, Any]], Any]:
        async with connect(run.ws_url) as ws:
            await replies(ws, "session.created")
            for value in ("NaN", "Infinity", "-Infinity", "1e999", "9" * 400):
                update = '{"type": "session.update", "session": {"lm.threshold": VALUE}}'
                await ws.send(update.replace("VALUE", value))
            await ws.send('{"type": "session.update", "session": {"tts.length_scale": 1e308}}')
            await ws.send('{"type": "ping"}')
            events = await replies(ws, "pong")
            (conn,) = run.server.active
            return events, conn.session.cfg

    with ErrorLog() as log:
        events, cfg = asyncio.run(talk())
    assert not log.records, log.records
    assert [e["type"] for e in errors(events)] == ["invalid_request_error"] * 6
    assert all("is not a finite number" in e["message"] for e in errors(events)[:5])
    assert "tts.length_scale = 1e+308 is out of range" in errors(events)[5]["message"]
    assert "session.updated" not in [e["type"] for e in events]
    assert cfg.lm.threshold == Config().lm.threshold


def test_a_flood_of_typed_items_is_refused_past_the_bound(running: tuple[Running, Any]) -> None:
    """3000 items of 2000 characters once made a 1.19M-token prompt: now one waits, the rest
    are refused, and the answer is to that one."""
    run, comps = running
    first, rest = "a" * MAX_TEXT_CHARS, "b" * MAX_TEXT_CHARS

    async def talk() -> list[dict[str, Any]]:
        async with connect(run.ws_url) as ws:
            await replies(ws, "session.created")
            await ws.send(item(first))
            for _ in range(200):
                await ws.send(item(rest))
            await ws.send(json.dumps({"type": "response.create"}))
            return await replies(ws, "response.done")

    with ErrorLog() as log:
        events = asyncio.run(talk())
    assert not log.records, log.records
    assert len([e for e in events if e["type"] == "conversation.item.created"]) == 1
    refused = errors(events)
    assert len(refused) == 200 and "4001 characters would wait" in refused[0]["message"]
    done = events[-1]["response"]
    assert done["status"] == "completed" and first in done["output_text"]
    assert comps.lm.calls[-1]["messages"][-1]["content"] == first


def test_text_that_is_not_unicode_is_refused_and_the_session_goes_on(
    running: tuple[Running, Any],
) -> None:
    run, _ = running

    async def talk() -> list[dict[str, Any]]:
        async with connect(run.ws_url) as ws:
            await replies(ws, "session.created")
            await ws.send(item("hi \ud800 there"))
            await ws.send(json.dumps({"type": "response.create"}))
            await ws.send(item("Hello there."))
            await ws.send(json.dumps({"type": "response.create"}))
            return await replies(ws, "response.done")

    with ErrorLog() as log:
        events = asyncio.run(talk())
    assert not log.records, log.records
    assert [e["message"] for e in errors(events)] == [
        "conversation.item.create: the text has a lone surrogate at character 3 (not Unicode text)",
        "response.create: no typed user item to answer (send conversation.item.create first; "
        "spoken turns are answered on their own)",
    ]
    assert events[-1]["response"]["output_text"] == "You said: Hello there. Fine."
