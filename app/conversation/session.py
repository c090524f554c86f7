"""One conversation: source -> VAD -> listening -> turn manager -> responses -> sink.

``VoiceSession`` reads frames from a source, runs the VAD on the loop (it is cheap) and wires
the rooms together: ``Listener`` (listening.py) runs the ASR passes in the shared ASR worker,
``EndOfTurn`` (end_of_turn.py) scores each pause in the conversation's LM thread, the pure
``TurnManager`` (turns.py) decides what follows, and ``Responses`` (responses.py) carries out
its actions on answers. Events go to the tracer and to ``on_event`` (events.py).

Cancellation: cancelling ``run()`` (or the source ending) cancels every answer, drops this
session's queued jobs in the shared workers and waits for their tasks and the jobs already
running, so nothing of the session runs after ``run()`` returns.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections import deque
from collections.abc import AsyncIterable, Callable
from typing import TYPE_CHECKING

import numpy as np

from dllm_voice import cores
from dllm_voice.app.conversation import events
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
from dllm_voice.app.conversation.components import Components
from dllm_voice.app.conversation.end_of_turn import EndOfTurn
from dllm_voice.app.conversation.listening import Listener
from dllm_voice.app.conversation.lm_thread import LMThread
from dllm_voice.app.conversation.responses import Responses
from dllm_voice.app.conversation.tool_use import ToolUse
from dllm_voice.app.conversation.turns import TurnManager
from dllm_voice.app.observe.trace import TraceEvent, Tracer, now_ms
from dllm_voice.app.observe.trace_tools import latency_event

if TYPE_CHECKING:
    from dllm_voice.app.config import Config
    from dllm_voice.audio.sinks import Sink

__all__ = ["Components", "VoiceSession"]
log = logging.getLogger(__name__)
EventFn = Callable[[events.Event], None]


class VoiceSession:
    """One conversation over a source and a sink; drive it with ``await run()``."""

    def __init__(
        self,
        components: Components,
        cfg: Config,
        source: AsyncIterable[np.ndarray],
        sink: Sink,
        tracer: Tracer | None = None,
        on_event: EventFn | None = None,
    ) -> None:
        from dllm_voice.audio.vad import Endpointer

        self.c, self.cfg = components, cfg
        self.source, self.sink = source, sink
        # Behind an echo canceller (python main.py's speakers) its double-talk decision pauses
        # the agent before the VAD has heard an onset through the echo.
        self.echo = getattr(source, "canceller", None)
        self.tracer = tracer or Tracer(None)
        self.on_event = on_event
        self.lm_thread = LMThread(components.lm.session())
        self.vad = Endpointer(cfg.vad, cfg.audio.sample_rate_hz)
        self.tm = TurnManager(
            cfg.conversation,
            cfg.end_of_turn,
            cfg.speculation,
            cfg.barge_in,
            components.count_tokens,
            heard=self._heard_of,
            history_mode=components.history_mode(cfg.conversation.history),
        )
        self.audio_ms = 0.0
        self.pause_end: float | None = None  # audio ms where the current pause began
        self._arrivals: deque[tuple[float, float]] = deque(maxlen=2000)  # (audio ms, t_ms)
        self._closed = False
        self.onset_t: float | None = None  # when the current speech began (monotonic ms)
        self._end_t: float | None = None  # when the user's turn ended: voice to voice from here
        self.ears = Listener(self)
        self.eot = EndOfTurn(self)
        self.responses = Responses(self)
        self.tools = ToolUse(self)
        self._turn_events: dict[int, list[TraceEvent]] = {}
        self.state = "listening"
        self.speaks = True  # False: answers in text only, never synthesized (a client's choice)
        self.last_audio_out_t: float | None = None
        self.tracer.listeners.append(self._collect)

    # ---- properties the server and UIs read ---------------------------------------------------

    @property
    def gen(self) -> int:
        """Generation id of the audio being played (or the latest generation)."""
        return self.tm.answer_gen if self.tm.answer_gen is not None else self.tm.gen

    def hearing_user(self) -> bool:
        """The user speaks, or the final transcript of their last words has not come."""
        return self.vad.in_speech or self.ears.final_pending

    def idle(self) -> bool:
        """No user speech in progress, no transcript pending, no answer running."""
        self.responses.reap()  # a source that waits for idle() feeds no frames, and frames reap
        return not self.hearing_user() and not self.responses.answers and not self.responses.closing

    # ---- events --------------------------------------------------------------------------------

    def emit(self, event: events.Event) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception:  # noqa: BLE001 - a broken UI callback must not end the conversation
            log.exception("on_event callback failed for %s", event.get("type"))

    def trace(self, name: str, turn: int, gen: int, **attrs: object) -> None:
        # Timed now: no attribute may carry t_ms (Tracer.event's own keyword).
        self.tracer.event(name, turn=turn, gen=gen, t_ms=None, **attrs)

    def _collect(self, ev: TraceEvent) -> None:
        self._turn_events.setdefault(int(ev["turn"]), []).append(ev)
        self.emit(events.trace(ev))

    def set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.emit(events.agent_state(state))

    def t_of(self, audio_ms: float) -> float:
        """Monotonic time at which the audio at ``audio_ms`` arrived (source clock mapping)."""
        for a_ms, t in reversed(self._arrivals):
            if a_ms <= audio_ms + 1e-6:
                return t + (audio_ms - a_ms)
        return self._arrivals[0][1] if self._arrivals else now_ms()

    # ---- the input side ------------------------------------------------------------------------

    async def run(self) -> None:
        """Consume the source to its end, finish the last turn, then release everything."""
        try:
            with cores.conversation():
                self.tools.start()
                self.warm_lm()
                async for frame in self.source:
                    self._on_frame(np.asarray(frame))
                for ev in self.vad.finish():  # the source ended mid-utterance: end the turn
                    self.on_vad(ev.kind, ev.audio_ms, ev.detected_ms)
                while not self.idle():
                    await asyncio.sleep(0.02)
                    self.responses.reap()
        finally:
            await self.aclose()

    def warm_lm(self, words: str = "") -> None:
        """Prefill the LM cache, in the LM thread while the user speaks, with what the turn's
        prompt will start with: the system prompt and the past turns a follow-up carries, then
        the words of the turn the partial passes agree on. The end-of-turn score at the pause
        then feeds only the last words: a cold 100-token history cost it 80-107 ms, a warm one
        18 ms with the whole question to feed and 14 with its last words (Zen 4)."""
        if not self._closed and not self.responses.answers and not self.lm_thread.warming:
            self.lm_thread.prefill(self.tm.lead(words))

    def _on_frame(self, frame: np.ndarray) -> None:
        t = now_ms()
        frame_ms = 1000.0 * len(frame) / self.cfg.audio.sample_rate_hz
        self._arrivals.append((self.audio_ms, t - frame_ms))  # audio start of this frame
        self.audio_ms += frame_ms
        self.eot.hear(frame)
        if (echo := self.echo) is not None:
            start = self.audio_ms - frame_ms
            self.do(self.tm.on_near_end(start, echo.near_end, echo.near_end_sure))
        was_speaking = self.vad.in_speech
        vad_events = self.vad.process(frame)
        self.ears.word_end.update(frame, self.audio_ms, self.vad.voiced_end_ms)
        if was_speaking and self.vad.in_speech:
            self.ears.feed(frame)
        for ev in vad_events:
            self.on_vad(ev.kind, ev.audio_ms, ev.detected_ms)
        if self.vad.in_speech:
            if self.vad.last_voiced:  # the silence before a pause is detected is not speech
                self.do(self.tm.on_speech_progress(self.audio_ms))
            self.ears.pass_if_due()
        elif self.tools.waiting:  # a timer went off while the user talked
            self.tools.speak_notices()
        self.responses.reap()

    def on_vad(self, kind: str, audio_ms: float, detected_ms: float) -> None:
        turn = self.tm.turn
        if kind == "speech_start":
            self.pause_end = None
            self.ears.new_utterance()
            self.onset_t = self.t_of(audio_ms)
            actions = self.tm.on_speech_start(audio_ms, unheard=self.ears.final_pending)
            if self.tm.reopened:  # the same turn goes on: its transcriber hears the rest too
                self.trace("reopen", self.tm.turn, self.tm.gen)
            elif self.tm.rejoined:  # so does the utterance before it
                self.trace("rejoin", self.tm.turn, self.tm.gen)
            else:
                self.ears.new_turn(over_answer=self.tm.barging.current is not None)
            self.ears.feed(self.vad.speech_audio())
            self.do(actions)
            self.trace(
                "speech_start", self.tm.turn, self.tm.gen, onset_ms=self.onset_t, audio_ms=audio_ms
            )
            self.emit(events.speech_started(audio_ms))
            self.set_state("listening" if self.tm.agent == "idle" else self.state)
        elif kind == "pause":
            self.pause_end = audio_ms
            self.trace("pause", turn, self.tm.gen, end_ms=self.t_of(audio_ms))
            self.eot.score_speech()
            self.do(self.tm.on_pause(audio_ms))
        elif kind == "resume":
            self.pause_end = None
            self.trace("resume", turn, self.tm.gen)
            self.do(self.tm.on_resume(audio_ms))
        elif kind == "segment":  # a long turn goes on; the ASR keeps this segment's text only
            self.trace("segment", turn, self.tm.gen, audio_ms=audio_ms)
            self.ears.close_segment()
        elif kind == "speech_end":
            self.pause_end = None
            self._end_t = self.t_of(audio_ms)
            self.trace("speech_end", turn, self.tm.gen, end_ms=self._end_t, audio_ms=audio_ms)
            self.emit(events.speech_stopped(audio_ms))
            self.do(self.tm.on_speech_end(audio_ms))
            self.ears.request_final()

    # ---- carrying out the turn manager's actions -----------------------------------------------

    def do(self, actions: list[Action]) -> None:
        for a in actions:
            self._do_one(a)

    def _do_one(self, a: Action) -> None:
        r = self.responses
        match a:
            case RequestPartial():
                self.ears.request_partial()
            case StartSpeculation():
                r.speculate(a)
            case DropSpeculation():
                r.drop(a)
            case ReleaseSpeculation():
                r.release(a)
            case StartAnswer():
                r.answer(a)
            case HoldPlayback():
                r.hold(a)
            case ResumePlayback():
                r.resume(a)
            case CancelAnswer():
                r.cut(a.gen, "barge_in")
            case ScoreEnd():
                self.eot.score_words(a)
            case ReopenTurn():
                r.cut(a.gen, "reopen_cancel")
            case _:
                raise TypeError(f"unknown action {a!r}")

    def _heard_of(self, gen: int) -> str:
        return self.responses.heard(gen)

    def cancel_response(self) -> None:
        """The client asked to stop the current answer (``response.cancel``)."""
        self.do(self.tm.cancel_answer())

    def text_turn(self, text: str) -> str | None:
        """A typed user turn, answered like a spoken turn's final transcript; an answer under
        way is cancelled first, as a barge-in would. Returns why it was not taken, or None."""
        if self.hearing_user():
            return "the user is speaking; the typed turn was not taken"
        if self.tm.barging.is_backchannel(text):
            return f"{text!r} is a backchannel (conversation.backchannels): it starts no turn"
        self.do(self.tm.cancel_answer())
        self._end_t = now_ms()
        self.do(self.tm.on_speech_start(self.audio_ms))
        self.trace("text_input", self.tm.turn, self.tm.gen, end_ms=self._end_t, text=text)
        self.do(self.tm.on_speech_end(self.audio_ms))
        self.do(self.tm.on_final(text))
        return None

    def turn_waiting(self) -> bool:
        """A spoken turn was committed and waits for ``response.create``."""
        return not self.tm.answers_turns and self.tm.turn_waiting()

    def answer_waiting_turn(self) -> str | None:
        """Answer the turn that waits (``response.create``); returns why not, or None."""
        if self.hearing_user():
            return "the user is speaking"
        actions = self.tm.answer_again(tools=True)
        if not actions:
            return "an answer is under way"
        self.do(actions)
        return None

    def configure(self, cfg: Config) -> None:
        """This session's settings (``session.update``): VAD waits from the next frame, the
        decoder, the voice, the system prompt and the turn-taking rules from the next answer."""
        self.tm.configure(cfg.conversation, cfg.end_of_turn, cfg.speculation, cfg.barge_in)
        if cfg.vad != self.cfg.vad:
            self.vad.set_waits(cfg.vad.pause_ms, cfg.vad.speech_end_ms)
        if cfg.lm != self.cfg.lm:
            self.lm_thread.session.configure(cfg.lm)
        if cfg.tts != self.cfg.tts:
            self.c = copy.copy(self.c)  # the models stay shared; only this session's view
            self.c.tts = copy.copy(self.c.tts)
            self.c.tts.cfg = cfg.tts
        self.cfg = cfg

    # ---- what answers tell the conversation ----------------------------------------------------

    def answer_audible(self, turn: int, gen: int, t: float) -> None:
        """Answer ``gen``'s first sample went to the sink at ``t``."""
        turn_ended = self._end_t is not None and not self.tools.is_notice(gen)
        v2v = t - self._end_t if self._end_t is not None and turn_ended else None
        self.trace("audio_out_first", turn, gen, v2v_ms=None if v2v is None else round(v2v, 1))
        self.last_audio_out_t = t
        self.tm.on_audio_started(gen)
        self.set_state("speaking")

    def answer_ended(self, turn: int, gen: int, last: bool) -> None:
        """Answer ``gen`` ended and was reported; ``last``: no other answer is running."""
        latency = latency_event(self._turn_events.get(turn, []), gen)
        if latency is not None:
            self.emit(latency)
        for old in [k for k in self._turn_events if k < turn - 4]:
            del self._turn_events[old]
        if last:
            self.set_state("listening")
            self.warm_lm()
            self.tools.speak_notices()

    # ---- shutdown ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Cancel every answer and wait for this session's tasks and worker jobs to end."""
        self._closed = True
        self.tools.close()
        self.ears.close()
        self.responses.cancel_all()
        await self.responses.wait_closed()
        await self.ears.wait_closed()
        await self.lm_thread.close()
        if self._collect in self.tracer.listeners:
            self.tracer.listeners.remove(self._collect)
        self.tracer.flush()
