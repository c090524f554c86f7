"""Typed frames between the answer stages (LM -> TTS -> playback), each with its generation id.

A generation id (``gen``) names one agent answer. On barge-in (or when a speculative answer is
dropped) the session moves to a new id and the stages drop frames whose ``gen`` is stale. The
base class says whether an interrupt drops a frame: data frames of an answer (clauses, audio)
are droppable, the control frame that closes an answer's bookkeeping is not. The input side
(VAD events, transcripts) is plain calls into the turn manager, which has no queue to go stale.
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
class ClauseFrame(Frame):
    """A speakable chunk of the answer (clause or sentence), ready for TTS."""

    text: str
    index: int


@dataclass(frozen=True)
class TTSAudioFrame(Frame):
    """Synthesized PCM (int16 at the TTS rate) tagged with the clause it speaks."""

    pcm: np.ndarray
    text: str
    clause: int


@dataclass(frozen=True)
class EndOfAnswerFrame(ControlFrame):
    """The LM finished (or was cancelled); ``stop_reason`` as in GenerationStats."""

    stop_reason: str
