"""Audio sources: async iterators of int16 mono frames at 16 kHz, frame_ms long.

WavSource reads a WAV (8/16/24/32-bit PCM or 32/64-bit float, plain or WAVE_FORMAT_EXTENSIBLE,
any rate, any channels) block by block, down-mixes, resamples, and paces in real time or not.
MicSource opens a sounddevice input at the device's own rate (44.1/48 kHz stereo is the norm) and
converts in the event loop. PushSource is fed by the websocket server with PCM16LE bytes (odd
byte counts are carried over) or arrays.
All: `async for frame in source:` and `await source.aclose()`.
"""

import asyncio
import logging
import os
import struct
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np

from dllm_voice.audio.config import AudioConfig
from dllm_voice.audio.devices import CallbackFlags, resolve_device, sounddevice
from dllm_voice.audio.errors import AudioDeviceError, AudioFormatError
from dllm_voice.audio.resample import PCM, PCM16, FloatPCM, Resampler, to_float32, to_int16, to_mono

log = logging.getLogger(__name__)

RATE_HZ = 16000


def _check_frame_ms(frame_ms: int) -> int:
    if frame_ms not in (10, 20, 30):
        raise AudioFormatError(f"frame_ms must be 10, 20 or 30 (webrtcvad), got {frame_ms}")
    return RATE_HZ * frame_ms // 1000


class _Framer:
    """Float or int16 blocks at src_hz -> exact int16 frames at 16 kHz."""

    def __init__(self, src_hz: int, frame_len: int) -> None:
        self._rs = Resampler(src_hz, RATE_HZ)
        self._len = frame_len
        self._pending: PCM16 = np.zeros(0, np.int16)

    def _cut(self, pcm: PCM16) -> list[PCM16]:
        pcm = np.concatenate([self._pending, pcm])
        n = len(pcm) // self._len
        self._pending = pcm[n * self._len :]
        return [pcm[i * self._len : (i + 1) * self._len] for i in range(n)]

    def feed(self, mono: PCM) -> list[PCM16]:
        if self._rs.up == self._rs.down:
            return self._cut(to_int16(mono))
        return self._cut(to_int16(self._rs.process(to_float32(mono))))

    def pad(self) -> list[PCM16]:
        """The partial frame held back, zero-padded to a whole one (none if nothing is held)."""
        if not len(self._pending):
            return []
        frame = np.concatenate([self._pending, np.zeros(self._len - len(self._pending), np.int16)])
        self._pending = np.zeros(0, np.int16)
        return [frame]

    def flush(self) -> list[PCM16]:
        """Remaining audio, the last frame zero-padded."""
        return self._cut(to_int16(self._rs.flush())) + self.pad()


_WAVE_PCM, _WAVE_FLOAT, _WAVE_EXTENSIBLE = 1, 3, 0xFFFE
# WAVE_FORMAT_EXTENSIBLE names its encoding by a GUID: the format tag in the first two bytes,
# then this fixed KSDATAFORMAT tail.
_GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")
_TAG_NAMES = {2: "MS ADPCM", 6: "A-law", 7: "mu-law", 0x11: "IMA ADPCM", 0x55: "MP3"}
_INT_DTYPES: dict[int, np.dtype[np.integer]] = {  # by byte width
    1: np.dtype(np.uint8),
    2: np.dtype("<i2"),
    4: np.dtype("<i4"),
}


