"""Turn manager: the pure, synchronous core of turn-taking, speculation and barge-in.

The asyncio pipeline feeds it what happened (VAD events, transcripts, the agent's playback state)
and carries out the actions it returns; it never touches a model, a clock or a thread, so every
decision is testable with plain pytest.

Speculation (the user pauses ~200 ms mid-turn):
  pause        -> ``RequestPartial``: a pass over all the speech (with
                  ``speculation.on_last_partial``, also ``StartSpeculation`` on the latest partial)
  that partial -> ``StartSpeculation``: the LM answers it, first clause synthesized, audio held
                  (a different earlier guess is dropped first: ``DropSpeculation("changed")``)
  resume       -> ``DropSpeculation`` (miss); the LM session keeps the shared KV prefix itself
  final == speculated text (normalized) -> ``ReleaseSpeculation`` (hit): play it at once
  final != speculated text             -> ``StartAnswer(refine_of=spec gen)``: the pipeline hands
                                          the speculative answer's tokens as first drafts
End of turn (``end_of_turn.mode: adaptive``): the pause's fresh transcript is also scored: the LM's
P(the turn is complete), read by the speculation's first forward (``StartSpeculation.score``), or
by ``ScoreEnd`` where no speculation starts on it. With the speech's own score it
(``end_decision``) sets how much silence ends this pause's turn: ``complete_ms`` when likely
complete, ``incomplete_ms`` when likely not ("What is the capital of"), vad.speech_end_ms
when unsure; speech that sounds cut mid-sentence (``audio_cut``) is incomplete unless the LM
is sure (``audio_gate``), and unsure if it is; an unsure LM score on words Whisper barely
heard (``asr_logprob``) is incomplete. Speech within
``reopen_ms`` of a turn that ended after such a decision continues that turn (``ReopenTurn``): its
answer is cancelled, its user message taken back, and the whole turn (one transcript) gets one
answer.
Barge-in (the user talks while the agent is thinking or speaking), in two steps so playback stops
within ~100 ms yet a cough or "mm-hmm" does not throw the answer away:
  speech for ``barge_in.min_speech_ms`` (+ echo guard while audio plays) -> ``HoldPlayback``
  behind an echo canceller, at once on its double talk (``on_near_end``) -> ``HoldPlayback``,
                                          resumed without a speech_start within NEAR_END_WAIT_MS;
                                          while it can tell (the echo's delay known), speech it
                                          never called the user's is the agent's echo: ignored
  a transcript that is not a backchannel, once speech lasted ``barge_in.confirm_ms``
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

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from dllm_voice.app.conversation.actions import (
    Action,
    CancelAnswer,
    DropSpeculation,
    HoldPlayback,
    ReleaseSpeculation,
    ReopenTurn,
    RequestPartial,
    ResumePlayback,
    ScoreEnd,
    StartAnswer,
    StartSpeculation,
)
from dllm_voice.app.conversation.config import (
    BargeInConfig,
    ConversationConfig,
    EndOfTurnConfig,
    SpeculationConfig,
)
from dllm_voice.app.conversation.end_of_turn import audible_after, end_decision
from dllm_voice.app.conversation.history import History
from dllm_voice.app.conversation.text import approx_tokens, normalize

# Words that alone say nothing to act on; "no", "stop", "wait" are not among them.
_EMPTY_WORDS = frozenset(
    ("a", "an", "the", "and", "or", "but", "so", "then", "them", "they", "it", "its", "that")
    + ("this", "there", "uh", "um", "umm", "uhm", "er", "erm", "eh", "ah", "oh", "ooh", "mm")
    + ("mmm", "mhm", "hm", "hmm", "huh", "m")
)


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
    end_of_turn: EndOfTurnConfig = field(default_factory=EndOfTurnConfig)
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)
    barge_in: BargeInConfig = field(default_factory=BargeInConfig)
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
    p_end: float | None = None  # the LM's P(end of turn) behind ``decision``
    # Audio ms before which no answer is heard: the turn ended on a decision the LM was not
    # sure of (``audible_after``), and a reopen before then cuts nothing the user heard.
    audible_from: float | None = None
    reopened: bool = False  # the latest speech_start continued the previous turn
    # An interruption let go as short: until when (audio ms) speech continues it, and its onset.
    rejoin: tuple[float, float] | None = None
    rejoined: bool = False  # the latest speech_start continued the utterance before it
    spec: _Speculation | None = None
    barge: _Barge | None = None
    near_end_sure: bool = False  # an echo canceller's double-talk detector can tell echo apart
    # False: a committed turn joins the history and waits for an explicit answer (a Realtime
    # client's turn_detection.create_response: false).
    answers_turns: bool = True
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
        if not self.barge_in.echo_guard_ms or self.answer_gen is None:
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
        self.reopen_until, self.reopened, self.audible_from = None, reopen, None
        short = near and self.agent != "idle"
        self.rejoined = not reopen and (unheard or short)
        self.user_speaking, self.paused = True, False
        self.last_partial, self.decision, self.scored, self.p_end = "", None, None, None
        if reopen:
            return self._reopen()
        if not self.rejoined:
            self.turn += 1
        if self.rejoined and self.barge is not None:  # an interruption that awaits its words
            self.barge.last_ms = onset_ms
        elif self.agent != "idle" and self.barge_in.enabled:
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
        if talking and self.barge_in.enabled and self.agent == "speaking" and gen is not None:
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
        guard = self.barge_in.echo_guard_ms if self.agent == "speaking" else 0
        if (
            not b.held
            and not b.echo
            and audio_ms - b.onset_ms >= self.barge_in.min_speech_ms + guard
        ):
            b.held = True
            return [HoldPlayback(self.answer_gen)]
        return []

    def _barge_needs_transcript(self) -> bool:
        b = self.barge
        guard = self.barge_in.echo_guard_ms if self.agent == "speaking" else 0
        if b is None:
            return False
        return b.last_ms - b.onset_ms >= self.barge_in.confirm_ms + guard and not b.echo

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
        if not self.speculation.enabled:  # the pass still feeds the end-of-turn score
            return [RequestPartial(self.gen)] if self.end_of_turn.mode == "adaptive" else []
        if not self.speculation.on_last_partial:
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
        score = complete and self.end_of_turn.mode == "adaptive" and normalize(text) and new_text
        if score:
            self.scored, self.decision = text, None
        actions = self._speculate(text) if self.speculation.enabled else []
        if not score:
            return actions
        # A speculation that starts on this text scores it on the way (one forward fewer).
        for i, a in enumerate(actions):
            if isinstance(a, StartSpeculation):
                actions[i] = replace(a, score=True)
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
        self.decision = end_decision(p_end, self.end_of_turn, text, p_audio, asr_logprob)
        self.p_end = p_end
        return self.decision

    def may_play(self, audio_ms: float) -> bool:
        """Whether an answer may be heard at input time ``audio_ms`` (see ``audible_from``)."""
        return self.audible_from is None or audio_ms >= self.audible_from

    def _speculate(self, text: str) -> list[Action]:
        if len(normalize(text).split()) < self.speculation.min_words:
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
        adaptive = self.end_of_turn.mode == "adaptive" and self.decision is not None
        if adaptive and end_ms is not None and self.barge is None:
            self.reopen_until = end_ms + self.end_of_turn.reopen_ms
            hold = audible_after(self.decision, self.p_end, self.end_of_turn)
            self.audible_from = end_ms + hold if hold else None
        self.user_speaking, self.paused = False, False
        if self.barge is not None and end_ms is not None:
            self.barge.last_ms = end_ms
        if self.barge is not None and self.barge.held and end_ms is not None:
            # "Wait," [600 ms] "which ocean is the smallest?": the rest may come after a pause
            self.rejoin = (end_ms + self.end_of_turn.reopen_ms, self.barge.onset_ms)
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
        if not self.answers_turns:
            actions = self._drop_spec("waiting")
            self.history.add_user(text)
            return actions
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

    def turn_waiting(self) -> bool:
        """A turn is committed and unanswered (``answers_turns`` off)."""
        past = self.history.messages
        return bool(past) and past[-1].role == "user" and self.agent == "idle"

    def answer_again(self, tools: bool = False) -> list[Action]:
        """Answer the latest turn again, from what its tools said (a client's tool outputs), or
        a turn left waiting (``tools``: it may call one); nothing while an answer is under way."""
        if self.agent != "idle" or self.user_speaking:
            return []
        text = next((m.content for m in reversed(self.history.messages) if m.role == "user"), "")
        self.agent, self.answer_turn = "thinking", self.turn
        self.answer_gen = self._next_gen()
        prompt = self.history.prompt(self.cfg.system_prompt)
        return [StartAnswer(self.answer_gen, text, prompt, tools=tools)]

    def announce(self) -> int | None:
        """A new generation for something the agent says unasked (a timer going off), or None
        while the user talks or an answer is under way: it waits for the turn to end."""
        if self.user_speaking or self.agent != "idle" or self.spec is not None:
            return None
        self.answer_gen, self.agent, self.answer_turn = self._next_gen(), "thinking", self.turn
        return self.answer_gen

    def cancel_answer(self) -> list[Action]:
        """An explicit cancel (client ``response.cancel``)."""
        self.barge, self.reopen_until, self.rejoin = None, None, None
        if self.answer_gen is None:
            return self._drop_spec("cancelled")
        return self._confirm_barge()
