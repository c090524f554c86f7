"""One client message, parsed: binary or JSON text in, a typed command out, or a ClientError
saying what the protocol (docs/protocol.md) does not allow. No socket, no session: what a
command does is the connection's business (connection.py).

Numbers must be finite as IEEE doubles anywhere in a message: NaN, Infinity, 1e999 or a
400-digit integer would pass range checks or become Infinity in a browser's JSON.parse.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from dllm_voice.app.conversation.control import (
    MAX_TEXT_CHARS,
    Refused,
    settings_object,
    user_text,
)
from dllm_voice.app.conversation.events import brief

AUDIO_HEADER = struct.Struct("<I")  # generation id in front of every outgoing audio message
# The largest double has 309 digits: a longer integer is not finite for a JSON peer.
_MAX_INT_DIGITS = len(str(int(sys.float_info.max)))
_NUMBER_CHARS = bytes.maketrans(b"0123456789E-", b"0000000000e+")  # for _may_overflow
# A client's JSON message, its "type" checked: each parser below checks the keys it reads.
JSONObject = dict[str, Any]


class ClientError(ValueError):
    """A message the client sent that the protocol does not allow; reported, never fatal.
    ``event_id``: the client's id of the event, which the error names (Realtime API)."""

    event_id: str | None = None


@dataclass(frozen=True)
class Audio:
    """Microphone audio, PCM16LE mono at the input rate (binary, or input_audio_buffer.append)."""

    pcm: bytes


@dataclass(frozen=True)
class PlaybackReport:
    """output_audio_buffer.played, or conversation.item.truncate (`stopped`: the client dropped
    the rest it held)."""

    gen: int
    audio_end_ms: float
    stopped: bool


@dataclass(frozen=True)
class CancelResponse:
    """response.cancel."""


@dataclass(frozen=True)
class CreateItem:
    """conversation.item.create: a typed user message."""

    text: str


@dataclass(frozen=True)
class ToolOutput:
    """conversation.item.create of a ``function_call_output``: a client tool's result."""

    call_id: str
    output: str


@dataclass(frozen=True)
class CreateResponse:
    """response.create."""


@dataclass(frozen=True)
class UpdateSession:
    """session.update: settings by config key, not yet checked against the config's ranges;
    ``tools`` and ``tool_choice`` as given (None: not given), checked by the session."""

    settings: dict[str, object]
    tools: object = None
    tool_choice: object = None


@dataclass(frozen=True)
class Ping:
    """ping."""


Command = (
    Audio
    | PlaybackReport
    | CancelResponse
    | CreateItem
    | ToolOutput
    | CreateResponse
    | UpdateSession
    | Ping
)


class _NotFinite(Exception):
    """Raised from inside json.loads: a ValueError would read as text that is not JSON."""


def _refuse_constant(name: str) -> NoReturn:
    raise _NotFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _finite_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:  # before int(), which refuses 4300 digits
        raise _NotFinite(text)
    value = int(text)
    if abs(value) > sys.float_info.max:
        raise _NotFinite(text)
    return value


def _may_overflow(message: str) -> bool:
    """Whether `message` may hold a number past a double's range: a 3-digit exponent, or 210
    digits in a row (a 2-digit exponent then overflows)."""
    text = message.encode(errors="surrogatepass").translate(_NUMBER_CHARS)
    return b"e000" in text or b"e+000" in text or b"0" * 210 in text


def _json(message: str) -> object:
    # The number hooks cost 6x the parser's own path on 1 MiB of numbers: only for a message
    # that may need them. NaN and Infinity are refused in every message.
    hooks = _may_overflow(message)
    try:
        return json.loads(
            message,
            parse_constant=_refuse_constant,
            parse_float=_finite_float if hooks else None,
            parse_int=_finite_int if hooks else None,
        )
    except _NotFinite as exc:
        raise ClientError(
            f"{brief(exc.args[0])} is not a finite number (NaN, Infinity and numbers beyond "
            "1.8e308 are not taken)"
        ) from None
    except (ValueError, RecursionError):  # also 100 000 nested [
        raise ClientError("message is neither binary audio nor JSON (or nests too deep)") from None


def _number(event: JSONObject, key: str) -> float:
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise ClientError(f"{event['type']}: {key} must be a number >= 0, got {brief(value)}")
    return float(value)


def append_audio(event: JSONObject) -> Audio:
    try:
        return Audio(base64.b64decode(event.get("audio", ""), validate=True))
    except (ValueError, TypeError):  # binascii.Error, and non-ASCII text
        raise ClientError("input_audio_buffer.append: audio must be base64") from None


def _played(event: JSONObject) -> PlaybackReport:
    gen = event.get("gen")
    if isinstance(gen, bool) or not isinstance(gen, int) or gen < 0:
        raise ClientError(
            f"{event['type']}: gen must be the audio's generation id, got {brief(gen)}"
        )
    return PlaybackReport(gen, _number(event, "audio_end_ms"), stopped=False)


def _truncate(event: JSONObject) -> PlaybackReport:
    kind, item = event["type"], event.get("item_id")
    match = re.fullmatch(r"resp_(\d{1,9})", item) if isinstance(item, str) else None
    if match is None:
        raise ClientError(f"{kind}: item_id must be a response id resp_<gen>, got {brief(item)}")
    if event.get("content_index", 0) != 0:
        raise ClientError(f"{kind}: content_index must be 0 (one audio part per response)")
    return PlaybackReport(int(match[1]), _number(event, "audio_end_ms"), stopped=True)


def _create_item(event: JSONObject) -> CreateItem | ToolOutput:
    item = event.get("item")
    if isinstance(item, dict) and item.get("type") == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or not 0 < len(call_id) <= 64:
            raise ClientError("conversation.item.create: a function_call_output needs its call_id")
        if not isinstance(output, str) or len(output) > MAX_TEXT_CHARS:
            raise ClientError(
                f"conversation.item.create: output must be a string of at most {MAX_TEXT_CHARS} "
                "characters"
            )
        return ToolOutput(call_id, output)
    try:
        return CreateItem(user_text(event))
    except Refused as exc:
        raise ClientError(str(exc)) from None


def _update_session(event: JSONObject) -> UpdateSession:
    session = event.get("session")
    if isinstance(session, dict) and ("tools" in session or "tool_choice" in session):
        rest = {k: v for k, v in session.items() if k not in ("tools", "tool_choice")}
        return UpdateSession(rest, session.get("tools"), session.get("tool_choice"))
    try:
        return UpdateSession(settings_object(session))
    except Refused as exc:
        raise ClientError(str(exc)) from None


_PARSERS: dict[str, Callable[[JSONObject], Command]] = {
    "input_audio_buffer.append": append_audio,
    "output_audio_buffer.played": _played,
    "conversation.item.truncate": _truncate,
    "response.cancel": lambda event: CancelResponse(),
    "conversation.item.create": _create_item,
    "response.create": lambda event: CreateResponse(),
    "session.update": _update_session,
    "ping": lambda event: Ping(),
}
CLIENT_TYPES = tuple(_PARSERS)  # the JSON messages a client may send, by "type"


def json_object(message: str) -> JSONObject:
    """A JSON text message as an object with a string "type"; ClientError if it is not one."""
    event = _json(message)
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise ClientError('JSON messages must be objects with a string "type"')
    return event


def parse(message: str | bytes) -> Command:
    """The command `message` carries; ClientError says why it carries none."""
    if isinstance(message, bytes):
        return Audio(message)
    event = json_object(message)
    parser = _PARSERS.get(event["type"])
    if parser is None:
        raise ClientError(f"unknown event type {brief(event['type'])}")
    return parser(event)