class _WavFile:
    """The samples of a RIFF/WAVE file, read block by block (the stdlib `wave` reads tag 1 only).

    Takes format tag 1 (integer PCM, 8/16/24/32-bit), 3 (IEEE float, 32/64-bit) and 0xFFFE
    (WAVE_FORMAT_EXTENSIBLE, which sox writes above 16 bits or 2 channels) with either encoding.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._f = path.open("rb")
        except FileNotFoundError as e:
            raise AudioFormatError(f"no such WAV file: {path}") from e
        try:
            self._parse()
        except BaseException:
            self._f.close()
            raise

    def _fail(self, why: str) -> AudioFormatError:
        return AudioFormatError(
            f"{self.path}: {why}; convert it: sox {self.path} -b 16 -e signed-integer out.wav"
        )

    def _parse(self) -> None:
        head = self._f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            raise self._fail("not a WAV file (no RIFF/WAVE header)")
        fmt = b""
        while True:
            chunk = self._f.read(8)
            if len(chunk) < 8:
                raise self._fail("WAV without a data chunk" if fmt else "WAV without a fmt chunk")
            cid, size = chunk[:4], struct.unpack("<I", chunk[4:])[0]
            if cid == b"data":
                break
            if cid == b"fmt ":
                fmt = self._f.read(size)
                self._f.seek(size % 2, 1)
            else:
                self._f.seek(size + size % 2, 1)  # chunks are padded to an even size
        if len(fmt) < 16:
            raise self._fail("WAV without a fmt chunk before its data")
        tag, channels, rate, _, block, bits = struct.unpack_from("<HHIIHH", fmt)
        if tag == _WAVE_EXTENSIBLE:
            if len(fmt) < 40 or fmt[26:40] != _GUID_TAIL:
                raise self._fail("WAVE_FORMAT_EXTENSIBLE WAV with an unknown subformat")
            tag = struct.unpack_from("<H", fmt, 24)[0]
        if channels < 1 or rate < 1 or block % channels:
            raise self._fail(f"broken fmt chunk ({channels} channels, {rate} Hz, block {block})")
        self.width = block // channels
        self.is_float = tag == _WAVE_FLOAT
        if not (
            (tag == _WAVE_PCM and self.width in (1, 2, 3, 4))
            or (self.is_float and self.width in (4, 8))
        ):
            kind = "float" if self.is_float else "PCM" if tag == _WAVE_PCM else None
            what = f"{8 * self.width}-bit {kind}" if kind else _TAG_NAMES.get(tag, f"tag {tag:#x}")
            raise self._fail(
                f"unsupported WAV encoding {what} (PCM 8/16/24/32-bit and float 32/64-bit are read)"
            )
        self.rate, self.channels, self._block = rate, channels, block
        # Streaming writers leave the data size 0 or 0xFFFFFFFF: the data then runs to the end.
        here = self._f.tell()
        left = os.fstat(self._f.fileno()).st_size - here
        self._left = left if size in (0, 0xFFFFFFFF) else min(size, left)
        self.frames = self._left // block

    def read(self, frames: int) -> PCM:
        """Up to `frames` frames, down-mixed to mono (int PCM keeps its width, float is float32)."""
        data = self._f.read(min(self._left, frames * self._block))
        self._left -= len(data)
        data = data[: len(data) - len(data) % self._block]
        pcm: PCM
        if self.is_float:
            pcm = np.frombuffer(data, "<f4" if self.width == 4 else "<f8").astype(np.float32)
        elif self.width == 3:  # 24-bit little-endian -> int32 with the sign in the top byte
            b = np.frombuffer(data, np.uint8).reshape(-1, 3)
            low = (b[:, 0].astype(np.int32) << 8) | (b[:, 1].astype(np.int32) << 16)
            pcm = low | (b[:, 2].astype(np.int8).astype(np.int32) << 24)
        else:
            pcm = np.frombuffer(data, _INT_DTYPES[self.width])
        return to_mono(pcm, self.channels)

    def close(self) -> None:
        self._f.close()


class WavSource:
    """Frames of a WAV file, in real time (realtime=True) or as fast as the consumer reads."""

    def __init__(self, path: str | Path, frame_ms: int = 30, realtime: bool = False) -> None:
        self.path = Path(path)
        self.frame_len = _check_frame_ms(frame_ms)
        self.frame_ms = frame_ms
        self.realtime = realtime
        self._wav = _WavFile(self.path)
        self.src_hz = self._wav.rate
        self.duration_s = self._wav.frames / self.src_hz
        self._closed = False

    def __aiter__(self) -> AsyncIterator[PCM16]:
        return self._frames()

    async def _frames(self) -> AsyncIterator[PCM16]:
        framer = _Framer(self.src_hz, self.frame_len)
        block = max(1, self.src_hz // 2)  # read 0.5 s at a time: bounded memory for long files
        start = time.monotonic()
        sent = 0
        while not self._closed:
            mono = self._wav.read(block)
            frames = framer.feed(mono) if len(mono) else framer.flush()
            for frame in frames:
                if self._closed:
                    return
                if self.realtime:
                    due = start + sent * self.frame_ms / 1000.0
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                elif sent % 64 == 0:
                    await asyncio.sleep(0)  # let the loop breathe on long files
                sent += 1
                yield frame
            if not len(mono):
                break
        self._wav.close()

    async def aclose(self) -> None:
        self._closed = True
        self._wav.close()


class PushSource:
    """Frames pushed by a producer in the same event loop (the websocket server).

    push() takes PCM16LE bytes (an odd trailing byte waits for the next push) or an array
    (int16 or float in [-1, 1]) at src_rate_hz, whole. Beyond max_buffer_ms of unread audio the
    oldest frames are dropped so a stalled consumer cannot grow memory without bound; push()
    returns how many, for the producer to report, and `drained()` lets it wait instead.

    gap_fill_ms > 0: the received audio is taken to play in real time from its arrival, back to
    back; once it has run out for gap_fill_ms with nothing new, the consumer gets silence for the
    whole wall-clock gap and then one silent frame per frame_ms, until audio arrives again. A
    producer that stops mid-speech (a closed mic, a stalled network) so still ends its turn at
    the real end of speech, while one that sends ahead of real time or in bursts never sees
    silence inserted: its audio has not run out.
    """

    def __init__(
        self,
        frame_ms: int = 30,
        src_rate_hz: int = RATE_HZ,
        max_buffer_ms: int = 10000,
        gap_fill_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.frame_len = _check_frame_ms(frame_ms)
        self.frame_ms = frame_ms
        self._rate = src_rate_hz
        self._framer = _Framer(src_rate_hz, self.frame_len)
        self._odd = b""
        self._frames: deque[PCM16] = deque()
        self._max_frames = max(1, max_buffer_ms // frame_ms)
        self._ready = asyncio.Event()
        self._drained = asyncio.Event()
        self._closed = False
        self._gap_s = gap_fill_ms / 1000.0
        self._clock = clock
        self._due: float | None = None  # wall time at which the received audio runs out
        self._filling = False
        self.dropped_frames = 0
        self.filled_frames = 0

    @property
    def buffered_ms(self) -> int:
        """Audio pushed and not yet read."""
        return len(self._frames) * self.frame_ms

    def push(self, pcm: bytes | bytearray | memoryview | PCM) -> int:
        """Queue audio; returns how many old unread frames were dropped to make room (0)."""
        if self._closed:
            return 0
        if isinstance(pcm, bytes | bytearray | memoryview):
            data = self._odd + bytes(pcm)
            cut = len(data) - len(data) % 2
            self._odd = data[cut:]
            mono = np.frombuffer(data[:cut], dtype="<i2").astype(np.int16)
        else:
            arr = np.asarray(pcm)
            if arr.ndim != 1:
                arr = to_mono(arr)
            mono = to_int16(arr)
        if len(mono):
            now = self._clock()
            self._due = max(now, self._due if self._due is not None else now)
            self._due += len(mono) / self._rate
            self._filling = False
        return self._enqueue(self._framer.feed(mono))

    def _enqueue(self, frames: list[PCM16]) -> int:
        self._frames.extend(frames)
        over = max(0, len(self._frames) - self._max_frames)
        for _ in range(over):
            self._frames.popleft()
        if over:
            self.dropped_frames += over
            log.warning("audio: push source overflow, %d old frames dropped", over)
        if self._frames:
            self._ready.set()
            self._drained.clear()
        return over

    async def drained(self, timeout_s: float) -> bool:
        """Wait until the consumer has read everything pushed; False if it did not in time."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._drained.wait()
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """End of stream: the remaining audio (last frame zero-padded) is still delivered."""
        if not self._closed:
            self._enqueue(self._framer.flush())
            self._closed = True
            self._ready.set()

    def _until_fill(self) -> float | None:
        """Seconds until silence is due, or None when no fill is armed."""
        if not self._gap_s or self._due is None:
            return None
        wait = self.frame_ms / 1000.0 if self._filling else self._gap_s
        return max(0.0, self._due + wait - self._clock())

    def _fill(self) -> None:
        """Silence for the wall-clock time since the received audio ran out."""
        assert self._due is not None
        frame_s = self.frame_ms / 1000.0
        n = int((self._clock() - self._due) / frame_s)
        if n < 1 or (not self._filling and n * frame_s < self._gap_s - frame_s):
            return
        frames = [] if self._filling else self._framer.pad()
        frames += [np.zeros(self.frame_len, np.int16) for _ in range(n)]
        self._due += n * frame_s
        self._filling = True
        self.filled_frames += len(frames)
        self._enqueue(frames)

    def __aiter__(self) -> AsyncIterator[PCM16]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[PCM16]:
        while True:
            while self._frames:
                frame = self._frames.popleft()
                if not self._frames:
                    self._drained.set()
                yield frame
            if self._closed:
                return
            self._ready.clear()
            wait = self._until_fill()
            if wait is None:
                await self._ready.wait()
                continue
            try:
                async with asyncio.timeout(wait):
                    await self._ready.wait()
            except TimeoutError:
                self._fill()

    async def aclose(self) -> None:
        self.close()
        self._frames.clear()
        self._drained.set()


