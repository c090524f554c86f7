"""Speculation: an answer started on a pause's partial transcript, kept if the final agrees.

The turn manager drives it (the user pauses ~200 ms mid-turn):
  pause        -> ``StartSpeculation`` on the latest partial (``speculation.on_last_partial``)
                  and ``RequestPartial``: a pass over all the speech
  that partial -> ``StartSpeculation``: the LM answers it, first clause synthesized, audio held
                  (a different earlier guess is dropped first: ``DropSpeculation("changed")``;
                  the same words keep the guess, whose first forward scored the end of turn)
  resume       -> ``DropSpeculation`` (miss); the LM session keeps the shared KV prefix itself
  final == speculated text (normalized) -> ``ReleaseSpeculation`` (hit): play it at once
  final != speculated text             -> ``StartAnswer(refine_of=spec gen)``: the pipeline hands
                                          the speculative answer's tokens as first drafts
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dllm_voice.app.conversation.actions import Action, DropSpeculation, StartSpeculation
from dllm_voice.app.conversation.config import SpeculationConfig
from dllm_voice.app.conversation.text import normalize


@dataclass
class Guess:
    gen: int
    text: str  # as spoken to the LM
    turn: int


class Speculator:
    """The speculative answer under way, if any."""

    def __init__(self, cfg: SpeculationConfig) -> None:
        self.cfg = cfg
        self.current: Guess | None = None

    def drop(self, reason: str) -> list[Action]:
        if self.current is None:
            return []
        dropped, self.current = self.current, None
        return [DropSpeculation(dropped.gen, reason)]

    def start(
        self,
        text: str,
        next_gen: Callable[[], int],
        turn: int,
        prompt: Callable[[str], list[dict[str, str]]],
    ) -> list[Action]:
        """Answer ``text`` speculatively (``prompt(text)`` asks it), unless it is too short or the
        guess under way already; a different guess is dropped first."""
        if len(normalize(text).split()) < self.cfg.min_words:
            return []
        if self.current is not None and normalize(self.current.text) == normalize(text):
            return []
        actions = self.drop("changed")
        self.current = Guess(next_gen(), text, turn)
        return [*actions, StartSpeculation(self.current.gen, text, prompt(text))]
