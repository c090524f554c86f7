"""The parse of one client message (app/server/protocol.py), socket-free: each kind of good
message, each kind of bad one; and what a connection does with numbers that are not finite."""

from __future__ import annotations

import base64
import json
import logging
import math
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dllm_voice.app.conversation.control import MAX_TEXT_CHARS
from dllm_voice.app.observe.metrics import ServerMetrics
from dllm_voice.app.server.connection import Connection
from dllm_voice.app.server.protocol import (
    Audio,
    CancelResponse,
    ClientError,
    CreateItem,
    CreateResponse,
    Ping,
    PlaybackReport,
    UpdateSession,
    parse,
)
from dllm_voice.app.server.server import Throttled
from tests.app.test_server_playback import fake_cfg


def item(*texts: str, role: str = "user") -> str:
    content = [{"type": "input_text", "text": t} for t in texts]
    return json.dumps(
        {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": role, "content": content},
        }  # fmt: skip
    )


@pytest.mark.parametrize(
    ("message", "command"),
    [
        (b"\x01\x00\x02", Audio(b"\x01\x00\x02")),
        (b"", Audio(b"")),
        ('{"type": "input_audio_buffer.append", "audio": "AQA="}', Audio(b"\x01\x00")),
        (
            '{"type": "output_audio_buffer.played", "gen": 3, "audio_end_ms": 120.5}',
            PlaybackReport(3, 120.5, stopped=False),
        ),
        (
            '{"type": "conversation.item.truncate", "item_id": "resp_7", "content_index": 0, '
            '"audio_end_ms": 40}',
            PlaybackReport(7, 40.0, stopped=True),
        ),
        ('{"type": "response.cancel"}', CancelResponse()),
        ('{"type": "response.create", "response": {}}', CreateResponse()),
        ('{"type": "ping", "event_id": "e1"}', Ping()),
        (item("  Hello ", "there"), CreateItem("Hello there")),
        (
            '{"type": "session.update", "session": {"lm.threshold": 0.5}}',
            UpdateSession({"lm.threshold": 0.5}),
        ),
        # Not range-checked here: the session's config does that.
        ('{"type": "session.update", "session": {"lm.threshold": 2}}',
         UpdateSession({"lm.threshold": 2})),
    ],
)  # fmt: skip
def test_good_messages_parse_to_their_command(message: str | bytes, command: Any) -> None:
    assert parse(message) == command


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ("{not json", "neither binary audio nor JSON"),
        ("", "neither binary audio nor JSON"),
        ("[" * 100_000, "nests too deep"),
        ("[1, 2]", 'objects with a string "type"'),
        ("null", 'objects with a string "type"'),
        ('{"kind": "ping"}', 'objects with a string "type"'),
        ('{"type": 5}', 'objects with a string "type"'),
        ('{"type": "no.such.event"}', "unknown event type 'no.such.event'"),
        ('{"type": "input_audio_buffer.append", "audio": "AAA"}', "audio must be base64"),
        ('{"type": "input_audio_buffer.append", "audio": "üüüü"}', "audio must be base64"),
        ('{"type": "input_audio_buffer.append", "audio": 5}', "audio must be base64"),
        ('{"type": "output_audio_buffer.played", "gen": true, "audio_end_ms": 1}', "gen must be"),
        ('{"type": "output_audio_buffer.played", "gen": -1, "audio_end_ms": 1}', "gen must be"),
        ('{"type": "output_audio_buffer.played", "gen": "1", "audio_end_ms": 1}', "gen must be"),
        ('{"type": "output_audio_buffer.played", "gen": 1}', "audio_end_ms must be a number"),
        ('{"type": "output_audio_buffer.played", "gen": 1, "audio_end_ms": -1}', ">= 0, got -1"),
        ('{"type": "output_audio_buffer.played", "gen": 1, "audio_end_ms": 1e12}', ">= 0"),
        ('{"type": "output_audio_buffer.played", "gen": 1, "audio_end_ms": false}', ">= 0"),
        ('{"type": "conversation.item.truncate", "item_id": "item_1", "audio_end_ms": 1}',
         "item_id must be a response id"),
        ('{"type": "conversation.item.truncate", "item_id": "resp_' + "9" * 5000 + '"}',
         "item_id must be a response id"),
        ('{"type": "conversation.item.truncate", "item_id": "resp_1", "content_index": 1, '
         '"audio_end_ms": 1}', "content_index must be 0"),
        (item("hi", role="assistant"), "role must be 'user'"),
        (item(" ", ""), "the text is empty"),
        (item("x" * (MAX_TEXT_CHARS + 1)), f"at most {MAX_TEXT_CHARS}"),
        (item("hi \ud800 there"), "lone surrogate at character 3"),
        ('{"type": "conversation.item.create", "item": "hi"}', '"item" must be a message'),
        ('{"type": "session.update", "session": {}}', '"session" must be an object'),
        ('{"type": "session.update", "session": [1]}', '"session" must be an object'),
    ],
)  # fmt: skip
def test_bad_messages_raise_a_client_error_saying_why(message: str, says: str) -> None:
    with pytest.raises(ClientError) as err:
        parse(message)
    assert says in str(err.value)