class MicSource:
    """Microphone frames via sounddevice; conversion runs in the event loop, not the callback."""

    def __init__(self, cfg: AudioConfig) -> None:
        self.frame_len = _check_frame_ms(cfg.frame_ms)
        sd = sounddevice()
        self.device, info = resolve_device(cfg.input_device, "input")
        self.src_hz = int(info["default_samplerate"])
        self.channels = min(2, int(info["max_input_channels"]))
        self._framer = _Framer(self.src_hz, self.frame_len)
        self._blocks: asyncio.Queue[FloatPCM | None] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.overflows = 0
        try:
            self._stream = sd.InputStream(
                device=self.device,
                samplerate=self.src_hz,
                channels=self.channels,
                dtype="float32",
                # Blocks as the host has them, not 30 ms ones, which held each sample until the
                # block was whole and sized PortAudio's periods: onsets reach the pipeline 50 ms
                # sooner (bench/live.py --mic-path).
                blocksize=0,
                latency="low",
                callback=self._callback,
            )
        except Exception as e:  # sounddevice.PortAudioError
            raise AudioDeviceError(
                f"cannot open input device {info['name']!r} ({e}); "
                "pick another with audio.input_device (`python main.py devices`)"
            ) from e
        log.info("mic: %r at %d Hz x%d", info["name"], self.src_hz, self.channels)

    def _callback(self, indata: FloatPCM, frames: int, t: object, status: CallbackFlags) -> None:
        if status:
            self.overflows += 1
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._blocks.put_nowait, indata.copy())

    def __aiter__(self) -> AsyncIterator[PCM16]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[PCM16]:
        self._loop = asyncio.get_running_loop()
        self._stream.start()
        try:
            while (block := await self._blocks.get()) is not None:
                for frame in self._framer.feed(to_mono(block)):
                    yield frame
        finally:
            self._stream.stop()

    async def aclose(self) -> None:
        self._stream.stop()
        self._stream.close()
        self._blocks.put_nowait(None)
        log.info("mic: %d overflows", self.overflows)
