"""End of turn: whether the user is done, from the words heard, the LM's score and the speech.

``end_decision`` makes the call ("complete", "unsure", "incomplete") from the pause's transcript,
the LM's P(end of turn) and the speech's own P(end) (audio/prosody.py); the session turns it into
how much silence ends the pause's turn. ``EndOfTurn`` runs both scores at each pause, in the
conversation's LM thread, and ends the turn after the silence the decision sets.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from dllm_voice.app.conversation.actions import ScoreEnd
from dllm_voice.app.conversation.config import EndOfTurnConfig
from dllm_voice.app.conversation.text import normalize
from dllm_voice.app.observe.trace import now_ms

if TYPE_CHECKING:
    from dllm_voice.app.config import Config
    from dllm_voice.app.conversation.components import Components
    from dllm_voice.app.conversation.listening import Listener
    from dllm_voice.app.conversation.lm_thread import LMThread
    from dllm_voice.app.conversation.turns import TurnManager
    from dllm_voice.app.tools.chooser import Choice
    from dllm_voice.audio.vad import Endpointer

log = logging.getLogger(__name__)
# Input kept for the end of turn heard in the speech: its 1.6 s window, and the pause's silence
# until the score starts (the pause's ASR pass is done ~200 ms after the speech ends, p95 ~1 s).
RECENT_MS = 3000

_SENTENCE_BREAK = re.compile(r"[.!?]\s+\S")
_TRAILING_OFF = re.compile(r"(\.\.\.|\u2026)\s*$")  # "So my question is..."
STORY_WORDS = 20  # a turn this long with several sentences is someone telling something
# How a sentence that asks or requests starts (after a lead such as "so" or "okay").
# fmt: off
_ASKING = frozenset((
    "what", "how", "why", "who", "whom", "whose", "where", "when", "which", "can", "could",
    "would", "will", "should", "shall", "is", "are", "am", "was", "were", "do", "does", "did",
    "have", "has", "may", "might", "isn't", "aren't", "don't", "doesn't", "didn't", "won't",
    "can't",
))
_IMPERATIVE = frozenset((
    "tell", "give", "explain", "describe", "list", "name", "say", "show", "recommend",
    "suggest", "help", "find", "play", "read", "write", "translate", "define", "compare",
    "summarize", "remind", "set", "call", "let", "let's", "make", "teach", "sing", "stop",
    "wait", "continue", "go", "repeat", "keep", "check", "look", "start", "turn", "open", "add",
    "calculate", "count", "spell", "guess", "imagine", "pick", "choose", "plan",
))
_LEADS = frozenset(("ok", "okay", "so", "and", "but", "now", "well", "oh", "hey", "um", "uh"))
_WANTS = (["i", "would", "like"], ["i'd", "like"], ["i", "want"], ["i", "need"])
# Words no sentence stops on, whatever mark Whisper puts after them: the speaker paused before
# what they lead to ("So my question is." scored 0.031, complete by a hair). A copula ends a
# question ("Can you tell me where it is?"), so it counts outside a question only.
_OPEN_ENDS = frozenset(("a", "an", "the", "my", "your", "our", "their", "and", "or", "because"))
_COPULAS = frozenset(("is", "are", "was", "were", "am"))
# What a speaker says before what they want ("Actually, never mind that," "Wait," "So"): a turn
# of these alone has its request still to come. The LM read "Actually, never mind that" as
# a whole message (0.18).
_LEAD_IN_WORDS = frozenset((
    "actually", "wait", "hold", "hang", "on", "never", "mind", "that", "this", "it", "so",
    "sorry", "oh", "um", "uh", "hmm", "er", "well", "and", "also", "but", "i", "mean", "meant",
    "listen", "look", "by", "the", "way", "anyway", "one", "more", "thing", "second", "sec",
    "moment", "let", "me", "think", "see", "no", "okay", "ok", "hey", "now", "then", "a",
    "just", "about", "excuse", "right", "alright", "all",
))
_LEAD_IN_HEADS = frozenset((
    "actually", "wait", "hold", "hang", "never", "so", "sorry", "oh", "um", "uh", "hmm", "er",
    "well", "and", "also", "but", "listen", "look", "anyway", "let", "by", "one", "just",
    "excuse",
))
# What may come before a lead-in without being one alone ("No, wait.", "Okay, so"; "No." alone
# answers a question the agent asked).
_ACKS = frozenset(("no", "okay", "ok", "alright", "right", "yeah", "yes", "hey"))
# A lead-in of words that alone ask ("So what?"): read as the one word "anyway".
_LEAD_IN_PHRASES = re.compile(r"\byou know what\b")
# What tells the agent to stop talking ("Okay, stop.", "Oh, forget it.", "No, no."): said over an
# answer, with lead-ins at most around it, it asks for silence, not for an answer. Outside an
# interruption "No." answers a question the agent asked: these are no lead-in heads.
_STOPS = frozenset((
    "stop", "forget", "cancel", "scratch", "enough", "quiet", "shh", "shush", "hush", "no",
    "nope",
))
_STOP_WORDS = _LEAD_IN_WORDS | _STOPS | frozenset(("please", "that's", "it's", "fine", "up"))
# Words a finished request does not end on: a pronoun or auxiliary ("How do I", "Why do"), a
# preposition ("Give me a quick tip for"), a determiner or conjunction.
_FUNCTION_ENDS = frozenset((
    *_OPEN_ENDS, *_COPULAS, "i", "you", "we", "they", "he", "she", "me", "us", "them", "its",
    "his", "her", "do", "does", "did", "can", "could", "would", "will", "should", "to", "of",
    "for", "about", "with", "in", "on", "at", "from", "by", "into", "between", "than", "some",
    "any", "this", "that", "these", "those", "how", "what", "why", "who", "where", "when",
    "which", "if", "but", "so", "like", "very", "more", "most", "please",
))
# A number that may go on after a pause ("twelve plus twenty" [300 ms] "nine"): a turn whose
# call stops on one is no evidence of its end.
_NUMBER_GOES_ON = frozenset((
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred",
    "thousand", "million", "billion", "point",
))
_YOU = ("can", "could", "would", "will")
_LEADS_OR_PLEASE = _LEADS | {"please"}
SHORT_WORDS = 6  # "Can you recommend a good book?": an ask this short is said in one breath
# fmt: on


def end_decision(
    p_end: float | None,
    cfg: EndOfTurnConfig,
    text: str = "",
    p_audio: float | None = None,
    asr_logprob: float | None = None,
    called: bool = False,
) -> str:
    """ "complete", "unsure" or "incomplete" from the LM's P(end of turn) (None: not scored),
    the speech's own P(end) (audio/prosody.py; None: not heard), how clearly Whisper heard
    the words (``asr_logprob``, its mean log-probability per token; None: not measured) and
    whether they read as one whole tool call (``called``, ``names_a_call``).

    In order:
    1. Speech that sounds cut (``p_audio`` < ``audio_cut``) is "incomplete" unless the LM is
       sure (``p_end`` >= ``audio_gate``) or the words are a short ask (``short_ask``; a
       question among them scored at least ``unlikely`` and heard clearly): Whisper completes
       a cut sentence on its own ("How far is the" -> "How far is that?"), which the LM reads
       as barely complete.
    2. Words that trail off ("So my question is...") or stop on a word that leads to another
       (``stops_open``) are "incomplete" under the same gate: read without its marks "So my
       question is" scored 0.031, complete by a hair.
    3. A turn of lead-ins alone ("Actually, never mind that," ``leads_in``) is "incomplete".
       Words that read as a whole tool call, in speech that does not sound cut, are "complete":
       the LM scores requests low ("Which day of the week are we on?" 0.016), while a parser
       that found every argument in them is evidence of its own.
    4. No LM score is "unsure"; one below ``unlikely`` "incomplete"; one below ``likely`` is
       "incomplete" on words Whisper barely heard (``asr_logprob`` below ``cfg.asr_logprob``;
       a clear question scores -0.05 to -0.3), else "unsure". A short ask is at least
       "unsure" (a request however clearly heard): the LM scores object-final requests low
       ("Can you recommend a book?" 0.0002) as if more were coming, and Whisper hears short
       requests in synthetic voices under -0.5; an early end the hold keeps silent.
    5. A likely end is "unsure" where the speech still sounds cut, in a story (20+ words,
       several sentences, ending in a statement: a teller pauses ~300 ms between sentences),
       or where the last sentence tells something without asking (``tells_something``).
    """
    sure = p_end is not None and p_end >= cfg.audio_gate
    sounds_cut = p_audio is not None and p_audio < cfg.audio_cut
    unclear = asr_logprob is not None and asr_logprob < cfg.asr_logprob
    # A question the LM finds very unlikely to end, or that Whisper barely heard, is often a
    # cut head ("What is the tallest?" 0.0001; "How many legs does a" heard "How many lengths
    # do I need?" at -0.66); a short request is seldom one, whatever the two make of it.
    ask = short_ask(text)
    clear_question = not unclear and p_end is not None and p_end >= cfg.unlikely
    short = ask == "request" or (ask == "question" and clear_question)
    if sounds_cut and not sure and not short:
        return "incomplete"
    if (_TRAILING_OFF.search(text) or stops_open(text)) and not sure:
        return "incomplete"
    if leads_in(text):
        return "incomplete"
    if called and not sounds_cut:
        return "complete"
    if p_end is None:
        return "unsure"
    if p_end < cfg.likely and short:
        return "unsure"
    if p_end < cfg.unlikely:
        return "incomplete"
    if p_end < cfg.likely:
        return "incomplete" if unclear else "unsure"
    story = len(text.split()) >= STORY_WORDS and _SENTENCE_BREAK.search(text.strip())
    if story and not text.rstrip().endswith("?"):
        return "unsure"
    return "unsure" if sounds_cut or tells_something(text) else "complete"


def says_more(text: str) -> bool:
    """Whether the words themselves say more is coming: they trail off ("So my question
    is..."), stop on a function word ("What is the capital of", "How far is that?" for "How
    far is the") or only lead in (``leads_in``)."""
    words = normalize(text).split()
    ends_open = bool(words) and words[-1] in _FUNCTION_ENDS
    return bool(_TRAILING_OFF.search(text)) or ends_open or leads_in(text)


def silence_ms(decision: str, text: str, cfg: EndOfTurnConfig, unsure_ms: int) -> int:
    """The silence after the last word that ends a turn decided ``decision`` on ``text``
    (``unsure_ms``: vad.speech_end_ms). An "incomplete" turn waits ``incomplete_ms`` where its
    words say more is coming, else ``doubt_ms``: a low score, words Whisper barely heard or
    speech that sounds cut is as often a short question misheard ("What makes rainbows?" heard
    "What makes rain both?", 0.0002) as a cut head, and a cut head's pause is 300-700 ms."""
    if decision == "complete":
        return cfg.complete_ms
    if decision != "incomplete":
        return unsure_ms
    return cfg.incomplete_ms if says_more(text) else min(cfg.doubt_ms, cfg.incomplete_ms)


def audible_after(
    decision: str | None,
    p_end: float | None,
    cfg: EndOfTurnConfig,
    p_audio: float | None = None,
    called: bool = False,
) -> int:
    """Silence after the user's last word before the answer to this end of turn may be heard
    (ms; 0: at once). An end the LM is sure of (``p_end`` >= ``audio_gate``), whose speech
    sounds final (``p_audio`` >= ``audio_final``) or whose words read as a whole tool call
    (``called``) plays at once; another "complete" or
    "unsure" one waits ``hold_ms`` from the last word, so that a user going on after a
    mid-sentence pause (300-700 ms) reopens a turn whose answer nobody heard. An "incomplete"
    end has waited longer already (``silence_ms``)."""
    if decision not in ("complete", "unsure") or (p_end is not None and p_end >= cfg.audio_gate):
        return 0
    if called or (p_audio is not None and p_audio >= cfg.audio_final):
        return 0
    return cfg.hold_ms


@dataclass
class TurnEnd:
    """The end-of-turn decision on the pause under way (and the transcript it was made on),
    then, after a turn ended on it, until when speech reopens the turn and from when its answer
    may be heard. Pure, like the turn manager that holds it; audio times in ms."""

    cfg: EndOfTurnConfig
    scored: str | None = None  # the transcript the decision was made on
    decision: str | None = None  # "complete" | "unsure" | "incomplete"
    p_end: float | None = None  # the LM's P(end of turn) behind ``decision``
    p_audio: float | None = None  # and the speech's
    called: bool = False  # the words read as a whole tool call
    reopen_until: float | None = None  # speech before this continues the ended turn
    # No answer is heard before this: the turn ended on a decision the LM was not sure of
    # (``audible_after``), and a reopen before then cuts nothing the user heard.
    audible_from: float | None = None

    def clear(self) -> None:
        """Speech went on: nothing is decided."""
        self.scored = self.decision = self.p_end = self.p_audio = None
        self.called = False

    def wants_score(self, text: str, complete: bool) -> bool:
        """Whether the pause's partial ``text`` is scored (``complete``: it covers all the
        speech); if so, it becomes the text the decision is made on."""
        new = self.scored is None or normalize(self.scored) != normalize(text)
        if not (complete and self.cfg.mode == "adaptive" and normalize(text) and new):
            return False
        self.scored, self.decision = text, None
        return True

    def decide(
        self,
        text: str,
        p_end: float | None,
        p_audio: float | None,
        asr_logprob: float | None,
        called: bool = False,
    ) -> str | None:
        """The decision on ``text``, or None when it is not the text being scored."""
        if self.scored is None or normalize(self.scored) != normalize(text):
            return None
        self.decision = end_decision(p_end, self.cfg, text, p_audio, asr_logprob, called)
        self.p_end, self.p_audio = p_end, p_audio
        self.called = called and self.decision == "complete"
        return self.decision

    def ended(self, end_ms: float) -> None:
        """The turn ended at ``end_ms``. Any end the adaptive rule chose may be early: a 600 ms
        pause after "So my question is" outlasts the unsure wait (500 ms) as "What is the
        capital of?" outlasts 200 ms."""
        if self.cfg.mode != "adaptive" or self.decision is None:
            return
        self.reopen_until = end_ms + self.cfg.reopen_ms
        hold = audible_after(self.decision, self.p_end, self.cfg, self.p_audio, self.called)
        self.audible_from = end_ms + hold if hold else None

    def may_play(self, audio_ms: float) -> bool:
        """Whether an answer may be heard at input time ``audio_ms``."""
        return self.audible_from is None or audio_ms >= self.audible_from


def names_a_call(choice: Choice | None, text: str) -> bool:
    """Whether ``text`` reads as one whole tool call: the tool chosen on it has a parser that
    read all its arguments in these very words (``how`` "head+words"), the turn is the size of
    a request (at most STORY_WORDS words: someone telling about a trip to Madrid and Berlin
    pauses ~300 ms between sentences, and each sentence that named a country ended the turn),
    and they do not stop on a number that may go on ("What's twelve plus twenty", "Set a timer
    for 100")."""
    if choice is None or choice.how != "head+words":
        return False
    words = normalize(text).split()
    if len(words) > STORY_WORDS:
        return False
    last = words[-1] if words else ""
    if last.isdigit():
        return not (int(last) >= 20 and int(last) % 10 == 0)
    return last not in _NUMBER_GOES_ON


def stops_open(text: str) -> bool:
    """Whether the transcript's last word leads to another: an article, a possessive, a
    conjunction, or outside a question a copula ("So my question is.")."""
    words = normalize(text).split()
    if not words:
        return False
    if words[-1] in _OPEN_ENDS:
        return True
    asked = text.rstrip().endswith("?") or _asks(_last_sentence(text))
    return words[-1] in _COPULAS and not asked


def leads_in(text: str) -> bool:
    """Whether the turn is only what leads to a request: "Actually, never mind that,", "Wait,",
    "So", "Oh, and also", "No, hold on." (what follows a barge-in before the new request)."""
    words = _lead_in_words(text)
    while len(words) > 1 and words[0] in _ACKS:
        words = words[1:]
    return bool(words) and words[0] in _LEAD_IN_HEADS and all(w in _LEAD_IN_WORDS for w in words)


def _lead_in_words(text: str) -> list[str]:
    """The turn's words, a lead-in phrase ("you know what") as one word."""
    return _LEAD_IN_PHRASES.sub("anyway", normalize(text)).split()


def takes_floor(text: str) -> bool:
    """Whether an interruption only takes the floor: lead-ins (``leads_in``) or words that tell
    the agent to stop ("Okay, stop.", "Oh, forget it.", "Stop, stop."), after which the user
    either says what they want or wants silence; in the conversation benchmark each such
    interruption answered at once was heard ("I'm") and cut by the request after it."""
    if leads_in(text):
        return True
    words = _lead_in_words(text)
    return bool(words) and all(w in _STOP_WORDS for w in words) and any(w in _STOPS for w in words)


def short_ask(text: str) -> str | None:
    """ "request" or "question" where the turn is one short, finished sentence that asks: 2-6
    words closed by a mark, not ending on a function word ("Give me a tip for", "Which planet
    has this?"), starting with an imperative ("Name three fruits.") or "can/could/would/will
    you" and a verb ("Can you recommend a book?"): a request; closed by "?" and starting with
    a question word ("Where do koalas live?"): a question. None otherwise."""
    t = text.strip()
    if not t or t[-1] not in ".?!" or _SENTENCE_BREAK.search(t) or _TRAILING_OFF.search(t):
        return None
    words = normalize(t).split()
    while words and words[0] in _LEADS_OR_PLEASE:
        words = words[1:]
    if not 2 <= len(words) <= SHORT_WORDS or words[-1] in _FUNCTION_ENDS:
        return None
    if len(words) >= 3 and words[0] in _YOU and words[1] == "you":
        return "request" if words[2] not in _FUNCTION_ENDS else None
    if words[0] in _IMPERATIVE:
        return "request"
    asks = words[0].split("'")[0] in _ASKING  # "what's", "where's"
    return "question" if t.endswith("?") and asks else None


def tells_something(text: str) -> bool:
    """Whether the turn's last sentence is a statement that neither asks nor requests ("I am
    having six friends over for dinner on Saturday."): a speaker who sets the scene goes on
    after ~300 ms, and the LM reads the sentence as a whole message (in bench/conversation.py
    each monologue's first sentence ended its turn and the agent said "I'm")."""
    t = text.strip()
    if not t.endswith(".") or _TRAILING_OFF.search(t):
        return False
    return not _asks(_last_sentence(t))


def _last_sentence(text: str) -> list[str]:
    """The last sentence's words, lower case, without a lead such as "so" or "okay"."""
    words = [w.strip(",;:").lower() for w in re.split(r"(?<=[.!?])\s+", text.strip())[-1].split()]
    while words and words[0] in _LEADS:
        words = words[1:]
    return words


def _asks(words: list[str]) -> bool:
    """Whether a sentence's words ask or request (an empty one counts as asking: nothing told)."""
    if not words or "please" in words or any(words[: len(w)] == w for w in _WANTS):
        return True
    return words[0] in _ASKING or words[0] in _IMPERATIVE


# ---- the scores, at each pause --------------------------------------------------------------


# Takes the LM's P(end of turn) of a pause's words (None: not scored) and the tool chosen on
# them (None: none, or none chosen).
EndScore = Callable[[float | None, "Choice | None"], None]
_Scored = tuple[float | None, "Choice | None"]


class Scoring(Protocol):
    """What the end-of-turn scores need of their session."""

    c: Components
    cfg: Config
    tm: TurnManager
    vad: Endpointer
    ears: Listener
    audio_ms: float
    pause_end: float | None
    lm_thread: LMThread

    def trace(self, name: str, turn: int, gen: int, **attrs: object) -> None: ...
    def on_vad(self, kind: str, audio_ms: float, detected_ms: float) -> None: ...


class EndOfTurn:
    """At each pause, the LM's and the speech's P(end of turn), and the silence they set."""

    def __init__(self, session: Scoring) -> None:
        self.s = session
        # The latest input: audio/prosody.py reads its last 1.6 s of speech; the rest covers
        # the pause's silence until the score starts.
        self._recent: deque[np.ndarray] = deque(maxlen=RECENT_MS // session.cfg.audio.frame_ms + 1)
        # The speech's own P(end of turn) for the current pause: (p, compute ms), scored in the
        # LM thread while the pause's ASR pass runs; None when end_of_turn.audio is off.
        self._speech_end: asyncio.Future[tuple[float | None, float]] | None = None
        # The P(end of turn) a speculation read of words no pass had shown to be all the
        # speech yet (``ahead``): the utterance, the pause, the words, and the score to come.
        self._ahead: tuple[int, float | None, str, asyncio.Future[_Scored]] | None = None

    def hear(self, frame: np.ndarray) -> None:
        self._recent.append(frame)

    def score_speech(self) -> None:
        """At a pause: the end of turn heard in the speech, in the LM thread (~2 ms), which is
        idle while the pause's ASR pass runs, so the LM's score does not wait on it."""
        heard, prosody = self._speech_before_pause(), self.s.c.turn_audio
        if heard is None or prosody is None or self.s.cfg.end_of_turn.mode != "adaptive":
            self._speech_end = None
            return

        def score() -> tuple[float | None, float]:
            t = now_ms()
            return prosody.score(heard), now_ms() - t

        self._speech_end = self.s.lm_thread.run(score)

    def ahead(self, text: str) -> EndScore:
        """What takes the P(end of turn) a speculation reads of ``text`` on its first forward
        (free) where no pass has shown ``text`` to be all the speech yet (a pause's latest
        partial, ``speculation.on_last_partial``): once the pause's pass hears the same words,
        its ``ScoreEnd`` decides from this score, without a forward of its own (which would
        also take the LM's cache from the speculation and stop it)."""
        s, loop = self.s, asyncio.get_running_loop()
        scored: asyncio.Future[_Scored] = loop.create_future()
        self._ahead = (s.ears.utt, s.pause_end, normalize(text), scored)

        def settle(p: float | None, choice: Choice | None) -> None:
            if not scored.done():
                scored.set_result((p, choice))

        def from_any_thread(p: float | None, choice: Choice | None) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(settle, p, choice)

        return from_any_thread

    def score_words(self, a: ScoreEnd) -> None:
        """P(end of turn) of the pause's words in the LM worker, ahead of any speculation, or
        the one a speculation on the same words in this pause read already (``ahead``)."""
        decide = self.scorer(a.gen, a.text)
        s, ahead = self.s, self._ahead
        if ahead is not None and ahead[:3] == (s.ears.utt, s.pause_end, normalize(a.text)):
            ahead[3].add_done_callback(lambda f: decide(*f.result()))
            return
        fut = self.s.lm_thread.run(self.s.lm_thread.session.end_of_turn, a.messages)

        def done(f: asyncio.Future[float | None]) -> None:
            if f.cancelled():
                return
            if f.exception() is not None:
                log.error("end-of-turn score failed: %s", f.exception())
                return
            decide(f.result(), None)

        fut.add_done_callback(done)

    def scorer(self, gen: int, text: str) -> EndScore:
        """What takes the LM's P(end of turn) for this pause's ``text`` and the tool chosen on
        it (None: none, or not chosen), from any thread: with the speech's score, the decision
        sets the silence that ends this pause's turn."""
        s, loop = self.s, asyncio.get_running_loop()
        utt, pause, turn, t0 = s.ears.utt, s.pause_end, s.tm.turn, now_ms()
        speech = self._speech_end
        # The pass this text came from is the last one (ScoreEnd and the speculation that
        # scores are both made from it at once).
        last = s.ears.last_pass[2] if s.ears.last_pass is not None else None
        logprob = last.logprob if last is not None and last.text == text else None

        def decide(p: float | None, called: bool) -> None:
            if utt != s.ears.utt or pause != s.pause_end:
                return  # the user spoke again: this pause is over
            if speech is not None and not speech.done():
                speech.add_done_callback(lambda _: decide(p, called))
                return
            p_audio, audio_ms = None, 0.0
            if speech is not None and not speech.cancelled():
                if speech.exception() is not None:
                    log.error("end-of-turn speech score failed: %s", speech.exception())
                else:
                    p_audio, audio_ms = speech.result()
            decision = s.tm.on_end_score(text, p, p_audio, logprob, called)
            if decision is None:
                return
            wait = silence_ms(decision, text, s.cfg.end_of_turn, s.cfg.vad.speech_end_ms)
            s.trace(
                "end_of_turn", turn, gen, p_end=None if p is None else round(p, 4),
                p_audio=None if p_audio is None else round(p_audio, 4),
                asr_logprob=None if logprob is None else round(logprob, 3), called=called,
                decision=decision, wait_ms=wait, compute_ms=round(now_ms() - t0, 1),
                audio_compute_ms=round(audio_ms, 2), text=text,
            )  # fmt: skip
            for ev in s.vad.end_after(wait):
                s.on_vad(ev.kind, ev.audio_ms, ev.detected_ms)

        def from_any_thread(p: float | None, choice: Choice | None) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(decide, p, names_a_call(choice, text))

        return from_any_thread

    def _speech_before_pause(self) -> np.ndarray | None:
        """The latest input up to the current pause's start, for the end heard in the speech;
        None when that is off or there is no pause."""
        s = self.s
        if s.c.turn_audio is None or not s.cfg.end_of_turn.audio:
            return None
        if s.pause_end is None or not self._recent:
            return None
        pcm = np.concatenate(self._recent)
        after = int((s.audio_ms - s.pause_end) * s.cfg.audio.sample_rate_hz / 1000)
        return pcm[: max(0, len(pcm) - after)]
