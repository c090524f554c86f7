"""Turn manager: the pure, synchronous core of turn-taking, speculation and barge-in.

The asyncio pipeline feeds it what happened (VAD events, transcripts, the agent's playback state)
and carries out the actions it returns; it never touches a model, a clock or a thread, so every
decision is testable with plain pytest.

Speculation (speculation.py): an answer started on a pause's partial, kept if the final agrees.
End of turn (``end_of_turn.mode: adaptive``): the pause's fresh transcript is also scored: the LM's
P(the turn is complete), read by the speculation's first forward (``StartSpeculation.score``), or
by ``ScoreEnd`` where no speculation starts on it. With the speech's own score it
(``end_decision``) sets how much silence ends this pause's turn: ``complete_ms`` when likely
complete, ``incomplete_ms`` or ``doubt_ms`` when likely not ("What is the capital of";
``silence_ms``), vad.speech_end_ms when unsure; speech that sounds cut mid-sentence
(``audio_cut``) is incomplete unless the LM is sure (``audio_gate``), and unsure if it is; an
unsure LM score on words Whisper barely heard (``asr_logprob``) is incomplete. Speech within
``reopen_ms`` of a turn that ended after such a decision continues that turn (``ReopenTurn``): its
answer is cancelled, its user message taken back, and the whole turn (one transcript) gets one
answer.
Barge-in (the user talks while the agent is thinking or speaking; barge_in.py): speech held
long enough, not a backchannel -> ``CancelAnswer``: the user has the turn; speech within
``reopen_ms`` of the end of a held one, or before the last utterance's final transcript came
-> the same utterance goes on (``rejoined``), or the same turn (reopened) where the first part
was taken as the turn and is being answered.
History keeps only what the user heard of an interrupted answer, marked interrupted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field, replace

from dllm_voice.app.conversation.actions import (
    Action,
    CancelAnswer,
    ReleaseSpeculation,
    ReopenTurn,
    RequestPartial,
    ScoreEnd,
    StartAnswer,
    StartSpeculation,
)
from dllm_voice.app.conversation.barge_in import BargeIn
from dllm_voice.app.conversation.config import (
    BargeInConfig,
    ConversationConfig,
    EndOfTurnConfig,
    SpeculationConfig,
)
from dllm_voice.app.conversation.end_of_turn import TurnEnd, takes_floor
from dllm_voice.app.conversation.history import History
from dllm_voice.app.conversation.speculation import Speculator
from dllm_voice.app.conversation.text import approx_tokens, normalize


@dataclass
class TurnManager:
    """Decides, from what happened, what the pipeline does next. Audio times in ms."""

    cfg: ConversationConfig
    end_of_turn: InitVar[EndOfTurnConfig] = EndOfTurnConfig()
    speculation: InitVar[SpeculationConfig] = SpeculationConfig()
    barge_in: InitVar[BargeInConfig] = BargeInConfig()
    count_tokens: InitVar[Callable[[str], int]] = approx_tokens
    # What the user heard of answer `gen` (the pipeline's playback knows): read when an answer
    # is cancelled, so history holds the heard text before the interrupting user message.
    heard: Callable[[int], str] = lambda gen: ""
    # conversation.history resolved for the model (Components.history_mode); "auto" here
    # takes the config's value, and an unresolved "auto" is "follow_up".
    history_mode: InitVar[str] = "auto"
    gen: int = 0
    turn: int = 0
    agent: str = "idle"  # idle | thinking | speaking
    answer_gen: int | None = None  # generation of the answer being thought/spoken
    answer_turn: int = 0
    user_speaking: bool = False
    paused: bool = False
    last_partial: str = ""  # latest partial transcript of the current utterance
    reopened: bool = False  # the latest speech_start continued the previous turn
    rejoined: bool = False  # the latest speech_start continued the utterance before it
    floor_turn: int | None = None  # the latest turn whose speech cut an answer (a barge-in)
    # False: a committed turn joins the history and waits for an explicit answer (a Realtime
    # client's turn_detection.create_response: false).
    answers_turns: bool = True
    history: History = field(init=False)
    ending: TurnEnd = field(init=False)
    guess: Speculator = field(init=False)
    barging: BargeIn = field(init=False)

    def __post_init__(
        self,
        end_of_turn: EndOfTurnConfig,
        speculation: SpeculationConfig,
        barge_in: BargeInConfig,
        count_tokens: Callable[[str], int],
        history_mode: str,
    ) -> None:
        mode = self.cfg.history if history_mode == "auto" else history_mode
        mode = "follow_up" if mode == "auto" else mode  # the bundled 135M model's setting
        self.history = History(
            self.cfg.history_tokens, count_tokens, mode, self.cfg.follow_up_turns
        )
        self.ending = TurnEnd(end_of_turn)
        self.guess = Speculator(speculation)
        self.barging = BargeIn(barge_in, self.cfg.backchannels)

    def configure(
        self,
        cfg: ConversationConfig,
        end_of_turn: EndOfTurnConfig,
        speculation: SpeculationConfig,
        barge_in: BargeInConfig,
    ) -> None:
        """New turn-taking rules from the next event on; the history keeps its budget."""
        self.cfg, self.ending.cfg, self.guess.cfg = cfg, end_of_turn, speculation
        self.barging.configure(barge_in, cfg.backchannels)

    def _not_for_us(self, text: str) -> bool:
        """A backchannel, or (echo guard on) mostly the words the agent itself just said."""
        gen = self.answer_gen
        return self.barging.not_for_us(text, lambda: self.heard(gen) if gen is not None else "")

    def _next_gen(self) -> int:
        self.gen += 1
        return self.gen

    # -- user speech ---------------------------------------------------------------------------

    def on_speech_start(self, onset_ms: float, unheard: bool = False) -> list[Action]:
        """``unheard``: the last utterance's final transcript has not come yet, so nothing was
        made of it: this speech continues it (its transcriber hears both), as it continues an
        interruption let go as short within ``reopen_ms``."""
        until = self.ending.reopen_until
        reopen = until is not None and onset_ms <= until
        rejoin, self.barging.rejoin = self.barging.rejoin, None
        near = rejoin is not None and onset_ms <= rejoin[0]
        if near and self.answer_gen is not None and self.answer_turn == self.turn:
            reopen = True  # the interruption was taken as the turn: its answer is taken back
        self.ending.reopen_until = self.ending.audible_from = None
        self.reopened = reopen
        short = near and self.agent != "idle"
        self.rejoined = not reopen and (unheard or short)
        self.user_speaking, self.paused = True, False
        self.last_partial = ""
        self.ending.clear()
        if reopen and self._answer_heard() and self.barging.cfg.enabled:
            assert self.answer_gen is not None
            return [
                *self.guess.drop("reopen"),
                *self.barging.hold_for_reopen(onset_ms, self.answer_gen),
            ]
        if reopen:
            return self._reopen()
        if not self.rejoined:
            self.turn += 1
        b = self.barging.current
        if self.rejoined and b is not None:  # an interruption that awaits its words
            b.last_ms, b.short = onset_ms, False
        elif self.agent != "idle" and self.barging.cfg.enabled:
            onset = rejoin[1] if short and rejoin else onset_ms
            self.barging.begin(onset, onset_ms, self.agent == "speaking")
        return []

    def on_near_end(self, audio_ms: float, talking: bool, sure: bool) -> list[Action]:
        """Every input frame behind an echo canceller (see BargeIn.on_near_end)."""
        speaking = self.agent == "speaking"
        actions = self.barging.on_near_end(audio_ms, talking, sure, self.answer_gen, speaking)
        if not actions and self.barging.waited_in_vain(audio_ms) and not self.user_speaking:
            return self.barging.let_go(self.answer_gen, "no speech")
        return actions

    def on_speech_progress(self, audio_ms: float) -> list[Action]:
        """Called for every input frame while the user speaks during an agent answer."""
        if self.answer_gen is None or self.paused:
            return []
        actions = self.barging.on_progress(audio_ms, self.answer_gen, self.agent == "speaking")
        if self.barging.reopen_due():
            self.barging.current = None
            return self._reopen()
        return actions

    def _answer_heard(self) -> bool:
        """The answer to the turn under way plays: the user hears it."""
        return (
            self.answer_gen is not None
            and self.answer_turn == self.turn
            and (self.agent == "speaking")
        )

    def _barge_needs_transcript(self) -> bool:
        return self.barging.needs_transcript(self.agent == "speaking")

    def _confirm_barge(self) -> list[Action]:
        b, self.barging.current = self.barging.current, None
        if b is not None and b.reopens:
            return self._reopen()
        if self.answer_gen is None:
            return []
        self.floor_turn = self.turn
        gen = self.answer_gen
        self.history.add_assistant(self.heard(gen), interrupted=True)
        self.answer_gen, self.agent = None, "idle"
        self._next_gen()
        return [CancelAnswer(gen)]

    def on_pause(self, end_ms: float | None = None) -> list[Action]:
        """``end_ms``: audio time of the end of the last voiced frame."""
        self.paused = True
        if (b := self.barging.current) is not None:
            if end_ms is not None:
                b.last_ms = end_ms
            # Short so far: stay held until speech_end ("Wait, ..." pauses at its comma).
            return [RequestPartial(self.gen)] if self._barge_needs_transcript() else []
        if not (self.user_speaking and self.agent == "idle"):
            return []
        if not self.guess.cfg.enabled:  # the pass still feeds the end-of-turn score
            return [RequestPartial(self.gen)] if self.ending.cfg.mode == "adaptive" else []
        if not self.guess.cfg.on_last_partial:
            return [RequestPartial(self.gen)]
        # Speculate at once on the latest partial (often the utterance minus its last word);
        # the fresh pass over all the speech then confirms or replaces it.
        return [*self._speculate(self.last_partial), RequestPartial(self.gen)]

    def _reopen(self) -> list[Action]:
        """Speech right after an early end: the same turn goes on (see ReopenTurn)."""
        actions = self.guess.drop("reopen")
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
        self.ending.clear()
        return self.guess.drop("resume")

    def on_partial(
        self, text: str, complete: bool = False, stable: str | None = None
    ) -> list[Action]:
        """A partial transcript of the current utterance; ``complete``: the pass covers all the
        speech so far; ``stable``: the words two passes agree on (None: all of ``text``)."""
        if self.barging.current is not None:
            # A partial confirms an interruption on its stable words only: one pass over
            # 200 ms of "uh-huh" read "What the fuck?", and the final then read nothing.
            heard = text if stable is None else stable
            if (
                self._barge_needs_transcript()
                and heard
                and not self._not_for_us(heard)
                and not self.barging.may_become_backchannel(heard)
            ):
                return self._confirm_barge()
            return []
        if self.user_speaking:
            self.last_partial = text
        if not (self.paused and self.user_speaking and self.agent == "idle"):
            return []
        score = self.ending.wants_score(text, complete)
        actions = self._speculate(text) if self.guess.cfg.enabled else []
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
        called: bool = False,
    ) -> str | None:
        """The LM's P(end of turn) for ``text``, the speech's (``p_audio``, None: not heard),
        Whisper's mean log-probability of ``text`` (None: not measured) and whether its words
        read as a whole tool call; returns the decision ("complete", "unsure", "incomplete"),
        or None when the user has spoken again since (nothing to decide)."""
        if not self.paused:
            return None
        return self.ending.decide(text, p_end, p_audio, asr_logprob, called)

    def _speculate(self, text: str) -> list[Action]:
        prompt = functools.partial(self.history.prompt, self.cfg.system_prompt)
        return self.guess.start(text, self._next_gen, self.turn, prompt)

    def on_speech_end(self, end_ms: float | None = None) -> list[Action]:
        self.user_speaking, self.paused = False, False
        b = self.barging.current
        if b is None:
            if end_ms is not None:
                self.ending.ended(end_ms)
            return []
        if end_ms is not None:
            b.last_ms = end_ms
            if b.held:  # "Wait," [600 ms] "which ocean is the smallest?": the rest may follow
                self.barging.rejoin = (end_ms + self.ending.cfg.reopen_ms, b.onset_ms)
        if not self._barge_needs_transcript():
            if b.held and not b.echo and not b.reopens:
                b.short = True  # its words decide: "No." is as short as a cough
                return []
            return self.barging.let_go(self.answer_gen, "short")  # a cough, a click, a short "mm"
        return []

    def on_final(
        self, text: str, alternatives: tuple[str, ...] = (), logprob: float | None = None
    ) -> list[Action]:
        """The final transcript of the utterance that just ended, what else Whisper's beam
        heard in it (``Transcript.alternatives``) and how clearly (``Transcript.logprob``)."""
        if (b := self.barging.current) is not None:
            if (
                self._not_for_us(text)
                or self.barging.heard_as_backchannel(text, alternatives)
                or self.barging.short_and_unclear(logprob)
            ):
                reason = "short" if b.short else "backchannel"
                return [*self.guess.drop(reason), *self.barging.let_go(self.answer_gen, reason)]
            actions = self._confirm_barge()
        else:
            actions = []
        if self.agent != "idle" or self.barging.is_backchannel(text):
            # An answer is still playing (barge-in disabled) or the user only said "mm-hmm".
            return [*actions, *self.guess.drop("ignored")]
        if self.floor_turn == self.turn and takes_floor(text):
            # "Wait." or "Okay, stop." took the floor: the agent stops and listens for what
            # comes, as a person would; answered, it said "The" and was cut by the request.
            return [*actions, *self.guess.drop("lead-in")]
        return [*actions, *self._commit(text)]

    def _commit(self, text: str) -> list[Action]:
        """``text`` is the user's turn: release the matching speculation or start an answer."""
        if not self.answers_turns:
            actions = self.guess.drop("waiting")
            self.history.add_user(text)
            return actions
        spec, self.guess.current = self.guess.current, None
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
        self.ending.reopen_until = self.barging.rejoin = (
            None  # heard whole: new speech is a new turn
        )
        self.history.add_assistant(text, interrupted=False)
        self.answer_gen, self.agent = None, "idle"
        return (
            self.barging.let_go(self.answer_gen, "answer finished") if self.barging.current else []
        )

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
        if self.user_speaking or self.agent != "idle" or self.guess.current is not None:
            return None
        self.answer_gen, self.agent, self.answer_turn = self._next_gen(), "thinking", self.turn
        return self.answer_gen

    def cancel_answer(self) -> list[Action]:
        """An explicit cancel (client ``response.cancel``)."""
        self.barging.current = self.barging.rejoin = self.ending.reopen_until = None
        if self.answer_gen is None:
            return self.guess.drop("cancelled")
        return self._confirm_barge()
