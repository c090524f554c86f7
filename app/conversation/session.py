"""The streaming voice pipeline: source -> VAD -> ASR -> turn manager -> LM -> TTS -> sink.

``Components`` loads the three models once; speech recognition and synthesis each have one
worker thread shared by every session, which runs first what someone waits on
(app/conversation/scheduler.py); each conversation has its own LM thread, whose decoding steps share
forwards with the other sessions' (model/batch.py). ``VoiceSession`` is one conversation: it
reads frames from a source, runs
the VAD (cheap, on the loop), sends utterance audio to the ASR worker, asks
the pure ``TurnManager`` what to do and carries out its actions on ``Answer`` objects (one per
generation id, see answer.py). Events go to the tracer and to ``on_event`` as JSON-able dicts
named after the OpenAI Realtime API.

Cancellation: cancelling ``run()`` (or the source ending) cancels every answer, drops this
session's queued jobs in the shared workers and waits for their tasks and the jobs already
running, so nothing of the session runs after ``run()`` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

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
from dllm_voice.app.conversation.answer import Answer
from dllm_voice.app.conversation.components import Components
from dllm_voice.app.conversation.scheduler import LATER, URGENT
from dllm_voice.app.conversation.turns import TurnManager
from dllm_voice.app.observe.trace import Tracer, now_ms
from dllm_voice.app.observe.trace_tools import latency_event
from dllm_voice.audio.asr import WordEnd

__all__ = ["Components", "VoiceSession"]
log = logging.getLogger(__name__)
EventFn = Callable[[dict[str, Any]], None]
# Input kept for the end of turn heard in the speech: its 1.6 s window, and the pause's silence
# until the score starts (the pause's ASR pass is done ~200 ms after the speech ends, p95 ~1 s).
RECENT_MS = 3000
ONSET_PASS_MIN_MS = 100  # new audio a pass in a silence needs (a pass costs ~100 ms of a core)


class VoiceSession:
    """One conversation over a source and a sink; drive it with ``await run()``."""

    def __init__(
        self,
        components: Components,
        cfg: Any,
        source: AsyncIterator[np.ndarray],
        sink: Any,
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
        self.lm_session = components.lm.session()
        # This conversation's LM jobs, in order (its ChatSession is not thread-safe); sessions'
        # threads run side by side and their decoding steps share forwards (model/batch.py).
        self.lm_executor = ThreadPoolExecutor(1, thread_name_prefix="lm")
        self.vad = Endpointer(cfg.vad, cfg.audio.sample_rate_hz)
        self.transcriber = components.new_transcriber(cfg.asr)
        self.tm = TurnManager(
            cfg.conversation,
            components.count_tokens,
            heard=self._heard,
            history_mode=components.history_mode(cfg.conversation.history),
        )
        self.answers: dict[int, Answer] = {}
        self.closing: list[Answer] = []
        self.sink_cursor = 0  # sink sample position where the next written sample will play
        self.audio_ms = 0.0
        self._arrivals: deque[tuple[float, float]] = deque(maxlen=2000)  # (audio ms, t_ms)
        self._utt = 0  # utterance counter: ASR results of an older utterance are dropped
        self._asr_jobs: set[asyncio.Future[Any]] = set()
        self._lm_jobs: set[asyncio.Future[Any]] = set()  # end-of-turn scores, prefills
        self._warming: asyncio.Future[Any] | None = None  # the prefill in the LM thread
        self._partial_job: asyncio.Future[Any] | None = None  # the partial pass in flight
        self._partial_again = False
        self._pass_at_ms = 0.0  # audio ms the latest partial pass heard (asked for, until done)
        self._last_pass: tuple[int, float, Any] | None = None  # (utterance, heard ms, transcript)
        self._pause_heard: float | None = None  # the pause whose pass heard all the speech
        self._heard_ms = 0.0  # audio ms fed to the transcriber; ASR worker only
        # Where the user's words end (a final "s" included): what the pause's pass must hear.
        self._word_end = WordEnd(cfg.asr.min_rms_dbfs, RECENT_MS // cfg.audio.frame_ms + 1)
        self._final_pending = False
        self._finals = 0  # finals asked for
        self._closed = False
        self._refinements: set[Future[str]] = set()  # whole passes over long turns, asked for
        self._last_final: tuple[Any, str] = (None, "")  # the latest final and its transcriber
        self._onset_t: float | None = None
        self._pause_end: float | None = None  # audio ms where the current pause began
        # The speech's own P(end of turn) for the current pause: (p, compute ms), scored in the
        # LM thread while the pause's ASR pass runs; None when end_audio is off.
        self._speech_end: asyncio.Future[tuple[float | None, float]] | None = None
        # The latest input, for the end of turn heard in the speech (audio/prosody.py reads
        # its last 1.6 s of speech; the rest covers the pause's silence).
        self._recent: deque[np.ndarray] = deque(maxlen=RECENT_MS // cfg.audio.frame_ms + 1)
        self._end_t: float | None = None
        self._speculation_t: dict[int, float] = {}
        self._refines: dict[int, float] = {}  # refined gen -> ttft of the dropped speculation
        self._turn_events: dict[int, list[dict[str, Any]]] = {}
        self.state = "listening"
        self.last_audio_out_t: float | None = None
        self.tracer.listeners.append(self._collect)

    # ---- properties the server and UIs read ---------------------------------------------------

    @property
    def gen(self) -> int:
        """Generation id of the audio being played (or the latest generation)."""
        return self.tm.answer_gen if self.tm.answer_gen is not None else self.tm.gen

    def idle(self) -> bool:
        """No user speech in progress, no transcript pending, no answer running."""
        self._reap()  # a source that waits for idle() feeds no frames, and frames reap
        return (
            not self.vad.in_speech
            and not self._final_pending
            and not self.answers
            and not self.closing
        )

    # ---- events --------------------------------------------------------------------------------

    def emit(self, event: dict[str, Any]) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(event)
        except Exception:  # noqa: BLE001 - a broken UI callback must not end the conversation
            log.exception("on_event callback failed for %s", event.get("type"))

    def trace(self, name: str, turn: int, gen: int, **attrs: Any) -> None:
        self.tracer.event(name, turn=turn, gen=gen, **attrs)

    def _collect(self, ev: dict[str, Any]) -> None:
        self._turn_events.setdefault(int(ev["turn"]), []).append(ev)
        self.emit({"type": "trace", "event": ev})

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.emit({"type": "agent.state", "state": state})

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
            self._warm_lm()
            async for frame in self.source:
                self._on_frame(np.asarray(frame))
            for ev in self.vad.finish():  # the source ended mid-utterance: end the turn there
                self._on_vad(ev.kind, ev.audio_ms, ev.detected_ms)
            while not self.idle():
                await asyncio.sleep(0.02)
                self._reap()
        finally:
            await self.aclose()

    def _warm_lm(self, words: str = "") -> None:
        """Prefill the LM cache, in the LM thread while the user speaks, with what the turn's
        prompt will start with: the system prompt and the past turns a follow-up carries, then
        the words of the turn the partial passes agree on. The end-of-turn score at the pause
        then feeds only the last words: a cold 100-token history cost it 80-107 ms, a warm one
        18 ms with the whole question to feed and 14 with its last words (Zen 4)."""
        if self._closed or self.answers or self._warming is not None:
            return
        fut = asyncio.get_running_loop().run_in_executor(
            self.lm_executor, self.lm_session.prefill, self.tm.lead(words)
        )
        self._warming = fut

        def done(f: asyncio.Future[int]) -> None:
            self._lm_jobs.discard(f)
            self._warming = None
            if not f.cancelled() and f.exception() is not None:
                log.warning("LM prefill failed: %s", f.exception())

        self._lm_jobs.add(fut)
        fut.add_done_callback(done)

    def _on_frame(self, frame: np.ndarray) -> None:
        t = now_ms()
        frame_ms = 1000.0 * len(frame) / self.cfg.audio.sample_rate_hz
        self._arrivals.append((self.audio_ms, t - frame_ms))  # audio start of this frame
        self.audio_ms += frame_ms
        self._recent.append(frame)
        if (echo := self.echo) is not None:
            start = self.audio_ms - frame_ms
            self._do(self.tm.on_near_end(start, echo.near_end, echo.near_end_sure))
        was_speaking = self.vad.in_speech
        events = self.vad.process(frame)
        self._word_end.update(frame, self.vad.last_voiced, self.audio_ms)
        if was_speaking and self.vad.in_speech:
            self._feed(frame)
        for ev in events:
            self._on_vad(ev.kind, ev.audio_ms, ev.detected_ms)
        if self.vad.in_speech:
            self._do(self.tm.on_speech_progress(self.audio_ms))
            # In silence with speech no pass has heard yet, a pass starts as soon as the worker
            # is free: if this is the end of the turn, it covers all the speech when the pause
            # is detected (90 ms), so the end-of-turn score and the speculation start up to
            # ~60 ms sooner than on a pass started at the pause. In the pause, at once: the pass
            # before it ended inside the words' sound.
            words_end = self._word_end.sound_ms
            unheard = words_end < self.audio_ms and self._pass_at_ms < words_end
            paused = self._pause_end is not None
            fresh = paused or self.audio_ms - self._pass_at_ms >= ONSET_PASS_MIN_MS
            if self._partial_job is None and (self.transcriber.partial_due() or unheard and fresh):
                self._request_partial()
        self._reap()

    def _on_vad(self, kind: str, audio_ms: float, detected_ms: float) -> None:
        turn = self.tm.turn
        if kind == "speech_start":
            self._pause_end = None
            self._utt += 1
            self._onset_t = self.t_of(audio_ms)
            actions = self.tm.on_speech_start(audio_ms, unheard=self._final_pending)
            if self.tm.reopened:  # the same turn goes on: its transcriber hears the rest too
                self.trace("reopen", self.tm.turn, self.tm.gen)
            elif self.tm.rejoined:  # so does the utterance before it
                self.trace("rejoin", self.tm.turn, self.tm.gen)
            else:
                # A fresh transcriber per turn: the previous one's final may still be queued
                # in the ASR worker.
                self.transcriber = self.c.new_transcriber(self.cfg.asr)
            self._feed(self.vad.speech_audio())
            self._do(actions)
            self.trace(
                "speech_start", self.tm.turn, self.tm.gen, onset_ms=self._onset_t, audio_ms=audio_ms
            )
            self.emit({"type": "input_audio_buffer.speech_started", "audio_start_ms": audio_ms})
            self._set_state("listening" if self.tm.agent == "idle" else self.state)
        elif kind == "pause":
            self._pause_end = audio_ms
            self.trace("pause", turn, self.tm.gen, end_ms=self.t_of(audio_ms))
            self._score_speech()
            self._do(self.tm.on_pause(audio_ms))
        elif kind == "resume":
            self._pause_end = None
            self.trace("resume", turn, self.tm.gen)
            self._do(self.tm.on_resume(audio_ms))
        elif kind == "segment":  # a long turn goes on; the ASR keeps this segment's text only
            self.trace("segment", turn, self.tm.gen, audio_ms=audio_ms)
            self._submit_asr(self.transcriber.close_segment, lambda tr: None, URGENT)
        elif kind == "speech_end":
            self._pause_end = None
            self._end_t = self.t_of(audio_ms)
            self.trace("speech_end", turn, self.tm.gen, end_ms=self._end_t, audio_ms=audio_ms)
            self.emit({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": audio_ms})
            self._do(self.tm.on_speech_end(audio_ms))
            self._request_final()

    # ---- ASR -----------------------------------------------------------------------------------

    def _feed(self, pcm: np.ndarray) -> None:
        # The transcriber has one owner, the ASR worker: feeding it from the loop while a pass
        # reads its buffer would race, so feeds queue in the same worker. Urgent, in order with
        # finals and segment cuts: a pass hears every feed queued before it (and those that
        # arrived while it waited), a final none that came after it.
        fut = self.c.asr_worker.submit(
            self._fed, self.transcriber, pcm.copy(), self.audio_ms, priority=URGENT, key=self
        )
        self._asr_jobs.add(fut)
        fut.add_done_callback(self._asr_jobs.discard)

    def _fed(self, transcriber: Any, pcm: np.ndarray, end_ms: float) -> None:
        """In the ASR worker: feed the audio that ends at ``end_ms``."""
        transcriber.feed(pcm)
        self._heard_ms = end_ms

    def _pass(self, transcriber: Any, at_pause: bool) -> tuple[float, Any]:
        """In the ASR worker: a partial pass, and the audio ms it heard up to."""
        return self._heard_ms, transcriber.partial(at_pause)

    def _submit_asr(
        self, fn: Callable[[], Any], done: Callable[[Any], None], priority: int
    ) -> asyncio.Future[Any]:
        fut = self.c.asr_worker.submit(fn, priority=priority, key=self)
        self._asr_jobs.add(fut)
        utt = self._utt

        def finished(f: asyncio.Future[Any]) -> None:
            self._asr_jobs.discard(f)
            if f.cancelled():
                return
            if f.exception() is not None:
                log.error("ASR failed: %s", f.exception())
                self.emit(
                    {"type": "error", "error": {"type": "asr_error", "message": str(f.exception())}}
                )
                done(None)
                return
            done(f.result() if utt == self._utt else None)

        fut.add_done_callback(finished)
        return fut

    def _request_partial(self) -> None:
        # A pass asked for in a pause is the one the end of the turn waits on (the end-of-turn
        # score, the speculation): it goes before every regular pass, other sessions' included.
        urgent = self._pause_end is not None
        if urgent and self._partial_job is None and self._reuse_last_pass():
            return
        if self._partial_job is not None:
            # A pass still queued becomes the pause's: it will hear all the audio up to now.
            if not (urgent and self.c.asr_worker.promote(self._partial_job, URGENT)):
                self._partial_again = True
            return
        self._pass_at_ms = self.audio_ms
        # One after the words (in a pause, or in the silence before one is detected) may be the
        # pass the end of the turn waits on: in a long turn it hears a short last segment again
        # with the audio before its cut, as the final would.
        after_words = urgent or self._word_end.sound_ms < self.audio_ms
        self._partial_job = self._submit_asr(
            functools.partial(self._pass, self.transcriber, after_words),
            self._on_partial,
            URGENT if urgent else LATER,
        )

    def _reuse_last_pass(self) -> bool:
        """In a pause, whether the last pass heard all the speech: then no other pass runs over
        the pause's silence. One that ended before the pause was detected becomes the pause's
        pass (with `vad.pause_ms` 200 it usually has: ~170 ms after the last word on Zen 4)."""
        if self._last_pass is None or self._pause_end is None or self.tm.barge is not None:
            return False  # an interruption is confirmed on words two passes agree on
        utt, heard_ms, tr = self._last_pass
        words = self._word_end.sound_ms
        if utt != self._utt or words >= self.audio_ms or heard_ms < max(self._pause_end, words):
            return False
        if self._pause_heard == self._pause_end:
            return True
        self._pause_heard = self._pause_end
        self.trace(
            "asr_partial", self.tm.turn, self.tm.gen, text=tr.text, stable=tr.stable,
            compute_ms=0.0, reused=True,
        )  # fmt: skip
        self._do(self.tm.on_partial(tr.text, True, tr.stable))
        return True

    def _on_partial(self, res: tuple[float, Any] | None) -> None:
        self._partial_job = None
        heard_ms, tr = res if res is not None else (self._pass_at_ms, None)
        self._pass_at_ms = heard_ms
        if tr is not None:
            self._last_pass = (self._utt, heard_ms, tr)
        # The pass covers all the speech when it heard past the last word's sound, even a
        # regular pass the pause found running (at pause_ms 90 it often has): no second pass.
        # One that ended inside it goes again at once.
        # While the words' sound reaches the newest frame it may go on past what the pass heard:
        # the pass that covers it starts from _on_frame once it has ended.
        paused = self._pause_end is not None
        words = self._word_end.sound_ms
        sounding = words >= self.audio_ms
        complete = paused and not sounding and heard_ms >= max(self._pause_end, words)
        if complete:
            self._partial_again = False
            self._pause_heard = self._pause_end
        elif paused and not sounding and heard_ms >= self._pause_end:
            self._partial_again = True
        if tr is not None and not self._final_pending:
            self.trace(
                "asr_partial", self.tm.turn, self.tm.gen, text=tr.text, stable=tr.stable,
                compute_ms=round(tr.compute_ms, 1),
            )  # fmt: skip
            self.emit(
                {
                    "type": "conversation.item.input_audio_transcription.delta",
                    "transcript": tr.text,
                    "stable": tr.stable,
                }
            )
            self._do(self.tm.on_partial(tr.text, complete, tr.stable))
            if not paused and self.tm.user_speaking and tr.stable:
                self._warm_lm(tr.stable)
        if self._partial_again and self.vad.in_speech:
            self._partial_again = False
            self._request_partial()

    def _request_final(self) -> None:
        self._final_pending = True
        self._partial_again = False
        # The final hears all the audio the pass in flight would, and a partial after it is
        # unused: a pass still queued is dropped, one running finishes unheard.
        if self._partial_job is not None and self._partial_job.cancel():
            self._partial_job = None
        self._finals += 1
        self._submit_asr(
            self.transcriber.final, functools.partial(self._on_final, self._finals), URGENT
        )

    def _on_final(self, n: int, tr: Any) -> None:
        # Only the latest final asked for ends the wait: an earlier one, dropped because the
        # speech went on, may finish after it.
        if n == self._finals:
            self._final_pending = False
        if tr is None:
            return
        turn = self.tm.turn
        closed, whole = tr.segments
        self.trace(
            "asr_final", turn, self.tm.gen, text=tr.text, compute_ms=round(tr.compute_ms, 1),
            segments=closed, segments_whole=whole,
        )  # fmt: skip
        self.emit(
            {"type": "conversation.item.input_audio_transcription.completed", "transcript": tr.text}
        )
        self._do(self.tm.on_final(tr.text))
        self._last_final = (self.transcriber, tr.text)
        if tr.text:
            self._follow_refinement(self.transcriber, turn, tr.text)

    def _follow_refinement(self, transcriber: Any, turn: int, text: str) -> None:
        """A long turn, heard in segments: one whole pass over all of it on the Refiner after
        its final (the answer does not wait for it); its text replaces the final's in the
        history, so the later turns' prompts carry it, and the client is told
        (``...input_audio_transcription.revised``), so its transcript stays the history's."""
        refinement = getattr(transcriber, "refinement", None)
        if refinement is None or self._closed:
            return
        loop = asyncio.get_running_loop()
        job = self.c.asr_worker.submit(refinement, priority=LATER, key=self)
        self._asr_jobs.add(job)

        def revise(refined: str) -> None:
            if self._closed or not refined or refined == text:
                return
            if self._last_final[0] is transcriber and self._last_final[1] != text:
                return  # the turn went on (reopened): its new final asks for its own
            if self.tm.history.revise_user(text, refined):
                self.trace("asr_refined", turn, self.tm.gen, text=refined)
                self.emit(
                    {
                        "type": "conversation.item.input_audio_transcription.revised",
                        "transcript": refined,
                        "previous_transcript": text,
                    }
                )

        def refined(fut: Future[str]) -> None:  # in the refiner's thread
            self._refinements.discard(fut)
            if fut.cancelled() or fut.exception() is not None:
                return
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to revise
                loop.call_soon_threadsafe(revise, fut.result())

        def asked(f: asyncio.Future[Future[str] | None]) -> None:
            self._asr_jobs.discard(f)
            if not f.cancelled() and f.exception() is None and f.result() is not None:
                self._refinements.add(f.result())
                f.result().add_done_callback(refined)

        job.add_done_callback(asked)

    # ---- carrying out the turn manager's actions -----------------------------------------------

    def _do(self, actions: list[Action]) -> None:
        for a in actions:
            self._do_one(a)

    def _do_one(self, a: Action) -> None:
        handler = {
            RequestPartial: lambda a: self._request_partial(),
            StartSpeculation: self._speculate,
            DropSpeculation: self._drop,
            ReleaseSpeculation: self._release,
            StartAnswer: self._answer,
            HoldPlayback: self._hold,
            ResumePlayback: self._resume,
            CancelAnswer: lambda a: self._cut(a.gen, "barge_in"),
            ScoreEnd: self._score_end,
            ReopenTurn: lambda a: self._cut(a.gen, "reopen_cancel"),
        }[type(a)]
        handler(a)

    def _score_speech(self) -> None:
        """At a pause: the end of turn heard in the speech, in the LM thread (~2 ms), which is
        idle while the pause's ASR pass runs, so the LM's score does not wait on it."""
        heard, prosody = self._speech_before_pause(), self.c.turn_audio
        if heard is None or self.cfg.conversation.end_of_turn != "adaptive":
            self._speech_end = None
            return

        def score() -> tuple[float | None, float]:
            t = now_ms()
            return prosody.score(heard), now_ms() - t

        fut = asyncio.get_running_loop().run_in_executor(self.lm_executor, score)
        self._speech_end = fut
        self._lm_jobs.add(fut)
        fut.add_done_callback(self._lm_jobs.discard)

    def _score_end(self, a: ScoreEnd) -> None:
        """P(end of turn) in the LM worker, ahead of any speculation queued after it."""
        loop, decide = asyncio.get_running_loop(), self._end_scorer(a.gen, a.text)
        fut = loop.run_in_executor(self.lm_executor, self.lm_session.end_of_turn, a.messages)

        def done(f: asyncio.Future[float | None]) -> None:
            self._lm_jobs.discard(f)
            if f.cancelled():
                return
            if f.exception() is not None:
                log.error("end-of-turn score failed: %s", f.exception())
                return
            decide(f.result())

        self._lm_jobs.add(fut)
        fut.add_done_callback(done)

    def _end_scorer(self, gen: int, text: str) -> Callable[[float | None], None]:
        """What takes the LM's P(end of turn) for this pause's ``text``, from any thread: with
        the speech's score, the decision sets the silence that ends this pause's turn."""
        loop = asyncio.get_running_loop()
        utt, pause, turn, t0 = self._utt, self._pause_end, self.tm.turn, now_ms()
        speech = self._speech_end
        # The pass this text came from is the last one (ScoreEnd and the speculation that
        # scores are both made from it at once).
        last = self._last_pass[2] if self._last_pass is not None else None
        logprob = last.logprob if last is not None and last.text == text else None

        def decide(p: float | None) -> None:
            if utt != self._utt or pause != self._pause_end:
                return  # the user spoke again: this pause is over
            if speech is not None and not speech.done():
                speech.add_done_callback(lambda _: decide(p))
                return
            p_audio, audio_ms = None, 0.0
            if speech is not None and not speech.cancelled():
                if speech.exception() is not None:
                    log.error("end-of-turn speech score failed: %s", speech.exception())
                else:
                    p_audio, audio_ms = speech.result()
            decision = self.tm.on_end_score(text, p, p_audio, logprob)
            if decision is None:
                return
            conv = self.cfg.conversation
            wait = {
                "complete": conv.end_complete_ms,
                "incomplete": conv.end_incomplete_ms,
            }.get(decision, self.cfg.vad.speech_end_ms)
            self.trace(
                "end_of_turn", turn, gen, p_end=None if p is None else round(p, 4),
                p_audio=None if p_audio is None else round(p_audio, 4),
                asr_logprob=None if logprob is None else round(logprob, 3), decision=decision,
                wait_ms=wait, compute_ms=round(now_ms() - t0, 1),
                audio_compute_ms=round(audio_ms, 2), text=text,
            )  # fmt: skip
            for ev in self.vad.end_after(wait):
                self._on_vad(ev.kind, ev.audio_ms, ev.detected_ms)

        def from_any_thread(p: float | None) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(decide, p)

        return from_any_thread

    def _speech_before_pause(self) -> np.ndarray | None:
        """The latest input up to the current pause's start, for the end heard in the speech;
        None when that is off or there is no pause."""
        if self.c.turn_audio is None or not self.cfg.conversation.end_audio:
            return None
        if self._pause_end is None or not self._recent:
            return None
        pcm = np.concatenate(self._recent)
        after = int((self.audio_ms - self._pause_end) * self.cfg.audio.sample_rate_hz / 1000)
        return pcm[: max(0, len(pcm) - after)]

    def _speculate(self, a: StartSpeculation) -> None:
        score = self._end_scorer(a.gen, a.user_text) if a.score else None
        ans = Answer(self, a.gen, self.tm.turn, a.messages, speculative=True, end_score=score)
        self.answers[a.gen] = ans
        self._speculation_t[a.gen] = now_ms()
        self.trace("speculation_start", self.tm.turn, a.gen, text=a.user_text)
        ans.start_lm(park_after_clause=True)

    def _drop(self, a: DropSpeculation) -> None:
        self.trace("speculation", self.tm.turn, a.gen, result="miss", reason=a.reason, saved_ms=0)
        self.emit({"type": "response.speculation.dropped", "gen": a.gen, "reason": a.reason})
        self._cancel(a.gen)

    def _release(self, a: ReleaseSpeculation) -> None:
        ans = self.answers[a.gen]
        # Saved = the work done before the final transcript arrived: LM prefill and first
        # clause, and its audio when ready.
        t = now_ms()
        ready = ans.times.get("tts_first_audio", ans.times.get("lm_first_clause", t))
        saved = min(ready, t) - self._speculation_t[a.gen]
        self.trace("speculation", self.tm.turn, a.gen, result="hit", saved_ms=round(saved, 1))
        self._start_response(ans)
        ans.release()
        if ans.text:
            self.emit_text(ans, ans.text)

    def _answer(self, a: StartAnswer) -> None:
        drafts = None
        spec = self.answers.get(a.refine_of) if a.refine_of is not None else None
        if spec is not None:
            drafts = spec.token_ids or None
            t = now_ms()
            self._refines[a.gen] = spec.times.get("lm_first_token", t) - spec.times["lm_start"]
            self.emit(
                {"type": "response.speculation.dropped", "gen": spec.gen, "reason": "refined"}
            )
            spec.cancel()
        elif self.cfg.conversation.speculation:
            self.trace("speculation", self.tm.turn, a.gen, result="none", saved_ms=0)
        ans = Answer(self, a.gen, self.tm.answer_turn, a.messages, speculative=False, drafts=drafts)
        self.answers[a.gen] = ans
        self._start_response(ans)
        ans.start_lm(park_after_clause=False)

    def _resume(self, a: ResumePlayback) -> None:
        if (ans := self.answers.get(a.gen)) is not None:
            self.trace("barge_in_resume", ans.turn, a.gen, reason=a.reason)
            ans.resume()

    def _cut(self, gen: int, event: str) -> None:
        """Cancel answer ``gen`` (LM, TTS, unplayed audio), traced as ``event`` with what the
        user heard of it: a barge-in, or a reopened turn's early answer."""
        if (ans := self.answers.get(gen)) is not None:
            self.trace(event, ans.turn, gen, heard=ans.heard_text())
            if ans.base is not None and not ans.held:
                self.emit({"type": "output_audio_buffer.cleared", "gen": gen})
            ans.cancel()

    def _start_response(self, ans: Answer) -> None:
        self._set_state("thinking")
        self.emit(
            {
                "type": "response.created",
                "response": {"id": f"resp_{ans.gen}", "gen": ans.gen, "status": "in_progress"},
            }
        )

    def _hold(self, a: HoldPlayback) -> None:
        gen = a.gen
        ans = self.answers.get(gen)
        if ans is None:
            return
        was_playing = ans.base is not None and not ans.held
        ans.hold()
        t = now_ms()
        if a.onset_ms is not None:  # double talk: the VAD has not started this speech
            onset = self.t_of(a.onset_ms)
        else:
            onset = self._onset_t if self._onset_t is not None else t
        self.trace("barge_in_hold", ans.turn, gen, onset_ms=onset, near_end=a.near_end)
        if was_playing:
            self.trace("playback_stopped", ans.turn, gen, stop_ms=round(t - onset, 1))
            self.emit({"type": "output_audio_buffer.cleared", "gen": gen})

    def _cancel(self, gen: int) -> None:
        ans = self.answers.get(gen)
        if ans is not None:
            ans.cancel()

    def _heard(self, gen: int) -> str:
        ans = self.answers.get(gen)
        return ans.heard_text() if ans is not None else ""

    def cancel_response(self) -> None:
        """The client asked to stop the current answer (``response.cancel``)."""
        self._do(self.tm.cancel_answer())

    def text_turn(self, text: str) -> str | None:
        """A typed user turn, answered like a spoken turn's final transcript; an answer under
        way is cancelled first, as a barge-in would. Returns why it was not taken, or None."""
        if self.vad.in_speech or self._final_pending:
            return "the user is speaking; the typed turn was not taken"
        if self.tm.is_backchannel(text):
            return f"{text!r} is a backchannel (conversation.backchannels): it starts no turn"
        self._do(self.tm.cancel_answer())
        self._end_t = now_ms()
        self._do(self.tm.on_speech_start(self.audio_ms))
        self.trace("text_input", self.tm.turn, self.tm.gen, end_ms=self._end_t, text=text)
        self._do(self.tm.on_speech_end(self.audio_ms))
        self._do(self.tm.on_final(text))
        return None

    def configure(self, cfg: Any) -> None:
        """This session's settings (``session.update``): VAD waits from the next frame, the
        decoder and the voice from the next answer."""
        if cfg.vad != self.cfg.vad:
            self.vad.set_waits(cfg.vad.pause_ms, cfg.vad.speech_end_ms)
        if cfg.lm != self.cfg.lm or cfg.tts != self.cfg.tts:
            self.c = copy.copy(self.c)  # the models stay shared; only this session's view
            self.c.lm, self.c.tts = copy.copy(self.c.lm), copy.copy(self.c.tts)
            self.c.lm.cfg, self.c.tts.cfg = cfg.lm, cfg.tts
            # The conversation keeps its KV cache (a new one is ~100 MB to zero on the loop).
            self.lm_session.lm = self.c.lm
        self.cfg = cfg

    # ---- callbacks from answers ------------------------------------------------------------------

    def emit_text(self, ans: Answer, piece: str) -> None:
        if ans.speculative:
            self.emit(
                {
                    "type": "response.speculation.delta",
                    "gen": ans.gen,
                    "delta": piece,
                    "text": ans.text,
                }
            )
        else:
            self.emit(
                {
                    "type": "response.audio_transcript.delta",
                    "response_id": f"resp_{ans.gen}",
                    "gen": ans.gen,
                    "delta": piece,
                }
            )

    def on_first_token(self, ans: Answer) -> None:
        if ans.gen in self._refines:
            ttft = ans.times["lm_first_token"] - ans.times["lm_start"]
            saved = max(0.0, self._refines.pop(ans.gen) - ttft)
            self.trace(
                "speculation",
                ans.turn,
                ans.gen,
                result="refined",
                saved_ms=round(saved, 1),
                drafts=len(ans.drafts or []),
            )

    def on_audio_started(self, ans: Answer) -> None:
        t = ans.times["audio_out_first"]
        v2v = t - self._end_t if self._end_t is not None else None
        self.trace(
            "audio_out_first", ans.turn, ans.gen, v2v_ms=round(v2v, 1) if v2v is not None else None
        )
        self.last_audio_out_t = t
        self.tm.on_audio_started(ans.gen)
        self._set_state("speaking")

    def on_answer_finished(self, ans: Answer) -> None:
        self.answers.pop(ans.gen, None)
        self.closing.append(ans)
        if ans.speculative and ans.status == "cancelled":
            return  # a dropped speculation: never announced as a response
        heard = ans.heard_text() if ans.status == "cancelled" else ans.text.strip()
        if ans.status == "completed":
            self._do(self.tm.on_answer_done(ans.gen, ans.text.strip()))
        self.trace(
            "turn_done", ans.turn, ans.gen, status=ans.status, text=ans.text.strip(), heard=heard
        )
        self.emit(
            {
                "type": "response.done",
                "response": {
                    "id": f"resp_{ans.gen}",
                    "gen": ans.gen,
                    "status": ans.status,
                    "output_text": ans.text.strip(),
                    "heard_text": heard,
                },
            }
        )
        latency = latency_event(self._turn_events.get(ans.turn, []), ans.gen)
        if latency is not None:
            self.emit(latency)
        for old in [k for k in self._turn_events if k < ans.turn - 4]:
            del self._turn_events[old]
        if not self.answers:
            self._set_state("listening")
            self._warm_lm()

    def _reap(self) -> None:
        """Forget finished answers once their tasks have ended."""
        if self.closing:
            self.closing = [a for a in self.closing if not all(t.done() for t in a._tasks)]

    # ---- shutdown ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Cancel every answer and wait for this session's tasks and worker jobs to end."""
        self._closed = True
        for fut in list(self._refinements):  # nobody will read them: not started, never run
            fut.cancel()
        for ans in list(self.answers.values()):
            ans.cancel()
        self.c.asr_worker.drop(self)
        pending = list(self.closing)
        self.closing = []
        for ans in pending:
            await ans.wait_closed()
        for fut in [*self._asr_jobs, *self._lm_jobs]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await fut
        self.lm_executor.shutdown(wait=False)  # its jobs have ended: cancelled and awaited
        if self._collect in self.tracer.listeners:
            self.tracer.listeners.remove(self._collect)
        self.tracer.flush()
