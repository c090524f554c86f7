"""Echo control for the local mic mode: the agent must not interrupt itself via the speakers.

Two layers:
1. `EchoCanceller`: WebRTC AEC3 (pywebrtc-audio, a PyPI wheel) subtracts the speaker signal
   from the mic. The speaker sink reports every block it plays (`push_far`, any thread); each
   mic frame takes the same amount of reference from a FIFO. AEC3 estimates the delay itself.
   A speaker flush that drops the device's buffer (a barge-in) resets both (`reset`): the
   reference no longer matches what played, and AEC3 let the echo through after it (the agent
   paused itself 14-17 times after 3 barge-ins; none with the reset).
   Without pywebrtc-audio (or mode="guard") frames pass through unchanged.
2. `DoubleTalkDetector`: per 10 ms, whether the raw mic holds more than the echo the reference
   predicts (the user talking over the agent); `EchoCanceller.near_end` is its decision on the
   latest frame, on which the turn manager pauses the agent at once.
"""

import logging
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from dllm_voice.audio.config import EchoConfig
from dllm_voice.audio.errors import AudioFormatError
from dllm_voice.audio.resample import PCM, PCM16, Resampler, to_float32, to_int16
from dllm_voice.audio.vad import rms_dbfs

if TYPE_CHECKING:
    from pywebrtc_audio import EchoCanceller as AEC3

log = logging.getLogger(__name__)

_Float64: TypeAlias = npt.NDArray[np.float64]

_MAX_FAR_S = 1.0  # reference FIFO cap: drift or a stalled mic cannot grow it without bound

# DoubleTalkDetector: the speech band, judged per bin and learned per band
_DT_LO_HZ, _DT_HI_HZ, _DT_BANDS = 200, 7000, 16
_DT_SPLIT_HZ = 4000  # voiced sounds below, fricatives above: each range counts on its own
_DT_MAX_LAG_MS = 500  # reference-to-mic delay searched (speaker buffer 120 + capture ~75 + room)
_DT_SMEAR = (2, 3)  # blocks before / after the delay the echo may come from (pairing jitter)
_DT_TAIL_DB = 1.5  # decay per block of the reverb the echo keeps after that (RT60 400 ms)
_DT_SHARE = 0.1  # share of a range's bins above the echo that makes a block the user's
# A bin above the echo by 6 dB less than the threshold in 3 consecutive blocks counts too: the
# user's harmonics hold their bins while the agent's echo beats its prediction in one block here
# and one there (a voiced onset under the echo paused the agent after 150-210 ms, not 270-360).
_DT_HELD_DB, _DT_HELD_BLOCKS = 6.0, 3
_DT_NOISE_DB = 12.0  # a bin's noise floor is a low percentile: white noise crosses +6 dB (+10)
_DT_BLOCKS = 2  # consecutive such blocks: a click lasts one
_DT_CALM = 30  # blocks without a counting one before the echo path is learned again
_DT_FAR_ACTIVE_DBFS = -50.0  # a reference block quieter than this is the agent silent
_DT_GCC_WINDOW_MS = 1000  # mic audio each delay estimate correlates
_DT_GCC_EVERY = 25  # blocks between delay estimates (twice as often while it is unknown)
_DT_PEAK = 8.0  # GCC-PHAT peak over the correlation's standard deviation that counts
_DT_GAIN_START_DB = 10.0  # echo assumed this much louder than the reference until learned
_DT_GAIN_Q, _DT_GAIN_STEP_DB = 0.8, 0.5  # percentile the echo gain tracks, and its step


def aec_available() -> bool:
    try:
        import pywebrtc_audio  # noqa: F401
    except ImportError:
        return False
    return True


