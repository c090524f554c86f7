"""One agent answer (one generation id): LM worker -> clause chunker -> TTS worker -> playback.

An ``Answer`` owns three strands:

* the LM job, run in the conversation's LM thread: iterates ``ChatSession.generate`` and chunks the
  text into clauses in that thread. A speculative answer *parks* after its first clause (the
  iterator is kept, the thread freed for others) and continues where it stopped on release.
* the TTS task: synthesizes each clause in the shared TTS worker, PCM pieces tagged with their
  clause, resampled to the sink's rate; a first clause goes before other answers' later ones.
* the playback task: once released and not held, writes the audio to the sink in short slices
  and tracks where the answer's sample 0 sits in the sink's played-sample count, so that after a
  flush ``heard_text()`` knows which words the user actually heard.

Everything here runs on the event loop except the two worker jobs, which only hand results
back through ``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dllm_voice.app.conversation.frames import ClauseFrame, EndOfAnswerFrame, TTSAudioFrame
from dllm_voice.app.conversation.scheduler import LATER, URGENT
from dllm_voice.app.conversation.text import normalize
from dllm_voice.app.observe.trace import now_ms

log = logging.getLogger(__name__)

# Sink writes are cut to 20 ms slices so a hold or cancel lands between two slices at worst.
SLICE_MS = 20
# An answer whose first 4-8 words were said in an earlier answer is a copy, not an answer ("The
# capital of France is Paris." to a request for a joke); 3 words ("The capital of") legitimately
# start many answers.
COPY_MIN_WORDS = 4
COPY_WORDS = 8
# Once the first clause is handed out the LM waits (up to this long) for TTS to voice it: the
# user waits on that audio alone, and decoding the rest on the same two cores meanwhile slowed
# Piper's first clause from ~95 to 128 ms (Zen 4, 4-5 words); the rest is still ready long
# before the first clause has played (~1.2 s).
FIRST_AUDIO_WAIT_S = 0.5
# A chunk that ends a sentence (the chunker cuts at . ! ? only where a sentence ends).
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")
_WORD = re.compile(r"\S+")


def word_boundary(text: str, n: int) -> int | None:
    """Index just past the ``n``-th word of ``text`` when whitespace follows it (the word is
    whole), else None."""
    words = list(itertools.islice(_WORD.finditer(text), n))
    if len(words) < n:
        return None
    end = words[-1].end()
    return end if end < len(text) else None


def _after(pieces: Iterator[str], skip: int) -> Iterator[str]:
    """``pieces`` without their first ``skip`` characters."""
    for piece in pieces:
        if skip >= len(piece):
            skip -= len(piece)
            continue
        yield piece[skip:]
        skip = 0


def without_history(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The system message and the new user message only."""
    system = [m for m in messages[:1] if m["role"] == "system"]
    return [*system, messages[-1]]


@dataclass
class _Segment:
    start: int  # answer sample offset
    pcm: np.ndarray
    text: str
    clause: int


