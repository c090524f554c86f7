"""One model's worker thread, shared by every session, that runs first what someone waits on.

With first come, first served, three sessions asking at once saw their final transcripts take
483-622 ms instead of ~3 ms: each final queued behind the other sessions' partial passes. Here
a job carries a priority and a key (its session, or its answer): ``URGENT`` jobs run before any
``LATER`` job, first come first served within a priority (``JobQueue``, pure). A job cannot be
interrupted once it runs, so an urgent job waits for the job running and the urgent ones queued
before it only.

One thread per model: on 2 CPU cores a second thread per model only fights the first, and a
model call is never re-entered from two threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

# An ASR final, the pass the end of a turn waits on, the audio feeds every pass must hear (a
# few µs each), closing a long turn's segment; an answer's first clause.
URGENT = 0
# A regular partial pass (nobody waits on it: the next one hears the same audio and more); a
# clause after an answer's first, which has the clause before it playing (3+ words, ~1 s) to be
# ready in.
LATER = 1

T = TypeVar("T")
# A queued job's future: the jobs of one worker return different types.
JobFuture = asyncio.Future[Any]


@dataclass(eq=False)  # identity: two jobs are never the same job
class Job:
    priority: int
    key: Hashable  # whose job: a session drops its queued jobs when it closes
    run: Callable[[], object]
    seq: int = 0  # submission order; a promoted job takes a new one
    future: JobFuture | None = field(default=None, repr=False)


class JobQueue:
    """The order of one worker's queued jobs: by priority, then by submission (or promotion).

    A few jobs a session are queued at most (one pass, a few 30 ms audio feeds, one clause), so
    a list scanned per pop is enough."""

    def __init__(self) -> None:
        self._jobs: list[Job] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job: Job) -> bool:
        return job in self._jobs

    def push(self, job: Job) -> None:
        job.seq = next(self._seq)
        self._jobs.append(job)

    def pop(self) -> Job | None:
        """The next job to run, or None when nothing is queued."""
        if not self._jobs:
            return None
        job = min(self._jobs, key=lambda j: (j.priority, j.seq))
        self._jobs.remove(job)
        return job

    def promote(self, job: Job, priority: int) -> bool:
        """Give a queued job a higher ``priority``, behind what is queued there now (a pass
        promoted at a pause then hears every audio feed queued before it). False when it is not
        queued (it runs or ran)."""
        if job not in self:
            return False
        if priority < job.priority:
            job.priority, job.seq = priority, next(self._seq)
        return True

    def remove(self, job: Job) -> bool:
        if job not in self._jobs:
            return False
        self._jobs.remove(job)
        return True

    def drop(self, key: Hashable) -> list[Job]:
        """Take every queued job of ``key`` out; returns them."""
        dropped = [j for j in self._jobs if j.key == key]
        self._jobs = [j for j in self._jobs if j.key != key]
        return dropped


class Worker:
    """One thread running one model's jobs in ``JobQueue`` order. ``submit`` returns an asyncio
    future, as ``loop.run_in_executor`` does; cancelling it drops the job if it is still queued
    (a running job finishes, its result unused)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue = JobQueue()
        self._jobs: dict[JobFuture, Job] = {}  # by future, until it is done
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(
        self, fn: Callable[..., T], *args: object, priority: int, key: Hashable
    ) -> asyncio.Future[T]:
        """Queue ``fn(*args)``; call from the event loop whose future it returns."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        job = Job(priority, key, lambda: fn(*args), future=fut)
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self.name} worker is closed")
            self._queue.push(job)
            self._jobs[fut] = job
            if self._thread is None:
                # Daemon: a process that never closes its components still exits.
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()
        fut.add_done_callback(self._forget)
        return fut

    def promote(self, fut: JobFuture, priority: int) -> bool:
        """Raise the priority of the job behind ``fut``; False when it is no longer queued."""
        with self._cond:
            job = self._jobs.get(fut)
            return job is not None and self._queue.promote(job, priority)

    def drop(self, key: Hashable) -> None:
        """Cancel every queued job of ``key`` (a closed session's, a cancelled answer's)."""
        with self._cond:
            dropped = self._queue.drop(key)
        for job in dropped:
            if job.future is not None:
                job.future.cancel()

    def _forget(self, fut: JobFuture) -> None:
        with self._cond:
            job = self._jobs.pop(fut, None)
            if job is not None and fut.cancelled():
                self._queue.remove(job)

    def _loop(self) -> None:
        while self._run_next():
            pass

    def _run_next(self) -> bool:
        """Run the next job; False once closed with nothing left. The job goes out of scope
        when this returns: a finished job must not keep its session alive while the worker
        waits for the next one."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            job = self._queue.pop()
        if job is None:
            return False
        fut = job.future
        assert fut is not None
        if fut.cancelled():  # by its awaiter, before the loop ran _forget
            return True
        try:
            result, exc = job.run(), None
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting side
            result, exc = None, e
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody awaits
            fut.get_loop().call_soon_threadsafe(_settle, fut, result, exc)
        return True

    def close(self) -> None:
        """Cancel the queued jobs, wait for the running one, end the thread."""
        with self._cond:
            self._closed = True
            dropped = []
            while (job := self._queue.pop()) is not None:
                dropped.append(job)
            self._cond.notify()
            thread = self._thread
        for job in dropped:
            if job.future is not None:
                with contextlib.suppress(RuntimeError):
                    job.future.get_loop().call_soon_threadsafe(job.future.cancel)
        if thread is not None:
            thread.join()


def _settle(fut: JobFuture, result: object, exc: BaseException | None) -> None:
    if fut.done():  # cancelled while it ran
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
