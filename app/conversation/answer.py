"""One agent answer (one generation id): LM thread -> clauses -> TTS worker -> playback.

An ``Answer`` owns three strands:

* the LM job, run in the conversation's LM thread: ``ClauseStream`` (clauses.py) pulls the
  generation's text and cuts it into clauses there.
* the TTS task: synthesizes each clause in the shared TTS worker, PCM pieces tagged with their
  clause, resampled to the sink's rate; a first clause goes before other answers' later ones.
* the playback task: ``Playback`` (playback.py) writes the audio to the sink once released and
  not held, and knows which words the user heard.

When the LM thread chooses a tool instead of answering, a fourth strand carries the call out
once the answer is released (a speculation prepares a call, never runs it), says a filler if
it runs long, and speaks its result (``say``) or has the LM answer from it.

Everything here runs on the event loop except the two worker jobs, which only hand results
back through ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dllm_voice.app.conversation import events
from dllm_voice.app.conversation.clauses import ClauseStream, Post
from dllm_voice.app.conversation.frames import ClauseFrame, EndOfAnswerFrame, TTSAudioFrame
from dllm_voice.app.conversation.playback import Playback
from dllm_voice.app.conversation.scheduler import LATER, URGENT
from dllm_voice.app.observe.trace import now_ms
from dllm_voice.model.errors import ModelError

if TYPE_CHECKING:
    from concurrent.futures import Executor

    import torch

    from dllm_voice.app.config import Config
    from dllm_voice.app.conversation.components import Components
    from dllm_voice.app.conversation.end_of_turn import EndScore
    from dllm_voice.app.conversation.ports import ChatSession
    from dllm_voice.app.tools.calls import Call, Outcome
    from dllm_voice.app.tools.chooser import Choice
    from dllm_voice.audio.sinks import Sink
    from dllm_voice.model.engine import GenerationStats

log = logging.getLogger(__name__)


class Session(Protocol):
    """What an answer needs of its conversation (responses.py's Responses)."""

    sink_cursor: int  # sink position where the next written sample will play

    @property
    def c(self) -> Components: ...  # the shared models and their workers
    @property
    def cfg(self) -> Config: ...
    @property
    def lm_session(self) -> ChatSession: ...
    @property
    def lm_executor(self) -> Executor: ...  # the conversation's LM thread
    @property
    def sink(self) -> Sink: ...
    @property
    def speaks(self) -> bool: ...  # False: text only, no speech synthesized

    def trace(self, name: str, turn: int, gen: int, **attrs: object) -> None: ...
    def emit(self, event: events.Event) -> None: ...
    def emit_text(self, ans: Answer, piece: str) -> None: ...
    def on_first_token(self, ans: Answer) -> None: ...
    def on_audio_started(self, ans: Answer) -> None: ...
    def may_play(self) -> bool: ...  # False while an unsure end of turn holds answers silent
    def on_answer_finished(self, ans: Answer) -> None: ...
    def run_tool(self, call: Call) -> asyncio.Future[Outcome]: ...  # run, recorded by carry_out
    async def carry_out(
        self, ans: Answer, call: Call, started: asyncio.Future[Outcome] | None = None
    ) -> Outcome | None: ...


class Answer:
    """The agent's answer of generation ``gen`` to the prompt ``messages``."""

    def __init__(
        self,
        session: Session,
        gen: int,
        turn: int,
        messages: list[dict[str, str]],
        *,
        speculative: bool,
        drafts: list[int] | None = None,
        end_score: EndScore | None = None,
        choose: Callable[[torch.Tensor | None], Choice | None] | None = None,
    ) -> None:
        self.s = session
        self.gen, self.turn, self.messages = gen, turn, messages
        self.speculative = speculative
        self.speaks = session.speaks
        self.drafts = drafts
        self.cancel_event = threading.Event()
        self.cancelled = False
        self.status = "in_progress"
        self.text = ""  # committed LM text
        self.token_ids: list[int] = []
        self.stats: GenerationStats | None = None
        self.times: dict[str, float] = {}
        self.released = asyncio.Event()
        if not speculative:
            self.released.set()
        self.finished = asyncio.Event()
        self.first_voiced = threading.Event()  # TTS has voiced the first clause (or never will)
        self._clauses: asyncio.Queue[ClauseFrame | EndOfAnswerFrame] = asyncio.Queue()
        self._n_clauses = 0
        self.words = ClauseStream(self, end_score, choose)
        self.call: Call | None = None
        self.playback = Playback(self)
        self._lm_future: asyncio.Future[str] | None = None
        self._tasks = [
            asyncio.create_task(self._tts_loop(), name=f"tts-{gen}"),
            asyncio.create_task(self.playback.run(), name=f"play-{gen}"),
        ]

    @property
    def base(self) -> int | None:
        """Sink played-sample position of the answer's first sample; None before it plays."""
        return self.playback.base

    @property
    def held(self) -> bool:
        return self.playback.held

    # ---- LM ------------------------------------------------------------------------------------

    def start_lm(self, park_after_clause: bool) -> None:
        """Run (or continue) the generation in the LM worker."""
        loop = asyncio.get_running_loop()
        if "lm_start" not in self.times:
            self.times["lm_start"] = now_ms()
            self.s.trace(
                "lm_start", self.turn, self.gen, speculative=self.speculative,
                drafts=len(self.drafts or []),
            )  # fmt: skip
        post: Post = loop.call_soon_threadsafe
        self._lm_future = loop.run_in_executor(
            self.s.lm_executor, self.words.run, park_after_clause, post
        )
        self._lm_future.add_done_callback(self._lm_job_done)

    def _lm_job_done(self, fut: asyncio.Future[str]) -> None:
        if fut.cancelled():
            return
        if fut.exception() is None and fut.result() == "tool" and not self.cancelled:
            self.call = self.words.call
            assert self.call is not None
            self._tasks.append(asyncio.create_task(self._call(self.call), name=f"call-{self.gen}"))
            return
        parked = fut.exception() is None and fut.result() == "parked"
        if parked and not self.speculative and fut is self._lm_future:
            self.start_lm(park_after_clause=False)  # released while the job was parking
            return
        exc = fut.exception()
        if exc is not None and not self.cancelled:
            # A model error (a system prompt too long for the context) is the client's to read;
            # anything else is a bug and keeps its traceback.
            bug = None if isinstance(exc, ModelError) else exc
            log.error("LM failed in answer %d: %s", self.gen, exc, exc_info=bug)
            self.s.trace("error", self.turn, self.gen, stage="lm", message=str(exc))
            self.s.emit(events.error("lm_error", str(exc)))
            self._clauses.put_nowait(EndOfAnswerFrame(self.gen, "error"))

    def on_retry(self, copied: str) -> None:
        self.s.trace("lm_retry", self.turn, self.gen, copied=copied)

    def on_first_token(self) -> None:
        if self.cancelled or "lm_first_token" in self.times:
            return
        self.times["lm_first_token"] = now_ms()
        self.s.trace("lm_first_token", self.turn, self.gen)
        self.s.on_first_token(self)

    def on_text(self, piece: str, chunks: list[str], token_ids: list[int]) -> None:
        if self.cancelled:
            return
        self.token_ids = token_ids
        if piece:
            self.text += piece
            self.s.emit_text(self, piece)
        for chunk in chunks:
            if not chunk.strip():
                continue
            if "lm_first_clause" not in self.times:
                self.times["lm_first_clause"] = now_ms()
                self.s.trace("lm_first_clause", self.turn, self.gen, text=chunk.strip())
            self._clauses.put_nowait(ClauseFrame(self.gen, chunk.strip(), self._n_clauses))
            self._n_clauses += 1

    def on_lm_end(self, stats: GenerationStats, text: str) -> None:
        self.stats = stats
        if self.cancelled:
            return
        self.text = text  # what is spoken: the loop guard or the sentence limit may cut it
        self.s.trace("lm_done", self.turn, self.gen, **_stats_dict(stats))
        self._clauses.put_nowait(EndOfAnswerFrame(self.gen, getattr(stats, "stop_reason", "")))

    # ---- a tool call ---------------------------------------------------------------------------

    async def _call(self, call: Call) -> None:
        """Run ``call`` once released, then speak its result or answer from it with the LM. A
        read-only tool runs at once, also on a speculation's guess of the turn: its sentence is
        voiced ahead, held like an LM answer's first clause, and plays on release."""
        early: asyncio.Future[Outcome] | None = None
        ahead: str | None = None
        if not self.released.is_set() and call.tool.read_only and not call.tool.client_side:
            early = self.s.run_tool(call)
            released = asyncio.ensure_future(self.released.wait())
            either: list[asyncio.Future[Any]] = [early, released]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            released.cancel()
            if early.done() and not self.cancelled:
                ahead = early.result().said
                if ahead is not None:
                    self.say(ahead, last=False)
        await self.released.wait()
        if self.cancelled:
            if early is not None:
                early.cancel()
            return
        outcome = await self.s.carry_out(self, call, early)
        if self.cancelled:
            return
        if outcome is None:  # a client's tool: the client runs it and asks for the answer
            self._clauses.put_nowait(EndOfAnswerFrame(self.gen, "tool_call"))
            return
        if ahead is not None:  # its text, held back at the release, follows the call's events
            self.s.emit_text(self, self.text)
            self._end_said(ahead)
            return
        if outcome.said is not None:
            self.say(outcome.said, last=True)
            return
        self.messages = with_result(self.messages, call.tool.name, outcome.output)
        self.words = ClauseStream(self, None)
        self.start_lm(park_after_clause=False)

    def say(self, text: str, *, last: bool) -> None:
        """Speak ``text`` as this answer's next clauses (a filler, a tool's sentence);
        ``last``: the answer ends after it."""
        if self.cancelled:
            return
        self.on_first_token()  # once: a filler's, or the tool sentence's with no filler
        chunker = self.s.c.new_chunker(self.s.cfg.tts)
        piece = f" {text}" if self.text else text
        self.on_text(piece, [*chunker.push(text), *chunker.flush()], self.token_ids)
        if last:
            self._end_said(text)

    def _end_said(self, text: str) -> None:
        self.s.trace("lm_done", self.turn, self.gen, said=text)
        self._clauses.put_nowait(EndOfAnswerFrame(self.gen, "said"))

    # ---- TTS -----------------------------------------------------------------------------------

    async def _tts_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if not self.s.cfg.speculation.tts:
            await self.released.wait()
        while True:
            frame = await self._clauses.get()
            if isinstance(frame, EndOfAnswerFrame) or frame.stale(self.gen) or self.cancelled:
                break
            if not self.speaks:
                self.first_voiced.set()  # never voiced: the LM waits for no synthesis
                continue
            if frame.index > 0:  # speculation prepares the first clause only
                await self.released.wait()
            post = loop.call_soon_threadsafe
            # The first clause is what the user waits on; a later one has the clause before it
            # playing (3+ words, ~1 s) to be ready in.
            priority = URGENT if frame.index == 0 else LATER
            await self.s.c.tts_worker.submit(
                self._tts_job, frame, post, priority=priority, key=self
            )
        self.playback.end()

    def _tts_job(self, clause: ClauseFrame, post: Post) -> None:
        """Runs in the TTS thread."""
        tts = self.s.c.tts
        try:
            for pcm in tts.synthesize(clause.text, cancel=self.cancel_event):
                if self.cancel_event.is_set():
                    return
                post(self._on_audio, TTSAudioFrame(self.gen, pcm, clause.text, clause.index))
                if clause.index == 0:
                    self.first_voiced.set()  # Piper voiced the whole clause in one run
        finally:
            if clause.index == 0:
                self.first_voiced.set()

    def _on_audio(self, frame: TTSAudioFrame) -> None:
        if self.cancelled or frame.stale(self.gen):
            return
        pcm = np.asarray(frame.pcm, dtype=np.int16)
        src, dst = self.s.c.tts.sample_rate_hz, self.s.sink.sample_rate_hz
        if src != dst:  # normally equal: sinks are opened at the TTS rate
            from dllm_voice.audio.resample import resample

            pcm = resample(pcm, src, dst)
        if len(pcm) == 0:
            return
        if "tts_first_audio" not in self.times:
            self.times["tts_first_audio"] = now_ms()
            self.s.trace("tts_first_audio", self.turn, self.gen)
        self.playback.add(pcm, frame.text, frame.clause)

    # ---- control -------------------------------------------------------------------------------

    def heard_text(self) -> str:
        """The words the user heard: whole clauses, plus the played share of the current one."""
        return self.playback.heard_text()

    def release(self) -> None:
        """Speculation hit: play it, and let the LM go on past the first clause."""
        self.speculative = False
        self.released.set()
        lm = self._lm_future
        if lm is not None and lm.done() and not lm.cancelled() and lm.result() == "parked":
            self.start_lm(park_after_clause=False)

    def hold(self) -> None:
        self.playback.hold()

    def resume(self) -> None:
        self.playback.resume()

    def cancel(self) -> None:
        """Stop the LM and TTS, drop unplayed audio; safe to call twice."""
        if self.cancelled:
            return
        self.cancelled = True
        self.cancel_event.set()
        self.first_voiced.set()
        self.s.c.tts_worker.drop(self)  # a clause still queued is never synthesized
        self.playback.cancel()
        self.released.set()
        self._clauses.put_nowait(EndOfAnswerFrame(self.gen, "cancelled"))
        self.finish("cancelled")

    def finish(self, status: str) -> None:
        if self.finished.is_set():
            return
        self.status = status
        self.finished.set()
        self.s.on_answer_finished(self)

    def tasks_done(self) -> bool:
        return all(t.done() for t in self._tasks)

    async def wait_closed(self) -> None:
        """Wait for this answer's tasks and worker jobs to end (after finish or cancel)."""
        for task in self._tasks:
            if not task.done() and self.cancelled:
                task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._lm_future is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._lm_future


def _stats_dict(stats: GenerationStats | None) -> dict[str, object]:
    if stats is None:
        return {}
    keys = ("prompt_tokens", "cached_tokens", "new_tokens", "forwards", "ttft_ms", "total_ms")
    out = {k: getattr(stats, k) for k in keys if hasattr(stats, k)}
    out["tokens_per_s"] = round(float(getattr(stats, "tokens_per_s", 0.0)), 1)
    out["stop_reason"] = getattr(stats, "stop_reason", "")
    return out


def with_result(messages: list[dict[str, str]], name: str, output: object) -> list[dict[str, str]]:
    """``messages`` with a tool's result after the user's words, for the LM to answer from
    (every chat template takes a user message; not all take a tool role)."""
    *head, last = messages
    note = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    content = f"{last['content']}\n({name} says: {note}. Answer in one short sentence.)"
    return [*head, {**last, "content": content}]
