"""Turn manager: the pure, synchronous core of turn-taking, speculation and barge-in.

The asyncio pipeline feeds it what happened (VAD events, transcripts, the agent's playback state)
and carries out the actions it returns; it never touches a model, a clock or a thread, so every
decision is testable with plain pytest.

Speculation (the user pauses ~200 ms mid-turn):
  pause        -> ``RequestPartial``: a pass over all the speech (with
                  ``speculate_on_last_partial``, also ``StartSpeculation`` on the latest partial)
  that partial -> ``StartSpeculation``: the LM answers it, first clause synthesized, audio held
                  (a different earlier guess is dropped first: ``DropSpeculation("changed")``)
  resume       -> ``DropSpeculation`` (miss); the LM session keeps the shared KV prefix itself
  final == speculated text (normalized) -> ``ReleaseSpeculation`` (hit): play it at once
  final != speculated text             -> ``StartAnswer(refine_of=spec gen)``: the pipeline hands
                                          the speculative answer's tokens as first drafts
End of turn (``end_of_turn: adaptive``): the pause's fresh transcript is also scored: the LM's
P(the turn is complete), read by the speculation's first forward (``StartSpeculation.score``), or
by ``ScoreEnd`` where no speculation starts on it. With the speech's own score it
(``end_decision``) sets how much silence ends this pause's turn: ``end_complete_ms`` when likely
complete, ``end_incomplete_ms`` when likely not ("What is the capital of"), vad.speech_end_ms
when unsure; speech that sounds cut mid-sentence (``end_audio_cut``) is incomplete unless the LM
is sure (``end_audio_gate``), and unsure if it is; an unsure LM score on words Whisper barely
heard (``end_asr_logprob``) is incomplete. Speech within
``reopen_ms`` of a turn that ended after such a decision continues that turn (``ReopenTurn``): its
answer is cancelled, its user message taken back, and the whole turn (one transcript) gets one
answer.
Barge-in (the user talks while the agent is thinking or speaking), in two steps so playback stops
within ~100 ms yet a cough or "mm-hmm" does not throw the answer away:
  speech for ``barge_in_min_speech_ms`` (+ echo guard while audio plays) -> ``HoldPlayback``
  behind an echo canceller, at once on its double talk (``on_near_end``) -> ``HoldPlayback``,
                                          resumed without a speech_start within NEAR_END_WAIT_MS;
                                          while it can tell (the echo's delay known), speech it
                                          never called the user's is the agent's echo: ignored
  a transcript that is not a backchannel, once speech lasted ``barge_in_confirm_ms``
                                          -> ``CancelAnswer``: the user has the turn
  speech that ends (speech_end) before that, or transcribes as a backchannel -> ``ResumePlayback``
  speech within ``reopen_ms`` of the end of a held one ("Wait, [600 ms] which ocean is the
  smallest?"), or before the last utterance's final transcript came
                                          -> the same utterance goes on (``rejoined``), or
                                          the same turn (reopened) where the first part was
                                          taken as the turn and is being answered
History keeps only what the user heard of an interrupted answer, marked interrupted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from dllm_voice.app.conversation.config import ConversationConfig

_NON_WORD = re.compile(r"[^\w' ]+")
_SPACES = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Lower case, punctuation and hyphens dropped, spaces collapsed: 'Mm-hmm.' -> 'mm hmm'."""
    text = _NON_WORD.sub(" ", text.lower().replace("-", " "))
    return _SPACES.sub(" ", text).strip(" '")


def approx_tokens(text: str) -> int:
    """Token estimate when no tokenizer is at hand: ~4 characters per BPE token in English."""
    return len(text) // 4 + 1


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
# fmt: on