class EchoCanceller:
    """Mic frames in, echo-reduced frames out; `far_dbfs` = level of this frame's reference,
    `near_end` = the user talks over the agent in this frame (`DoubleTalkDetector`)."""

    def __init__(self, cfg: EchoConfig, sample_rate_hz: int = 16000) -> None:
        self.cfg = cfg
        self.rate = sample_rate_hz
        mode = cfg.mode
        if mode == "auto":
            mode = "aec" if aec_available() else "guard"
        if mode == "aec" and not aec_available():
            raise AudioFormatError(
                "echo.mode=aec needs pywebrtc-audio: .venv/bin/pip install pywebrtc-audio "
                "(or set echo.mode: guard)"
            )
        self.mode = mode
        self._aec: AEC3 | None = None
        if mode == "aec":
            import pywebrtc_audio

            self._aec = pywebrtc_audio.EchoCanceller(
                sample_rate=sample_rate_hz, stream_delay_ms=cfg.stream_delay_ms
            )
        self._far: deque[PCM16] = deque()
        self._far_n = 0
        self._lock = threading.Lock()
        self._resamplers: dict[int, Resampler] = {}
        self.far_dbfs = -120.0
        self.double_talk = (
            DoubleTalkDetector(cfg.double_talk_db, sample_rate_hz) if cfg.double_talk_db else None
        )
        self.near_end = False
        self._slipped = False  # set from the audio thread, acted on in process()
        self._opened = False  # the mic's first frame came
        log.info("echo: mode %s", mode)

    def push_far(self, pcm: PCM, rate_hz: int) -> None:
        """Audio that just went to the speaker (thread-safe; called from the audio callback)."""
        played = np.asarray(pcm).reshape(-1)
        if rate_hz != self.rate:
            rs = self._resamplers.setdefault(rate_hz, Resampler(rate_hz, self.rate))
            far = to_int16(rs.process(to_float32(played)))
        else:
            far = to_int16(played)
        with self._lock:
            self._far.append(far)
            self._far_n += len(far)
            over = self._far_n - int(_MAX_FAR_S * self.rate)
            while over > 0:  # keep the newest second of reference
                head = self._far[0]
                if len(head) <= over:
                    self._far.popleft()
                    over -= len(head)
                    self._far_n -= len(head)
                else:
                    self._far[0] = head[over:]
                    self._far_n -= over
                    over = 0

    def _take_far(self, n: int) -> PCM16:
        out: PCM16 = np.zeros(n, np.int16)
        filled = 0
        with self._lock:
            while filled < n and self._far:
                head = self._far[0]
                take = min(n - filled, len(head))
                out[filled : filled + take] = head[:take]
                filled += take
                self._far_n -= take
                if take == len(head):
                    self._far.popleft()
                else:
                    self._far[0] = head[take:]
        return out

    def process(self, frame: PCM) -> PCM16:
        """One mic frame (int16, 16 kHz) -> the frame with the speaker echo removed."""
        near = to_int16(np.asarray(frame).reshape(-1))
        if not self._opened:
            self._opened = True
            self._drop_waiting()
        far = self._take_far(len(near))
        self.far_dbfs = rms_dbfs(far)
        if self.double_talk is not None:
            if self._slipped:
                self._slipped = False
                self.double_talk.reset()
            self.near_end = self.double_talk.update(far, near)
        if self._aec is None or len(near) == 0:
            return near
        return self._aec.process(near, far)

    @property
    def near_end_sure(self) -> bool:
        """The double-talk detector has measured the echo path: what it does not call the user's
        is the agent's own voice (with the delay lost, it still predicts the echo from the
        loudest reference of the last 500 ms, deaf rather than wrong)."""
        return self.double_talk is not None and self.double_talk.learned

    def wrap(self, source: "FrameSource") -> "EchoCancelledSource":
        """The source's frames with the echo removed: `ec.wrap(MicSource(cfg))`."""
        return EchoCancelledSource(source, self)

    def reset(self) -> None:
        with self._lock:
            self._far.clear()
            self._far_n = 0
        if self._aec is not None:
            self._aec.reset()
        if self.double_talk is not None:
            self.double_talk.reset()

    def slipped(self) -> None:
        """The speaker underran (any thread; it played a gap the reference does not have) or the
        mic overflowed (it lost samples): the echo no longer comes after the delay the
        double-talk detector measured (a callback was seen waiting up to 436 ms for the GIL)."""
        self._slipped = True

    def _drop_waiting(self) -> None:
        """At the mic's first frame: the reference the speaker reported before the mic opened
        (its stream starts first, up to 1 s of it kept) is no reference for any mic frame. Left
        in the FIFO it paired each frame with reference that much older, the echo reached the
        mic before its paired reference (259 ms of it in a run on a busy CPU), and the agent's first
        syllables were taken for the user. Whatever of it still plays, the detector covers."""
        with self._lock:
            waiting = np.concatenate(self._far) if self._far else np.zeros(0, np.int16)
            self._far.clear()
            self._far_n = 0
        if self.double_talk is not None:
            self.double_talk.unpaired(waiting)


class FrameSource(Protocol):
    def __aiter__(self) -> AsyncIterator[PCM16]: ...

    async def aclose(self) -> None: ...


