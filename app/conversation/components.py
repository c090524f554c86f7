"""The models a voice session needs, loaded once, and their worker threads.

Speech recognition and synthesis each have one worker thread shared by every session, which
runs first what someone waits on (scheduler.py): on 2 CPU cores a second thread per model
only fights the first, and a model call is never re-entered from two threads. The LM has no
worker here: each conversation runs its LM jobs in its own thread (session.py) and the
LM's StepBatcher runs concurrent sessions' decoding steps as one forward (model/batch.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from dllm_voice import cores
from dllm_voice.app.conversation.ports import (
    Chunker,
    LanguageModel,
    Recognizer,
    Synthesizer,
    Transcriber,
)
from dllm_voice.app.conversation.scheduler import Worker

if TYPE_CHECKING:
    from dllm_voice.app.config import Config
    from dllm_voice.app.tools.toolset import Toolset
    from dllm_voice.audio.config import ASRConfig, TTSConfig
    from dllm_voice.audio.prosody import TurnEndAudio

SMALL_LM_PARAMS = 1_000_000_000


@dataclass
class Components:
    """The loaded models and their worker threads, shared by all sessions."""

    lm: LanguageModel
    asr: Recognizer
    tts: Synthesizer
    turn_audio: TurnEndAudio | None = None  # the end of turn heard in the speech
    tools: Toolset | None = None  # the tools the agent may call; None: it calls none
    asr_worker: Worker = field(default_factory=lambda: Worker("asr"))
    tts_worker: Worker = field(default_factory=lambda: Worker("tts"))

    @classmethod
    def load(cls, cfg: Config, warmup: bool = True, tts_rate_hz: int = 0) -> Components:
        """Load LM, ASR and TTS from the root config; ``warmup`` runs each once (first calls of
        onnxruntime / CTranslate2 / torch are 2-5x slower and would land in the first turn).
        ``tts_rate_hz``: synthesize at this rate (the speaker's), 0 = the voice's own."""
        from dllm_voice.app.tools.toolset import Toolset
        from dllm_voice.audio.asr import WhisperASR
        from dllm_voice.audio.prosody import TurnEndAudio
        from dllm_voice.audio.tts import PiperTTS
        from dllm_voice.model.engine import LM

        cores.one_blas_thread()
        lm = LM.load(cfg.lm)
        tools = Toolset.load(cfg.tools, lm.parameter_count())  # none when tools.enabled is off
        comps = cls(lm=lm, asr=WhisperASR(cfg.asr), tts=PiperTTS(cfg.tts, tts_rate_hz), tools=tools)
        if cfg.end_of_turn.audio:
            comps.turn_audio = TurnEndAudio()
        if warmup:
            comps.warmup()
        return comps

    def warmup(self) -> None:
        pcm = next(iter(self.tts.synthesize("Hello there.")), np.zeros(1600, np.int16))
        from dllm_voice.audio.resample import resample

        speech = resample(pcm, self.tts.sample_rate_hz, 16000)
        self.asr.transcribe(speech, final=True)
        if self.turn_audio is not None:  # its first score took 67 ms in a turn, the next 2-6 ms
            self.turn_audio.score(speech)
        gen = self.lm.session().generate([{"role": "user", "content": "Hi"}], max_new_tokens=2)
        for _ in gen:
            pass

    def new_transcriber(self, cfg: ASRConfig, over_answer: bool = False) -> Transcriber:
        """Per-turn streaming ASR state over the shared Whisper model; ``over_answer``: the
        turn's speech began over the agent's answer (StreamingTranscriber.over_answer)."""
        from dllm_voice.audio.asr import WhisperASR
        from dllm_voice.audio.transcriber import StreamingTranscriber

        assert isinstance(self.asr, WhisperASR), "a transcriber runs on the Whisper model"
        refiner = self.asr.refiner if cfg.refine_long_turns else None
        return StreamingTranscriber(self.asr, cfg, refiner, over_answer)

    def new_chunker(self, cfg: TTSConfig) -> Chunker:
        """Cuts the LM's text stream into speakable clauses."""
        from dllm_voice.audio.tts import ClauseChunker

        return ClauseChunker.from_config(cfg)

    def lm_params(self) -> int:
        return self.lm.parameter_count()

    def history_mode(self, mode: str) -> str:
        """conversation.history for this LM: "auto" gives a model under 1B parameters only the
        turns a follow-up refers to (the bundled 135M one copies earlier answers otherwise)."""
        if mode != "auto":
            return mode
        return "follow_up" if self.lm_params() < SMALL_LM_PARAMS else "full"

    def count_tokens(self, text: str) -> int:
        return len(self.lm.tokenizer.encode(text))

    def close(self) -> None:
        self.asr_worker.close()
        self.tts_worker.close()
