"""docs/protocol.md documents the protocol the code speaks: every event app/conversation/events.py
builds, every error type the app sends, every message app/server/protocol.py takes."""

from __future__ import annotations

import inspect
import re
import types
import typing
from pathlib import Path
from typing import Any

from dllm_voice.app.conversation import events
from dllm_voice.app.server.protocol import CLIENT_TYPES

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "docs" / "protocol.md").read_text()


def section(title: str) -> str:
    start = DOCS.index(f"\n## {title}\n")
    end = DOCS.find("\n## ", start + 1)
    return DOCS[start : end if end >= 0 else None]


def table_types(title: str) -> set[str]:
    """The `type` in the first column of each row of the section's tables (not the header's)."""
    return set(re.findall(r"^\| `([^`]+)` \|(?!.*\n\|---)", section(title), re.M))


def dummy(tp: Any) -> Any:
    """A value of type `tp`, enough for a builder to run."""
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return dummy(typing.get_args(tp)[0])
    return {str: "x", int: 1, float: 1.0, bool: True, dict: {}, list: []}.get(
        typing.get_origin(tp) or tp
    )


def builders() -> dict[str, Any]:
    """The event type each builder of events.py makes, to the builder."""
    out = {}
    for name, fn in inspect.getmembers(events, inspect.isfunction):
        if fn.__module__ != events.__name__ or name.startswith("_"):
            continue
        hints = typing.get_type_hints(fn)
        if hints.pop("return", None) != events.Event:
            continue
        out[fn(**{p: dummy(tp) for p, tp in hints.items()})["type"]] = fn
    return out


def test_every_built_event_is_documented_and_every_documented_event_built() -> None:
    built, documented = set(builders()), table_types("Server → client")
    assert {"session.created", "error", "pong", "response.done", "latency"} <= built
    assert built - documented == set(), "events built but not in docs/protocol.md"
    assert documented - built == set(), "events documented that no builder makes"


def test_every_error_type_the_app_sends_is_documented() -> None:
    row = next(
        line for line in section("Server → client").splitlines() if line.startswith("| `error`")
    )
    sent = set()
    for path in (ROOT / "app").rglob("*.py"):
        sent |= set(re.findall(r'\berror\(\s*"([a-z_]+)"', path.read_text()))
    assert {"invalid_request_error", "server_error", "server_busy"} <= sent
    assert {kind for kind in sent if f"`{kind}`" not in row} == set()


def test_every_client_message_is_documented() -> None:
    rows = section("Client → server")
    assert {kind for kind in CLIENT_TYPES if f'{{"type": "{kind}"' not in rows} == set()