class EchoCancelledSource:
    """A frame source seen through an EchoCanceller (local mic mode).

    Wiring: ec = EchoCanceller(cfg.echo); sink = SpeakerSink(cfg.audio, on_played=ec.push_far,
    on_restart=ec.reset, on_underrun=ec.slipped); source = ec.wrap(MicSource(cfg.audio)).
    """

    def __init__(self, source: FrameSource, canceller: EchoCanceller) -> None:
        self.source, self.canceller = source, canceller

    def __aiter__(self) -> AsyncIterator[PCM16]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[PCM16]:
        overflows = 0
        async for frame in self.source:
            seen: int = getattr(self.source, "overflows", 0)  # a MicSource counts its overflows
            if seen != overflows:  # the mic lost samples
                overflows = seen
                self.canceller.slipped()
            yield self.canceller.process(frame)

    async def aclose(self) -> None:
        await self.source.aclose()


@dataclass(frozen=True, eq=False)
class _Bins:
    """The 200-7000 Hz bins of a 20 ms Hann spectrum per 10 ms block, and the 16 bands the echo
    gain is learned in (geometric: as many bands per octave low and high)."""

    n: int  # samples per 10 ms block
    window: _Float64
    mask: npt.NDArray[np.bool_]  # the speech band among all rfft bins
    band: npt.NDArray[np.intp]  # each bin's band
    high: npt.NDArray[np.bool_]  # the bins from 4000 Hz up
    band_size: npt.NDArray[np.intp]  # bins per band

    @classmethod
    def at(cls, rate_hz: int) -> "_Bins":
        n = rate_hz // 100
        freqs = np.fft.rfftfreq(2 * n, 1 / rate_hz)
        mask = (freqs >= _DT_LO_HZ) & (freqs < _DT_HI_HZ)
        edges = np.geomspace(_DT_LO_HZ, _DT_HI_HZ, _DT_BANDS + 1)
        band = np.searchsorted(edges, freqs[mask], side="right") - 1
        high = freqs[mask] >= _DT_SPLIT_HZ
        return cls(n, np.hanning(2 * n), mask, band, high, np.bincount(band, minlength=_DT_BANDS))

    @property
    def count(self) -> int:
        return int(self.mask.sum())

    def spectra(self, prev: _Float64, pcm: _Float64) -> _Float64:
        """dB per bin of each 10 ms block, over 20 ms Hann windows (it and the block before)."""
        x = np.concatenate([prev, pcm]).reshape(-1, self.n)
        frames = np.concatenate([x[:-1], x[1:]], axis=1) * self.window
        power = np.abs(np.fft.rfft(frames, axis=1)[:, self.mask]) ** 2
        return 10 * np.log10(power / (32768.0**2 * len(self.window)) + 1e-12)

    def bands(self, db: _Float64) -> _Float64:
        power: _Float64 = np.bincount(self.band, 10 ** (db / 10), _DT_BANDS) / self.band_size
        return 10 * np.log10(power + 1e-12)


