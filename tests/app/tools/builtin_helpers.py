"""Shared by the built-in tools' tests: a clock the test sets, a context on it, and short
ways to reach a tool and a ToolError's sentence."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from dllm_voice.app.tools.registry import Tool, ToolContext, ToolError

# Saturday, December 5, 2026, 12:41:00 UTC: 9:41 PM in Tokyo.
NOW = datetime(2026, 12, 5, 12, 41, tzinfo=ZoneInfo("UTC")).timestamp()


def tool_of(fn: Callable[..., object]) -> Tool:
    found = fn.__dict__["__tool__"]
    assert isinstance(found, Tool)
    return found


class Clock:
    """A wall clock the test moves."""

    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@contextmanager
def fixed_context() -> Iterator[ToolContext]:
    """A ToolContext whose clock reads NOW (``ctx.now.t`` moves it), on a machine whose local
    time zone is UTC (local time and alarms); its scheduled sentences are canceled after."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    context = ToolContext(now=Clock())
    try:
        yield context
    finally:
        context.close()
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def error_of(call: Callable[[], object]) -> str:
    with pytest.raises(ToolError) as raised:
        call()
    return str(raised.value)
