"""Property-based fuzzing of /v1/realtime, as test_server_fuzz.py fuzzes /ws: every message gets
an answer or a documented close code, never a traceback, and the session goes on."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from dllm_voice.app.server.realtime.messages import CLIENT_TYPES
from testkit.protocol_fuzz import DOCUMENTED_CLOSES, ErrorLog, binaries, json_values, pathological
from tests.app.test_server import Running
from tests.app.test_server_fuzz import FUZZ, running  # noqa: F401 - fixture

FIELDS = ("audio", "item", "item_id", "content_index", "audio_end_ms", "session", "response",
          "event_id")  # fmt: skip
# The end of a case: an event only this one answers, with an error naming its event_id.
SYNC = {"type": "conversation.item.retrieve", "event_id": "fuzz_sync", "item_id": "fuzz_none"}

events = st.builds(
    lambda kind, fields: {**fields, "type": kind},
    st.sampled_from(CLIENT_TYPES) | st.text(max_size=30),
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4),
)
# Shapes the handlers check deeper: audio that decodes, sessions of the API's keys.
shaped = st.one_of(
    st.binary(max_size=4800).map(
        lambda b: {"type": "input_audio_buffer.append", "audio": base64.b64encode(b).decode()}
    ),
    st.builds(
        lambda session: {"type": "session.update", "session": session},
        st.fixed_dictionaries(
            {},
            optional={
                "type": st.sampled_from(["realtime", "transcription"]) | json_values,
                "instructions": st.text(max_size=50) | json_values,
                "output_modalities": st.sampled_from([["text"], ["audio"], ["x"]]) | json_values,
                "audio": st.fixed_dictionaries({}, optional={
                    "input": st.fixed_dictionaries({}, optional={
                        "format": st.sampled_from([{"type": "audio/pcmu"}, "pcm16",
                                                   {"type": "audio/pcm", "rate": 16000}])
                        | json_values,
                        "turn_detection": st.sampled_from([None, {"type": "server_vad"},
                                                           {"type": "semantic_vad",
                                                            "eagerness": "high"}]) | json_values,
                    }),
                    "output": st.fixed_dictionaries({}, optional={"speed": json_values,
                                                                  "format": json_values}),
                }),
                "tools": json_values,
                "tool_choice": json_values,
                "dllm_voice": json_values,
            },
        ),
    ),
    st.sampled_from([
        {"type": "input_audio_buffer.commit"},
        {"type": "input_audio_buffer.clear"},
        {"type": "response.create", "response": {"output_modalities": ["text"]}},
        {"type": "response.cancel"},
        {"type": "conversation.item.truncate", "item_id": "item_1", "content_index": 0,
         "audio_end_ms": 100},
        {"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                                      "content": [{"type": "input_text",
                                                                   "text": "hi there"}]}},
    ]),
)  # fmt: skip
texts = st.one_of(
    events.map(json.dumps), shaped.map(json.dumps), json_values.map(json.dumps), pathological
)
messages = st.lists(st.one_of(texts, texts, binaries), min_size=1, max_size=8)


async def run_case(url: str, case: list[str | bytes]) -> tuple[set[str], int | None, bool]:
    """The error types and close code a case got, and whether its end was answered."""
    kinds: set[str] = set()
    async with connect(url, max_size=None) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        try:
            for message in [*case, json.dumps(SYNC)]:
                await ws.send(message)
            async with asyncio.timeout(20):
                async for reply in ws:
                    event: dict[str, Any] = json.loads(reply)
                    assert "event_id" in event
                    if event["type"] == "error":
                        kinds.add(event["error"]["type"])
                        if event["error"]["event_id"] == "fuzz_sync":
                            return kinds, None, True
        except ConnectionClosed as exc:
            return kinds, exc.rcvd.code if exc.rcvd else None, False
    return kinds, None, False


@FUZZ
@given(case=messages)
def test_any_messages_get_answers_and_the_session_goes_on(
    running: Running,  # noqa: F811 - the fixture
    case: list[str | bytes],
) -> None:
    url = running.ws_url.replace("/ws", "/v1/realtime")
    with ErrorLog() as errors:
        kinds, code, answered = asyncio.run(run_case(url, case))
    assert not errors.records, errors.records
    assert "server_error" not in kinds
    assert answered or code in DOCUMENTED_CLOSES, (kinds, code)
