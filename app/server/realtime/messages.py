"""One Realtime API client event, parsed into a command: the GA event set, and the beta names
where they differ. No socket, no session: RealtimeConnection carries the commands out.

Audio stays as the client sent it (base64 decoded): the connection knows the session's format.
A client's ``event_id`` comes back in the ``error`` its event causes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dllm_voice.app.conversation.control import MAX_TEXT_CHARS, Refused, user_text
from dllm_voice.app.conversation.events import brief
from dllm_voice.app.server.protocol import (
    Audio,
    CancelResponse,
    ClientError,
    CreateItem,
    JSONObject,
    ToolOutput,
    append_audio,
    json_object,
)

# A client's event_id, and an item id it may name: the API's ids are at most 32 characters;
# 64 leaves room for a client's own scheme.
MAX_ID_CHARS = 64


@dataclass(frozen=True)
class CommitAudio:
    """input_audio_buffer.commit (push-to-talk: the buffer is the user's turn)."""


@dataclass(frozen=True)
class ClearAudio:
    """input_audio_buffer.clear."""


@dataclass(frozen=True)
class ClearOutput:
    """output_audio_buffer.clear: stop the answer's audio."""


@dataclass(frozen=True)
class AddItem:
    """conversation.item.create: a user message (``text``) or a tool's output; ``item_id`` the
    client's own id for it, if it gave one."""

    item: CreateItem | ToolOutput
    item_id: str | None


@dataclass(frozen=True)
class DeleteItem:
    item_id: str


@dataclass(frozen=True)
class RetrieveItem:
    item_id: str


@dataclass(frozen=True)
class TruncateItem:
    """conversation.item.truncate: the client played ``audio_end_ms`` of the item's audio."""

    item_id: str
    audio_end_ms: float


@dataclass(frozen=True)
class CreateResponse:
    """response.create; ``instructions`` and ``modalities`` for this response only."""

    instructions: str | None = None
    modalities: tuple[str, ...] | None = None


@dataclass(frozen=True)
class UpdateSession:
    """session.update: the ``session`` object as sent (RealtimeSettings checks it)."""

    session: JSONObject


Command = (
    Audio
    | CommitAudio
    | ClearAudio
    | ClearOutput
    | AddItem
    | DeleteItem
    | RetrieveItem
    | TruncateItem
    | CancelResponse
    | CreateResponse
    | UpdateSession
)


def _id(event: JSONObject, key: str, required: bool = True) -> str | None:
    value = event.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS:
        raise ClientError(
            f"{event['type']}: {key} must be a string of 1 to {MAX_ID_CHARS} characters"
        )
    return value


def _create_item(event: JSONObject) -> AddItem:
    item = event.get("item")
    if not isinstance(item, dict):
        raise ClientError("conversation.item.create: item must be an object")
    item_id = _id(item, "id", required=False) if "id" in item else None
    if item.get("type") == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if not isinstance(call_id, str) or not 0 < len(call_id) <= MAX_ID_CHARS:
            raise ClientError("conversation.item.create: a function_call_output needs its call_id")
        if not isinstance(output, str) or len(output) > MAX_TEXT_CHARS:
            raise ClientError(
                f"conversation.item.create: output must be a string of at most {MAX_TEXT_CHARS} "
                "characters"
            )
        return AddItem(ToolOutput(call_id, output), item_id)
    if item.get("type", "message") == "message" and item.get("role") in ("system", "assistant"):
        raise ClientError(
            "conversation.item.create: only user messages and function_call_output items are "
            "taken (set the system prompt with session.update's instructions)"
        )
    try:
        return AddItem(CreateItem(user_text(event)), item_id)
    except Refused as exc:
        raise ClientError(str(exc)) from None


def _truncate(event: JSONObject) -> TruncateItem:
    item_id = _id(event, "item_id")
    assert item_id is not None
    if event.get("content_index", 0) != 0:
        raise ClientError("conversation.item.truncate: content_index must be 0 (one audio part)")
    end = event.get("audio_end_ms")
    if isinstance(end, bool) or not isinstance(end, int | float) or not 0 <= end < 1e9:
        raise ClientError(
            f"conversation.item.truncate: audio_end_ms must be a number >= 0, got {brief(end)}"
        )
    return TruncateItem(item_id, float(end))


def _create_response(event: JSONObject) -> CreateResponse:
    params = event.get("response") or {}
    if not isinstance(params, dict):
        raise ClientError("response.create: response must be an object")
    instructions = params.get("instructions")
    if instructions is not None and (not isinstance(instructions, str) or len(instructions) > 4000):
        raise ClientError(
            "response.create: instructions must be a string of at most 4000 characters"
        )
    modalities = params.get("output_modalities", params.get("modalities"))
    if modalities is not None:
        if (
            not isinstance(modalities, list)
            or not modalities
            or not set(modalities) <= {"audio", "text"}
        ):
            raise ClientError('response.create: output_modalities must be ["audio"] or ["text"]')
        modalities = ("text",) if modalities == ["text"] else ("audio",)
    return CreateResponse(instructions, modalities)


def _update_session(event: JSONObject) -> UpdateSession:
    session = event.get("session")
    if not isinstance(session, dict):
        raise ClientError("session.update: session must be an object")
    return UpdateSession(session)


def _item_event(
    cls: type[DeleteItem] | type[RetrieveItem],
) -> Callable[[JSONObject], DeleteItem | RetrieveItem]:
    def parse(event: JSONObject) -> DeleteItem | RetrieveItem:
        item_id = _id(event, "item_id")
        assert item_id is not None
        return cls(item_id)

    return parse


_PARSERS: dict[str, Callable[[JSONObject], Command]] = {
    "input_audio_buffer.append": append_audio,  # in the session's input format
    "input_audio_buffer.commit": lambda event: CommitAudio(),
    "input_audio_buffer.clear": lambda event: ClearAudio(),
    "output_audio_buffer.clear": lambda event: ClearOutput(),
    "conversation.item.create": _create_item,
    "conversation.item.delete": _item_event(DeleteItem),
    "conversation.item.retrieve": _item_event(RetrieveItem),
    "conversation.item.truncate": _truncate,
    "response.create": _create_response,
    "response.cancel": lambda event: CancelResponse(),
    "session.update": _update_session,
}
CLIENT_TYPES = tuple(_PARSERS)


def parse(message: str | bytes) -> tuple[str | None, Command]:
    """The client's event_id and the command `message` carries; ClientError says why none
    (its ``event_id`` attribute names the event, when it had one)."""
    if isinstance(message, bytes):
        raise ClientError("the Realtime API sends audio as input_audio_buffer.append events")
    event = json_object(message)
    event_id = event.get("event_id")
    if not isinstance(event_id, str) or len(event_id) > MAX_ID_CHARS:
        event_id = None
    parser = _PARSERS.get(event["type"])
    try:
        if parser is None:
            raise ClientError(f"unknown event type {brief(event['type'])}")
        return event_id, parser(event)
    except ClientError as exc:
        exc.event_id = event_id
        raise