class _EchoDelay:
    """The reference-to-mic delay: GCC-PHAT of the last second of reference and mic (a sharp
    peak at 0 dB, through reverb too); two estimates within 3 ms of each other set it."""

    def __init__(self, n: int, rate_hz: int) -> None:
        self.n, self.rate = n, rate_hz
        self.max_lag = _DT_MAX_LAG_MS // 10  # in blocks
        self.gcc_near = rate_hz * _DT_GCC_WINDOW_MS // 1000
        self.gcc_far = self.gcc_near + self.max_lag * n
        total = self.gcc_far + self.gcc_near
        self.gcc_size = min(m << int(np.ceil(np.log2(total / m))) for m in (1, 3, 5))
        self.learned = False  # the echo path was measured once: unknown delays are covered
        self.reset()

    def reset(self) -> None:
        """Forget the delay and the audio it was measured on."""
        self.far_pcm = np.zeros(self.gcc_far)  # rings, oldest at the write position
        self.near_pcm = np.zeros(self.gcc_near)
        self.far_on = np.zeros(self.gcc_near // self.n, bool)
        self.pos = 0  # blocks written
        self.lag: int | None = None  # samples
        self.estimates: list[int] = []

    @property
    def blocks(self) -> int | None:
        """The delay in whole blocks (None: unknown)."""
        return None if self.lag is None else round(self.lag / self.n)

    def add(self, far: _Float64, near: _Float64) -> None:
        """One 10 ms block of reference and mic."""
        ring = self.pos % (self.gcc_far // self.n)
        self.far_pcm[ring * self.n : (ring + 1) * self.n] = far
        ring = self.pos % (self.gcc_near // self.n)
        self.near_pcm[ring * self.n : (ring + 1) * self.n] = near
        self.far_on[ring] = rms_dbfs(far) > _DT_FAR_ACTIVE_DBFS
        self.pos += 1

    def follow(self) -> None:
        """Estimate the delay again when it is time (every 250 ms, twice as often while it is
        unknown) and the agent talked through most of the last second."""
        every = _DT_GCC_EVERY if self.lag is not None else _DT_GCC_EVERY // 2
        if self.pos % every == 0 and self.far_on.mean() > 0.4:
            self._estimate()

    def _estimate(self) -> None:
        shift = self.pos % (self.gcc_far // self.n) * self.n
        far = np.roll(self.far_pcm, -shift)
        near = np.roll(self.near_pcm, -(self.pos % (self.gcc_near // self.n)) * self.n)
        size = self.gcc_size
        cross = np.fft.rfft(near, size) * np.conj(np.fft.rfft(far, size))
        corr = np.fft.irfft(cross / (np.abs(cross) + 1e-9), size)
        # near[i] is far[i + window lead - lag]: lag L sits at index L - window lead
        lead = self.gcc_far - self.gcc_near
        scores = corr[(np.arange(lead) - lead) % size]
        best = int(np.argmax(scores))
        if scores[best] < _DT_PEAK * np.std(scores):
            return
        self.estimates = [*self.estimates[-1:], best]
        if len(self.estimates) == 2 and abs(self.estimates[0] - best) <= 3 * self.n // 10:
            if self.lag is None:
                log.info("echo: delay %.0f ms behind the speaker's signal", best * 1000 / self.rate)
            self.lag, self.learned = best, True


class _Levels:
    """Per-bin levels in dB: the reference's spectra of the last 540 ms (newest first), the
    reverb tail the echo keeps, and the mic's noise floor (it falls to the floor in ~0.5 s)."""

    def __init__(self, bins: int, max_lag: int) -> None:
        self.max_lag = max_lag  # in blocks
        self.far_db = np.full((max_lag + _DT_SMEAR[1] + 1, bins), -120.0)
        self.tail_db = np.full(bins, -120.0)
        self.noise_db = np.zeros(bins)

    def add(self, far_db: _Float64, near_db: _Float64) -> None:
        """One block's reference and mic spectra."""
        self.far_db = np.roll(self.far_db, 1, axis=0)
        self.far_db[0] = far_db
        fall = near_db < self.noise_db  # the floor follows dips at once, rises 2 dB/s
        self.noise_db = np.where(fall, 0.9 * self.noise_db + 0.1 * near_db, self.noise_db + 0.02)

    def echo_db(self, delay: int | None) -> _Float64:
        """The reference the echo may hold, before the gain, ``delay`` blocks late: the
        loudest from 2 blocks before to 3 after, then a reverb decaying 1.5 dB per block; the
        loudest of the last 500 ms where the delay is unknown."""
        loudest: _Float64
        if delay is None:
            loudest = self.far_db[: self.max_lag + 1].max(axis=0)
            return loudest
        self.tail_db = np.maximum(self.far_db[delay + _DT_SMEAR[1]], self.tail_db - _DT_TAIL_DB)
        near = self.far_db[max(0, delay - _DT_SMEAR[0]) : delay + _DT_SMEAR[1] + 1].max(axis=0)
        loudest = np.maximum(near, self.tail_db)
        return loudest


class DoubleTalkDetector:
    """Is the user talking over the agent? Decided per 10 ms block on the raw mic against the echo
    the reference predicts, not on AEC3's output, whose suppressor lets the user's voice out in
    pieces during double talk (the VAD behind it took 545 ms to pause the agent).

    - Delay (`_EchoDelay`): GCC-PHAT of the reference and the mic over the last second while the
      agent talks, every 250 ms; two estimates within 3 ms of each other set it. Unknown (at
      start, after `reset`), the echo is predicted from the loudest reference of the last 500 ms:
      the detector is then deaf rather than wrong.
    - Gain per band: the 80th percentile of mic minus delayed reference over blocks the echo
      explains (high: an echo taken for the user pauses the agent).
    - Decision: a bin counts when the mic beats the predicted echo (`_Levels.echo_db`, plus the
      gain) and its noise floor by `threshold_db`, or by 6 dB less in 3 consecutive blocks (a
      harmonic of the user's under the agent's louder voice); the user talks when 10 % of the
      200-4000 Hz bins, or of the 4000-7000 Hz ones (a "s" under the agent's vowels), count in
      2 consecutive blocks.
      Two voices at one level still own different bins (their harmonics), which the level of
      the whole frame does not show.
    """

    def __init__(self, threshold_db: float = 10.0, rate_hz: int = 16000) -> None:
        self.threshold_db = threshold_db
        self.bins = _Bins.at(rate_hz)
        self.delay = _EchoDelay(self.bins.n, rate_hz)
        self.levels = _Levels(self.bins.count, self.delay.max_lag)
        self.gain_db = np.full(_DT_BANDS, _DT_GAIN_START_DB)
        self.prev_far = np.zeros(self.bins.n)
        self.prev_near = np.zeros(self.bins.n)
        self.reset()

    @property
    def learned(self) -> bool:
        """The echo path was measured once: unknown delays are covered."""
        return self.delay.learned

    def reset(self) -> None:
        """Forget the delay: the reference no longer lines up with the mic (a flush restarted the
        speaker, or an underrun played a gap the reference does not have). The gain stays, and
        the reference heard so far: its echo is still on its way to the mic."""
        self.delay.reset()
        self.run = 0  # consecutive blocks that counted
        self.held = np.zeros(self.bins.count, int)  # consecutive blocks each bin was above
        self.calm = 0  # blocks since one counted
        self.share = 0.0  # share of bins above the echo in the latest block

    def unpaired(self, far: PCM16) -> None:
        """Reference that went to the speaker and will be paired with no mic frame: while the
        delay is unknown its echo is predicted with the newest reference's (for 540 ms)."""
        n = self.bins.n
        whole = len(far) // n * n
        if whole:
            far_db = self.bins.spectra(np.zeros(n), far[:whole].astype(np.float64))
            self.levels.far_db[0] = np.maximum(self.levels.far_db[0], far_db.max(axis=0))

    def update(self, far: PCM16, near: PCM16) -> bool:
        """A mic frame and its reference (whole 10 ms blocks); True when the user talks."""
        n = self.bins.n
        whole = len(near) // n * n
        if whole == 0:
            return False
        far_f = far[:whole].astype(np.float64)
        near_f = near[:whole].astype(np.float64)
        far_db = self.bins.spectra(self.prev_far, far_f)
        near_db = self.bins.spectra(self.prev_near, near_f)
        self.prev_far, self.prev_near = far_f[-n:], near_f[-n:]
        talking = False
        for i in range(len(far_db)):
            cut = slice(i * n, (i + 1) * n)
            talking |= self._block(far_f[cut], near_f[cut], far_db[i], near_db[i])
        return talking

    def _block(self, far: _Float64, near: _Float64, far_db: _Float64, near_db: _Float64) -> bool:
        self.levels.add(far_db, near_db)
        self.delay.add(far, near)
        echo = self.levels.echo_db(self.delay.blocks) + self.gain_db[self.bins.band]
        excess = near_db - np.maximum(echo, self.levels.noise_db + _DT_NOISE_DB)
        audible = near_db > -80.0
        self.held = np.where((excess > self.threshold_db - _DT_HELD_DB) & audible, self.held + 1, 0)
        over = ((excess > self.threshold_db) & audible) | (self.held >= _DT_HELD_BLOCKS)
        high = self.bins.high
        self.share = max(float(np.mean(over[~high])), float(np.mean(over[high])))
        counts = self.share >= _DT_SHARE
        self.run = self.run + 1 if counts else 0
        self.calm = 0 if counts else self.calm + 1
        if self.calm >= _DT_CALM:  # the user has been quiet for 300 ms: learn the echo path
            self._learn(near_db)
        return self.run >= _DT_BLOCKS

    def _learn(self, near_db: _Float64) -> None:
        self.delay.follow()
        delay = self.delay.blocks
        if delay is None:
            return
        ref = self.bins.bands(self.levels.far_db[delay])
        mic = self.bins.bands(near_db)
        seen = mic - ref
        echo_only = (ref > -65.0) & (mic > self.bins.bands(self.levels.noise_db) + 10.0)
        echo_only &= seen < self.gain_db + 6.0  # far above: the user, too soft to count
        step = np.where(seen > self.gain_db, _DT_GAIN_Q, _DT_GAIN_Q - 1.0) * _DT_GAIN_STEP_DB
        self.gain_db = np.where(echo_only, self.gain_db + step, self.gain_db)
