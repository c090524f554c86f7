"""Small fakes of the models and sink for fast pipeline-logic tests (the real ones run in
test_end_to_end.py). They keep the contracts' shapes: generate() streams text pieces and honours
cancel, synthesize() streams PCM pieces, the sink paces "playback" by the wall clock."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from dllm_voice.app.conversation.components import Components
from dllm_voice.app.observe.trace import now_ms
from dllm_voice.audio.asr import Transcript
from dllm_voice.model.config import LMConfig

SR = 16000


def buzz(ms: int, f0: float = 140.0, level: int = 8000) -> np.ndarray:
    """A voiced-sounding harmonic buzz (webrtcvad calls it speech), int16 at 16 kHz."""
    t = np.arange(SR * ms // 1000) / SR
    x = sum(np.sin(2 * np.pi * f0 * h * t) / h for h in range(1, 20))
    x = x * (0.6 + 0.4 * np.sin(2 * np.pi * 4 * t))
    return (x / np.abs(x).max() * level).astype(np.int16)


def silence(ms: int) -> np.ndarray:
    return np.zeros(SR * ms // 1000, dtype=np.int16)


class FakeASR:
    """Scripted transcripts: turn i reads ``script[i]`` = text or (partial, final, ...): a
    turn that goes on after its final (reopened) reads the next (partial, final) pair."""

    def __init__(
        self,
        script: list[str | tuple[str, str]],
        compute_s: float = 0.03,
        refine: dict[str, str] | None = None,
        logprob: float | None = None,
        slower: dict[str, tuple[str, ...] | Exception] | None = None,
    ):
        self.script = list(script)
        self.slower = slower or {}  # heard text -> what it is heard as played slower, or a failure
        self.logprob = logprob  # every pass's Whisper mean log-probability (None: unmeasured)
        # A long turn's refinement after its final: final text -> the refined text, 0.2 s later.
        self.refine = refine or {}
        self.refine_s = 0.2
        self.compute_s = compute_s
        self.used = 0
        self.lock = threading.Lock()
        self.heard_ms: list[float] = []  # the audio each partial pass heard, in order

    def take(self) -> tuple[str, str]:
        with self.lock:
            item = self.script[self.used] if self.used < len(self.script) else ""
            self.used += 1
        return (item, item) if isinstance(item, str) else item


class FakeTranscriber:
    def __init__(self, asr: FakeASR, interval_ms: int = 400):
        self.asr, self.interval_ms = asr, interval_ms
        self.item: tuple[str, str] | None = None
        self.fed_ms = 0.0
        self.last_partial_ms = 0.0
        self.stage = 0  # finals given so far (a reopened turn has two)
        self.refining: Future[str] | None = None
        self.last_final = ""

    def _item(self) -> tuple[str, str]:
        if self.item is None:
            self.item = self.asr.take()
        return self.item

    def feed(self, pcm: np.ndarray) -> None:
        self.fed_ms += 1000.0 * len(pcm) / SR

    def partial_due(self) -> bool:
        return self.fed_ms - self.last_partial_ms >= self.interval_ms

    def partial(self, at_pause: bool = False) -> Transcript:
        time.sleep(self.asr.compute_s)
        self.last_partial_ms = self.fed_ms
        self.asr.heard_ms.append(self.fed_ms)
        text = self._item()[2 * self.stage]
        ms = self.asr.compute_s * 1000
        return Transcript(
            text, text, False, self.fed_ms, ms, logprob=self.asr.logprob, slower=self._slower(text)
        )

    def _slower(self, text: str) -> Callable[[], tuple[str, ...]] | None:
        heard = self.asr.slower.get(text)
        if heard is None:
            return None

        def hear() -> tuple[str, ...]:
            if isinstance(heard, Exception):
                raise heard
            return heard

        return hear

    def refinement(self) -> Future[str] | None:
        """As StreamingTranscriber.refinement: the whole pass over a long turn, 0.2 s later."""
        if self.last_final not in self.asr.refine:
            return None
        if self.refining is None:
            fut: Future[str] = Future()
            refined = self.asr.refine[self.last_final]

            def run() -> None:
                if fut.set_running_or_notify_cancel():  # as the Refiner: a cancelled one is skipped
                    fut.set_result(refined)

            timer = threading.Timer(self.asr.refine_s, run)
            timer.daemon = True  # a refinement nobody waits for holds up no exit
            timer.start()
            self.refining = fut
        return self.refining

    def final(self) -> Transcript:
        time.sleep(self.asr.compute_s)
        item = self._item()
        text = self.last_final = item[2 * self.stage + 1]
        self.stage = min(self.stage + 1, len(item) // 2 - 1)
        logprob = self.asr.logprob if text else None
        ms = self.asr.compute_s * 1000
        return Transcript(
            text, text, True, self.fed_ms, ms, logprob=logprob, slower=self._slower(text)
        )


@dataclass
class Stats:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    new_tokens: int = 0
    forwards: int = 0
    ttft_ms: float = 0.0
    total_ms: float = 0.0
    tokens_per_s: float = 0.0
    stop_reason: str = ""


class FakeGeneration:
    def __init__(
        self,
        words: list[str],
        cancel: threading.Event | None,
        step_s: float,
        superseded_after: int | None = None,
        first_forward: Callable[[], None] | None = None,
    ):
        self.words, self.cancel, self.step_s = words, cancel, step_s
        self.first_forward = first_forward  # what the real one's first forward hands out
        self.text = ""
        self.token_ids: list[int] = []
        self.stats = Stats()
        self.closed = False
        # As the engine's when another LM job takes the session's cache: after this many
        # pieces the generation is superseded, and iterated on it stops.
        self.superseded_after = superseded_after
        self.superseded = False

    def close(self, reason: str = "closed") -> None:
        self.stats.stop_reason = self.stats.stop_reason or reason
        self.closed = True

    def __iter__(self) -> Iterator[str]:
        t0 = time.monotonic()
        for i, word in enumerate(self.words):
            time.sleep(self.step_s)  # one "forward"
            if i == 0 and self.first_forward is not None:
                self.first_forward()
            self.stats.forwards += 1
            if self.closed:
                return
            if self.superseded or (self.cancel is not None and self.cancel.is_set()):
                self.stats.stop_reason = "cancelled"
                return
            piece = word if i == 0 else " " + word
            self.text += piece
            self.token_ids.append(1000 + i)
            self.stats.new_tokens += 1
            if i == 0:
                self.stats.ttft_ms = (time.monotonic() - t0) * 1000
            self.superseded = self.superseded_after == i + 1
            yield piece
        self.stats.stop_reason = "eos"
        self.stats.total_ms = (time.monotonic() - t0) * 1000


@dataclass
class FakeLM:
    """Answers "You said: <last user message>. <tail>", ``words_per_step`` words a forward
    (a hybrid step hands out several tokens at once)."""

    tail: str = "That is a fine question, and here is a longer answer to it."
    template: str = "You said: {user}. {tail}"
    step_s: float = 0.01
    words_per_step: int = 1
    calls: list[dict] = field(default_factory=list)
    prefills: list[list[dict]] = field(default_factory=list)
    superseded_after: int | None = None  # the first generation's, see FakeGeneration
    # The tail of answers to any other question than the first one (None: ``tail``): a long
    # first answer to barge into, then a short one that need not play for seconds.
    later_tail: str | None = None
    scored_alone: int = 0  # end_of_turn() calls: end-of-turn scores not read by a generation
    cfg: LMConfig = field(default_factory=LMConfig)

    class tokenizer:  # noqa: N801 - mirrors LM.tokenizer
        @staticmethod
        def encode(text: str) -> list[int]:
            return list(range(len(text.split())))

    def session(self) -> FakeLM:
        return self

    def configure(self, cfg: LMConfig) -> None:
        self.cfg = cfg

    def parameter_count(self) -> int:
        return 135_000_000

    def end_of_turn(self, messages, *, cancel=None) -> float:
        """Likely complete when the user's text ends in . ? ! (the real LM's score, roughly)."""
        self.scored_alone += 1
        return self._p_end(messages)

    @staticmethod
    def _p_end(messages) -> float:
        return 0.9 if messages[-1]["content"].rstrip().endswith((".", "?", "!")) else 0.001

    def prefill(self, messages, *, cancel=None) -> int:
        self.prefills.append(messages)
        return len(messages)

    def generate(
        self, messages, *, cancel=None, max_new_tokens=None, decoder=None, drafts=None,
        end_score=None, turn_state=None,
    ):  # fmt: skip
        self.calls.append({"messages": messages, "drafts": drafts, "scored": bool(end_score)})
        # No hidden state: tools are chosen by name, on the first forward as the real one
        # does, just before the end-of-turn score where there is one.
        choose = None if turn_state is None else lambda: turn_state(None)
        if end_score is not None:  # the real one: on the first forward, before any text
            if choose is not None:
                choose()
                choose = None
            end_score(self._p_end(messages))
        user = messages[-1]["content"].rstrip(".?!")
        first = self.calls[0]["messages"][-1]["content"]
        later = self.later_tail is not None and messages[-1]["content"] != first
        tail = self.later_tail if later else self.tail
        words = self.template.format(user=user, tail=tail).split()
        words = words[: max_new_tokens or len(words)]
        k = self.words_per_step
        steps = [" ".join(words[i : i + k]) for i in range(0, len(words), k)]
        after = self.superseded_after if len(self.calls) == 1 else None
        return FakeGeneration(steps, cancel, self.step_s, after, choose)


class FakeTTS:
    """100 ms PCM pieces, ``ms_per_word`` of audio per word, a little compute per piece."""

    sample_rate_hz = 22050

    def __init__(self, ms_per_word: int = 200, compute_s: float = 0.005):
        self.ms_per_word, self.compute_s = ms_per_word, compute_s

    def synthesize(self, text: str, cancel: threading.Event | None = None) -> Iterator[np.ndarray]:
        total = len(text.split()) * self.ms_per_word * self.sample_rate_hz // 1000
        piece = self.sample_rate_hz // 10
        t = np.arange(piece) / self.sample_rate_hz
        tone = (3000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
        for start in range(0, total, piece):
            if cancel is not None and cancel.is_set():
                return
            time.sleep(self.compute_s)
            yield tone[: min(piece, total - start)]


class FakeChunker:
    """Clause cuts after , . ? ! (the real ClauseChunker is tested in tests/audio)."""

    def __init__(self) -> None:
        self.buf = ""

    def push(self, text: str) -> list[str]:
        self.buf += text
        out = []
        while m := re.search(r"[,.?!:](\s)", self.buf):
            out.append(self.buf[: m.end()].strip())
            self.buf = self.buf[m.end() :]
        return out

    def flush(self) -> list[str]:
        out, self.buf = ([self.buf.strip()] if self.buf.strip() else []), ""
        return out


class FakeComponents(Components):
    def __init__(self, script, **kw):
        asr = FakeASR(
            script, kw.pop("asr_s", 0.03), kw.pop("refine", None), kw.pop("asr_logprob", None),
            kw.pop("slower", None),
        )  # fmt: skip
        super().__init__(lm=FakeLM(**kw.pop("lm", {})), asr=asr, tts=FakeTTS(**kw))
        self.over_answer: list[bool] = []  # each new transcriber's, in order

    def new_transcriber(self, cfg, over_answer=False):
        self.over_answer.append(over_answer)
        return FakeTranscriber(self.asr, cfg.partial_interval_ms)

    def new_chunker(self, cfg):
        return FakeChunker()

    def lm_params(self) -> int:
        return 135_000_000

    def count_tokens(self, text: str) -> int:
        return len(text.split())


class ClockSink:
    """A sink that "plays" in real time: played_samples follows the wall clock, a flush drops
    the unplayed rest, ``played`` keeps exactly the samples that were played."""

    def __init__(self, sample_rate_hz: int = 22050, buffer_ms: int = 40):
        self.sample_rate_hz = sample_rate_hz
        self.buffer = sample_rate_hz * buffer_ms // 1000
        self._queue: list[np.ndarray] = []
        self._written = 0
        self._played = 0
        self._t = now_ms()
        self.flushes: list[float] = []

    def _advance(self) -> None:
        t = now_ms()
        self._played = min(
            self._written, self._played + int((t - self._t) * self.sample_rate_hz / 1000)
        )
        self._t = t

    @property
    def played_samples(self) -> int:
        self._advance()
        return self._played

    async def write(self, pcm: np.ndarray) -> None:
        self._advance()
        self._written += len(pcm)
        while self._written - self.played_samples > self.buffer:
            await asyncio.sleep(0.005)

    def flush(self) -> None:
        self._advance()
        self._written = self._played
        self.flushes.append(now_ms())

    async def drain(self) -> None:
        while self.played_samples < self._written:
            await asyncio.sleep(0.005)

    async def aclose(self) -> None:
        return None
