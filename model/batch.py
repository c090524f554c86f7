"""Continuous batching across sessions: the forwards of concurrent generations run as one.

Each session's generation runs in its own thread and calls the model as if it were alone: its
decoder's forward (`DecodeRequest.forward`) is the batcher. `StepBatcher` collects the calls
that arrive together and runs them as one `Transformer.forward_many`: on CPU a forward's cost is
mostly reading the weights once, so three sessions' rows in one forward cost little more than
one session's (BENCHMARKS.md, "Several sessions"). Generations join and leave between steps;
each still checks its own cancel before every step, so a cancel takes effect within one batched
forward. A row's bits do not depend on the rows beside it (kernels/cpu_rows.py), so every
session gets exactly the tokens it would get alone.

When to run: a call waits until every generation that is between two steps (a thread whose
last call returned within RECENT_MS) has handed in its next call, or `wait_ms` has passed - a
generation busy elsewhere (chunking its text, a drafter pass) does not hold the others back for
longer than that. One batch runs at a time; calls that arrive meanwhile form the next.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import torch

from dllm_voice.model.kv_cache import KVCache
from dllm_voice.model.transformer import Call, ForwardOut, Transformer

# How long a ready call waits for the other generations' calls: longer than a step's own Python
# between forwards (up to 1 ms), shorter than half a forward when a generation is busy elsewhere.
WAIT_MS = 2.0
# A thread whose call returned this recently is a generation between two steps: batches wait (up
# to WAIT_MS) for its next call. One that has been away longer (a speculative answer parked
# after its first clause, an ended generation that did not `leave`) is not waited for.
RECENT_MS = 20.0


@dataclass
class _Pending:
    call: Call
    thread: int
    out: ForwardOut | None = None
    error: BaseException | None = None
    done: bool = False
    t0: float = field(default_factory=time.perf_counter)


class StepBatcher:
    """Runs concurrent `forward` calls on one model as batched forwards (module docstring)."""

    def __init__(self, model: Transformer, wait_ms: float = WAIT_MS) -> None:
        self.model = model
        self.wait_s = wait_ms / 1e3
        self._cond = threading.Condition()
        self._pending: list[_Pending] = []
        self._last: dict[int, float] = {}  # thread -> when its last call returned
        self._running = False
        self._free_at = 0.0  # when the last batch ended
        self.batches = 0  # forwards run, and the calls they carried: the batching's stats
        self.calls = 0

    def leave(self) -> None:
        """The calling thread's generation has ended: batches stop waiting for its next call."""
        with self._cond:
            self._last.pop(threading.get_ident(), None)
            self._cond.notify_all()

    def sessions(self) -> int:
        """Generations whose steps share forwards now (those that forwarded within RECENT_MS
        or are waiting to), at least 1: what a hybrid decoder sizes its draft tree for."""
        with self._cond:
            recent = time.perf_counter() - RECENT_MS / 1e3
            active = {t for t, at in self._last.items() if at >= recent}
            return max(1, len(active | {p.thread for p in self._pending}))

    def _expected(self, now: float) -> int:
        """Threads that forwarded within RECENT_MS and have not handed in their next call."""
        waiting = {p.thread for p in self._pending}
        recent = now - RECENT_MS / 1e3
        return sum(1 for t, at in self._last.items() if at >= recent and t not in waiting)

    def __call__(
        self,
        ids: torch.Tensor | None = None,
        *,
        cache: KVCache,
        embeds: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        write: int | None = None,
        logits: str | int = "all",
        hidden: bool = False,
    ) -> ForwardOut:
        """The model's forward on these arguments, run together with the calls other threads
        hand in now: a decoder's `DecodeRequest.forward` (a transformer.Forward)."""
        call = Call(cache, ids, embeds, positions, mask, write, logits, hidden)
        me = _Pending(call, threading.get_ident())
        with self._cond:
            self._pending.append(me)
            self._cond.notify_all()
            while not me.done:
                if not self._running:
                    now = time.perf_counter()
                    # From when the call came or the last batch ended: the calls of that batch's
                    # sessions come back a few hundred us after it.
                    waited = now - max(self._pending[0].t0, self._free_at)
                    if waited >= self.wait_s or not self._expected(now):
                        batch, self._pending, self._running = self._pending, [], True
                        break
                    self._cond.wait(self.wait_s - waited)
                else:
                    self._cond.wait()
        if not me.done:
            try:
                self._run(batch)
            finally:
                with self._cond:
                    self._running = False
                    self._free_at = now = time.perf_counter()
                    recent = now - RECENT_MS / 1e3
                    # Forget threads gone quiet (ended sessions' threads never come back).
                    self._last = {t: at for t, at in self._last.items() if at >= recent}
                    for p in batch:
                        self._last[p.thread] = now
                    self._cond.notify_all()
        if me.error is not None:
            raise me.error
        assert me.out is not None, "a batch ended without this call's output"
        return me.out

    def _run(self, batch: list[_Pending]) -> None:
        """One forward for the batch. A call its cache has no room for fails alone, before the
        forward (ContextOverflowError, as `forward` raises it), so it reaches only its session."""
        ready = []
        for p in batch:
            try:
                p.call.check_room()
                ready.append(p)
            except Exception as e:  # noqa: BLE001 - handed to the caller's thread
                p.error = e
        try:
            if ready:
                with torch.inference_mode():
                    outs = self.model.forward_many([p.call for p in ready])
                for p, out in zip(ready, outs, strict=True):
                    p.out = out
        except Exception as e:  # noqa: BLE001 - each caller raises it in its own thread
            for p in ready:
                p.error = e
        finally:
            self.batches += bool(ready)
            self.calls += len(ready)
            for p in batch:
                p.done = True
