"""The websocket client's sink: `ClientSink`, audio for a remote player that reports its playback.

The client says how far it has played each generation's audio as it received it; the sink maps
those offsets back to its own positions through the runs it sent since the last flush, so
`played_samples` follows what the user heard, and a wall-clock `PlayClock` until it reports.
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from dllm_voice.audio.resample import PCM, PCM16
from dllm_voice.audio.sinks import PlayClock, as_pcm

log = logging.getLogger(__name__)


@dataclass
class _Run:
    """Samples of one generation sent back to back: client offsets [recv, recv + n) of that
    generation's audio are sink positions [pos, pos + n)."""

    gen: int
    recv: int
    pos: int
    n: int


class ClientSink:
    """Audio for a remote player (the websocket client) that may report what it has played.

    write() queues PCM tagged with the generation `gen_of()` names; a pump sends it in piece_ms
    pieces through `send(gen, pcm_bytes)`, which returns once the message is on the socket, at
    most lead_ms ahead of a wall-clock model of the client's playback (a PlayClock over what was
    sent). played_samples is that model until the client reports (`report()`), and the client's
    reports from then on: an offset into a generation's audio *as the client received it* (every
    message of that id counts) maps back to a sink position through the runs sent since the last
    flush. Either way, audio queued but not yet on the socket, or flushed, is never counted.
    """

    def __init__(
        self,
        send: Callable[[int, bytes], Awaitable[None]],
        gen_of: Callable[[], int],
        sample_rate_hz: int,
        lead_ms: int = 100,
        piece_ms: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sample_rate_hz = sample_rate_hz
        self._send = send
        self._gen_of = gen_of
        self._clock = PlayClock(sample_rate_hz, clock)
        self._now = clock
        self._lead = sample_rate_hz * lead_ms // 1000
        self._piece = max(1, sample_rate_hz * piece_ms // 1000)
        self._snap = -(-sample_rate_hz // 1000)  # reports are whole ms: 1 ms short is the end
        self._pending: deque[tuple[int, PCM16]] = deque()
        self._written = 0  # sink position after the last sample written
        self._sent = 0  # sink position after the last sample on the socket (this epoch)
        self._epoch = 0  # bumped by every flush: a piece in flight across it is not counted
        self._runs: list[_Run] = []  # this epoch's, oldest first
        self._recv: dict[int, int] = {}  # gen -> samples of it on the socket, all epochs
        self.reported = False  # the client reports its playback: played_samples follows it
        self._played = 0  # the client's reported position (once reported)
        self._floor = 0  # position at the last flush: no report goes below it
        self._last_played = 0
        self._progress_t = clock()
        self._pump: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def played_samples(self) -> int:
        return self._played if self.reported else self._clock.played()

    # ---- the client's reports ----------------------------------------------------------------

    def report(self, gen: int, audio_end_ms: float, stopped: bool = False) -> None:
        """The client has played generation `gen` up to `audio_end_ms` of its audio as received;
        `stopped`: it has also dropped the rest it had (a truncate), so it holds no audio now."""
        got = self._recv.get(gen, 0)
        offset = min(round(audio_end_ms * self.sample_rate_hz / 1000), got)
        if got - offset <= self._snap:
            offset = got
        pos = self._position(gen, offset)
        if not self.reported:
            self.reported, self._played = True, self._floor
        if pos is not None:
            self._played = min(max(self._played, pos), self._sent)
        if stopped:
            self._clock.flush()  # its buffer is empty: pacing sends a whole lead again

    def _position(self, gen: int, offset: int) -> int | None:
        """Sink position of `gen`'s received-audio offset, or None if sent before the flush."""
        pos = None
        for run in self._runs:
            if run.gen != gen or offset < run.recv:
                continue
            if offset <= run.recv + run.n:
                return run.pos + offset - run.recv
            pos = run.pos + run.n  # past this run: in audio sent across a flush, or beyond
        return pos

    def _on_sent(self, gen: int, n: int, epoch: int) -> None:
        recv = self._recv.get(gen, 0)
        self._recv[gen] = recv + n
        for old in [g for g in self._recv if g < gen - 8]:
            del self._recv[old]
        if epoch != self._epoch:
            return
        last = self._runs[-1] if self._runs else None
        if (
            last
            and last.gen == gen
            and last.recv + last.n == recv
            and last.pos + last.n == self._sent
        ):
            last.n += n
        else:
            self._runs = [*self._runs[-15:], _Run(gen, recv, self._sent, n)]
        self._sent += n
        self._clock.add(n)

    def stalled_s(self) -> float:
        """How long audio has been waiting to be played with played_samples not moving."""
        played, now = self.played_samples, self._now()
        if played != self._last_played or self._written <= played:
            self._last_played, self._progress_t = played, now
            return 0.0
        return now - self._progress_t

    # ---- the Sink protocol -------------------------------------------------------------------

    async def write(self, pcm: PCM) -> None:
        if self._closed:
            return
        pcm = as_pcm(pcm)
        if self._written <= self.played_samples:  # idle until now: a stall counts from here
            self._last_played, self._progress_t = self.played_samples, self._now()
        self._pending.append((self._gen_of(), pcm))
        self._written += len(pcm)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._run_pump())

    async def _run_pump(self) -> None:
        while self._pending and not self._closed:
            allowed = self._lead - (self._clock.written - self._clock.played())
            while allowed > 0 and self._pending and not self._closed:
                gen, head = self._pending[0]
                take = head[: min(allowed, self._piece)]
                if len(take) == len(head):
                    self._pending.popleft()
                else:
                    self._pending[0] = (gen, head[len(take) :])
                epoch = self._epoch
                try:
                    await self._send(gen, take.astype("<i2").tobytes())
                except Exception as e:  # a closed websocket must not kill the pipeline
                    log.warning("audio: client sink send failed (%s); dropping output", e)
                    self._closed = True
                    self._pending.clear()
                    return
                self._on_sent(gen, len(take), epoch)
                allowed -= len(take)
            await asyncio.sleep(self._piece / self.sample_rate_hz)

    def flush(self) -> None:
        """Drop everything not played: the next write lands at the played position."""
        self._pending.clear()
        self._clock.flush()
        played = self._played if self.reported else self._clock.written
        self._written = self._sent = self._floor = self._played = played
        self._runs.clear()
        self._epoch += 1

    async def drain(self) -> None:
        while not self._closed and self.played_samples < self._written:  # noqa: ASYNC110 - the clock plays it
            await asyncio.sleep(0.02)

    async def aclose(self) -> None:
        self._closed = True
        self._pending.clear()
        if self._pump is not None:
            self._pump.cancel()
