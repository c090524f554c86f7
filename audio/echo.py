"""Echo control for the local mic mode: the agent must not interrupt itself via the speakers.

Two layers:
1. `EchoCanceller`: WebRTC AEC3 (pywebrtc-audio, a PyPI wheel) subtracts the speaker signal
   from the mic. The speaker sink reports every block it plays (`push_far`, any thread); each
   mic frame takes the same amount of reference from a FIFO. AEC3 estimates the delay itself.
   A speaker flush that drops the device's buffer (a barge-in) resets both (`reset`): the
   reference then no longer matches what played, and on a real sound server AEC3 let the
   echo through in the answers after a barge-in (3 interruptions: 14-17 pauses of the agent
   by its own voice; with the reset, none after them).
   Without pywebrtc-audio (or mode="guard") frames pass through unchanged.
2. `BargeInDetector`: while the agent speaks, a voiced frame counts as the user only when the
   mic is louder than the expected echo (reference level + learned speaker-to-mic coupling,
   the 75th percentile of recent echo-only frames) by guard_margin_db, and more such speech
   is needed (guard_min_speech_ms; aec_min_speech_ms behind AEC3) than when it is silent.
"""

import logging
import threading
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

import numpy as np

from audio.config import BargeInConfig, EchoConfig
from audio.errors import AudioFormatError
from audio.resample import Resampler, to_float32, to_int16
from audio.vad import rms_dbfs

log = logging.getLogger(__name__)

_FAR_ACTIVE_DBFS = -50.0  # reference quieter than this is treated as "agent silent"
_MAX_FAR_S = 1.0  # reference FIFO cap: drift or a stalled mic cannot grow it without bound


def aec_available() -> bool:
    try:
        import pywebrtc_audio  # noqa: F401
    except ImportError:
        return False
    return True


class EchoCanceller:
    """Mic frames in, echo-reduced frames out; `far_dbfs` = level of this frame's reference."""

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
        self._aec = None
        if mode == "aec":
            from pywebrtc_audio import EchoCanceller as AEC3

            self._aec = AEC3(sample_rate=sample_rate_hz, stream_delay_ms=cfg.stream_delay_ms)
        self._far: deque[np.ndarray] = deque()
        self._far_n = 0
        self._lock = threading.Lock()
        self._resamplers: dict[int, Resampler] = {}
        self.far_dbfs = -120.0
        log.info("echo: mode %s", mode)

    def push_far(self, pcm: np.ndarray, rate_hz: int) -> None:
        """Audio that just went to the speaker (thread-safe; called from the audio callback)."""
        pcm = np.asarray(pcm).reshape(-1)
        if rate_hz != self.rate:
            rs = self._resamplers.setdefault(rate_hz, Resampler(rate_hz, self.rate))
            pcm = to_int16(rs.process(to_float32(pcm)))
        else:
            pcm = to_int16(pcm)
        with self._lock:
            self._far.append(pcm)
            self._far_n += len(pcm)
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

    def _take_far(self, n: int) -> np.ndarray:
        out = np.zeros(n, np.int16)
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

    def process(self, near: np.ndarray) -> np.ndarray:
        """One mic frame (int16, 16 kHz) -> the frame with the speaker echo removed."""
        near = to_int16(np.asarray(near).reshape(-1))
        far = self._take_far(len(near))
        self.far_dbfs = rms_dbfs(far)
        if self._aec is None or len(near) == 0:
            return near
        return self._aec.process(near, far)

    def wrap(self, source: "FrameSource") -> "EchoCancelledSource":
        """The source's frames with the echo removed: `ec.wrap(MicSource(cfg))`."""
        return EchoCancelledSource(source, self)

    def reset(self) -> None:
        with self._lock:
            self._far.clear()
            self._far_n = 0
        if self._aec is not None:
            self._aec.reset()


class FrameSource(Protocol):
    def __aiter__(self) -> AsyncIterator[np.ndarray]: ...

    async def aclose(self) -> None: ...


class EchoCancelledSource:
    """A frame source seen through an EchoCanceller (local mic mode).

    Wiring: ec = EchoCanceller(cfg.echo); sink = SpeakerSink(cfg.audio, on_played=ec.push_far,
    on_restart=ec.reset); source = ec.wrap(MicSource(cfg.audio)).
    """

    def __init__(self, source: FrameSource, canceller: EchoCanceller) -> None:
        self.source, self.canceller = source, canceller

    def __aiter__(self) -> AsyncIterator[np.ndarray]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[np.ndarray]:
        async for frame in self.source:
            yield self.canceller.process(frame)

    async def aclose(self) -> None:
        await self.source.aclose()


class BargeInDetector:
    """Per-frame barge-in decision: enough user speech, beyond what the echo explains."""

    def __init__(
        self, cfg: BargeInConfig, echo: EchoConfig, frame_ms: int = 30, aec: bool = False
    ) -> None:
        self.cfg, self.echo = cfg, echo
        self.frame_ms = frame_ms
        self.aec = aec  # frames come out of AEC3: the echo is gone, the user's voice is choppy
        self._need_quiet = max(1, -(-cfg.min_speech_ms // frame_ms))
        self._need_guard = max(1, -(-cfg.guard_min_speech_ms // frame_ms))
        self._need_aec = max(1, -(-cfg.aec_min_speech_ms // frame_ms))
        self.reset()

    def reset(self) -> None:
        self._recent: deque[bool] = deque(maxlen=2 * max(self._need_guard, self._need_quiet))
        self.coupling_db = self.echo.echo_gain_db  # mic level minus reference level, for echo
        self._observed: deque[float] = deque(maxlen=max(10, 3000 // self.frame_ms))

    def update(
        self, frame: np.ndarray, voiced: bool, far_dbfs: float, agent_speaking: bool
    ) -> bool:
        """Feed one (echo-cancelled) mic frame; True when this frame completes a barge-in."""
        mic_db = rms_dbfs(np.asarray(frame))
        far_active = far_dbfs > _FAR_ACTIVE_DBFS
        expected_echo = far_dbfs + self.coupling_db if far_active else -120.0
        user = voiced and mic_db >= expected_echo + self.echo.guard_margin_db
        observed = mic_db - far_dbfs
        plausible_echo = observed <= self.coupling_db + self.echo.guard_margin_db / 2
        if far_active and not user and plausible_echo and not any(list(self._recent)[-3:]):
            # Echo-only frame: the coupling is a high percentile of the last ~3 s of them.
            # Frames well above the estimate are left out: they are likely the user talking
            # too softly to qualify, and learning from them would lock the user out.
            self._observed.append(observed)
            if len(self._observed) >= 10:
                self.coupling_db = float(np.percentile(self._observed, 75))
        self._recent.append(user)
        need = self._need_quiet
        if agent_speaking:
            # With AEC3 the echo is gone (0 false barge-ins in the loopback bench at 150 ms),
            # but it gates the user's voice in double talk: a 360 ms need took ~700 ms.
            need = self._need_aec if self.aec else self._need_guard
        # Evidence = qualifying frames among the last 2 x need (speech has short gaps).
        if sum(list(self._recent)[-2 * need :]) >= need:
            self._recent.clear()
            return True
        return False
