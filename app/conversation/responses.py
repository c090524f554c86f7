"""The answers of one conversation: started, held, released and cut as the turn manager asks.

``Responses`` carries out the turn manager's actions on answers (a speculation started on a
pause's words, released on a hit, refined into a new answer on a miss; playback held, resumed
or cut when the user talks over it), keeps the sink's write position they share, and reports
each answer to the client as it starts, speaks and ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
from concurrent.futures import Executor
from typing import TYPE_CHECKING

from dllm_voice.app.conversation import events
from dllm_voice.app.conversation.actions import (
    DropSpeculation,
    HoldPlayback,
    ReleaseSpeculation,
    ResumePlayback,
    StartAnswer,
    StartSpeculation,
)
from dllm_voice.app.conversation.answer import Answer
from dllm_voice.app.conversation.history import new_subject, words_of_turn
from dllm_voice.app.observe.trace import now_ms
from dllm_voice.app.tools import calls
from dllm_voice.app.tools.registry import Guess

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from dllm_voice.app.config import Config
    from dllm_voice.app.conversation.components import Components
    from dllm_voice.app.conversation.ports import ChatSession
    from dllm_voice.app.conversation.session import VoiceSession
    from dllm_voice.app.tools.chooser import Choice
    from dllm_voice.audio.sinks import Sink


class Responses:
    """The answers of ``session``, by generation id; what each ``Answer`` reports to."""

    def __init__(self, session: VoiceSession) -> None:
        self.s = session
        self.answers: dict[int, Answer] = {}
        self.closing: list[Answer] = []  # finished or cancelled, tasks still ending
        self.sink_cursor = 0  # sink sample position where the next written sample will play
        self._speculation_t: dict[int, float] = {}
        self._refines: dict[int, float] = {}  # refined gen -> ttft of the dropped speculation

    # ---- what an answer reads of its conversation ----------------------------------------------

    @property
    def c(self) -> Components:
        return self.s.c

    @property
    def cfg(self) -> Config:
        return self.s.cfg

    @property
    def lm_session(self) -> ChatSession:
        return self.s.lm_thread.session

    @property
    def lm_executor(self) -> Executor:
        return self.s.lm_thread.executor

    @property
    def sink(self) -> Sink:
        return self.s.sink

    @property
    def speaks(self) -> bool:
        return self.s.speaks

    def trace(self, name: str, turn: int, gen: int, **attrs: object) -> None:
        self.s.trace(name, turn, gen, **attrs)

    def emit(self, event: events.Event) -> None:
        self.s.emit(event)

    # ---- the turn manager's actions ------------------------------------------------------------

    def speculate(self, a: StartSpeculation) -> None:
        eot = self.s.eot
        score = eot.scorer(a.gen, a.user_text) if a.score else eot.ahead(a.user_text)
        ans = Answer(
            self, a.gen, self.s.tm.turn, a.messages, speculative=True, end_score=score,
            choose=self._chooser(a.user_text, a.messages, self.s.tm.turn, a.gen),
        )  # fmt: skip
        self.answers[a.gen] = ans
        self._speculation_t[a.gen] = now_ms()
        self.s.trace("speculation_start", self.s.tm.turn, a.gen, text=a.user_text)
        ans.start_lm(park_after_clause=True)

    def drop(self, a: DropSpeculation) -> None:
        self.s.trace(
            "speculation", self.s.tm.turn, a.gen, result="miss", reason=a.reason, saved_ms=0
        )
        self.s.emit(events.speculation_dropped(a.gen, a.reason))
        self.cancel(a.gen)

    def release(self, a: ReleaseSpeculation) -> None:
        ans = self.answers[a.gen]
        # Saved = the work done before the final transcript arrived: LM prefill and first
        # clause, and its audio when ready.
        t = now_ms()
        ready = ans.times.get("tts_first_audio", ans.times.get("lm_first_clause", t))
        saved = min(ready, t) - self._speculation_t[a.gen]
        self.s.trace("speculation", self.s.tm.turn, a.gen, result="hit", saved_ms=round(saved, 1))
        self._start_response(ans)
        ans.release()
        if ans.text and ans.call is None:  # a call's events go first (Answer._call)
            self.emit_text(ans, ans.text)

    def answer(self, a: StartAnswer) -> None:
        drafts = None
        spec = self.answers.get(a.refine_of) if a.refine_of is not None else None
        if spec is not None:
            drafts = spec.token_ids or None
            t = now_ms()
            self._refines[a.gen] = spec.times.get("lm_first_token", t) - spec.times["lm_start"]
            self.s.emit(events.speculation_dropped(spec.gen, "refined"))
            spec.cancel()
        elif self.s.cfg.speculation.enabled:
            self.s.trace("speculation", self.s.tm.turn, a.gen, result="none", saved_ms=0)
        ans_turn = self.s.tm.answer_turn
        ans = Answer(
            self, a.gen, ans_turn, a.messages, speculative=False, drafts=drafts,
            choose=self._chooser(a.user_text, a.messages, ans_turn, a.gen) if a.tools else None,
        )  # fmt: skip
        self.answers[a.gen] = ans
        self._start_response(ans)
        ans.start_lm(park_after_clause=False)

    def say(self, gen: int, text: str) -> None:
        """Speak ``text`` as answer ``gen``, not made by the LM (a timer going off)."""
        ans = Answer(self, gen, self.s.tm.answer_turn, [], speculative=False)
        self.answers[gen] = ans
        self._start_response(ans)
        ans.say(text, last=True)

    def resume(self, a: ResumePlayback) -> None:
        if (ans := self.answers.get(a.gen)) is not None:
            self.s.trace("barge_in_resume", ans.turn, a.gen, reason=a.reason)
            ans.resume()

    def cut(self, gen: int, event: str) -> None:
        """Cancel answer ``gen`` (LM, TTS, unplayed audio), traced as ``event`` with what the
        user heard of it: a barge-in, or a reopened turn's early answer."""
        if (ans := self.answers.get(gen)) is not None:
            audible = ans.base is not None  # its audio had reached the sink
            self.s.trace(event, ans.turn, gen, heard=ans.heard_text(), audible=audible)
            if ans.base is not None and not ans.held:
                self.s.emit(events.audio_cleared(gen))
            ans.cancel()

    def _start_response(self, ans: Answer) -> None:
        self.s.set_state("thinking")
        self.s.emit(events.response_created(ans.gen))

    def hold(self, a: HoldPlayback) -> None:
        gen = a.gen
        ans = self.answers.get(gen)
        if ans is None:
            return
        was_playing = ans.base is not None and not ans.held
        ans.hold()
        t = now_ms()
        if a.onset_ms is not None:  # double talk: the VAD has not started this speech
            onset = self.s.t_of(a.onset_ms)
        else:
            onset = self.s.onset_t if self.s.onset_t is not None else t
        self.s.trace("barge_in_hold", ans.turn, gen, onset_ms=onset, near_end=a.near_end)
        if was_playing:
            self.s.trace("playback_stopped", ans.turn, gen, stop_ms=round(t - onset, 1))
            self.s.emit(events.audio_cleared(gen))

    def cancel(self, gen: int) -> None:
        ans = self.answers.get(gen)
        if ans is not None:
            ans.cancel()

    def heard(self, gen: int) -> str:
        ans = self.answers.get(gen)
        return ans.heard_text() if ans is not None else ""

    # ---- what answers report -------------------------------------------------------------------

    def emit_text(self, ans: Answer, piece: str) -> None:
        if ans.speculative:
            self.s.emit(events.speculation_delta(ans.gen, piece, ans.text))
        else:
            self.s.emit(events.transcript_delta(ans.gen, piece))

    def on_first_token(self, ans: Answer) -> None:
        if ans.gen in self._refines:
            ttft = ans.times["lm_first_token"] - ans.times["lm_start"]
            saved = max(0.0, self._refines.pop(ans.gen) - ttft)
            self.s.trace(
                "speculation", ans.turn, ans.gen, result="refined", saved_ms=round(saved, 1),
                drafts=len(ans.drafts or []),
            )  # fmt: skip

    def may_play(self) -> bool:
        """Whether an answer's first audio may start: the turn manager's hold is over in input
        time, or in the wall-clock time that input would reach it (a client that stops sending
        after its words); and no voice the VAD has yet to call speech is rising in the input
        (at most ``vad.min_speech_ms``): a user going on reopens the turn before the answer's
        first word is heard, where it said "The" over them 80 ms into their words."""
        s, until = self.s, self.s.tm.ending.audible_from
        if s.vad.voice_rising and now_ms() < s.t_of(s.audio_ms) + s.cfg.vad.min_speech_ms:
            return False
        return until is None or s.tm.ending.may_play(s.audio_ms) or now_ms() >= s.t_of(until)

    def on_audio_started(self, ans: Answer) -> None:
        self.s.answer_audible(ans.turn, ans.gen, ans.times["audio_out_first"])

    def on_answer_finished(self, ans: Answer) -> None:
        self.answers.pop(ans.gen, None)
        self.closing.append(ans)
        if ans.speculative and ans.status == "cancelled":
            return  # a dropped speculation: never announced as a response
        s, text = self.s, ans.text.strip()
        heard = ans.heard_text() if ans.status == "cancelled" else text
        if ans.status == "completed":
            s.do(s.tm.on_answer_done(ans.gen, text))
        s.trace("turn_done", ans.turn, ans.gen, status=ans.status, text=text, heard=heard)
        stats = ans.stats
        usage = (stats.prompt_tokens, stats.new_tokens) if stats is not None else (0, 0)
        s.emit(events.response_done(ans.gen, ans.status, text, heard, *usage))
        s.answer_ended(ans.turn, ans.gen, last=not self.answers)

    # ---- tools ---------------------------------------------------------------------------------

    def _chooser(
        self, text: str, messages: list[dict[str, str]], turn: int, gen: int
    ) -> Callable[[torch.Tensor | None], Choice | None] | None:
        """What picks a tool for the turn ending in ``text`` (its prompt ``messages``) from
        its hidden state, for answer ``gen`` of ``turn``; None: no tools."""
        box, chooser = self.s.tools.box, self.s.tools.chooser
        if not len(box) or box.choice == "none":
            return None
        said = words_of_turn(text, messages)
        before = said[: len(said) - len(text)]
        alternatives = tuple(before + heard for heard in self.s.ears.alternatives(text))
        earlier = "" if before or new_subject(text) else self.s.tm.history.cut_short()
        hear = self.s.ears.slower(text)
        loop = asyncio.get_running_loop()
        slower = (
            functools.partial(self._heard_slower, hear, before, turn, gen, loop) if hear else None
        )

        def choose(state: torch.Tensor | None) -> Choice | None:
            row = None if state is None else state.float().cpu().numpy()
            choice = chooser.choose(box, row, said, alternatives, slower)
            if choice is None and earlier:
                # Words that go on from the turn the user cut: read as one request only
                # where together they name every argument.
                joined = chooser.choose(box, row, f"{earlier} {said}")
                args = joined.arguments if joined is not None else None
                if isinstance(args, dict) and not isinstance(args, Guess):
                    return joined
            return choice

        return choose

    def _heard_slower(
        self,
        hear: Callable[[], tuple[str, ...]],
        before: str,
        turn: int,
        gen: int,
        loop: asyncio.AbstractEventLoop,
    ) -> tuple[str, ...]:
        """What ``hear`` hears in the turn's last segment played slower, each after the
        turn's words ``before`` it, traced (``asr_slower``); nothing where the recognizer fails,
        which the trace says; nothing for an answer already cancelled (a speculation the
        user's words went on past). In the LM thread."""
        ans = self.answers.get(gen)
        if ans is None or ans.cancelled:
            return ()

        def post(name: str, **attrs: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to trace
                loop.call_soon_threadsafe(functools.partial(self.s.trace, name, turn, gen, **attrs))

        t0 = now_ms()
        try:
            heard = tuple(before + h for h in hear())
        except (RuntimeError, ValueError) as e:  # the turn goes on without these hearings
            heard = ()
            post("error", stage="asr", message=f"hearing the turn slower: {e}")
        post("asr_slower", texts=list(heard), ms=round(now_ms() - t0, 1))
        return heard

    def run_tool(self, call: calls.Call) -> asyncio.Future[calls.Outcome]:
        """Start ``call`` on its own; ``carry_out`` records it once the turn is committed."""
        return asyncio.ensure_future(calls.run(call, self.s.tools.ctx, self.s.tools.cfg.timeout_s))

    async def carry_out(
        self, ans: Answer, call: calls.Call, started: asyncio.Future[calls.Outcome] | None = None
    ) -> calls.Outcome | None:
        """Run ``call`` for answer ``ans`` (a filler if it runs long), record it in the trace,
        the history and the ledger; None for a client's tool, which the client runs.
        ``started``: the call already under way (``run_tool``: a read-only tool run ahead)."""
        s, turn = self.s, ans.turn
        args = call.arguments
        tpf = round(call.arg_stats.tokens_per_forward, 2) if call.arg_stats else None
        s.trace(
            "tool_call", turn, ans.gen, call_id=call.call_id, tool=call.tool.name, arguments=args,
            how=call.how, p=round(call.p, 3), args_by=call.args_by, tokens_per_forward=tpf,
        )  # fmt: skip
        client = call.tool.client_side
        if client:
            s.emit(events.tool_call_delta(ans.gen, call.call_id, args))
            s.emit(events.client_tool_call(ans.gen, call.call_id, call.tool.name, args))
        else:
            s.emit(events.tool_call(ans.gen, call.call_id, call.tool.name, args))
        if client:
            s.tools.pending[call.call_id] = (turn, call.tool.name)
            return None
        outcome = s.tools.ledger.get(turn, call)
        if outcome is not None:
            outcome = dataclasses.replace(outcome, repeated=True, ms=0.0)
        else:
            cfg = s.tools.cfg
            task = started if started is not None else self.run_tool(call)
            done, _ = await asyncio.wait({task}, timeout=cfg.filler_ms / 1e3)
            if not done and cfg.filler:
                s.trace("tool_filler", turn, ans.gen, text=cfg.filler)
                ans.say(cfg.filler, last=False)
            try:
                outcome = await task
            except asyncio.CancelledError:
                task.cancel()
                raise
            s.tools.ledger.put(turn, call, outcome)
        s.trace(
            "tool_result", turn, ans.gen, call_id=call.call_id, tool=call.tool.name,
            ms=outcome.ms, error=outcome.error, repeated=outcome.repeated,
            ahead=started is not None,
        )  # fmt: skip
        if outcome.error is not None:
            s.trace("error", turn, ans.gen, stage="tool", message=outcome.error)
        result = outcome.said if outcome.said is not None else outcome.output
        s.emit(events.tool_result(ans.gen, call.call_id, call.tool.name, result, outcome.error))
        s.tm.history.note_tool(call.tool.name, result)
        return outcome

    # ---- shutdown ------------------------------------------------------------------------------

    def reap(self) -> None:
        """Forget finished answers once their tasks have ended."""
        if self.closing:
            self.closing = [a for a in self.closing if not a.tasks_done()]

    def cancel_all(self) -> None:
        for ans in list(self.answers.values()):
            ans.cancel()

    async def wait_closed(self) -> None:
        pending, self.closing = self.closing, []
        for ans in pending:
            with contextlib.suppress(Exception):
                await ans.wait_closed()