def end_decision(
    p_end: float | None,
    cfg: ConversationConfig,
    text: str = "",
    p_audio: float | None = None,
    asr_logprob: float | None = None,
) -> str:
    """ "complete", "unsure" or "incomplete" from the LM's P(end of turn) (None: not scored),
    the speech's own P(end) (audio/prosody.py; None: not heard) and how clearly Whisper heard
    the words (``asr_logprob``, its mean log-probability per token; None: not measured).

    Speech that sounds cut (``p_audio`` below ``end_audio_cut``: no final lengthening or pitch
    movement on the last word) is "incomplete" unless the LM is sure of its end (``p_end`` at
    or above ``end_audio_gate``): Whisper completes a cut sentence on its own ("How far is the"
    -> "How far is that?"), which the LM reads as barely complete, while the speech's score
    alone would make a few complete questions wait too. Where the LM is sure and the speech
    still sounds cut, the two disagree: "unsure" (in real time "How far is that?" scored LM
    0.31-0.55 with the speech at 0.02-0.05, and its answer beat a 300 ms pause).
    A transcript that trails off ("So my question is...": Whisper's own mark for speech that
    stops mid-phrase) or stops on a word that leads to another (`stops_open`: "So my question
    is.") is "incomplete" under the same gate: the LM's score drops the marks, and read without
    them "So my question is" scored 0.031, complete by a hair.
    A long turn (20+ words, several sentences) that ends in a statement is at most "unsure":
    someone telling a story pauses ~300 ms between sentences, and each of them reads as a
    complete message (in bench/conversation.py's monologues every sentence ended the turn and
    was reopened); "Never mind that. Tell me about dragons." is not a story. So is a shorter
    turn whose last sentence tells something without asking or requesting (`tells_something`).
    An LM score between ``end_unlikely`` and ``end_likely`` on words Whisper barely heard
    (``asr_logprob`` below ``end_asr_logprob``) is "incomplete": the cut speech Whisper
    completes on its own ("How many legs does a" -> "How many lengths do I need?", -0.66) reads
    as barely complete, while a question heard clearly scores -0.05 to -0.3.
    """
    sure = p_end is not None and p_end >= cfg.end_audio_gate
    sounds_cut = p_audio is not None and p_audio < cfg.end_audio_cut
    if sounds_cut and not sure:
        return "incomplete"
    if (_TRAILING_OFF.search(text) or stops_open(text)) and not sure:
        return "incomplete"
    if p_end is None:
        return "unsure"
    if p_end < cfg.end_unlikely:
        return "incomplete"
    if p_end < cfg.end_likely:
        unclear = asr_logprob is not None and asr_logprob < cfg.end_asr_logprob
        return "incomplete" if unclear else "unsure"
    story = len(text.split()) >= STORY_WORDS and _SENTENCE_BREAK.search(text.strip())
    if story and not text.rstrip().endswith("?"):
        return "unsure"
    return "unsure" if sounds_cut or tells_something(text) else "complete"


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


# ---- actions the pipeline carries out ----------------------------------------------------------


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


# ---- history ----------------------------------------------------------------------------------


@dataclass
class Message:
    role: str  # user | assistant
    content: str
    interrupted: bool = False

    def as_chat(self) -> dict[str, str]:
        # An interrupted answer ends in an ellipsis: the convention for speech cut off mid-way,
        # which the LM reads as "the user stopped me here".
        text = self.content + ("..." if self.interrupted and self.content else "")
        return {"role": self.role, "content": text}


# A new turn that uses one of these refers back to the conversation ("How big is it?", "And
# what about Germany?"); one that says it changes the subject does not ("Actually, never mind
# that. Tell me ..."). Compared on normalize()d text.
_REFERS_BACK = re.compile(
    r"\b(it|its|it's|that|this|those|these|they|them|their|he|him|his|she|her|there|then|more"
    r"|again|another|else|also|too|same|instead|previous|earlier|before|what about|how about"
    r"|you said|you just|go on|continue)\b"
)
_NEW_SUBJECT = re.compile(
    r"\b(never ?mind|forget (it|that|about)|something else|new question|different question"
    r"|change the subject)\b"
)
_CONTINUATIONS = ("and", "but", "so", "or", "why", "how", "really")


