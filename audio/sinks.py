"""Audio sinks: speaker (sounddevice), WAV file, callback, client (websocket). int16 mono in.

Every sink reports `played_samples`, the audio actually played since open, so the pipeline
knows which words the user heard when it is interrupted; `flush()` drops everything not yet
played at once (the speaker aborts its device stream, dropping its buffer). WAV and callback
sinks pace "playback" by the wall clock when realtime=True (a `PlayClock`), so barge-in behaves
as with a speaker. The client sink (the websocket) counts what its remote player reports having
played, or that clock until it does.
"""

import asyncio
import logging
import threading
import time
import wave
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from dllm_voice.audio.config import AudioConfig
from dllm_voice.audio.devices import CallbackFlags, resolve_device, sounddevice
from dllm_voice.audio.errors import AudioDeviceError, AudioFormatError
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


def _as_pcm(pcm: PCM) -> PCM16:
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
        pcm = _as_pcm(pcm)
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
        pcm = _as_pcm(pcm)
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
        pcm = _as_pcm(pcm)
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


class SpeakerSink:
    """Speaker via a sounddevice callback stream that runs (silence when idle) until aclose.

    The device buffer (output_buffer_ms) is the margin against a late callback: the callback
    needs the GIL, which it waited up to 436 ms for while the models ran (an underrun: ALSA
    prints a line, the voice clicks). A flush does not wait for that buffer to play out: it
    aborts the stream, which drops what the device holds at once, and starts it again (~2 ms;
    then on_restart() is called: the blocks handed before it are not all what played).
    played_samples counts what was handed to the device minus the speech still in its buffer,
    so it follows the ear. on_played(block, rate_hz) is called from the audio thread with every
    block sent to the device, silence included, so an echo canceller gets a time-aligned
    reference; on_underrun() when the device ran dry (it played a gap that reference does not
    have).
    """

    def __init__(
        self,
        cfg: AudioConfig,
        on_played: Callable[[PCM16, int], None] | None = None,
        on_restart: Callable[[], None] | None = None,
        on_underrun: Callable[[], None] | None = None,
    ) -> None:
        sd = sounddevice()
        self.device, info = resolve_device(cfg.output_device, "output")
        self.sample_rate_hz = cfg.output_rate_hz or int(info["default_samplerate"])
        self._on_played, self._on_restart = on_played, on_restart
        self._on_underrun = on_underrun
        self._queue: deque[PCM16] = deque()
        self._lock = threading.Lock()
        self._handed = 0  # speech samples handed to the device since open, net of flushes
        self._queued = 0
        self._block = self.sample_rate_hz // 100  # 10 ms blocks
        try:
            self._stream = sd.OutputStream(
                device=self.device,
                samplerate=self.sample_rate_hz,
                channels=1,
                dtype="int16",
                blocksize=self._block,
                latency=cfg.output_buffer_ms / 1000.0,
                callback=self._callback,
            )
        except Exception as e:  # sounddevice.PortAudioError
            raise AudioDeviceError(
                f"cannot open output device {info['name']!r} at {self.sample_rate_hz} Hz ({e}); "
                "pick another with audio.output_device or set audio.output_rate_hz"
            ) from e
        self.latency_s = float(self._stream.latency)
        # Speech samples of the blocks still in the device buffer (one entry per block).
        in_buffer = -(-round(self.latency_s * self.sample_rate_hz) // self._block)
        self._in_device: deque[int] = deque(maxlen=max(1, in_buffer))
        self._name = info["name"]
        self.underruns = self.underruns_speaking = 0
        log.info(
            "speaker: %r at %d Hz, %.0f ms buffer",
            info["name"],
            self.sample_rate_hz,
            1000 * self.latency_s,
        )

    def start(self) -> None:
        """Start playing (silence until written to). Separate from opening: a stream started
        before the models load underruns all through the load (the callback waits for the GIL)."""
        if self._stream.active:
            return
        try:
            self._stream.start()
        except Exception as e:  # sounddevice.PortAudioError
            raise AudioDeviceError(f"cannot start output device {self._name!r} ({e})") from e

    def _callback(self, outdata: PCM16, frames: int, t: object, status: CallbackFlags) -> None:
        if status and status.output_underflow:
            self.underruns += 1
            if self._queued > 0 or (self._in_device and self._in_device[-1]):
                self.underruns_speaking += 1  # a gap in the agent's voice, not in silence
            if self._on_underrun is not None:
                self._on_underrun()
        out = outdata[:, 0]
        filled = 0
        with self._lock:
            while filled < frames and self._queue:
                head = self._queue[0]
                take = min(frames - filled, len(head))
                out[filled : filled + take] = head[:take]
                filled += take
                if take == len(head):
                    self._queue.popleft()
                else:
                    self._queue[0] = head[take:]
            self._handed += filled
            self._queued -= filled
            self._in_device.append(filled)
        out[filled:] = 0
        if self._on_played is not None:
            self._on_played(out.copy(), self.sample_rate_hz)

    @property
    def played_samples(self) -> int:
        with self._lock:
            return self._handed - sum(self._in_device)

    async def write(self, pcm: PCM) -> None:
        pcm = _as_pcm(pcm)
        self.start()
        with self._lock:
            self._queue.append(pcm)
            self._queued += len(pcm)

    def flush(self) -> None:
        with self._lock:
            self._queue.clear()
            self._queued = 0
            speech_in_device = sum(self._in_device)
        if not speech_in_device or not self._stream.active:
            return
        self._stream.abort()  # waits for a running callback; the device buffer is dropped
        with self._lock:
            self._handed -= sum(self._in_device)
            self._in_device.clear()
        if self._on_restart is not None:
            self._on_restart()
        self.start()

    async def drain(self) -> None:
        while self._queued > 0 and self._stream.active:  # noqa: ASYNC110 - the clock plays it
            await asyncio.sleep(0.01)
        await asyncio.sleep(self.latency_s)

    async def aclose(self) -> None:
        self.flush()
        self._stream.stop()
        self._stream.close()
        log.info(
            "speaker: %d underruns, %d while speaking", self.underruns, self.underruns_speaking
        )
