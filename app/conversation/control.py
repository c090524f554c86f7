"""A websocket session's typed turns and settings: ``conversation.item.create``,
``response.create`` and ``session.update`` (docs/protocol.md).

Settings are config keys (``lm.decoder``, ``vad.speech_end_ms``, ...) checked by the same field
metadata as config.yaml (``app.config.with_changes``), so a bad value is refused with the
range or choices the file would be held to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from dllm_voice.app.config import Config, ConfigError, with_changes

# What a session may change while it runs: each takes effect from the next frame or answer.
SETTINGS = ("lm.decoder", "lm.threshold", "tts.length_scale", "vad.pause_ms", "vad.speech_end_ms")
# A typed turn joins the prompt whole: 2000 characters (~500 tokens) leave three quarters of the
# default lm.context_tokens (2048) to the system prompt, the history and the answer.
MAX_TEXT_CHARS = 2000


def describe(cfg: Config) -> list[dict[str, Any]]:
    """Each setting: its key, current value and its type (str, int, float: JSON writes 1.0 as 1),
    help and what is allowed (for the client's form)."""
    out = []
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


def apply_settings(cfg: Config, settings: Any) -> Config:
    """``cfg`` with a ``session.update``'s ``{"section.key": value}`` applied; ValueError names
    the first key that is unknown, not settable, of the wrong type or out of range."""
    if not isinstance(settings, dict) or not settings:
        raise ValueError(
            'session.update: "session" must be an object of settings, e.g. '
            '{"lm.decoder": "ar"} (settable: ' + ", ".join(SETTINGS) + ")"
        )
    changes: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        if key not in SETTINGS:
            raise ValueError(
                f"session.update: {key!r} cannot change in a session (settable: "
                + ", ".join(SETTINGS)
                + ")"
            )
        section, name = key.split(".")
        changes.setdefault(section, {})[name] = value
    try:
        return with_changes(cfg, changes)
    except ConfigError as exc:
        raise ValueError(f"session.update: {str(exc).removeprefix('config: ')}") from None


def user_text(event: dict[str, Any]) -> str:
    """The text of a ``conversation.item.create`` user message with ``input_text`` parts."""
    item = event.get("item")
    if not isinstance(item, dict) or item.get("type", "message") != "message":
        raise ValueError('conversation.item.create: "item" must be a message object')
    if item.get("role") != "user":
        raise ValueError(f"conversation.item.create: role must be 'user', got {item.get('role')!r}")
    parts = item.get("content")
    if not isinstance(parts, list) or not parts:
        raise ValueError("conversation.item.create: content must be a list of input_text parts")
    texts = []
    for part in parts:
        if not isinstance(part, dict) or part.get("type") != "input_text":
            raise ValueError("conversation.item.create: only input_text content parts are taken")
        if not isinstance(part.get("text"), str):
            raise ValueError("conversation.item.create: an input_text part needs a string text")
        texts.append(part["text"].strip())
    text = " ".join(t for t in texts if t)
    if not text:
        raise ValueError("conversation.item.create: the text is empty")
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(
            f"conversation.item.create: {len(text)} characters; at most {MAX_TEXT_CHARS}"
        )
    return text


class SessionControl:
    """One connection's typed items waiting for ``response.create``, and its settings."""

    def __init__(self, cfg: Config, session: Any, emit: Callable[[dict[str, Any]], None]) -> None:
        self.cfg, self.session, self.emit = cfg, session, emit
        self.items: list[str] = []
        self._created = 0

    def handle(self, kind: str, event: dict[str, Any]) -> None:
        """One of the three events; ValueError for a message the protocol does not allow."""
        if kind == "conversation.item.create":
            text = user_text(event)
            self.items.append(text)
            self._created += 1
            content = [{"type": "input_text", "text": text}]
            item = {"id": f"item_{self._created}", "type": "message", "role": "user"}
            self.emit({"type": "conversation.item.created", "item": item | {"content": content}})
        elif kind == "response.create":
            if not self.items:
                raise ValueError(
                    "response.create: no typed user item to answer (send "
                    "conversation.item.create first; spoken turns are answered on their own)"
                )
            text, self.items = " ".join(self.items), []
            refused = self.session.text_turn(text)
            if refused is not None:
                raise ValueError(f"response.create: {refused}")
        else:
            self.cfg = apply_settings(self.cfg, event.get("session"))
            self.session.configure(self.cfg)
            self.emit({"type": "session.updated", "session": {"settings": describe(self.cfg)}})