# Words that alone say nothing to act on; "no", "stop", "wait" are not among them.
_EMPTY_WORDS = frozenset(
    ("a", "an", "the", "and", "or", "but", "so", "then", "them", "they", "it", "its", "that")
    + ("this", "there", "uh", "um", "umm", "uhm", "er", "erm", "eh", "ah", "oh", "ooh", "mm")
    + ("mmm", "mhm", "hm", "hmm", "huh", "m")
)


def refers_back(text: str) -> bool:
    """Whether a user turn needs the conversation before it to be understood."""
    t = normalize(text)
    words = t.split()
    if not words or _NEW_SUBJECT.search(t):
        return False
    return len(words) <= 2 or words[0] in _CONTINUATIONS or bool(_REFERS_BACK.search(t))


class History:
    """The conversation's past turns and the part of them each prompt carries.

    ``mode`` (conversation.history): "full" sends the newest turns that fit the token budget;
    "follow_up" sends the last ``follow_up_turns`` exchanges only when the new turn refers back
    (``refers_back``), else none; "none" never sends past turns. A 135M model given the whole
    conversation answers a cooking question with the previous answer about the calendar; a
    larger model can take "full".
    """

    def __init__(
        self,
        budget_tokens: int,
        count_tokens: Callable[[str], int] = approx_tokens,
        mode: str = "full",
        follow_up_turns: int = 1,
    ):
        self.budget_tokens = budget_tokens
        self.count_tokens = count_tokens
        self.mode, self.follow_up_turns = mode, follow_up_turns
        self.messages: list[Message] = []

    def add_user(self, text: str) -> None:
        # A user message with no answer yet (the answer was cancelled before a word was played)
        # absorbs the next one: the user simply went on talking.
        if self.messages and self.messages[-1].role == "user":
            self.messages[-1].content = f"{self.messages[-1].content} {text}".strip()
        else:
            self.messages.append(Message("user", text))

    def revise_user(self, old: str, new: str) -> bool:
        """Put ``new`` in place of ``old`` in the newest user message that holds it (a long
        turn's words transcribed again after its final); False when none does."""
        for msg in reversed(self.messages):
            if msg.role == "user" and old and old in msg.content:
                head, _, tail = msg.content.rpartition(old)
                msg.content = f"{head}{new}{tail}"
                return True
        return False

    def add_assistant(self, text: str, interrupted: bool) -> None:
        if not text.strip():
            return
        self.messages.append(Message("assistant", text.strip(), interrupted))

    def _context(self, past: list[Message], pending: Message) -> list[Message]:
        """The past messages this prompt carries, oldest first."""
        if self.mode == "follow_up" and not refers_back(pending.content):
            return []
        return self._window(past, pending)

    def _window(self, past: list[Message], pending: Message) -> list[Message]:
        """The past messages a prompt that carries history carries, oldest first."""
        if self.mode == "none":
            return []
        if self.mode == "follow_up":
            starts = [i for i, m in enumerate(past) if m.role == "user"]
            past = past[starts[-self.follow_up_turns] :] if starts else []
        kept: list[Message] = []
        used = self.count_tokens(pending.content)
        for msg in reversed(past):
            used += self.count_tokens(msg.content)
            if used > self.budget_tokens:
                break
            kept.append(msg)
        # Never start the kept history with an assistant message cut from its question.
        while kept and kept[-1].role == "assistant":
            kept.pop()
        return kept[::-1]

    def lead(self, system: str) -> list[dict[str, str]]:
        """What the next turn's prompt starts with when it carries history: the system
        message and the past turns (a turn that does not carry them shares the first)."""
        past = self.messages
        if past and past[-1].role == "user":
            past = past[:-1]  # unanswered: it opens the next turn's user message
        chat = [{"role": "system", "content": system}] if system else []
        return chat + [m.as_chat() for m in self._window(past, Message("user", ""))]

    def prompt(self, system: str, user_text: str = "") -> list[dict[str, str]]:
        """System + the past turns the new one needs (``mode``) + the user message.

        The user message is ``user_text`` appended to a stored unanswered user message (the
        one just added, or one whose answer was cancelled unheard).
        """
        pending = Message("user", user_text)
        past = self.messages
        if past and past[-1].role == "user":
            pending = Message("user", f"{past[-1].content} {user_text}".strip())
            past = past[:-1]
        chat = [{"role": "system", "content": system}] if system else []
        chat += [m.as_chat() for m in self._context(past, pending)]
        chat.append(pending.as_chat())
        return chat


