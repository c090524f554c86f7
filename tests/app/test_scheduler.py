"""The ASR/TTS workers' order (app/conversation/scheduler.py): urgent before later, first come
first served within a priority, promotion, dropping a key's jobs; and the thread that runs them."""

from __future__ import annotations

import asyncio
import threading

import pytest

from dllm_voice.app.conversation.scheduler import LATER, URGENT, Job, JobQueue, Worker


def job(name: str, priority: int, key: str = "a") -> Job:
    return Job(priority, key, lambda: name)


class Blocker:
    """A job that holds the worker's thread until `release()`: what is queued behind it waits."""

    def __init__(self) -> None:
        self.gate, self.started = threading.Event(), threading.Event()

    def __call__(self) -> str:
        self.started.set()
        self.gate.wait(5)
        return "held"

    async def running(self) -> None:
        await asyncio.to_thread(self.started.wait, 5)

    def release(self) -> None:
        self.gate.set()


def drain(q: JobQueue) -> list[str]:
    out = []
    while (j := q.pop()) is not None:
        out.append(j.run())
    return out


def test_urgent_jobs_go_first_then_first_come_first_served():
    q = JobQueue()
    for j in [
        job("a partial", LATER, "a"),
        job("b feed", URGENT, "b"),
        job("b partial", LATER, "b"),
        job("c final", URGENT, "c"),
        job("a clause 2", LATER, "a"),
        job("b final", URGENT, "b"),
    ]:
        q.push(j)
    assert drain(q) == ["b feed", "c final", "b final", "a partial", "b partial", "a clause 2"]
    assert q.pop() is None and len(q) == 0


def test_a_promoted_job_goes_behind_what_is_urgent_now():
    q = JobQueue()
    pause_pass = job("a pass", LATER, "a")
    for j in [pause_pass, job("b partial", LATER, "b"), job("a feed 1", URGENT, "a")]:
        q.push(j)
    assert q.promote(pause_pass, URGENT)
    q.push(job("a feed 2", URGENT, "a"))
    # It hears the feed queued before the promotion, not the one after.
    assert drain(q) == ["a feed 1", "a pass", "a feed 2", "b partial"]


def test_promote_never_lowers_and_fails_once_a_job_left_the_queue():
    q = JobQueue()
    final, other = job("final", URGENT), job("other", URGENT)
    q.push(final)
    q.push(other)
    assert q.promote(final, LATER) and final.priority == URGENT
    assert drain(q) == ["final", "other"]
    assert not q.promote(final, URGENT)


def test_remove_and_drop_take_jobs_out():
    q = JobQueue()
    a1, a2, b1 = job("a1", LATER, "a"), job("a2", URGENT, "a"), job("b1", LATER, "b")
    for j in (a1, a2, b1):
        q.push(j)
    assert q.remove(a1) and not q.remove(a1)
    assert q.drop("a") == [a2] and q.drop("a") == []
    assert drain(q) == ["b1"]


def test_worker_runs_by_priority_and_returns_awaitable_futures():
    w, hold, ran = Worker("test"), Blocker(), []

    async def main():
        held = w.submit(hold, priority=LATER, key="x")
        await hold.running()
        futs = [
            w.submit(ran.append, "a partial", priority=LATER, key="a"),
            w.submit(ran.append, "b final", priority=URGENT, key="b"),
            w.submit(lambda: 1 / 0, priority=URGENT, key="b"),
        ]
        hold.release()
        await held
        assert await futs[0] is None and await futs[1] is None
        with pytest.raises(ZeroDivisionError):
            await futs[2]
        assert await w.submit(pow, 2, 10, priority=LATER, key="c") == 1024

    asyncio.run(main())
    w.close()
    assert ran == ["b final", "a partial"]
    assert not any(t.name == "test" for t in threading.enumerate())


def test_worker_drops_cancelled_and_dropped_jobs():
    w, hold, ran = Worker("test"), Blocker(), []

    async def main():
        held = w.submit(hold, priority=URGENT, key="a")
        await hold.running()
        cancelled = w.submit(ran.append, "cancelled", priority=URGENT, key="b")
        dropped = [w.submit(ran.append, f"a{i}", priority=LATER, key="a") for i in range(2)]
        later = w.submit(ran.append, "later", priority=LATER, key="b")
        kept = w.submit(ran.append, "kept", priority=LATER, key="b")
        assert w.promote(kept, URGENT) and not w.promote(held, URGENT)
        cancelled.cancel()
        w.drop("a")  # the running job of "a" finishes; its queued ones never run
        assert all(f.cancelled() for f in dropped)
        hold.release()
        await asyncio.gather(held, later, kept)

    asyncio.run(main())
    w.close()
    assert ran == ["kept", "later"]


def test_close_cancels_queued_jobs_waits_for_the_running_one_and_refuses_more():
    w, hold, ran = Worker("test"), Blocker(), []

    async def main():
        held = w.submit(hold, priority=URGENT, key="a")
        await hold.running()
        queued = w.submit(ran.append, "never", priority=URGENT, key="b")
        closing = asyncio.create_task(asyncio.to_thread(w.close))
        while not queued.done():
            await asyncio.sleep(0.01)
        assert queued.cancelled() and not held.done()
        hold.release()
        await closing
        assert await held == "held"
        with pytest.raises(RuntimeError, match="closed"):
            w.submit(print, priority=URGENT, key="a")

    asyncio.run(main())
    assert ran == [] and not any(t.name == "test" for t in threading.enumerate())