class Session(Protocol):
    """What an answer needs of its conversation (app/conversation/session.py's VoiceSession)."""

    c: Any  # Components: the shared models and their executors
    cfg: Any
    lm_session: Any
    lm_executor: Any  # the conversation's LM thread
    sink: Any
    sink_cursor: int  # sink position where the next written sample will play

    def trace(self, name: str, turn: int, gen: int, **attrs: Any) -> None: ...
    def emit(self, event: dict[str, Any]) -> None: ...
    def emit_text(self, ans: Answer, piece: str) -> None: ...
    def on_first_token(self, ans: Answer) -> None: ...
    def on_audio_started(self, ans: Answer) -> None: ...
    def on_answer_finished(self, ans: Answer) -> None: ...


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
        end_score: Callable[[float | None], None] | None = None,
    ) -> None:
        self.s = session
        self.gen, self.turn, self.messages = gen, turn, messages
        self.speculative = speculative
        self.drafts = drafts
        # Takes P(end of the user's turn), which the generation's first forward reads on the way.
        self._end_score = end_score
        self.cancel_event = threading.Event()
        self.cancelled = False
        self.status = "in_progress"
        self.text = ""  # committed LM text
        self.token_ids: list[int] = []
        self.stats: Any = None
        self.times: dict[str, float] = {}
        self.released = asyncio.Event()
        if not speculative:
            self.released.set()
        self.held = False
        self._unheld = asyncio.Event()
        self._unheld.set()
        self._epoch = 0  # bumped by every hold, so an in-flight write knows it was flushed
        self._clauses: asyncio.Queue[ClauseFrame | EndOfAnswerFrame] = asyncio.Queue()
        self._segments: list[_Segment] = []
        self._n_clauses = 0
        self.total_samples = 0
        self.cursor = 0  # answer offset of the next sample to write
        self.base: int | None = None  # sink played-sample position of answer offset 0
        self.tts_done = False
        self._new_audio = asyncio.Event()
        self.finished = asyncio.Event()
        self._generation: Any = None
        self._iter: Iterator[str] | None = None
        self._prompt = messages  # what the generation was asked (without history on a retry)
        self._chunker: Any = None
        self._uncut: str | None = ""  # text before the first chunk; None once it is cut
        self._sentences = 0  # sentence ends among the chunks spoken so far
        self._spoken_text = ""  # the chunks handed to TTS, joined
        self._pushed_chars = 0  # text the generation handed out
        self._first_posted = False
        # Text not handed out until the copy check; None after it, or with nothing to copy.
        self._held: str | None = ""
        self._first_clause_out = False  # the LM thread handed out the first clause
        self._first_voiced = threading.Event()  # TTS has voiced it (or never will)
        self._held_chunks: list[str] = []
        self._lm_future: asyncio.Future[str] | None = None
        self._tasks = [
            asyncio.create_task(self._tts_loop(), name=f"tts-{gen}"),
            asyncio.create_task(self._play_loop(), name=f"play-{gen}"),
        ]

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
        post = loop.call_soon_threadsafe
        self._lm_future = loop.run_in_executor(
            self.s.lm_executor, self._lm_job, park_after_clause, post
        )
        self._lm_future.add_done_callback(self._lm_job_done)

    def _lm_job(self, park_after_clause: bool, post: Callable[..., Any]) -> str:
        """Runs in the LM thread: pull text, chunk it, hand both to the loop."""
        if self.cancel_event.is_set():
            return "cancelled"
        if self._iter is None:
            self._start_generation(self.messages)
        elif self._generation.superseded:
            self._regenerate()
        self._yield_to_first_audio()  # a speculation released after its first clause
        conv = self.s.cfg.conversation
        for piece in self._iter:
            self._pushed_chars += len(piece)
            if not self._first_posted:
                self._first_posted = True
                post(self._on_first_token)
            chunks: list[str] = []
            rest = piece
            if conv.first_clause_max_words and self._uncut is not None:
                end = word_boundary(self._uncut + piece, conv.first_clause_max_words)
                if end is not None:
                    # No punctuation yet after first_clause_max_words: cut the first chunk at
                    # that word's end, so TTS starts on 3 words (~68 ms of Piper on Zen 4)
                    # instead of a whole sentence, or 5-6 where a draft step brought several.
                    cut = max(0, end - len(self._uncut))
                    chunks = self._chunker.push(piece[:cut]) + self._chunker.flush()
                    rest = piece[cut:]
            chunks += self._chunker.push(rest)
            if self._uncut is not None:
                self._uncut = None if chunks else self._uncut + piece
            if self._held is not None:
                # Nothing leaves this thread before the answer's first words are checked.
                self._held += piece
                self._held_chunks += chunks
                if not self._held_chunks or len(self._held.split()) < COPY_MIN_WORDS:
                    continue
                if self._copies_history(self._held):
                    post(self._on_retry, self._held.strip())
                    self._start_generation(without_history(self.messages))
                    return self._lm_job(park_after_clause, post)
                piece, chunks, self._held, self._held_chunks = (
                    self._held,
                    self._held_chunks,
                    None,
                    [],
                )
            chunks = self._spoken(chunks)
            post(self._on_text, piece, chunks, list(self._generation.token_ids))
            if self._sentences >= conv.max_spoken_sentences > 0:
                self._generation.close("sentences")  # no forward past the last spoken sentence
                break
            self._first_clause_out = self._first_clause_out or bool(chunks)
            if park_after_clause and chunks and self.speculative:
                return "parked"
            self._yield_to_first_audio()
        if self.cancel_event.is_set():
            return "cancelled"
        gen = self._generation
        stop = gen.stats.stop_reason
        rest, tail = self._held or "", self._held_chunks
        tail += [] if stop == "sentences" else self._chunker.flush()
        if stop == "loop" and len(gen.text) < self._pushed_chars:
            # The loop guard took back text it had handed out: speak only what it kept.
            rest, tail = (gen.text, [gen.text.strip()]) if self._held is not None else ("", [])
        post(self._on_text, rest, self._spoken([t for t in tail if t]), list(gen.token_ids))
        post(self._on_lm_end, gen.stats, self._spoken_text if stop == "sentences" else gen.text)
        return "done"

    def _start_generation(self, messages: list[dict[str, str]]) -> None:
        if self._generation is not None:
            self._generation.close()
        self._chunker = self.s.c.new_chunker(self.s.cfg.tts)
        self._uncut, self._sentences, self._spoken_text, self._pushed_chars = "", 0, "", 0
        self._prompt = messages
        # Only a prompt with earlier answers in it can be copied (a retry has none): the rest
        # go out unchecked.
        copyable = any(m["role"] == "assistant" for m in messages[:-1])
        self._held, self._held_chunks = ("" if copyable else None), []
        self._generation = self.s.lm_session.generate(
            messages, cancel=self.cancel_event, drafts=self.drafts, end_score=self._end_score
        )
        self._end_score = None  # a retry's prompt is not the scored one
        self._iter = iter(self._generation)

    def _regenerate(self) -> None:
        """Generate again after another LM job took the session's cache from this parked
        answer (the end-of-turn score of a later pass over the same words): the same prompt
        gives the same tokens (greedy, the default), which go in as drafts, so the decoder
        verifies them in a forward or two; the text already handed out is skipped."""
        old = self._generation
        self._generation = self.s.lm_session.generate(
            self._prompt, cancel=self.cancel_event, drafts=list(old.token_ids)
        )
        self._iter = _after(iter(self._generation), self._pushed_chars)

    def _yield_to_first_audio(self) -> None:
        """In the LM thread: once the first clause is out, no forward until it is voiced."""
        if self._first_clause_out and not self._first_voiced.is_set():
            self._first_voiced.wait(FIRST_AUDIO_WAIT_S)

    def _copies_history(self, text: str) -> bool:
        """The answer starts with 4-8 words said in an answer in the prompt's history: a small
        model leaning on the last exchange instead of answering ("Mars is a terrestrial
        planet" after the user cut off "My planet Mars is a terrestrial"); the new turn then
        goes without history."""
        words = normalize(text).split()[:COPY_WORDS]
        n = len(words)
        for m in self.messages[:-1]:
            said = normalize(m["content"]).split() if m["role"] == "assistant" else []
            if any(said[i : i + n] == words for i in range(len(said) - n + 1)):
                return True
        return False

    def _spoken(self, chunks: list[str]) -> list[str]:
        """The chunks up to the answer's last spoken sentence (conversation.max_spoken_sentences);
        counts sentence ends."""
        limit = self.s.cfg.conversation.max_spoken_sentences
        out: list[str] = []
        for chunk in chunks:
            if limit and self._sentences >= limit:
                break
            out.append(chunk)
            self._spoken_text = f"{self._spoken_text} {chunk}".strip()
            if _SENTENCE_END.search(chunk):
                self._sentences += 1
        return out

    def _lm_job_done(self, fut: asyncio.Future[str]) -> None:
        if fut.cancelled():
            return
        parked = fut.exception() is None and fut.result() == "parked"
        if parked and not self.speculative and fut is self._lm_future:
            self.start_lm(park_after_clause=False)  # released while the job was parking
            return
        exc = fut.exception()
        if exc is not None and not self.cancelled:
            log.error("LM failed in answer %d: %s", self.gen, exc, exc_info=exc)
            self.s.trace("error", self.turn, self.gen, stage="lm", message=str(exc))
            self.s.emit({"type": "error", "error": {"type": "lm_error", "message": str(exc)}})
            self._clauses.put_nowait(EndOfAnswerFrame(self.gen, "error"))

    def _on_retry(self, copied: str) -> None:
        self.s.trace("lm_retry", self.turn, self.gen, copied=copied)

    def _on_first_token(self) -> None:
        if self.cancelled or "lm_first_token" in self.times:
            return
        self.times["lm_first_token"] = now_ms()
        self.s.trace("lm_first_token", self.turn, self.gen)
        self.s.on_first_token(self)

    def _on_text(self, piece: str, chunks: list[str], token_ids: list[int]) -> None:
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

    def _on_lm_end(self, stats: Any, text: str) -> None:
        self.stats = stats
        if self.cancelled:
            return
        self.text = text  # what is spoken: the loop guard or the sentence limit may cut it
        self.s.trace("lm_done", self.turn, self.gen, **_stats_dict(stats))
        self._clauses.put_nowait(EndOfAnswerFrame(self.gen, getattr(stats, "stop_reason", "")))

    # ---- TTS -----------------------------------------------------------------------------------

    async def _tts_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if not self.s.cfg.conversation.speculation_tts:
            await self.released.wait()
        while True:
            frame = await self._clauses.get()
            if isinstance(frame, EndOfAnswerFrame) or frame.stale(self.gen) or self.cancelled:
                break
            if frame.index > 0:  # speculation prepares the first clause only
                await self.released.wait()
            post = loop.call_soon_threadsafe
            # The first clause is what the user waits on; a later one has the clause before it
            # playing (3+ words, ~1 s) to be ready in.
            priority = URGENT if frame.index == 0 else LATER
            await self.s.c.tts_worker.submit(
                self._tts_job, frame, post, priority=priority, key=self
            )
        self.tts_done = True
        self._new_audio.set()

    def _tts_job(self, clause: ClauseFrame, post: Callable[..., Any]) -> None:
        """Runs in the TTS thread."""
        tts = self.s.c.tts
        try:
            for pcm in tts.synthesize(clause.text, cancel=self.cancel_event):
                if self.cancel_event.is_set():
                    return
                post(self._on_audio, TTSAudioFrame(self.gen, pcm, clause.text, clause.index))
                if clause.index == 0:
                    self._first_voiced.set()  # Piper voiced the whole clause in one run
        finally:
            if clause.index == 0:
                self._first_voiced.set()

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
        self._segments.append(_Segment(self.total_samples, pcm, frame.text, frame.clause))
        self.total_samples += len(pcm)
        self._new_audio.set()

    # ---- playback ------------------------------------------------------------------------------

    def _slice(self, n: int) -> np.ndarray:
        for seg in reversed(self._segments):
            if seg.start <= self.cursor:
                off = self.cursor - seg.start
                return seg.pcm[off : off + n]
        return np.zeros(0, dtype=np.int16)

    async def _play_loop(self) -> None:
        sink = self.s.sink
        slice_n = max(1, sink.sample_rate_hz * SLICE_MS // 1000)
        await self.released.wait()
        while not self.cancelled:
            if self.held:
                await self._unheld.wait()
                continue
            if self.cursor < self.total_samples:
                pcm = self._slice(slice_n)
                if self.base is None:
                    self.base = self.s.sink_cursor - self.cursor
                    self.times["audio_out_first"] = now_ms()
                    self.s.on_audio_started(self)
                epoch = self._epoch
                await sink.write(pcm)
                if self._epoch != epoch or self.cancelled:
                    self._stop_playback()  # the slice may have landed after the flush
                    continue
                self.cursor += len(pcm)
                self.s.sink_cursor += len(pcm)
            elif self.tts_done:
                if self.base is None or sink.played_samples >= self.base + self.total_samples:
                    self._finish("completed")
                    return
                await asyncio.sleep(0.01)
            else:
                self._new_audio.clear()
                await self._new_audio.wait()

    def _stop_playback(self) -> None:
        """Flush the sink and rewind the cursor to the first sample the user did not hear."""
        sink = self.s.sink
        sink.flush()
        played = sink.played_samples
        self.s.sink_cursor = played
        if self.base is not None:
            heard = min(max(played - self.base, 0), self.cursor)
            self.cursor = heard
            self.base = played - heard

    def heard_samples(self) -> int:
        if self.base is None:
            return 0
        return min(max(self.s.sink.played_samples - self.base, 0), self.cursor)

    def heard_text(self) -> str:
        """The words the user heard: whole clauses, plus the played share of the current one."""
        heard = self.heard_samples()
        clauses: dict[int, list[int]] = {}  # clause -> [samples, samples heard]
        texts: dict[int, str] = {}
        for seg in self._segments:
            c = clauses.setdefault(seg.clause, [0, 0])
            c[0] += len(seg.pcm)
            c[1] += min(max(heard - seg.start, 0), len(seg.pcm))
            texts[seg.clause] = seg.text
        words: list[str] = []
        for idx in sorted(clauses):
            total, got = clauses[idx]
            w = texts[idx].split()
            if got >= total:
                words += w
            else:
                # Piper speaks at a near-even word rate, so the played share of the clause's
                # samples picks the word being spoken (kept: the user heard it start).
                words += w[: int(np.ceil(len(w) * got / max(total, 1)))]
                break
        return " ".join(words)

    # ---- control -------------------------------------------------------------------------------

    def release(self) -> None:
        """Speculation hit: play it, and let the LM go on past the first clause."""
        self.speculative = False
        self.released.set()
        lm = self._lm_future
        if lm is not None and lm.done() and not lm.cancelled() and lm.result() == "parked":
            self.start_lm(park_after_clause=False)

    def hold(self) -> None:
        self.held = True
        self._unheld.clear()
        self._epoch += 1
        self._stop_playback()

    def resume(self) -> None:
        self.held = False
        self._unheld.set()

    def cancel(self) -> None:
        """Stop the LM and TTS, drop unplayed audio; safe to call twice."""
        if self.cancelled:
            return
        self.cancelled = True
        self.cancel_event.set()
        self._first_voiced.set()
        self.s.c.tts_worker.drop(self)  # a clause still queued is never synthesized
        if self.base is not None:
            self._stop_playback()
        self._unheld.set()
        self._new_audio.set()
        self.released.set()
        self._clauses.put_nowait(EndOfAnswerFrame(self.gen, "cancelled"))
        self._finish("cancelled")

    def _finish(self, status: str) -> None:
        if self.finished.is_set():
            return
        self.status = status
        self.finished.set()
        self.s.on_answer_finished(self)

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


def _stats_dict(stats: Any) -> dict[str, Any]:
    if stats is None:
        return {}
    keys = ("prompt_tokens", "cached_tokens", "new_tokens", "forwards", "ttft_ms", "total_ms")
    out = {k: getattr(stats, k) for k in keys if hasattr(stats, k)}
    out["tokens_per_s"] = round(float(getattr(stats, "tokens_per_s", 0.0)), 1)
    out["stop_reason"] = getattr(stats, "stop_reason", "")
    return out
