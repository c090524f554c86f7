"""One tool call: prepared in the LM thread, run on the event loop once the turn is committed.

``prepare`` reads the arguments (the tool's own parser over the user's words, else the LM
under the schema's grammar, arguments.py). ``run`` carries the call out with its timeout and
turns every ending into something to say: a tool's sentence, its ``ToolError``'s words, or an
apology for a timeout or a bug (the trace gets the error). ``Ledger`` keeps each turn's
results, so a reopened or repeated turn gets a side-effecting call's result again instead of
running it twice.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dllm_voice.app.tools.arguments import ArgumentStats, fill
from dllm_voice.app.tools.registry import Tool, ToolContext, ToolError

if TYPE_CHECKING:
    from dllm_voice.app.conversation.ports import ChatSession, Tokenizer
    from dllm_voice.app.tools.chooser import Choice

log = logging.getLogger(__name__)

TIMEOUT_SAID = "Sorry, that is taking too long."
FAILED_SAID = "Sorry, that didn't work."
_ids = itertools.count(1)


@dataclass
class Call:
    """A call the agent decided on: its tool, arguments and how both were found."""

    tool: Tool
    arguments: dict[str, object]
    how: str  # head | named | required
    p: float
    args_by: str  # parser | lm | none needed
    arg_stats: ArgumentStats | None = None
    call_id: str = field(default_factory=lambda: f"call_{next(_ids)}")

    @property
    def key(self) -> str:
        return f"{self.tool.name}{json.dumps(self.arguments, sort_keys=True)}"


@dataclass
class Outcome:
    """How a call ended: ``output`` the tool's value (None on error), ``said`` the sentence to
    speak (None: the LM answers from ``output``), ``error`` what went wrong."""

    output: object
    said: str | None
    error: str | None
    ms: float
    repeated: bool = False


def prepare(
    choice: Choice,
    request: str,
    session: ChatSession,
    tok: Tokenizer,
    cancel: threading.Event | None = None,
) -> Call | None:
    """The call ``choice`` makes for ``request``; None when cancelled. In the LM thread."""
    tool = choice.tool
    args = choice.arguments
    if args is None and tool.parse is not None:
        args = tool.parse(request)
    if args is not None:
        return Call(tool, args, choice.how, choice.p, "parser")
    if not tool.parameters.get("required"):  # the LM fills in required arguments only
        return Call(tool, {}, choice.how, choice.p, "none needed")
    filled = fill(session, tok, tool, request, cancel=cancel)
    if filled is None:
        return None
    return Call(tool, filled[0], choice.how, choice.p, "lm", filled[1])


class Ledger:
    """One conversation's call results, by turn and call."""

    def __init__(self) -> None:
        self._done: dict[tuple[int, str], Outcome] = {}

    def get(self, turn: int, call: Call) -> Outcome | None:
        return self._done.get((turn, call.key))

    def put(self, turn: int, call: Call, outcome: Outcome) -> None:
        if call.tool.side_effects and outcome.error is None:
            self._done[(turn, call.key)] = outcome


async def run(call: Call, ctx: ToolContext, timeout_s: float) -> Outcome:
    """Carry ``call`` out within ``min(timeout_s, tool.timeout_s)``; never raises but for a
    cancel (the user interrupted: the task is cancelled and the tool's thread left to end)."""
    t0 = time.perf_counter()
    limit = min(timeout_s, call.tool.timeout_s)

    def ms() -> float:
        return round((time.perf_counter() - t0) * 1e3, 1)

    try:
        output = await asyncio.wait_for(call.tool.call(call.arguments, ctx), limit)
    except ToolError as e:
        return Outcome(None, str(e), str(e), ms())
    except TimeoutError:
        return Outcome(None, TIMEOUT_SAID, f"timed out after {limit:g} s", ms())
    except asyncio.CancelledError:
        raise
    except Exception as e:
        log.exception("tool %s failed", call.tool.name)
        return Outcome(None, FAILED_SAID, f"{type(e).__name__}: {e}", ms())
    said = output.strip() if isinstance(output, str) else None
    return Outcome(output, said, None, ms())
