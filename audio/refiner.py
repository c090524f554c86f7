"""Whole passes over long turns, off the critical path: the `Refiner`.

A turn heard in segments lacks each segment's context; the Refiner transcribes it again in one
pass on a second copy of the Whisper model whose threads run only when the CPU is otherwise
idle. `StreamingTranscriber` (transcriber.py) asks for those passes and takes their text.
"""

import logging
import math
import os
import queue
import threading
from concurrent.futures import Future

import numpy as np

from dllm_voice.audio.asr import (
    RATE_HZ,
    WINDOW_S,
    WhisperASR,
    WhisperModel,
    transcribe_whole,
)
from dllm_voice.audio.resample import PCM, PCM16, to_float32

log = logging.getLogger(__name__)

_REFINE_WINDOW_MAX_S = 29  # a refinement up to this long is one pass in a window of its size


def _run_when_idle(tids: set[str]) -> None:
    """Put these threads of this process in Linux's idle class: they get a core only when no
    other thread wants it (elsewhere, or without the right, they keep their priority)."""
    for tid in tids:
        try:
            os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError, ValueError):
            return


class Refiner:
    """Whole passes over long turns, one at a time, off the critical path.

    A second copy of the Whisper model (tiny.en int8: ~40 MB) whose CTranslate2 threads are in
    the idle class: a refinement never delays a pass a user is waiting on, and when the CPU is
    busy it simply finishes later (the turn keeps its segments' text until then). Only
    CTranslate2's threads are idle-class (its compute threads, started at the first pass,
    inherit the class from its worker); the Python thread that drives them keeps its priority,
    as a descheduled GIL holder would stall every other thread.
    """

    def __init__(self, asr: WhisperASR) -> None:
        import faster_whisper

        self._language = asr.tok.language_code
        self._asr = asr
        self._beam_size = asr.cfg.beam_size
        # Loaded here, when nothing else starts threads: the new native threads that are not
        # Python's are CTranslate2's for this model.
        before = _native_threads()
        self._model: WhisperModel = faster_whisper.WhisperModel(
            asr.model_dir,
            device=asr.device,
            compute_type=asr.compute_type,
            cpu_threads=asr.cfg.cpu_threads,
        )
        if asr.device == "cpu":
            python = {str(t.native_id) for t in threading.enumerate()}
            _run_when_idle(_native_threads() - before - python)
        self._jobs: queue.SimpleQueue[tuple[Future[str], PCM16]] = queue.SimpleQueue()
        # A daemon: a refinement nobody will read must not hold up the process's exit.
        threading.Thread(target=self._serve, name="asr-refine", daemon=True).start()

    def submit(self, pcm16k: PCM16) -> Future[str]:
        """The text of one whole pass over ``pcm16k``, when the CPU has had time for it."""
        fut: Future[str] = Future()
        self._jobs.put((fut, pcm16k))
        return fut

    def _serve(self) -> None:
        while True:
            fut, pcm = self._jobs.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(self.transcribe(pcm))
            except Exception as e:  # noqa: BLE001 - the turn keeps its segments' text
                log.warning("asr: refining a long turn failed: %s", e)
                fut.set_exception(e)

    def transcribe(self, pcm16k: PCM) -> str:
        """The whole pass submit() runs, here and now (blocking, at this thread's priority)."""
        audio = to_float32(np.asarray(pcm16k))
        if len(audio) > _REFINE_WINDOW_MAX_S * RATE_HZ:
            return transcribe_whole(self._model, audio, self._language, self._beam_size)
        # One window sized to the audio instead of faster-whisper's 30 s: 28 % less CPU, and
        # 4.2 % WER instead of 4.7 % (bench/speech.py --sections long).
        window_s = max(WINDOW_S, math.ceil(len(audio) / RATE_HZ + 0.3))
        text, *_ = self._asr.prompted_pass(self._model, audio, window_s)
        return text


def _native_threads() -> set[str]:
    try:
        return set(os.listdir("/proc/self/task"))
    except OSError:
        return set()
