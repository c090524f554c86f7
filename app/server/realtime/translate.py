"""Our session's events, said as the Realtime API says them: ``RealtimeEvents`` keeps the
conversation's items and each response's output item and content part, so the API's lifecycle
comes out whole (``response.created`` → ``response.output_item.added`` →
``response.content_part.added`` → deltas → the ``.done`` events in reverse → ``response.done``).

One user item per turn: a turn our end of turn reopens (the user went on after a pause) keeps
its item, so the final transcript lands on the item the client already has. Our own events
(latency, trace, speculation, agent state, server tools) go out only when the client asked for
them (``session.update`` with ``dllm_voice.events``); nothing else the API does not define is
sent.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from dllm_voice.app.conversation.events import Event
from dllm_voice.app.server.realtime.items import Conversation, new_item

# Our error kinds that mean the client's message was wrong; the rest are the server's side.
_CLIENT_ERRORS = ("invalid_request_error",)
_EXTRA = {
    "latency": "latency",
    "trace": "trace",
    "agent.state": "agent_state",
    "response.speculation.delta": "speculation",
    "response.speculation.dropped": "speculation",
    "tool.call": "tool",
    "tool.result": "tool",
}


# GA names the beta API (an ``OpenAI-Beta: realtime=v1`` client) knew by others.
_BETA_NAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}
_BETA_PARTS = {"output_audio": "audio", "output_text": "text"}


def as_beta(event: Event) -> Event | None:
    """``event`` as the beta API said it; None for one it did not have."""
    if event["type"] == "conversation.item.done":
        return None
    event = {**event, "type": _BETA_NAMES.get(event["type"], event["type"])}
    for key in ("item", "response"):
        if isinstance(event.get(key), dict):
            event[key] = _beta_parts(event[key])
    return event


def _beta_parts(obj: Event) -> Event:
    out = dict(obj)
    if isinstance(out.get("content"), list):
        out["content"] = [
            {**c, "type": _BETA_PARTS.get(c.get("type"), c.get("type"))} for c in out["content"]
        ]
    if isinstance(out.get("output"), list):
        out["output"] = [_beta_parts(o) for o in out["output"]]
    return out


@dataclass
class _Response:
    gen: int
    modalities: tuple[str, ...]
    message: Event | None = None  # the assistant message item, once it has content
    output: list[Event] = field(default_factory=list)
    text: str = ""

    @property
    def id(self) -> str:
        return f"resp_{self.gen}"

    @property
    def speaks(self) -> bool:
        return "audio" in self.modalities


class RealtimeEvents(Conversation):
    """Translates one session's events into the Realtime API's, keeping its items."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(conversation_id)
        self.responses: dict[int, _Response] = {}
        self.modalities: tuple[str, ...] = ("audio",)  # for the next response
        self.extras: frozenset[str] = frozenset()
        self._user: str | None = None  # the user item of the turn under way
        self._heard_partial = ""  # its transcript sent as deltas so far
        self._spoken_ms: dict[str, float] = {}  # user item -> speech start (audio ms)
        self._waiting: list[str] = []  # committed user items awaiting their final transcript

    def gen_of(self, item_id: str) -> int | None:
        """The generation whose assistant message is ``item_id``."""
        for r in self.responses.values():
            if r.message is not None and r.message["id"] == item_id:
                return r.gen
        return self._gens.get(item_id)

    # ---- input -----------------------------------------------------------------------------------

    def speech_started(self, audio_ms: float) -> list[Event]:
        if self._user is None:
            self._user = self.new_id()
            self._heard_partial = ""
            self._spoken_ms[self._user] = audio_ms
        return [
            self.event(
                "input_audio_buffer.speech_started",
                audio_start_ms=int(audio_ms),
                item_id=self._user,
            )
        ]

    def speech_stopped(self, audio_ms: float) -> list[Event]:
        item_id = self._user or self.new_id()
        out = [
            self.event(
                "input_audio_buffer.speech_stopped", audio_end_ms=int(audio_ms), item_id=item_id
            )
        ]
        if item_id in self.items:  # a reopened turn: committed already
            return out
        self._waiting.append(item_id)
        return [*out, *self.committed(item_id, audio_ms)]

    def committed(self, item_id: str, end_ms: float) -> list[Event]:
        start = self._spoken_ms.pop(item_id, end_ms)
        out = [
            self.event(
                "input_audio_buffer.committed", previous_item_id=self.last_item, item_id=item_id
            )
        ]
        content = [{"type": "input_audio", "transcript": None}]
        item = new_item(item_id, "message", role="user", content=content)
        self._seconds[item_id] = max(0.0, (end_ms - start) / 1000)
        return [*out, *self.add_item(item)]

    def transcript_delta(self, text: str) -> list[Event]:
        """A partial transcript of the whole utterance: what extends what was sent, as a delta."""
        item_id = self._user
        if item_id is None or not text.startswith(self._heard_partial):
            return []
        delta, self._heard_partial = text[len(self._heard_partial) :], text
        if not delta:
            return []
        return [
            self.event(
                "conversation.item.input_audio_transcription.delta",
                item_id=item_id,
                content_index=0,
                delta=delta,
            )
        ]

    def transcript_final(self, text: str, item_id: str | None = None) -> list[Event]:
        if item_id is None:
            item_id = self._waiting.pop(0) if self._waiting else self._user
        if item_id == self._user:
            self._user = None
        if item_id is None:
            return []
        item = self.items.get(item_id, {})
        if item.get("content"):
            item["content"][0]["transcript"] = text
        seconds = round(self._seconds.get(item_id, 0.0), 3)
        return [
            self.event(
                "conversation.item.input_audio_transcription.completed",
                item_id=item_id,
                content_index=0,
                transcript=text,
                usage={"type": "duration", "seconds": seconds},
            )
        ]

    # ---- output ----------------------------------------------------------------------------------

    def _message(self, r: _Response) -> list[Event]:
        """The response's assistant message and its content part, once it has something."""
        if r.message is not None:
            return []
        item_id = self.new_id()
        r.message = new_item(item_id, "message", "in_progress", role="assistant", content=[])
        r.output.append(r.message)
        where = {"response_id": r.id, "output_index": len(r.output) - 1}
        previous = self.append(r.message)
        part = {"type": "audio", "transcript": ""} if r.speaks else {"type": "text", "text": ""}
        return [
            self.event("response.output_item.added", item=dict(r.message), **where),
            self.event("conversation.item.added", previous_item_id=previous, item=dict(r.message)),
            self.event(
                "response.content_part.added", item_id=item_id, content_index=0, part=part, **where
            ),
        ]

    def _where(self, r: _Response) -> Event:
        assert r.message is not None
        return {
            "response_id": r.id,
            "item_id": r.message["id"],
            "output_index": r.output.index(r.message),
            "content_index": 0,
        }

    def response_created(self, gen: int) -> list[Event]:
        r = self.responses[gen] = _Response(gen, self.modalities)
        return [self.event("response.created", response=self._response(r, "in_progress"))]

    def _response(self, r: _Response, status: str, **more: object) -> Event:
        return {
            "id": r.id,
            "object": "realtime.response",
            "status": status,
            "conversation_id": self.conversation_id,
            "output_modalities": list(r.modalities),
            "output": [dict(o) for o in r.output],
            **more,
        }

    def text_delta(self, gen: int, piece: str) -> list[Event]:
        r = self.responses.get(gen)
        if r is None:
            return []
        out = self._message(r)
        r.text += piece
        kind = (
            "response.output_audio_transcript.delta" if r.speaks else "response.output_text.delta"
        )
        return [*out, self.event(kind, delta=piece, **self._where(r))]

    def audio(self, gen: int, data: bytes) -> list[Event]:
        r = self.responses.get(gen)
        if r is None or not r.speaks:
            return []
        out = self._message(r)
        delta = base64.b64encode(data).decode("ascii")
        return [*out, self.event("response.output_audio.delta", delta=delta, **self._where(r))]

    def tool_call(self, gen: int, call_id: str, name: str, arguments: str) -> list[Event]:
        """A client tool's call: its function_call item, arguments and done, in one go (the
        arguments are whole by the time the call is made)."""
        r = self.responses.get(gen)
        if r is None:
            return []
        fields: Event = {"call_id": call_id, "name": name, "arguments": ""}
        item = new_item(self.new_id(), "function_call", "in_progress", **fields)
        r.output.append(item)
        where = {"response_id": r.id, "output_index": len(r.output) - 1}
        previous = self.append(item)
        args = {"item_id": item["id"], "call_id": call_id, **where}
        out = [
            self.event("response.output_item.added", item=dict(item), **where),
            self.event("conversation.item.added", previous_item_id=previous, item=dict(item)),
            self.event("response.function_call_arguments.delta", delta=arguments, **args),
            self.event(
                "response.function_call_arguments.done", name=name, arguments=arguments, **args
            ),
        ]
        item["arguments"], item["status"] = arguments, "completed"
        return [
            *out,
            self.event("response.output_item.done", item=dict(item), **where),
            self.event("conversation.item.done", previous_item_id=previous, item=dict(item)),
        ]

    def audio_cleared(self, gen: int) -> list[Event]:
        return [self.event("output_audio_buffer.cleared", response_id=f"resp_{gen}")]

    def response_done(self, response: Event) -> list[Event]:
        r = self.responses.pop(int(response["gen"]), None)
        if r is None:
            return []
        status = response["status"]
        said = response["heard_text"] if status == "cancelled" else response["output_text"]
        out: list[Event] = []
        if r.message is not None:
            where = self._where(r)
            if r.speaks:
                content = {"type": "output_audio", "transcript": said}
                part = {"type": "audio", "transcript": said}
                out += [
                    self.event("response.output_audio.done", **where),
                    self.event("response.output_audio_transcript.done", transcript=said, **where),
                ]
            else:
                content = {"type": "output_text", "text": said}
                part = {"type": "text", "text": said}
                out.append(self.event("response.output_text.done", text=said, **where))
            r.message["content"] = [content]
            r.message["status"] = "completed" if status == "completed" else "incomplete"
            self._gens[r.message["id"]] = r.gen
            item = dict(r.message)
            del where["content_index"], where["item_id"]
            out += [
                self.event(
                    "response.content_part.done",
                    item_id=item["id"],
                    content_index=0,
                    part=part,
                    **where,
                ),
                self.event("response.output_item.done", item=item, **where),
                self.event("conversation.item.done", item=item),
            ]
        more: Event = {"usage": response.get("usage")}
        if status == "cancelled":
            more["status_details"] = {"type": "cancelled", "reason": "turn_detected"}
        elif status != "completed":
            more["status_details"] = {"type": "failed"}
            status = "failed"
        done = self._response(r, status, **more)
        return [*out, self.event("response.done", response=done)]

    # ---- the session's events --------------------------------------------------------------------

    def translate(self, ev: Event) -> list[Event]:
        """The Realtime API's events for one of our session's events (none for most of ours)."""
        kind = ev["type"]
        if kind in _EXTRA:
            return [{**ev, "event_id": self.new_id("event")}] if _EXTRA[kind] in self.extras else []
        match kind:
            case "input_audio_buffer.speech_started":
                return self.speech_started(ev["audio_start_ms"])
            case "input_audio_buffer.speech_stopped":
                return self.speech_stopped(ev["audio_end_ms"])
            case "conversation.item.input_audio_transcription.delta":
                return self.transcript_delta(ev["transcript"])
            case "conversation.item.input_audio_transcription.completed":
                return self.transcript_final(ev["transcript"])
            case "response.created":
                return self.response_created(ev["response"]["gen"])
            case "response.audio_transcript.delta":
                return self.text_delta(ev["gen"], ev["delta"])
            case "response.function_call_arguments.done":
                return self.tool_call(ev["gen"], ev["call_id"], ev["name"], ev["arguments"])
            case "output_audio_buffer.cleared":
                return self.audio_cleared(ev["gen"])
            case "response.done":
                return self.response_done(ev["response"])
            case "error":
                return [self.error(ev["error"]["type"], ev["error"]["message"])]
        return []  # ours only: session.created/updated (the connection sends the API's), pong, ...

    def error(self, kind: str, message: str, event_id: str | None = None) -> Event:
        """The API's error shape: ``type`` the family, ``code`` our kind."""
        family = kind if kind in _CLIENT_ERRORS else "server_error"
        error = {
            "type": family,
            "code": kind,
            "message": message,
            "param": None,
            "event_id": event_id,
        }
        return self.event("error", error=error)
