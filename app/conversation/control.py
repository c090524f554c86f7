"""A websocket session's typed turns and settings: ``conversation.item.create``,
``response.create`` and ``session.update`` (docs/protocol.md).

The typed items waiting for ``response.create`` are held to one turn's worth of text, so no
client can grow a prompt past what the LM's context holds by sending items and never answering.

Settings are config keys (``lm.decoder``, ``vad.speech_end_ms``, ...) checked by the same field
metadata as config.yaml (``app.config.with_changes``), so a bad value is refused with the
range or choices the file would be held to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from dllm_voice.app.config import Config, ConfigError, with_changes
from dllm_voice.app.conversation import events
from dllm_voice.app.conversation.events import brief
from dllm_voice.app.tools.registry import ToolDefinitionError

# What a session may change while it runs: each takes effect from the next frame or answer.
SETTINGS = ("lm.decoder", "lm.threshold", "tts.length_scale", "vad.pause_ms", "vad.speech_end_ms")
# A typed turn joins the prompt whole: 2000 characters (~500 tokens) leave three quarters of the
# default lm.context_tokens (2048) to the system prompt, the history and the answer.
MAX_TEXT_CHARS = 2000
# What one response.create answers joins the prompt as one user turn: the items waiting for it
# are held to one item's 2000 characters in all (3000 items of 2000 made a 1.19M-token prompt).
MAX_WAITING_CHARS = MAX_TEXT_CHARS


class Refused(ValueError):
    """A typed item, response or setting the session does not take; the client is told why."""


def describe(cfg: Config) -> list[dict[str, object]]:
    """Each setting: its key, current value and its type (str, int, float: JSON writes 1.0 as 1),
    help and what is allowed (for the client's form)."""
    out: list[dict[str, object]] = []
    for key in SETTINGS:
        section, name = key.split(".")
        obj = getattr(cfg, section)
        meta = next(f for f in dataclasses.fields(obj) if f.name == name).metadata
        value = getattr(obj, name)
        item = {
            "key": key,
            "value": value,
            "type": type(value).__name__,
            "help": meta.get("help", ""),
        }
        item |= {k: meta[k] for k in ("min", "max", "choices") if k in meta}
        out.append(item)
    return out


def settings_object(settings: object) -> dict[str, object]:
    """A ``session.update``'s ``session``, which must be a non-empty object; else Refused."""
    if not isinstance(settings, dict) or not settings:
        raise Refused(
            'session.update: "session" must be an object of settings, e.g. '
            '{"lm.decoder": "ar"} (settable: ' + ", ".join(SETTINGS) + ")"
        )
    return settings


def apply_settings(cfg: Config, settings: object) -> Config:
    """``cfg`` with a ``session.update``'s ``{"section.key": value}`` applied; Refused names
    the first key that is unknown, not settable, of the wrong type or out of range."""
    changes: dict[str, dict[str, object]] = {}
    for key, value in settings_object(settings).items():
        if key not in SETTINGS:
            raise Refused(
                f"session.update: {brief(key)} cannot change in a session (settable: "
                + ", ".join(SETTINGS)
                + ")"
            )
        section, name = key.split(".")
        changes.setdefault(section, {})[name] = value
    try:
        return with_changes(cfg, changes)
    except ConfigError as exc:
        raise Refused(f"session.update: {str(exc).removeprefix('config: ')}") from None


def user_text(event: Mapping[str, object]) -> str:
    """The text of a ``conversation.item.create`` user message with ``input_text`` parts."""
    item = event.get("item")
    if not isinstance(item, dict) or item.get("type", "message") != "message":
        raise Refused('conversation.item.create: "item" must be a message object')
    if item.get("role") != "user":
        raise Refused(
            f"conversation.item.create: role must be 'user', got {brief(item.get('role'))}"
        )
    parts = item.get("content")
    if not isinstance(parts, list) or not parts:
        raise Refused("conversation.item.create: content must be a list of input_text parts")
    texts = []
    for part in parts:
        if not isinstance(part, dict) or part.get("type") != "input_text":
            raise Refused("conversation.item.create: only input_text content parts are taken")
        if not isinstance(part.get("text"), str):
            raise Refused("conversation.item.create: an input_text part needs a string text")
        texts.append(part["text"].strip())
    text = " ".join(t for t in texts if t)
    if not text:
        raise Refused("conversation.item.create: the text is empty")
    if len(text) > MAX_TEXT_CHARS:
        raise Refused(f"conversation.item.create: {len(text)} characters; at most {MAX_TEXT_CHARS}")
    try:
        text.encode()
    except UnicodeEncodeError as exc:  # JSON's \ud800 escape: the tokenizer cannot encode it
        raise Refused(
            f"conversation.item.create: the text has a lone surrogate at character {exc.start} "
            "(not Unicode text)"
        ) from None
    return text


class Tools(Protocol):
    """What a SessionControl needs of its session's tools (tool_use.py's ToolUse)."""

    outputs: int

    def set_client_tools(self, specs: object, choice: object) -> None: ...
    def output(self, call_id: str, output: str) -> None: ...
    def answer_from_outputs(self) -> str | None: ...
    def names(self) -> Sequence[str]: ...
    @property
    def choice(self) -> str: ...


class Session(Protocol):
    """What a SessionControl needs of its session (session.py's VoiceSession)."""

    @property
    def tools(self) -> Tools: ...

    def text_turn(self, text: str) -> str | None: ...
    def turn_waiting(self) -> bool: ...
    def answer_waiting_turn(self) -> str | None: ...
    def configure(self, cfg: Config) -> None: ...


class SessionControl:
    """One connection's typed items waiting for ``response.create``, and its settings. Each
    method raises Refused for a message the session does not take."""

    def __init__(self, cfg: Config, session: Session, emit: Callable[[events.Event], None]) -> None:
        self.cfg, self.session, self.emit = cfg, session, emit
        self.items: list[str] = []
        self.waiting_chars = 0  # of the items joined as response.create joins them
        self._created = 0

    def create_item(self, text: str) -> None:
        """``conversation.item.create``: ``text`` (see ``user_text``) waits for an answer."""
        waiting = self.waiting_chars + bool(self.items) + len(text)
        if waiting > MAX_WAITING_CHARS:
            raise Refused(
                f"conversation.item.create: {waiting} characters would wait for "
                f"response.create; at most {MAX_WAITING_CHARS} in all (send response.create "
                "first)"
            )
        self.items.append(text)
        self.waiting_chars = waiting
        self._created += 1
        self.emit(events.item_created(f"item_{self._created}", text))

    def withdraw(self, text: str) -> bool:
        """Take back a typed item still waiting for ``response.create`` (the client deleted it);
        False when none holds ``text``."""
        if text not in self.items:
            return False
        self.items.remove(text)
        self.waiting_chars = max(0, sum(map(len, self.items)) + len(self.items) - 1)
        return True

    def tool_output(self, call_id: str, output: str) -> None:
        """``conversation.item.create`` of a ``function_call_output``: the result of the client's
        tool call ``call_id``, which the next ``response.create`` answers from."""
        try:
            self.session.tools.output(call_id, output)
        except ToolDefinitionError as exc:
            raise Refused(f"conversation.item.create: {exc}") from None
        self._created += 1
        self.emit(events.item_created(f"item_{self._created}", output))

    def create_response(self) -> None:
        """``response.create``: answer the waiting items as one user turn (taken by the session,
        or refused: either way they wait no more); with none, answer from the client's tool
        outputs, or the spoken turn left waiting (``answers_turns`` off)."""
        if not self.items and self.session.tools.outputs:
            refused = self.session.tools.answer_from_outputs()
            if refused is not None:
                raise Refused(f"response.create: {refused}")
            return
        if not self.items and self.session.turn_waiting():
            refused = self.session.answer_waiting_turn()
            if refused is not None:
                raise Refused(f"response.create: {refused}")
            return
        if not self.items:
            raise Refused(
                "response.create: no typed user item to answer (send "
                "conversation.item.create first; spoken turns are answered on their own)"
            )
        text = " ".join(self.items)
        self.items, self.waiting_chars = [], 0
        refused = self.session.text_turn(text)
        if refused is not None:
            raise Refused(f"response.create: {refused}")

    def update(
        self, settings: Mapping[str, object], tools: object = None, tool_choice: object = None
    ) -> None:
        """``session.update``: the settings apply from the next frame or answer; ``tools`` (the
        client's, replacing its earlier ones) and ``tool_choice`` from the next turn."""
        cfg = apply_settings(self.cfg, settings) if settings else self.cfg
        if tools is not None or tool_choice is not None:
            try:
                self.session.tools.set_client_tools(tools, tool_choice)
            except ToolDefinitionError as exc:
                raise Refused(f"session.update: {exc}") from None
        self.cfg = cfg
        self.session.configure(self.cfg)
        t = self.session.tools
        self.emit(events.session_updated(describe(self.cfg), list(t.names()), t.choice))
