"""The local speaker: `SpeakerSink`, a sounddevice callback stream that plays until closed.

It reports each block it hands the device (the echo canceller's reference), underruns, and a
restart after a flush; `played_samples` counts what left the device buffer, so it follows the ear.
"""

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable

from dllm_voice.audio.config import AudioConfig
from dllm_voice.audio.devices import CallbackFlags, resolve_device, sounddevice
from dllm_voice.audio.errors import AudioDeviceError
from dllm_voice.audio.resample import PCM, PCM16
from dllm_voice.audio.sinks import as_pcm

log = logging.getLogger(__name__)


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
        pcm = as_pcm(pcm)
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
