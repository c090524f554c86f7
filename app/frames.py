"""Typed frames that move between pipeline stages, each tagged with its generation id.

A generation id (``gen``) names one agent answer. On barge-in (or when a speculative answer is
dropped) the session bumps its current id and every stage drops frames whose ``gen`` is stale.
The base class says whether an interrupt drops a frame: data frames of an answer (text, audio)
are droppable, control frames that close a turn's bookkeeping are not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np


@dataclass(frozen=True)
class Frame:
    """Anything passed between stages; ``gen`` is the generation that produced it."""

    gen: int
    interruptible: ClassVar[bool] = True

    def stale(self, current_gen: int) -> bool:
        """True when an interrupt has made this frame obsolete and the stage must drop it."""
        return self.interruptible and self.gen != current_gen


@dataclass(frozen=True)
class ControlFrame(Frame):
    """Bookkeeping that must reach its stage even after an interrupt."""

    interruptible: ClassVar[bool] = False


@dataclass(frozen=True)
class InputAudioFrame(Frame):
    """One frame of user audio (int16 mono, 16 kHz); ``audio_ms`` = its end in stream time."""

    pcm: np.ndarray
    audio_ms: float
    t_ms: float  # monotonic arrival time


@dataclass(frozen=True)
class SpeechFrame(ControlFrame):
    """A VAD event: speech_start | pause | resume | speech_end, at ``t_ms`` (monotonic)."""

    kind: str
    audio_ms: float
    t_ms: float


@dataclass(frozen=True)
class TranscriptFrame(Frame):
    """A partial or final transcript of the current user utterance."""

    text: str
    stable: str
    final: bool
    compute_ms: float


@dataclass(frozen=True)
class TextFrame(Frame):
    """A committed text increment of the agent's answer, straight from the LM."""

    text: str


@dataclass(frozen=True)
class ClauseFrame(Frame):
    """A speakable chunk of the answer (clause or sentence), ready for TTS."""

    text: str
    index: int


@dataclass(frozen=True)
class TTSAudioFrame(Frame):
    """Synthesized PCM (int16 at the sink's rate) tagged with the clause it speaks."""

    pcm: np.ndarray
    text: str
    clause: int
    last_of_clause: bool


@dataclass(frozen=True)
class EndOfAnswerFrame(ControlFrame):
    """The LM finished (or was cancelled); ``stop_reason`` as in GenerationStats."""

    stop_reason: str