@pytest.mark.parametrize(
    "number",
    ["NaN", "Infinity", "-Infinity", "1e999", "-1e400", "9" * 400, "-" + "9" * 309, "9" * 5000],
)
def test_numbers_that_are_not_finite_are_refused_anywhere(number: str) -> None:
    for message in (
        '{"type": "session.update", "session": {"lm.threshold": %s}}',
        '{"type": "ping", "deep": [{"x": [%s]}]}',
        '{"type": %s}',
    ):
        with pytest.raises(ClientError) as err:
            parse(message.replace("%s", number))
        assert "is not a finite number" in str(err.value)
        assert len(str(err.value)) < 200  # a 5000-digit number is quoted, not echoed


@settings(max_examples=500, deadline=None, database=None)
@given(
    digits=st.integers(0, 10**400),
    exponent=st.none() | st.integers(-999, 999),
    sign=st.sampled_from(["", "-"]),
)
@example(digits=10**210, exponent=99, sign="")  # 1e309: a 2-digit exponent overflows
@example(digits=10**209, exponent=99, sign="-")
@example(digits=int(sys.float_info.max) + 1, exponent=None, sign="")
def test_a_number_is_refused_exactly_when_a_double_cannot_hold_it(
    digits: int, exponent: int | None, sign: str
) -> None:
    literal = sign + str(digits) + ("" if exponent is None else f"e{exponent}")
    finite = digits <= sys.float_info.max if exponent is None else math.isfinite(float(literal))
    message = '{"type": "ping", "n": [NUMBER]}'.replace("NUMBER", literal)
    if finite:
        assert parse(message) == Ping()
    else:
        with pytest.raises(ClientError, match="is not a finite number"):
            parse(message)


def test_the_largest_finite_numbers_are_taken() -> None:
    biggest = str(int(1.7976931348623157e308))  # 309 digits
    event = parse(json.dumps({"type": "session.update", "session": {"a": 0, "b": 1.7e308}})
                  .replace("0", biggest, 1))  # fmt: skip
    assert event == UpdateSession({"a": int(biggest), "b": 1.7e308})


def test_error_messages_quote_client_values_briefly() -> None:
    for message in (
        json.dumps({"type": "x" * 1_000_000}),
        json.dumps({"type": "output_audio_buffer.played", "gen": [[[[["deep"]]]]] * 1000}),
        item("hi", role="r" * 1_000_000),
    ):
        with pytest.raises(ClientError) as err:
            parse(message)
        assert len(str(err.value)) < 200


def connection(tmp_path: Path) -> Connection:
    server = SimpleNamespace(
        cfg=fake_cfg(tmp_path),
        metrics=ServerMetrics(),
        log_bug=Throttled(logging.ERROR, exc_info=True),
    )
    return Connection(None, server)  # type: ignore[arg-type]  # no socket: events only


def strict(text: str) -> dict[str, Any]:
    """JSON as a browser's JSON.parse reads it: NaN and Infinity are not JSON."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_an_event_that_is_not_strict_json_is_replaced_by_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conn = connection(tmp_path)
    with caplog.at_level(logging.ERROR):
        conn.emit({"type": "session.updated", "session": {"settings": [{"value": float("nan")}]}})
        conn.emit({"type": "latency", "stages": {"lm": float("inf")}})
        conn.emit({"type": "pong"})
    sent = [strict(conn.out.get_nowait()) for _ in range(conn.out.qsize())]
    assert [e["type"] for e in sent] == ["error", "error", "pong"]
    assert sent[0]["error"] == {
        "type": "server_error",
        "message": "the server could not encode a session.updated event",
    }
    assert "latency event" in sent[1]["error"]["message"]
    # Logged once, with the traceback; the second one within LOG_EVERY_S is held back.
    assert [r.getMessage() for r in caplog.records] == [
        f"session {conn.id}: a 'session.updated' event is not JSON"
    ]
    metrics = conn.server.metrics.render().decode()
    assert 'dllm_voice_errors_total{type="server_error"} 2.0' in metrics


def test_an_audio_message_is_pushed_whole(tmp_path: Path) -> None:
    from dllm_voice.audio.sources import PushSource

    conn = connection(tmp_path)
    conn.source = PushSource(max_buffer_ms=1000)
    pcm = bytes(1920)  # 60 ms at 16 kHz: two 30 ms frames
    conn.handle_message(json.dumps({"type": "input_audio_buffer.append",
                                    "audio": base64.b64encode(pcm).decode()}))  # fmt: skip
    conn.handle_message(pcm)
    assert conn.source.buffered_ms == 120 and conn.out.empty()
