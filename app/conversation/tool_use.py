"""A conversation's tools: which it may call, what its calls did, and what they say later.

``ToolUse`` holds one session's ``ToolBox`` (the server's tools plus the client's, from
``session.update``), the ``Ledger`` of call results by turn, the client calls waiting for
their output, and the ``ToolContext`` its tools run with. A timer that goes off while the
user talks, or while an answer is under way, waits for the turn to end, then is said.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dllm_voice.app.conversation.actions import StartAnswer
from dllm_voice.app.tools.calls import Ledger
from dllm_voice.app.tools.chooser import ToolChooser
from dllm_voice.app.tools.config import ToolsConfig
from dllm_voice.app.tools.registry import ToolBox, ToolContext, ToolDefinitionError, client_tool

if TYPE_CHECKING:
    from dllm_voice.app.conversation.session import VoiceSession


class ToolUse:
    """The tools of ``session``'s conversation."""

    def __init__(self, session: VoiceSession) -> None:
        self.s = session
        tools = session.c.tools
        self.box = tools.box if tools is not None else ToolBox()
        # With no server tools a client's tools are still chosen, by name.
        self.chooser = tools.chooser if tools is not None else ToolChooser(None, 1.0)
        self.cfg = tools.cfg if tools is not None else ToolsConfig()
        self.ledger = Ledger()
        self.pending: dict[str, tuple[int, str]] = {}  # client call id -> (turn, tool name)
        self.outputs = 0  # client outputs noted since the last answer
        self.output_texts: list[str] = []  # and what they said
        self.ctx = ToolContext(say=self._say_soon)
        self._notices: deque[str] = deque()
        self._said: set[int] = set()  # generations that speak a notice, not answer a turn
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    def set_client_tools(self, specs: object, choice: object) -> None:
        """``session.update``'s ``tools`` (Realtime function descriptions) and ``tool_choice``;
        ToolDefinitionError says what is wrong."""
        if specs is not None and not isinstance(specs, list):
            raise ToolDefinitionError("tools must be a list of function descriptions")
        if choice is not None and not isinstance(choice, str | dict):
            raise ToolDefinitionError("tool_choice must be auto, none, required or a tool name")
        if isinstance(choice, dict):
            choice = choice.get("name")
        given = [client_tool(spec) for spec in specs if isinstance(spec, Mapping)] if specs else []
        if specs and len(given) != len(specs):
            raise ToolDefinitionError("each tool must be an object")
        client = [t for t in self.box.tools.values() if t.client_side]
        new_choice = choice if isinstance(choice, str) else self.box.choice
        self.box = self.box.with_client_tools(given if specs is not None else client, new_choice)

    def output(self, call_id: str, output: str) -> None:
        """A client's ``function_call_output``: noted in the turn that called; a call id not
        waiting (unknown, answered, or of a turn the user has moved on from) is refused."""
        waiting = self.pending.pop(call_id, None)
        if waiting is None:
            raise ToolDefinitionError(f"no call {call_id!r} is waiting for its output")
        turn, name = waiting
        if turn != self.s.tm.turn:
            raise ToolDefinitionError(f"call {call_id!r} is late: the user has spoken since")
        self.s.tm.history.note_tool(name, output)
        self.outputs += 1
        self.output_texts.append(output.strip())

    def answer_from_outputs(self) -> str | None:
        """Answer the turn again from the client's tool outputs noted in it (``response.create``
        after ``function_call_output``): said as they are when they read as sentences, else the
        LM answers from them. Returns why not, or None."""
        s = self.s
        if s.hearing_user():
            return "the user is speaking"
        actions = s.tm.answer_again()
        if not actions:
            return "an answer is under way"
        spoken = self.spoken_outputs()
        self.outputs, self.output_texts = 0, []
        if spoken is None:
            s.do(actions)
        else:
            start = actions[0]
            assert isinstance(start, StartAnswer)
            s.responses.say(start.gen, spoken)
        return None

    def spoken_outputs(self) -> str | None:
        """The client's outputs as the answer, when each already reads as a short spoken
        sentence ("Order 4521 shipped on Monday."): a 135M LM rephrasing one drops its facts.
        None for data (JSON, lists, long text), which the LM answers from."""
        texts = self.output_texts
        if texts and all(_sentence(t) for t in texts):
            return " ".join(texts)
        return None

    # ---- what the agent says unasked ----------------------------------------------------------

    def _say_soon(self, text: str) -> None:
        """From a tool's thread (a timer)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._notice, text)

    def _notice(self, text: str) -> None:
        self._notices.append(text)
        self.speak_notices()

    def speak_notices(self) -> None:
        """Say what waits, if nobody is talking and no answer is under way."""
        s = self.s
        while self._notices and not s.hearing_user():
            gen = s.tm.announce()
            if gen is None:
                return
            self._said.add(gen)
            s.responses.say(gen, self._notices.popleft())

    @property
    def choice(self) -> str:
        return self.box.choice

    @property
    def waiting(self) -> bool:
        return bool(self._notices)

    def is_notice(self, gen: int) -> bool:
        return gen in self._said

    def close(self) -> None:
        self.ctx.close()

    def names(self) -> Sequence[str]:
        return list(self.box.tools)


MAX_SPOKEN_WORDS = 40  # a tool's sentence longer than this is data for the LM to sum up


def _sentence(text: str) -> bool:
    """Prose that ends a sentence, no markup or data brackets, at most MAX_SPOKEN_WORDS words."""
    return (
        text[-1:] in ".!?"
        and not any(c in text for c in "{}[]<>|=")
        and 0 < len(text.split()) <= MAX_SPOKEN_WORDS
    )
