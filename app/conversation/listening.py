"""Listening: one conversation's streaming ASR, run in the shared ASR worker.

``Listener`` feeds the utterance's audio to its transcriber, asks for partial passes while the
user speaks (and the pass the end of the turn waits on, at a pause), the final at the end of
the speech, and a whole pass over a long turn after its final. It reports what it heard to its
session (``Hearing``), which asks the turn manager what follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Protocol, TypeVar

from dllm_voice.app.conversation import events
from dllm_voice.app.conversation.end_of_turn import RECENT_MS
from dllm_voice.app.conversation.ports import PCM16, Transcriber
from dllm_voice.app.conversation.scheduler import LATER, URGENT, JobFuture
from dllm_voice.audio.asr import EMPTY, Transcript, WordEnd

if TYPE_CHECKING:
    from dllm_voice.app.config import Config
    from dllm_voice.app.conversation.actions import Action
    from dllm_voice.app.conversation.components import Components
    from dllm_voice.app.conversation.turns import TurnManager
    from dllm_voice.audio.vad import Endpointer

log = logging.getLogger(__name__)
ONSET_PASS_MIN_MS = 100  # new audio a pass in a silence needs (a pass costs ~100 ms of a core)
R = TypeVar("R")


class Hearing(Protocol):
    """What a listener needs of its session."""

    c: Components
    cfg: Config
    tm: TurnManager
    vad: Endpointer
    audio_ms: float  # input heard so far
    pause_end: float | None  # audio ms where the current pause began

    def trace(self, name: str, turn: int, gen: int, **attrs: object) -> None: ...
    def emit(self, event: events.Event) -> None: ...
    def do(self, actions: list[Action]) -> None: ...
    def warm_lm(self, words: str = "") -> None: ...


class Listener:
    """The ASR side of one conversation: its transcriber, passes, finals and refinements."""

    def __init__(self, session: Hearing) -> None:
        self.s = session
        self.transcriber = session.c.new_transcriber(session.cfg.asr)
        self.utt = 0  # utterance counter: ASR results of an older utterance are dropped
        self._jobs: set[JobFuture] = set()
        # The partial pass in flight: (audio ms it heard up to, its transcript).
        self._partial_job: asyncio.Future[tuple[float, Transcript]] | None = None
        self._partial_again = False
        self._pass_at_ms = 0.0  # audio ms the latest partial pass heard (asked for, until done)
        # (utterance, heard ms, transcript) of the latest pass
        self.last_pass: tuple[int, float, Transcript] | None = None
        self._pause_heard: float | None = None  # the pause whose pass heard all the speech
        self._heard = EMPTY  # the newest pass's transcript, partial or final
        self._heard_ms = 0.0  # audio ms fed to the transcriber; ASR worker only
        # Where the user's words end (a final "s" included): what the pause's pass must hear.
        cfg = session.cfg
        self.word_end = WordEnd(cfg.asr.min_rms_dbfs, cfg.vad.frame_ms, RECENT_MS)
        self.final_pending = False
        self._finals = 0  # finals asked for
        self._refinements: set[Future[str]] = set()  # whole passes over long turns, asked for
        # The latest final and its transcriber
        self._last_final: tuple[Transcriber | None, str] = (None, "")
        self.closed = False

    # ---- audio in ------------------------------------------------------------------------------

    def new_utterance(self) -> None:
        self.utt += 1

    def new_turn(self, over_answer: bool = False) -> None:
        """A fresh transcriber: the previous one's final may still be queued in the worker.
        ``over_answer``: the turn's speech began over the agent's answer."""
        self.transcriber = self.s.c.new_transcriber(self.s.cfg.asr, over_answer)

    def feed(self, pcm: PCM16) -> None:
        # The transcriber has one owner, the ASR worker: feeding it from the loop while a pass
        # reads its buffer would race, so feeds queue in the same worker. Urgent, in order with
        # finals and segment cuts: a pass hears every feed queued before it (and those that
        # arrived while it waited), a final none that came after it.
        fut = self.s.c.asr_worker.submit(
            self._fed, self.transcriber, pcm.copy(), self.s.audio_ms, priority=URGENT, key=self
        )
        self._jobs.add(fut)
        fut.add_done_callback(self._jobs.discard)

    def _fed(self, transcriber: Transcriber, pcm: PCM16, end_ms: float) -> None:
        """In the ASR worker: feed the audio that ends at ``end_ms``."""
        transcriber.feed(pcm)
        self._heard_ms = end_ms

    def pass_if_due(self) -> None:
        """In speech: a pass at the regular cadence, or one over words no pass has heard yet.

        In silence with speech no pass has heard yet, a pass starts as soon as the worker is
        free, once ONSET_PASS_MIN_MS of audio came since the last pass or the quiet has ended
        the words: if this is the end of the turn, it covers all the speech when the pause is
        detected, so the end-of-turn score and the speculation start up to ~60 ms sooner than
        on a pass started at the pause. In the pause, at once: the pass before it ended inside
        the words' sound."""
        audio_ms, words_end = self.s.audio_ms, self.word_end.sound_ms
        unheard = words_end < audio_ms and self._pass_at_ms < words_end
        # A quiet of WordEnd.GAP_MS has ended the words' sound: the pass the end of the turn
        # waits on starts then, not 100 ms after one that a quiet piece inside the last word
        # started (61 and 71 ms after the words in 2 of 24 questions, 25-30 ms later).
        ended = audio_ms - words_end >= WordEnd.GAP_MS
        fresh = (
            self.s.pause_end is not None
            or ended
            or audio_ms - self._pass_at_ms >= ONSET_PASS_MIN_MS
        )
        if self._partial_job is None and (self.transcriber.partial_due() or unheard and fresh):
            self.request_partial()

    def close_segment(self) -> None:
        """A long turn goes on: the transcriber keeps this segment's text only."""
        self._submit(self.transcriber.close_segment, lambda tr: None, URGENT)

    # ---- passes --------------------------------------------------------------------------------

    def _pass(self, transcriber: Transcriber, at_pause: bool) -> tuple[float, Transcript]:
        """In the ASR worker: a partial pass, and the audio ms it heard up to."""
        return self._heard_ms, transcriber.partial(at_pause)

    def _submit(
        self, fn: Callable[[], R], done: Callable[[R | None], None], priority: int
    ) -> asyncio.Future[R]:
        fut = self.s.c.asr_worker.submit(fn, priority=priority, key=self)
        self._jobs.add(fut)
        utt = self.utt

        def finished(f: asyncio.Future[R]) -> None:
            self._jobs.discard(f)
            if f.cancelled():
                return
            if f.exception() is not None:
                log.error("ASR failed: %s", f.exception())
                self.s.emit(events.error("asr_error", str(f.exception())))
                done(None)
                return
            done(f.result() if utt == self.utt else None)

        fut.add_done_callback(finished)
        return fut

    def request_partial(self) -> None:
        # A pass asked for in a pause is the one the end of the turn waits on (the end-of-turn
        # score, the speculation): it goes before every regular pass, other sessions' included.
        urgent = self.s.pause_end is not None
        if urgent and self._partial_job is None and self._reuse_last_pass():
            return
        if self._partial_job is not None:
            # A pass still queued becomes the pause's: it will hear all the audio up to now.
            if not (urgent and self.s.c.asr_worker.promote(self._partial_job, URGENT)):
                self._partial_again = True
            return
        self._pass_at_ms = self.s.audio_ms
        # One after the words (in a pause, or in the silence before one is detected) may be the
        # pass the end of the turn waits on: in a long turn it hears a short last segment again
        # with the audio before its cut, as the final would.
        after_words = urgent or self.word_end.sound_ms < self.s.audio_ms
        self._partial_job = self._submit(
            functools.partial(self._pass, self.transcriber, after_words),
            self._on_partial,
            URGENT if urgent else LATER,
        )

    def _reuse_last_pass(self) -> bool:
        """In a pause, whether the last pass heard all the speech: then no other pass runs over
        the pause's silence. One that ended before the pause was detected becomes the pause's
        pass (with `vad.pause_ms` 200 it usually has: ~170 ms after the last word)."""
        s, pause_end = self.s, self.s.pause_end
        if self.last_pass is None or pause_end is None or s.tm.barging.current is not None:
            return False  # an interruption is confirmed on words two passes agree on
        utt, heard_ms, tr = self.last_pass
        words = self.word_end.sound_ms
        if utt != self.utt or words >= s.audio_ms or heard_ms < words:
            return False
        if self._pause_heard == pause_end:
            return True
        self._pause_heard = pause_end
        s.trace(
            "asr_partial", s.tm.turn, s.tm.gen, text=tr.text, stable=tr.stable,
            compute_ms=0.0, reused=True,
        )  # fmt: skip
        s.do(s.tm.on_partial(tr.text, True, tr.stable))
        return True

    def _on_partial(self, res: tuple[float, Transcript] | None) -> None:
        s = self.s
        self._partial_job = None
        heard_ms, tr = res if res is not None else (self._pass_at_ms, None)
        self._pass_at_ms = heard_ms
        if tr is not None:
            self.last_pass = (self.utt, heard_ms, tr)
            self._heard = tr
        # The pass covers all the speech when it heard past the last word's sound, even a
        # regular pass the pause found running: no second pass. One that ended inside it goes
        # again at once. While the words' sound reaches the newest frame it may go on past what
        # the pass heard: the pass that covers it starts from pass_if_due once it has ended.
        pause_end, words = s.pause_end, self.word_end.sound_ms
        sounding = words >= s.audio_ms
        complete = pause_end is not None and not sounding and heard_ms >= words
        if complete:
            self._partial_again = False
            self._pause_heard = pause_end
        elif pause_end is not None and not sounding and heard_ms >= pause_end:
            self._partial_again = True
        if tr is not None and not self.final_pending:
            s.trace(
                "asr_partial", s.tm.turn, s.tm.gen, text=tr.text, stable=tr.stable,
                compute_ms=round(tr.compute_ms, 1),
            )  # fmt: skip
            s.emit(events.transcription_delta(tr.text, tr.stable))
            s.do(s.tm.on_partial(tr.text, complete, tr.stable))
            if pause_end is None and s.tm.user_speaking and tr.stable:
                s.warm_lm(tr.stable)
        if self._partial_again and s.vad.in_speech:
            self._partial_again = False
            self.request_partial()

    def alternatives(self, text: str) -> tuple[str, ...]:
        """What else the newest pass heard, when ``text`` is what it heard best (a speculation's
        pause pass, which the final reuses; () for an older or a typed text)."""
        return self._heard.alternatives if self._heard.text == text else ()

    def slower(self, text: str) -> Callable[[], tuple[str, ...]] | None:
        """What hears the newest pass's audio again played slower (``Transcript.slower``), when
        ``text`` is what it heard best."""
        return self._heard.slower if self._heard.text == text else None

    # ---- finals --------------------------------------------------------------------------------

    def request_final(self) -> None:
        self.final_pending = True
        self._partial_again = False
        # The final hears all the audio the pass in flight would, and a partial after it is
        # unused: a pass still queued is dropped, one running finishes unheard.
        if self._partial_job is not None and self._partial_job.cancel():
            self._partial_job = None
        self._finals += 1
        self._submit(
            self.transcriber.final, functools.partial(self._on_final, self._finals), URGENT
        )

    def _on_final(self, n: int, tr: Transcript | None) -> None:
        s = self.s
        # Only the latest final asked for ends the wait: an earlier one, dropped because the
        # speech went on, may finish after it.
        if n == self._finals:
            self.final_pending = False
        if tr is None:
            if n == self._finals and not s.tm.user_speaking:
                s.do(s.tm.on_final(""))  # the ASR failed: nothing heard (a held answer plays on)
            return
        turn = s.tm.turn
        closed, whole = tr.segments
        self._heard = tr
        s.trace(
            "asr_final", turn, s.tm.gen, text=tr.text, compute_ms=round(tr.compute_ms, 1),
            segments=closed, segments_whole=whole,
        )  # fmt: skip
        s.emit(events.transcription_completed(tr.text))
        s.do(s.tm.on_final(tr.text, tr.alternatives, tr.logprob))
        self._last_final = (self.transcriber, tr.text)
        if tr.text:
            self._follow_refinement(self.transcriber, turn, tr.text)

    def _follow_refinement(self, transcriber: Transcriber, turn: int, text: str) -> None:
        """A long turn, heard in segments: one whole pass over all of it on the Refiner after
        its final (the answer does not wait for it); its text replaces the final's in the
        history, so the later turns' prompts carry it, and the client is told
        (``...input_audio_transcription.revised``), so its transcript stays the history's."""
        if self.closed:
            return
        s, loop = self.s, asyncio.get_running_loop()
        job = s.c.asr_worker.submit(transcriber.refinement, priority=LATER, key=self)
        self._jobs.add(job)

        def revise(refined: str) -> None:
            if self.closed or not refined or refined == text:
                return
            if self._last_final[0] is transcriber and self._last_final[1] != text:
                return  # the turn went on (reopened): its new final asks for its own
            if s.tm.history.revise_user(text, refined):
                s.trace("asr_refined", turn, s.tm.gen, text=refined)
                s.emit(events.transcription_revised(refined, text))

        def refined(fut: Future[str]) -> None:  # in the refiner's thread
            self._refinements.discard(fut)
            if fut.cancelled() or fut.exception() is not None:
                return
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to revise
                loop.call_soon_threadsafe(revise, fut.result())

        def asked(f: asyncio.Future[Future[str] | None]) -> None:
            self._jobs.discard(f)
            if not f.cancelled() and f.exception() is None and (r := f.result()) is not None:
                self._refinements.add(r)
                r.add_done_callback(refined)

        job.add_done_callback(asked)

    # ---- shutdown ------------------------------------------------------------------------------

    def close(self) -> None:
        """Drop this conversation's queued ASR jobs and its refinements not started."""
        self.closed = True
        for fut in list(self._refinements):  # nobody will read them: not started, never run
            fut.cancel()
        self.s.c.asr_worker.drop(self)

    async def wait_closed(self) -> None:
        """Wait for the ASR jobs already running."""
        for job in list(self._jobs):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await job
