"""What the turn manager asks the session to do: one frozen dataclass per action."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Action:
    gen: int


@dataclass(frozen=True)
class RequestPartial(Action):
    """Run an ASR partial pass on the utterance so far (now, not at the regular cadence)."""


@dataclass(frozen=True)
class StartSpeculation(Action):
    """Start answering ``user_text`` with audio held; ``messages`` is the LM prompt. ``score``:
    it stands for a ``ScoreEnd`` on the same prompt too, which its first forward reads."""

    user_text: str
    messages: list[dict[str, str]]
    score: bool = False


@dataclass(frozen=True)
class DropSpeculation(Action):
    """Cancel the speculative answer of generation ``gen``."""

    reason: str


@dataclass(frozen=True)
class ReleaseSpeculation(Action):
    """The final transcript matches: the speculative answer ``gen`` becomes the answer."""


@dataclass(frozen=True)
class StartAnswer(Action):
    """Answer ``user_text``; ``refine_of`` = speculative generation whose tokens are drafts."""

    user_text: str
    messages: list[dict[str, str]]
    refine_of: int | None = None
    tools: bool = True  # the answer may call a tool (not when it answers from tool outputs)


@dataclass(frozen=True)
class HoldPlayback(Action):
    """Stop playing the answer now (flush the sink), keep its unplayed audio. ``near_end``: on
    the echo canceller's double talk; ``onset_ms``: audio time of the speech that stops it when
    the VAD has not started that speech."""

    near_end: bool = False
    onset_ms: float | None = None


@dataclass(frozen=True)
class ResumePlayback(Action):
    """The interruption was a backchannel or noise: play on from where the user stopped hearing."""

    reason: str


@dataclass(frozen=True)
class ScoreEnd(Action):
    """Score P(end of turn) of ``text`` (the pause's transcript of all the speech) with the LM,
    on ``messages``, the prompt a speculative answer to it starts from."""

    text: str
    messages: list[dict[str, str]]


@dataclass(frozen=True)
class ReopenTurn(Action):
    """The user went on talking right after an early end: cancel the answer ``gen`` (if it
    started) without counting anything of it as said; the turn's transcript goes on."""


@dataclass(frozen=True)
class CancelAnswer(Action):
    """Barge-in: cancel LM + TTS of ``gen``, drop its audio; report what was heard."""
