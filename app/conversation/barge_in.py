"""Barge-in: the user's speech while the agent thinks or speaks, held before it is judged.

Two steps, so playback stops within ~100 ms yet a cough or "mm-hmm" does not throw the answer
away:
  speech for ``barge_in.min_speech_ms`` (+ echo guard while audio plays) -> ``HoldPlayback``
  behind an echo canceller, at once on its double talk (``on_near_end``) -> ``HoldPlayback``,
                                          resumed without a speech_start within NEAR_END_WAIT_MS;
                                          while it can tell (the echo's delay known), speech it
                                          never called the user's is the agent's echo: ignored
  a transcript that is not a backchannel, once speech lasted ``barge_in.confirm_ms``
                                          -> the turn manager cancels the answer
  speech that ends before that, or transcribes as a backchannel -> ``ResumePlayback``
  (held speech that ends before it waits for its final: a "No." or "Why?" heard clearly
  cancels, nothing heard, a backchannel or words heard unclearly resume)
  speech within ``reopen_ms`` of the end of a held one ("Wait, [600 ms] which ocean is the
  smallest?") continues it (``rejoin``).
  speech within ``end_of_turn.reopen_ms`` of an early end, over its audible answer
                                       -> ``HoldPlayback``; it reopens the turn once it lasts
                                          ``confirm_ms``, shorter resumes (``hold_for_reopen``)
Pure and synchronous like the turn manager that owns it; audio times in ms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dllm_voice.app.conversation.actions import Action, HoldPlayback, ResumePlayback
from dllm_voice.app.conversation.config import BargeInConfig
from dllm_voice.app.conversation.text import normalize

# Words that alone say nothing to act on; "no", "stop", "wait" are not among them.
_EMPTY_WORDS = frozenset(
    ("a", "an", "the", "and", "or", "but", "so", "then", "them", "they", "it", "its", "that")
    + ("this", "there", "uh", "um", "umm", "uhm", "er", "erm", "eh", "ah", "oh", "ooh", "mm")
    + ("mmm", "mhm", "hm", "hmm", "huh", "m")
)
# Letters Whisper spells a hum with: "Mhm." heard as "M.H.N.", "M-H-M?", "M-A-M."; "Oh." as "O.".
_HUM_LETTERS = frozenset("mhnuoa")

# Held speech that ended before confirm_ms cancels the answer only when Whisper heard its words
# this clearly (mean log-probability per token): 11 of 12 short "No.", "What?", "Why?" read
# -0.25 to -0.96 (bench.backchannels), listener sounds heard as words -1.24 to -1.31 ("Hmm." as
# "Time."), a synthetic cough -1.37 ("That's it.").
SHORT_CLEAR_LOGPROB = -1.0

# A hold on double talk alone resumes when the VAD does not start speech within this: on a real
# sound server speech_start (90 ms of voiced frames) came 80-210 ms after such a hold.
NEAR_END_WAIT_MS = 300


def is_backchannel(text: str, known: frozenset[str]) -> bool:
    """A listener's sound, not a turn: one of ``known`` (normalized), alone or after a sound
    ("Oh, really?"), a hum spelled in letters, or up to 3 words that carry nothing (Whisper
    hears "mm-hmm" as "and then them", "MMM", "uh oh")."""
    words = normalize(text)
    if not words or words in known:
        return True
    split = words.split()
    if all(len(w) == 1 and w in _HUM_LETTERS for w in split):
        return True
    lead = 0  # "Oh, really?", "Ah, I see.": a known one after a sound
    while lead < len(split) - 1 and split[lead] in _EMPTY_WORDS:
        lead += 1
    if lead and " ".join(split[lead:]) in known:
        return True
    if text.rstrip().endswith("?"):  # "And then?" asks for more
        return False
    return len(split) <= 3 and all(w in _EMPTY_WORDS or w in known for w in split)


@dataclass
class Interruption:
    onset_ms: float
    held: bool = False
    last_ms: float = 0.0
    early: bool = False  # held on the echo canceller's double talk, before the VAD's onset
    echo: bool = False  # speech the double-talk detector has not called the user's (yet)
    reopens: bool = False  # speech right after an early end over its audible answer
    short: bool = False  # held, and ended before confirm_ms: its final decides


class BargeIn:
    """The interruption under way, if any, and when it holds, resumes or needs its words."""

    def __init__(self, cfg: BargeInConfig, backchannels: tuple[str, ...]) -> None:
        self.configure(cfg, backchannels)
        self.current: Interruption | None = None
        self.near_end_sure = False  # an echo canceller's double-talk detector can tell echo apart
        # An interruption let go as short: until when (audio ms) speech continues it, its onset.
        self.rejoin: tuple[float, float] | None = None

    def configure(self, cfg: BargeInConfig, backchannels: tuple[str, ...]) -> None:
        self.cfg = cfg
        self.known = frozenset(normalize(b) for b in backchannels)

    def is_backchannel(self, text: str) -> bool:
        return is_backchannel(text, self.known)

    def may_become_backchannel(self, words: str) -> bool:
        """Words that start a known backchannel ("I" of "I see", "Got" of "Got it"): a partial's
        stable words then confirm nothing yet."""
        start = normalize(words)
        return bool(start) and any(k.startswith(start + " ") for k in self.known)

    def heard_as_backchannel(self, text: str, alternatives: tuple[str, ...]) -> bool:
        """``text`` of a few words whose beam also held a backchannel: "Mhm." heard as "I may
        turn." with "Mm-hm." beside it."""
        if len(normalize(text).split()) > 3:
            return False
        return any(self.is_backchannel(alt) for alt in alternatives)

    def short_and_unclear(self, logprob: float | None) -> bool:
        """The interruption ended before ``confirm_ms`` and its words (mean log-probability
        ``logprob``, None: none heard) are too unclear to stop the answer for."""
        b = self.current
        return b is not None and b.short and (logprob is None or logprob < SHORT_CLEAR_LOGPROB)

    def not_for_us(self, text: str, said: Callable[[], str]) -> bool:
        """A backchannel, or (echo guard on) mostly the words the agent just said (``said()``)."""
        if self.is_backchannel(text):
            return True
        if not self.cfg.echo_guard_ms:
            return False
        recent = set(normalize(said()).split()[-30:])
        words = normalize(text).split()
        return sum(w in recent for w in words) >= 0.6 * len(words)

    def guard_ms(self, speaking: bool) -> int:
        return self.cfg.echo_guard_ms if speaking else 0

    def begin(self, onset_ms: float, now_ms: float, speaking: bool) -> None:
        """Speech started while the agent thinks (or speaks: ``speaking``)."""
        held = self.current is not None and self.current.held  # held on double talk
        echo = speaking and self.near_end_sure and not held
        self.current = Interruption(onset_ms, held=held, last_ms=now_ms, echo=echo)

    def on_near_end(
        self, audio_ms: float, talking: bool, sure: bool, gen: int | None, speaking: bool
    ) -> list[Action]:
        """An input frame behind an echo canceller (see TurnManager.on_near_end); ``gen``: the
        answer under way, ``speaking``: its audio plays."""
        self.near_end_sure = sure
        b = self.current
        if talking and self.cfg.enabled and speaking and gen is not None:
            if b is None:
                self.current = Interruption(audio_ms, held=True, last_ms=audio_ms, early=True)
                return [HoldPlayback(gen, near_end=True, onset_ms=audio_ms)]
            b.echo = False
            if not b.held:
                b.held = True
                return [HoldPlayback(gen, near_end=True)]
        return []

    def hold_for_reopen(self, onset_ms: float, gen: int) -> list[Action]:
        """Speech right after an early end whose answer the user already hears: held at once
        like an interruption; it reopens the turn once it lasts ``confirm_ms`` (the user goes
        on), and a shorter burst (a cough, a click) lets the answer play on."""
        self.current = Interruption(onset_ms, held=True, last_ms=onset_ms, reopens=True)
        return [HoldPlayback(gen)]

    def reopen_due(self) -> bool:
        b = self.current
        return b is not None and b.reopens and b.last_ms - b.onset_ms >= self.cfg.confirm_ms

    def waited_in_vain(self, audio_ms: float) -> bool:
        """A hold on double talk alone that no speech_start followed within NEAR_END_WAIT_MS."""
        b = self.current
        return b is not None and b.early and audio_ms - b.onset_ms >= NEAR_END_WAIT_MS

    def on_progress(self, audio_ms: float, gen: int, speaking: bool) -> list[Action]:
        b = self.current
        if b is None:
            return []
        b.last_ms = audio_ms
        long_enough = audio_ms - b.onset_ms >= self.cfg.min_speech_ms + self.guard_ms(speaking)
        if not b.held and not b.echo and long_enough:
            b.held = True
            return [HoldPlayback(gen)]
        return []

    def needs_transcript(self, speaking: bool) -> bool:
        """The interruption lasted ``confirm_ms``: its words decide whether it takes the turn."""
        b = self.current
        if b is None:
            return False
        return (
            b.last_ms - b.onset_ms >= self.cfg.confirm_ms + self.guard_ms(speaking) and not b.echo
        )

    def let_go(self, gen: int | None, reason: str) -> list[Action]:
        """The interruption was not a turn: playback resumes if it was held."""
        b, self.current = self.current, None
        if b is None or not b.held or gen is None:
            return []
        return [ResumePlayback(gen, reason)]
