"""How many cores the LM's layer stack may take (kernels/cpu_layers.py): with one conversation,
every one, less one for each job another model of this process runs (speech recognition's
passes and TTS's runs mark themselves busy here), and half for a while after a forward's threads
waited on one of them that the OS had preempted for another process; with several, one below
SHARED_SOLO_ROWS rows.

A leaf module (it imports nothing of the project), so audio/ and kernels/ both use it. On two
cores, a forward on both beside a busy model ran 1.4x slower than on one (Zen 4, one row: 8.4
against 5.8 ms), and slowed that model too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

# After a preempted thread: half the threads for a while, then every core is tried again. The while
# doubles, up to the most, when the try meets the other process again soon after (each try
# costs one slow forward), and starts over at the least after a lone preemption (a daemon's
# wake-up: ~one each 10 s on an idle 2-core machine).
CROWDED_S = (0.25, 2.0)

# Rows a forward runs on one thread while several conversations are live, as it did before the
# barriers spun: their ASR passes and TTS runs start too often for a forward to find the other
# core free, and a job that starts mid-forward meets a spinning thread. `bench.load` could not
# tell the rules apart (six `serve` clients, Zen 4: voice to voice p50 478-743 ms over four runs
# of this rule, 611-612 over two with every forward on both cores spinning), so the rule the
# load targets were met with stays. Waking a sleeping thread at each barrier costs more than it
# gives below ~16 rows.
SHARED_SOLO_ROWS = 16

_lock = threading.Lock()
_crowded_until = 0.0
_back_off = CROWDED_S[0]


class _Count:
    """How many marked spans are open now."""

    def __init__(self) -> None:
        self.n = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        with _lock:
            self.n += 1
        try:
            yield
        finally:
            with _lock:
                self.n -= 1


_jobs = _Count()
_conversations = _Count()


def one_blas_thread() -> None:
    """numpy's BLAS (OpenBLAS) on one thread from now on. Its workers spin after each product
    (the mel filters of every Whisper pass): on 2 cores the spinning one took a core from the
    LM's first forward at the end of the turn (its first token 33-36 -> 27-30 ms, the answer's
    first audio ready 6 ms sooner, Xeon 207); the products are small enough for one thread."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")


def busy() -> AbstractContextManager[None]:
    """Marks one job of another model (an ASR pass, a TTS run) for as long as it runs."""
    return _jobs.held()


def conversation() -> AbstractContextManager[None]:
    """Marks a live conversation (a voice session) for as long as it runs."""
    return _conversations.held()


def crowded() -> None:
    """A forward's threads waited on one the OS had preempted: another process wants a core."""
    global _crowded_until, _back_off
    now = time.monotonic()
    again = now - _crowded_until < _back_off
    _back_off = min(2 * _back_off, CROWDED_S[1]) if again else CROWDED_S[0]
    _crowded_until = now + _back_off


def threads(most: int, rows: int) -> tuple[int, bool]:
    """How many of ``most`` threads a forward of ``rows`` rows may take now (at least one), and
    whether they spin at its barriers: not while several conversations are live, when only
    forwards of over SHARED_SOLO_ROWS rows take every core, and their threads sleep."""
    if _conversations.n > 1:
        return (1 if rows <= SHARED_SOLO_ROWS else most), False
    n = most - _jobs.n
    if time.monotonic() < _crowded_until:
        n = min(n, most // 2)
    return max(1, n), True
