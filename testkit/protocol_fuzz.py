"""Hypothesis strategies for the websocket protocol's client messages, and one fuzz case run
against a server: shared by tests/app/test_server_fuzz.py and bench/soak.py.

A case is a list of messages: JSON events of every known type with fields of random JSON
values (wrong types, huge numbers, non-ASCII, lone surrogates, nesting), random JSON documents,
text that is not JSON, pathological texts (a 5000-digit integer, 100 000 nested brackets), and
binary audio of random sizes. `run_case` sends them, then a ping, and reads to the pong: the
session must answer everything and go on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

KNOWN_TYPES = (
    "input_audio_buffer.append",
    "output_audio_buffer.played",
    "conversation.item.truncate",
    "conversation.item.create",
    "response.create",
    "response.cancel",
    "session.update",
    "ping",
)
FIELDS = (
    "audio",
    "gen",
    "audio_end_ms",
    "item_id",
    "content_index",
    "item",
    "session",
    "response",
    "event_id",
)
# Close codes the protocol documents (docs/protocol.md); 1011 (a server error) is not one.
DOCUMENTED_CLOSES = {1000, 1007, 1008, 1009, 1013}

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()
    | st.text(max_size=40)
    | st.sampled_from(["", "resp_0", "resp_1", "resp_99999999999999999999", "ü" * 8, "\ud800"])
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
events = st.builds(
    lambda kind, fields: {"type": kind, **fields},
    st.sampled_from(KNOWN_TYPES) | st.text(max_size=30),
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4),
)
# Typed text turns and settings with plausible shapes, so their handlers' deeper checks run.
shaped = st.one_of(
    st.builds(
        lambda text, role: {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": role,
                "content": [{"type": "input_text", "text": text}],
            },
        },
        st.text(max_size=60),
        st.sampled_from(["user", "assistant", "system", "x"]),
    ),
    st.builds(
        lambda settings: {"type": "session.update", "session": settings},
        st.dictionaries(st.text(max_size=20), json_values, max_size=3)
        | st.dictionaries(
            st.sampled_from(["lm", "vad", "conversation", "asr", "tts", "server"]),
            st.dictionaries(st.text(max_size=16), json_values, max_size=3),
            max_size=2,
        ),
    ),
)
pathological = st.sampled_from(
    [
        "1" * 5000,
        "[" * 100_000,
        "{" * 50_000,
        '{"type": "ping", "n": ' + "9" * 5000 + "}",
        '{"type": "output_audio_buffer.played", "gen": 1, "audio_end_ms": 1e999}',
        '{"type": "output_audio_buffer.played", "gen": 1, "audio_end_ms": NaN}',
        '{"type": "conversation.item.truncate", "item_id": "resp_' + "9" * 5000 + '"}',
        '{"type": "input_audio_buffer.append", "audio": "üüüü"}',
        '{"type": "input_audio_buffer.append", "audio": "AAA"}',
        '{"type": "ping", "type": 5}',
        '{"type": "\\ud800"}',
        "null",
        "",
    ]
)
texts = st.one_of(
    events.map(json.dumps),
    shaped.map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=200),
    pathological,
)
binaries = st.binary(max_size=2048) | st.integers(0, 200_000).map(bytes)
messages = st.lists(st.one_of(texts, texts, binaries), min_size=1, max_size=8)


@dataclass
class Outcome:
    """What a case got back: its error events by type, and the close code if it was closed."""

    errors: dict[str, int] = field(default_factory=dict)
    close_code: int | None = None
    answered: bool = False  # the ping after the case got its pong


class ErrorLog(logging.Handler):
    """Collects ERROR records (a traceback, a 1011) of the server and the websocket library."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))

    def __enter__(self) -> ErrorLog:
        for name in ("dllm_voice", "websockets"):
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in ("dllm_voice", "websockets"):
            logging.getLogger(name).removeHandler(self)


def _finite(value: Any) -> bool:
    """Whether every number in a parsed JSON value is finite as a double, as the server requires
    (NaN, Infinity, 1e999 and integers past 1.8e308 are refused)."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, int | float) and not abs(item) <= sys.float_info.max:
            return False  # NaN compares false too
    return True


def _parse(message: str | bytes) -> Any:
    """The JSON event the server takes `message` for, or None (audio, or a refused message)."""
    if isinstance(message, bytes):
        return None
    try:
        event = json.loads(message)
    except (ValueError, RecursionError):
        return None
    return event if _finite(event) else None


def is_ping(message: str | bytes) -> bool:
    event = _parse(message)
    return isinstance(event, dict) and event.get("type") == "ping"


def surely_invalid(message: str | bytes) -> bool:
    """Text that is not JSON, has a number that is not finite, is not an object with a string
    type, or is of an unknown type."""
    if isinstance(message, bytes):
        return False
    event = _parse(message)
    return not isinstance(event, dict) or event.get("type") not in KNOWN_TYPES


async def run_case(url: str, case: list[str | bytes], timeout_s: float = 20.0) -> Outcome:
    """Send `case` on a fresh session, then a ping; read until its pong (the case's own pings
    answered first) or the close."""
    out = Outcome()
    pongs = 1 + sum(map(is_ping, case))
    async with connect(url, max_size=None) as ws:
        created = json.loads(await ws.recv())
        assert created["type"] == "session.created", created
        try:
            for message in case:
                await ws.send(message)
            await ws.send('{"type": "ping"}')
            async with asyncio.timeout(timeout_s):
                async for reply in ws:
                    if isinstance(reply, bytes):
                        continue
                    event: dict[str, Any] = json.loads(reply)
                    if event["type"] == "error":
                        kind = event["error"]["type"]
                        out.errors[kind] = out.errors.get(kind, 0) + 1
                    pongs -= event["type"] == "pong"
                    if not pongs:
                        out.answered = True
                        break
        except ConnectionClosed as exc:
            out.close_code = exc.rcvd.code if exc.rcvd else None
    return out
