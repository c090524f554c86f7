"""Configuration of the conversation pipeline: turn-taking, speculation, barge-in, trace.

Frozen dataclasses, defaults in code; ``app/config.py`` nests them in the root ``Config`` as
``.conversation``, ``.end_of_turn``, ``.speculation``, ``.barge_in`` and ``.trace``. Each field
is a ``setting`` (dllm_voice/settings.py) whose metadata holds its range or choices, so the
config loader validates a YAML file before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass

from dllm_voice.settings import setting

# Measured with SmolLM2-135M on 3 questions: "friendly ... short spoken sentences, without lists
# or markdown" drifted into French ("Le Grand Paris is the capital of France."); this one
# answers "The capital of France is Paris." / "A spider has eight legs."
DEFAULT_SYSTEM_PROMPT = "You are a helpful voice assistant. Reply briefly in plain English."

# Words a listener says to show they are following, not to take the turn. Compared after
# normalization (lower case, punctuation and hyphens removed).
DEFAULT_BACKCHANNELS = (
    "mm hmm",
    "mhm",
    "mm",
    "hmm",
    "uh huh",
    "uh",
    "um",
    "ah",
    "oh",
    "yeah",
    "yes",
    "yep",
    "right",
    "okay",
    "ok",
    "sure",
    "i see",
    "got it",
    "wow",
    "really",
    "cool",
    "nice",
    "great",
    "alright",
    "all right",
    "gotcha",
    "interesting",
    "exactly",
    "makes sense",
    "make sense",
)


HISTORIES = ("auto", "full", "follow_up", "none")
END_MODES = ("adaptive", "fixed")


@dataclass(frozen=True)
class ConversationConfig:
    """What the agent is, what it remembers, how long it talks."""

    system_prompt: str = setting(DEFAULT_SYSTEM_PROMPT, "system message of every conversation")
    history_tokens: int = setting(
        1024, "token budget of past turns sent to the LM; the oldest go first", min=0, max=1_000_000
    )
    history: str = setting(
        "auto", "past turns in the prompt; auto = follow_up under 1B, else full", choices=HISTORIES
    )
    follow_up_turns: int = setting(1, "exchanges a follow-up turn gets (history)", min=1, max=100)
    max_spoken_sentences: int = setting(
        3, "sentences per answer; the LM stops there (0 = no limit)", min=0, max=100
    )
    first_clause_max_words: int = setting(
        3, "first TTS chunk's most words if no punctuation came (0 = no limit)", min=0, max=100
    )
    backchannels: tuple[str, ...] = setting(
        DEFAULT_BACKCHANNELS, "utterances that never interrupt the agent and never start a turn"
    )


@dataclass(frozen=True)
class EndOfTurnConfig:
    """When the user's turn ends: the silence after it, from how complete it sounds."""

    mode: str = setting(
        "adaptive", "adaptive: the LM's P(complete) picks the ending silence", choices=END_MODES
    )
    likely: float = setting(
        0.03, "P(end of turn) from which the turn ends after complete_ms", min=0.0, max=1.0
    )
    unlikely: float = setting(
        0.002, "P(end of turn) below which the turn waits incomplete_ms", min=0.0, max=1.0
    )
    audio: bool = setting(
        True, "also hear the speech: a last word that does not sound final means incomplete"
    )
    audio_cut: float = setting(
        0.15, "the speech's P(end of turn) below which the turn is incomplete", min=0.0, max=1.0
    )
    audio_gate: float = setting(
        0.3, "LM's P(end) at which the speech and a trailing '...' are ignored", min=0.0, max=1.0
    )
    asr_logprob: float = setting(
        -0.5, "ASR logprob below which an unsure LM score waits (-100 = off)", min=-100.0, max=0.0
    )
    complete_ms: int = setting(
        180, "silence that ends a turn the LM scores likely complete", min=30, max=10000
    )
    incomplete_ms: int = setting(
        1500,
        "silence that ends a turn whose words say more is coming ('...', 'the', a lead-in)",
        min=30,
        max=10000,
    )
    doubt_ms: int = setting(
        900,
        "silence that ends another turn called incomplete (a low score, unclear words, speech "
        "that sounds cut)",
        min=30,
        max=10000,
    )
    reopen_ms: int = setting(
        800, "speech this soon after an adaptive end continues the turn", min=0, max=10000
    )
    hold_ms: int = setting(
        750,
        "silence before an answer is heard if the LM was under audio_gate (0 = off)",
        min=0,
        max=10000,
    )
    audio_final: float = setting(
        0.7, "the speech's P(end) from which an end skips hold_ms (1.01 = off)", min=0.0, max=1.01
    )


@dataclass(frozen=True)
class SpeculationConfig:
    """Answering at a pause, before the turn has ended."""

    enabled: bool = setting(True, "start answering on a pause, from the stable partial transcript")
    on_last_partial: bool = setting(
        True, "at a pause, guess at once from the latest partial; the pause's pass confirms it"
    )
    min_words: int = setting(2, "stable words needed before speculating", min=1, max=50)
    tts: bool = setting(True, "also synthesize the speculative first clause (audio held)")


@dataclass(frozen=True)
class BargeInConfig:
    """The user interrupting the agent by talking."""

    enabled: bool = setting(True, "let the user interrupt the agent by talking")
    min_speech_ms: int = setting(
        90, "user speech (from its onset) that pauses the agent's playback at once", min=0, max=2000
    )
    confirm_ms: int = setting(
        300, "user speech that cancels the answer; shorter bursts resume playback", min=0, max=5000
    )
    echo_guard_ms: int = setting(
        0, "extra speech over speakers without echo cancellation; 0 for headsets", min=0, max=2000
    )


@dataclass(frozen=True)
class TraceConfig:
    """The latency trace: one JSONL event per stage of every turn."""

    enabled: bool = setting(True, "write the latency trace")
    path: str = setting(
        "", "JSONL file, or a folder for serve; '' = trace-<UTC time>.jsonl in $XDG_STATE_HOME"
    )
    otel: bool = setting(
        False, "also export each answer's stages as OpenTelemetry spans, as OTEL_* variables say"
    )
