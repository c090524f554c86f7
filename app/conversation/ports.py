"""What a conversation needs of its models: the contracts app/ is written against.

model/ and audio/ implement them (``LM``, ``ChatSession``, ``Generation``, ``WhisperASR``,
``StreamingTranscriber``, ``PiperTTS``, ``ClauseChunker``); tests/app/fakes.py implements them
without models. The sink's contract is audio/sinks.py's ``Sink``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import torch

    from dllm_voice.audio.asr import Transcript
    from dllm_voice.audio.config import TTSConfig
    from dllm_voice.audio.refiner import Refiner
    from dllm_voice.model.config import LMConfig
    from dllm_voice.model.engine import GenerationStats

Messages = Sequence[dict[str, str]]
PCM16 = npt.NDArray[np.int16]


class Generation(Protocol):
    """An answer being decoded: iterate it for committed text pieces."""

    text: str
    token_ids: list[int]
    stats: GenerationStats

    @property
    def superseded(self) -> bool: ...
    def __iter__(self) -> Iterator[str]: ...
    def close(self, reason: str = "closed") -> None: ...


class ChatSession(Protocol):
    """One conversation's KV cache; not thread-safe: one LM thread per conversation."""

    @property
    def cfg(self) -> LMConfig: ...
    def configure(self, cfg: LMConfig) -> None: ...

    def prefill(self, messages: Messages, *, cancel: threading.Event | None = None) -> int: ...
    def end_of_turn(
        self, messages: Messages, *, cancel: threading.Event | None = None
    ) -> float | None: ...
    def generate(
        self,
        messages: Messages,
        *,
        cancel: threading.Event | None = None,
        max_new_tokens: int | None = None,
        drafts: list[int] | None = None,
        end_score: Callable[[float | None], None] | None = None,
        turn_state: Callable[[torch.Tensor | None], None] | None = None,
    ) -> Generation: ...
    def extend(
        self, ids: list[int], *, cancel: threading.Event | None = None
    ) -> torch.Tensor | None: ...


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    def apply_chat(self, messages: Messages, add_generation_prompt: bool = True) -> list[int]: ...
    @property
    def token_bytes(self) -> list[bytes]: ...


class LanguageModel(Protocol):
    @property
    def tokenizer(self) -> Tokenizer: ...

    def session(self) -> ChatSession: ...
    def parameter_count(self) -> int: ...


class Transcriber(Protocol):
    """One turn's streaming ASR state; called from the ASR worker only."""

    def feed(self, pcm16k: PCM16) -> None: ...
    def partial_due(self) -> bool: ...
    def partial(self, at_pause: bool = False) -> Transcript: ...
    def close_segment(self) -> Transcript: ...
    def final(self) -> Transcript: ...
    def refinement(self) -> Future[str] | None: ...


class Recognizer(Protocol):
    """The shared speech recognizer that transcribers run on."""

    refiner: Refiner | None

    def transcribe(self, pcm16k: PCM16, *, final: bool) -> Transcript: ...


class Synthesizer(Protocol):
    cfg: TTSConfig
    sample_rate_hz: int

    def synthesize(self, text: str, cancel: threading.Event | None = None) -> Iterator[PCM16]: ...


class Chunker(Protocol):
    """Cuts a text stream into speakable clauses."""

    def push(self, text: str) -> list[str]: ...
    def flush(self) -> list[str]: ...
