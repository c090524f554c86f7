"""The conversation's LM thread: its chat session and every LM job of the conversation, in order.

A ``ChatSession`` is not thread-safe, so one conversation's jobs (answers, end-of-turn scores,
prefills) run one at a time in its own thread; sessions' threads run side by side and their
decoding steps share forwards (model/batch.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from dllm_voice.app.conversation.scheduler import JobFuture

if TYPE_CHECKING:
    from dllm_voice.app.conversation.ports import ChatSession

log = logging.getLogger(__name__)
T = TypeVar("T")


class LMThread:
    """``session``'s jobs in one thread; ``run`` and ``prefill`` from the event loop."""

    def __init__(self, session: ChatSession) -> None:
        self.session = session
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="lm")
        self._jobs: set[JobFuture] = set()  # end-of-turn scores, prefills: awaited at close
        self._warming: asyncio.Future[int] | None = None  # the prefill under way

    def run(self, fn: Callable[..., T], *args: object) -> asyncio.Future[T]:
        """``fn(*args)`` in the LM thread, awaited at close."""
        fut = asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
        self._jobs.add(fut)
        fut.add_done_callback(self._jobs.discard)
        return fut

    @property
    def warming(self) -> bool:
        """A prefill is under way: the next one waits for it (it starts from where it left)."""
        return self._warming is not None

    def prefill(self, messages: list[dict[str, str]]) -> None:
        """Warm the session's cache with the prompt ``messages`` start; one at a time
        (``warming``)."""
        self._warming = fut = self.run(self.session.prefill, messages)

        def done(f: asyncio.Future[int]) -> None:
            self._warming = None
            if not f.cancelled() and f.exception() is not None:
                log.warning("LM prefill failed: %s", f.exception())

        fut.add_done_callback(done)

    async def close(self) -> None:
        """Wait for the jobs started here, then let the thread go."""
        for fut in list(self._jobs):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await fut
        self.executor.shutdown(wait=False)  # its jobs have ended: cancelled and awaited
