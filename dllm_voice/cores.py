"""How many cores the LM's layer stack may take (kernels/cpu_layers.py): every one, less one for
each job another model of this process runs (speech recognition's passes and TTS's runs mark
themselves busy here), and half for a while after a forward's threads waited on one of them
that the OS had preempted for another process.

A leaf module (it imports nothing of the project), so audio/ and kernels/ both use it. On two
cores, a forward on both beside a busy model ran 1.4x slower than on one (Zen 4, one row: 8.4
against 5.8 ms), and slowed that model too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# After a preempted thread: one thread for a while, then every core is tried again. The while
# doubles, up to the most, when the try meets the other process again soon after (each try
# costs one slow forward), and starts over at the least after a lone preemption (a daemon's
# wake-up: ~one each 10 s on an idle 2-core machine).
CROWDED_S = (0.25, 2.0)

_lock = threading.Lock()
_running = 0
_crowded_until = 0.0
_back_off = CROWDED_S[0]


@contextmanager
def busy() -> Iterator[None]:
    """Marks one job of another model (an ASR pass, a TTS run) for as long as it runs."""
    global _running
    with _lock:
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1


def crowded() -> None:
    """A forward's threads waited on one the OS had preempted: another process wants a core."""
    global _crowded_until, _back_off
    now = time.monotonic()
    again = now - _crowded_until < _back_off
    _back_off = min(2 * _back_off, CROWDED_S[1]) if again else CROWDED_S[0]
    _crowded_until = now + _back_off


def threads(most: int) -> int:
    """How many of ``most`` threads a forward may take now (at least one)."""
    n = most - _running
    if time.monotonic() < _crowded_until:
        n = min(n, most // 2)
    return max(1, n)
