"""Audio sinks: the `Sink` protocol, and the WAV file and callback sinks. int16 mono in.

Every sink reports `played_samples`, the audio actually played since open, so the pipeline
knows which words the user heard when it is interrupted; `flush()` drops everything not yet
played at once. WAV and callback sinks pace "playback" by the wall clock when realtime=True (a
`PlayClock`), so barge-in behaves as with a speaker. The speaker is speaker.py's `SpeakerSink`
(it aborts its device stream on a flush); the websocket client's is client_sink.py's
`ClientSink` (what its remote player reports having played, or that clock until it does).
"""

import asyncio
import logging
import time
import wave
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from dllm_voice.audio.errors import AudioFormatError
from dllm_voice.audio.resample import PCM, PCM16, to_int16

log = logging.getLogger(__name__)


class Sink(Protocol):
    sample_rate_hz: int

    async def write(self, pcm: PCM) -> None: ...

    def flush(self) -> None: ...

    @property
    def played_samples(self) -> int: ...

    async def drain(self) -> None: ...

    async def aclose(self) -> None: ...


def as_pcm(pcm: PCM) -> PCM16:
    """Mono PCM as int16; an AudioFormatError for any other shape."""
    a = np.asarray(pcm)
    if a.ndim != 1:
        raise AudioFormatError(f"sinks take mono 1-D PCM, got shape {a.shape}")
    return to_int16(a)


class PlayClock:
    """Wall-clock model of a player: written audio plays from when it arrives, back to back.

    Pure bookkeeping (the clock is injectable for tests).
    """

    def __init__(self, rate_hz: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate_hz
        self._clock = clock
        self.written = 0  # samples accepted and not flushed
        self._base = 0  # samples played before the current run
        self._run_start = 0.0
        self._run = 0  # samples in the current run

    def played(self) -> int:
        elapsed = max(0.0, self._clock() - self._run_start)
        return self._base + min(self._run, int(elapsed * self.rate))

    def add(self, n: int) -> None:
        if self.played() >= self.written:  # idle: a new run starts now
            self._base, self._run, self._run_start = self.written, 0, self._clock()
        self._run += n
        self.written += n

    def flush(self) -> int:
        """Drop unplayed audio; returns how many samples were dropped."""
        played = self.played()
        dropped = self.written - played
        self.written = self._base = played
        self._run = 0
        return dropped

    def remaining_s(self) -> float:
        return (self.written - self.played()) / self.rate


class WavSink:
    """Writes played audio to a WAV file; with realtime=True only what played before a flush."""

    def __init__(self, path: str | Path, sample_rate_hz: int, realtime: bool = True) -> None:
        self.path = Path(path)
        self.sample_rate_hz = sample_rate_hz
        self.realtime = realtime
        self._clock = PlayClock(sample_rate_hz)
        self._pending: deque[PCM16] = deque()
        self._committed = 0
        try:
            self._wav = wave.open(str(self.path), "wb")  # noqa: SIM115 (open until aclose)
        except OSError as e:
            raise AudioFormatError(f"cannot write WAV {self.path}: {e}") from e
        self._wav.setnchannels(1)
        self._wav.setsampwidth(2)
        self._wav.setframerate(sample_rate_hz)
        self._closed = False

    @property
    def played_samples(self) -> int:
        return self._clock.played() if self.realtime else self._clock.written

    def _commit(self) -> None:
        """Move what has played from the pending queue into the file."""
        n = self.played_samples - self._committed
        while n > 0 and self._pending:
            head = self._pending[0]
            take = head[:n]
            self._wav.writeframes(take.astype("<i2").tobytes())
            self._committed += len(take)
            n -= len(take)
            if len(take) == len(head):
                self._pending.popleft()
            else:
                self._pending[0] = head[len(take) :]

    async def write(self, pcm: PCM) -> None:
        if self._closed:
            return
        pcm = as_pcm(pcm)
        self._commit()
        self._pending.append(pcm)
        self._clock.add(len(pcm))
        self._commit()

    def flush(self) -> None:
        self._clock.flush()  # freezes played == written first, then the file gets exactly that
        self._commit()
        self._pending.clear()

    async def drain(self) -> None:
        while self.realtime and self._clock.remaining_s() > 0:  # noqa: ASYNC110 - the clock plays it
            await asyncio.sleep(min(0.05, self._clock.remaining_s()))
        self._commit()

    async def aclose(self) -> None:
        """Drains first (flush() before aclose() to drop unplayed audio)."""
        if not self._closed:
            await self.drain()
            self._closed = True
            self._wav.close()


class CallbackSink:
    """Sends PCM16LE bytes through `send` (the websocket), paced lead_ms ahead of playback."""

    def __init__(
        self,
        send: Callable[[bytes], Awaitable[None]],
        sample_rate_hz: int,
        realtime: bool = True,
        lead_ms: int = 100,
        piece_ms: int = 20,
    ) -> None:
        self.sample_rate_hz = sample_rate_hz
        self.realtime = realtime
        self._send = send
        self._clock = PlayClock(sample_rate_hz)
        self._lead = sample_rate_hz * lead_ms // 1000
        self._piece = max(1, sample_rate_hz * piece_ms // 1000)
        self._pending: deque[PCM16] = deque()
        self._sent = 0
        self._pump: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def played_samples(self) -> int:
        return self._clock.played()

    async def _deliver(self, pcm: PCM16) -> None:
        try:
            await self._send(pcm.astype("<i2").tobytes())
        except Exception as e:  # a closed websocket must not kill the pipeline
            log.warning("audio: callback sink send failed (%s); dropping output", e)
            self._closed = True
            self._pending.clear()

    async def write(self, pcm: PCM) -> None:
        if self._closed:
            return
        pcm = as_pcm(pcm)
        self._clock.add(len(pcm))
        if not self.realtime:
            self._sent += len(pcm)
            await self._deliver(pcm)
            return
        self._pending.append(pcm)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._run_pump())

    async def _run_pump(self) -> None:
        while self._pending and not self._closed:
            allowed = self._clock.played() + self._lead - self._sent
            while allowed > 0 and self._pending:
                head = self._pending[0]
                take = head[: min(allowed, self._piece)]
                if len(take) == len(head):
                    self._pending.popleft()
                else:
                    self._pending[0] = head[len(take) :]
                self._sent += len(take)
                allowed -= len(take)
                await self._deliver(take)
            await asyncio.sleep(self._piece / self.sample_rate_hz)

    def flush(self) -> None:
        self._pending.clear()
        self._clock.flush()
        self._sent = min(self._sent, self._clock.written)

    async def drain(self) -> None:
        while not self._closed and (self._pending or self._clock.remaining_s() > 0):  # noqa: ASYNC110 - the clock plays it
            await asyncio.sleep(min(0.05, max(0.005, self._clock.remaining_s())))

    async def aclose(self) -> None:
        self._closed = True
        self._pending.clear()
        if self._pump is not None:
            self._pump.cancel()