# ---- the manager ------------------------------------------------------------------------------


@dataclass
class _Speculation:
    gen: int
    text: str  # as spoken to the LM
    turn: int


@dataclass
class _Barge:
    onset_ms: float
    held: bool = False
    last_ms: float = 0.0
    early: bool = False  # held on the echo canceller's double talk, before the VAD's onset
    echo: bool = False  # speech the double-talk detector has not called the user's (yet)


# A hold on double talk alone resumes when the VAD does not start speech within this: on a real
# sound server speech_start (90 ms of voiced frames) came 80-210 ms after such a hold.
NEAR_END_WAIT_MS = 300


@dataclass
class TurnManager:
    """Decides, from what happened, what the pipeline does next. Audio times in ms."""

    cfg: ConversationConfig
    count_tokens: Callable[[str], int] = approx_tokens
    # What the user heard of answer `gen` (the pipeline's playback knows): read when an answer
    # is cancelled, so history holds the heard text before the interrupting user message.
    heard: Callable[[int], str] = lambda gen: ""
    # conversation.history resolved for the model (Components.history_mode); "auto" here
    # takes the config's value, and an unresolved "auto" is "follow_up".
    history_mode: str = "auto"
    gen: int = 0
    turn: int = 0
    agent: str = "idle"  # idle | thinking | speaking
    answer_gen: int | None = None  # generation of the answer being thought/spoken
    answer_turn: int = 0
    user_speaking: bool = False
    paused: bool = False
    last_partial: str = ""  # latest partial transcript of the current utterance
    decision: str | None = None  # end-of-turn decision of the current pause
    scored: str | None = None  # the transcript it was made on
    reopen_until: float | None = None  # audio ms until which speech continues the ended turn
    reopened: bool = False  # the latest speech_start continued the previous turn
    # An interruption let go as short: until when (audio ms) speech continues it, and its onset.
    rejoin: tuple[float, float] | None = None
    rejoined: bool = False  # the latest speech_start continued the utterance before it
    spec: _Speculation | None = None
    barge: _Barge | None = None
    near_end_sure: bool = False  # an echo canceller's double-talk detector can tell echo apart
    history: History = field(init=False)

    def __post_init__(self) -> None:
        mode = self.cfg.history if self.history_mode == "auto" else self.history_mode
        mode = "follow_up" if mode == "auto" else mode  # the bundled 135M model's setting
        self.history = History(
            self.cfg.history_tokens, self.count_tokens, mode, self.cfg.follow_up_turns
        )
        self._backchannels = {normalize(b) for b in self.cfg.backchannels}

    def is_backchannel(self, text: str) -> bool:
        """A listener's sound, not a turn: one of ``backchannels``, or up to 3 words that carry
        nothing (Whisper hears "mm-hmm" as "and then them", "MMM", "uh oh")."""
        words = normalize(text)
        if not words or words in self._backchannels:
            return True
        if text.rstrip().endswith("?"):  # "And then?" asks for more
            return False
        split = words.split()
        return len(split) <= 3 and all(w in _EMPTY_WORDS or w in self._backchannels for w in split)

    def _not_for_us(self, text: str) -> bool:
        """A backchannel, or (echo guard on) mostly the words the agent itself just said."""
        if self.is_backchannel(text):
            return True
        if not self.cfg.echo_guard_ms or self.answer_gen is None:
            return False
        said = set(normalize(self.heard(self.answer_gen)).split()[-30:])
        words = normalize(text).split()
        return sum(w in said for w in words) >= 0.6 * len(words)

    def _next_gen(self) -> int:
        self.gen += 1
        return self.gen

    def _drop_spec(self, reason: str) -> list[Action]:
        if self.spec is None:
            return []
        dropped, self.spec = self.spec, None
        return [DropSpeculation(dropped.gen, reason)]

    # -- user speech ---------------------------------------------------------------------------

    def on_speech_start(self, onset_ms: float, unheard: bool = False) -> list[Action]:
        """``unheard``: the last utterance's final transcript has not come yet, so nothing was
        made of it: this speech continues it (its transcriber hears both), as it continues an
        interruption let go as short within ``reopen_ms``."""
        reopen = self.reopen_until is not None and onset_ms <= self.reopen_until
        rejoin, self.rejoin = self.rejoin, None
        near = rejoin is not None and onset_ms <= rejoin[0]
        if near and self.answer_gen is not None and self.answer_turn == self.turn:
            reopen = True  # the interruption was taken as the turn: its answer is taken back
        self.reopen_until, self.reopened = None, reopen
        short = near and self.agent != "idle"
        self.rejoined = not reopen and (unheard or short)
        self.user_speaking, self.paused = True, False
        self.last_partial, self.decision, self.scored = "", None, None
        if reopen:
            return self._reopen()
        if not self.rejoined:
            self.turn += 1
        if self.rejoined and self.barge is not None:  # an interruption that awaits its words
            self.barge.last_ms = onset_ms
        elif self.agent != "idle" and self.cfg.barge_in:
            held = self.barge is not None and self.barge.held  # held on double talk
            echo = self.agent == "speaking" and self.near_end_sure and not held
            onset = rejoin[1] if short and rejoin else onset_ms
            self.barge = _Barge(onset, held=held, last_ms=onset_ms, echo=echo)
        return []

    def on_near_end(self, audio_ms: float, talking: bool, sure: bool) -> list[Action]:
        """Every input frame behind an echo canceller; ``talking``: the mic holds speech the
        agent's echo does not explain (audio.echo.DoubleTalkDetector); ``sure``: the detector
        has measured the echo path, so speech it does not call the user's is the agent's own
        voice (AEC3 lets the echo through after a reset or an underrun: on a real sound server
        at 0 dB the VAD and the echo guard paused the agent once in each of two 15-answer
        runs). While the agent's audio plays, ``talking`` holds it at once, without the VAD's
        onset and the guard."""
        self.near_end_sure = sure
        b, gen = self.barge, self.answer_gen
        if talking and self.cfg.barge_in and self.agent == "speaking" and gen is not None:
            if b is None:
                self.barge = _Barge(audio_ms, held=True, last_ms=audio_ms, early=True)
                return [HoldPlayback(gen, near_end=True, onset_ms=audio_ms)]
            b.echo = False
            if not b.held:
                b.held = True
                return [HoldPlayback(gen, near_end=True)]
        waited = b is not None and b.early and audio_ms - b.onset_ms >= NEAR_END_WAIT_MS
        if waited and not self.user_speaking:
            return self._reject_barge("no speech")
        return []

    def on_speech_progress(self, audio_ms: float) -> list[Action]:
        """Called for every input frame while the user speaks during an agent answer."""
        b = self.barge
        if b is None or self.answer_gen is None or self.paused:
            return []
        b.last_ms = audio_ms
        guard = self.cfg.echo_guard_ms if self.agent == "speaking" else 0
        if (
            not b.held
            and not b.echo
            and audio_ms - b.onset_ms >= self.cfg.barge_in_min_speech_ms + guard
        ):
            b.held = True
            return [HoldPlayback(self.answer_gen)]
        return []

    def _barge_needs_transcript(self) -> bool:
        b = self.barge
        guard = self.cfg.echo_guard_ms if self.agent == "speaking" else 0
        long = b is not None and b.last_ms - b.onset_ms >= self.cfg.barge_in_confirm_ms + guard
        return long and not b.echo

    def _reject_barge(self, reason: str) -> list[Action]:
        b, self.barge = self.barge, None
        if b is None or not b.held or self.answer_gen is None:
            return []
        return [ResumePlayback(self.answer_gen, reason)]

    def _confirm_barge(self) -> list[Action]:
        self.barge = None
        if self.answer_gen is None:
            return []
        gen = self.answer_gen
        self.history.add_assistant(self.heard(gen), interrupted=True)
        self.answer_gen, self.agent = None, "idle"
        self._next_gen()
        return [CancelAnswer(gen)]

    def on_pause(self, end_ms: float | None = None) -> list[Action]:
        """``end_ms``: audio time of the end of the last voiced frame."""
        self.paused = True
        if self.barge is not None:
            if end_ms is not None:
                self.barge.last_ms = end_ms
            # Short so far: stay held until speech_end ("Wait, ..." pauses at its comma).
            return [RequestPartial(self.gen)] if self._barge_needs_transcript() else []
        if not (self.user_speaking and self.agent == "idle"):
            return []
        if not self.cfg.speculation:  # the pass still feeds the end-of-turn score
            return [RequestPartial(self.gen)] if self.cfg.end_of_turn == "adaptive" else []
        if not self.cfg.speculate_on_last_partial:
            return [RequestPartial(self.gen)]
        # Speculate at once on the latest partial (often the utterance minus its last word);
        # the fresh pass over all the speech then confirms or replaces it.
        return [*self._speculate(self.last_partial), RequestPartial(self.gen)]

    def _reopen(self) -> list[Action]:
        """Speech right after an early end: the same turn goes on (see ReopenTurn)."""
        actions = self._drop_spec("reopen")
        gen = self.answer_gen
        if gen is not None and self.answer_turn == self.turn:
            self.answer_gen, self.agent = None, "idle"
            self._next_gen()
            if self.history.messages and self.history.messages[-1].role == "user":
                self.history.messages.pop()  # the whole turn comes back with the final
            actions.append(ReopenTurn(gen))
        return actions

    def on_resume(self, onset_ms: float | None = None) -> list[Action]:
        self.paused = False
        self.decision, self.scored = None, None
        return self._drop_spec("resume")

    def on_partial(
        self, text: str, complete: bool = False, stable: str | None = None
    ) -> list[Action]:
        """A partial transcript of the current utterance; ``complete``: the pass covers all the
        speech so far; ``stable``: the words two passes agree on (None: all of ``text``)."""
        if self.barge is not None:
            # A partial confirms an interruption on its stable words only: one pass over
            # 200 ms of "uh-huh" read "What the fuck?", and the final then read nothing.
            heard = text if stable is None else stable
            if self._barge_needs_transcript() and heard and not self._not_for_us(heard):
                return self._confirm_barge()
            return []
        if self.user_speaking:
            self.last_partial = text
        if not (self.paused and self.user_speaking and self.agent == "idle"):
            return []
        new_text = self.scored is None or normalize(self.scored) != normalize(text)
        score = complete and self.cfg.end_of_turn == "adaptive" and normalize(text) and new_text
        if score:
            self.scored, self.decision = text, None
        actions = self._speculate(text) if self.cfg.speculation else []
        if not score:
            return actions
        # A speculation that starts on this text scores it on the way (one forward fewer).
        at = next((i for i, a in enumerate(actions) if isinstance(a, StartSpeculation)), None)
        if at is not None:
            actions[at] = replace(actions[at], score=True)
            return actions
        prompt = self.history.prompt(self.cfg.system_prompt, text)
        return [ScoreEnd(self.gen, text, prompt), *actions]

    def on_end_score(
        self,
        text: str,
        p_end: float | None,
        p_audio: float | None = None,
        asr_logprob: float | None = None,
    ) -> str | None:
        """The LM's P(end of turn) for ``text``, the speech's (``p_audio``, None: not heard)
        and Whisper's mean log-probability of ``text`` (None: not measured); returns the
        decision ("complete", "unsure", "incomplete"), or None when the user has spoken again
        since (nothing to decide)."""
        if not self.paused or self.scored is None or normalize(self.scored) != normalize(text):
            return None
        self.decision = end_decision(p_end, self.cfg, text, p_audio, asr_logprob)
        return self.decision

    def _speculate(self, text: str) -> list[Action]:
        if len(normalize(text).split()) < self.cfg.speculation_min_words:
            return []
        if self.spec is not None and normalize(self.spec.text) == normalize(text):
            return []
        actions = self._drop_spec("changed")
        self.spec = _Speculation(self._next_gen(), text, self.turn)
        prompt = self.history.prompt(self.cfg.system_prompt, text)
        return [*actions, StartSpeculation(self.spec.gen, text, prompt)]

    def on_speech_end(self, end_ms: float | None = None) -> list[Action]:
        # Any end the adaptive rule chose may be early: a 600 ms pause after "So my question
        # is" outlasts the unsure wait (500 ms) as "What is the capital of?" outlasts 200 ms.
        adaptive = self.cfg.end_of_turn == "adaptive" and self.decision is not None
        if adaptive and end_ms is not None and self.barge is None:
            self.reopen_until = end_ms + self.cfg.reopen_ms
        self.user_speaking, self.paused = False, False
        if self.barge is not None and end_ms is not None:
            self.barge.last_ms = end_ms
        if self.barge is not None and self.barge.held and end_ms is not None:
            # "Wait," [600 ms] "which ocean is the smallest?": the rest may come after a pause
            self.rejoin = (end_ms + self.cfg.reopen_ms, self.barge.onset_ms)
        if self.barge is not None and not self._barge_needs_transcript():
            return self._reject_barge("short")  # a cough, a click, a short "mm"
        return []

    def on_final(self, text: str) -> list[Action]:
        """The final transcript of the utterance that just ended."""
        if self.barge is not None:
            if self._not_for_us(text):
                return [*self._drop_spec("backchannel"), *self._reject_barge("backchannel")]
            actions = self._confirm_barge()
        else:
            actions = []
        if self.agent != "idle" or self.is_backchannel(text):
            # An answer is still playing (barge-in disabled) or the user only said "mm-hmm".
            return [*actions, *self._drop_spec("ignored")]
        return [*actions, *self._commit(text)]

    def _commit(self, text: str) -> list[Action]:
        """``text`` is the user's turn: release the matching speculation or start an answer."""
        spec, self.spec = self.spec, None
        self.history.add_user(text)
        self.agent, self.answer_turn = "thinking", self.turn
        if spec is not None and normalize(spec.text) == normalize(text):
            self.answer_gen = spec.gen
            return [ReleaseSpeculation(spec.gen)]
        gen = self._next_gen()
        self.answer_gen = gen
        prompt = self.history.prompt(self.cfg.system_prompt)
        return [StartAnswer(gen, text, prompt, spec.gen if spec else None)]

    # -- agent ---------------------------------------------------------------------------------

    def on_audio_started(self, gen: int) -> None:
        if gen == self.answer_gen:
            self.agent = "speaking"

    def lead(self, words: str = "") -> list[dict[str, str]]:
        """What the next prompt starts with, to warm the LM cache with: History.lead, or with
        the first ``words`` of the user's turn, the prompt they would make."""
        if words:
            return self.history.prompt(self.cfg.system_prompt, words)
        return self.history.lead(self.cfg.system_prompt)

    def on_answer_done(self, gen: int, text: str) -> list[Action]:
        """The answer ``gen`` played to its end (cancelled answers were recorded on cancel)."""
        if gen != self.answer_gen:
            return []
        self.reopen_until = self.rejoin = None  # heard whole: new speech is a new turn
        self.history.add_assistant(text, interrupted=False)
        self.answer_gen, self.agent = None, "idle"
        return self._reject_barge("answer finished") if self.barge else []

    def cancel_answer(self) -> list[Action]:
        """An explicit cancel (client ``response.cancel``)."""
        self.barge, self.reopen_until, self.rejoin = None, None, None
        if self.answer_gen is None:
            return self._drop_spec("cancelled")
        return self._confirm_barge()
