"""Configuration of the conversation pipeline: turn-taking, speculation, barge-in, trace.

Two frozen dataclasses, defaults in code; the lead's ``app/config.py`` nests them in the root
``Config`` as ``.conversation`` and ``.trace``. Range and choice constraints live in field
metadata so the config loader can validate a YAML file before anything is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
)


@dataclass(frozen=True)
class ConversationConfig:
    """Turn-taking: what the agent is, what it remembers, when it starts and stops talking."""

    system_prompt: str = field(
        default=DEFAULT_SYSTEM_PROMPT, metadata={"help": "system message of every conversation"}
    )
    history_tokens: int = field(
        default=1024,
        metadata={
            "min": 0,
            "max": 1_000_000,
            "help": "token budget of past turns sent to the LM; the oldest turns go first",
        },
    )
    history: str = field(
        default="auto",
        metadata={
            "choices": ("auto", "full", "follow_up", "none"),
            "help": "past turns in each prompt: full = all that fit history_tokens; follow_up "
            "= the last follow_up_turns exchanges, only when the new turn refers back ('how big "
            "is it?'); auto = follow_up for models under 1B parameters, else full",
        },
    )
    follow_up_turns: int = field(
        default=1,
        metadata={"min": 1, "max": 100, "help": "exchanges a follow-up turn gets (history)"},
    )
    max_spoken_sentences: int = field(
        default=3,
        metadata={
            "min": 0,
            "max": 100,
            "help": "end each answer after this many sentences; the LM stops there (0 = "
            "no limit: lm.max_new_tokens only)",
        },
    )
    speculation: bool = field(
        default=True,
        metadata={"help": "start answering on a pause, from the stable partial transcript"},
    )
    speculate_on_last_partial: bool = field(
        default=False,
        metadata={
            "help": "at a pause, guess at once from the latest partial instead of waiting "
            "for a fresh ASR pass (right 2 of 12 times in bench/voice.py; costs CPU)"
        },
    )
    end_of_turn: str = field(
        default="adaptive",
        metadata={
            "choices": ("adaptive", "fixed"),
            "help": "adaptive: at each pause the LM scores P(the user's turn is complete) "
            "from the transcript and the turn ends after end_complete_ms, end_incomplete_ms "
            "or vad.speech_end_ms of silence; fixed: always vad.speech_end_ms",
        },
    )
    end_likely: float = field(
        default=0.03,
        metadata={
            "min": 0.0,
            "max": 1.0,
            "help": "P(end of turn) at or above which the turn ends after end_complete_ms",
        },
    )
    end_unlikely: float = field(
        default=0.002,
        metadata={
            "min": 0.0,
            "max": 1.0,
            "help": "P(end of turn) below which the endpointer waits end_incomplete_ms",
        },
    )
    end_audio: bool = field(
        default=True,
        metadata={
            "help": "adaptive end of turn also hears the speech: a last word that does not "
            "sound like a sentence's end (audio/prosody.py, ~2 ms a pause) makes the turn "
            "incomplete unless the LM is sure of its end (end_audio_gate), unsure if it is: "
            "Whisper completes cut speech on its own ('How far is the' -> 'How far is that?')"
        },
    )
    end_audio_cut: float = field(
        default=0.15,
        metadata={
            "min": 0.0,
            "max": 1.0,
            "help": "with end_audio, the speech's P(end of turn) below which the endpointer "
            "waits end_incomplete_ms (0.15: 2% of the training set's complete clips)",
        },
    )
    end_audio_gate: float = field(
        default=0.3,
        metadata={
            "min": 0.0,
            "max": 1.0,
            "help": "the LM's P(end of turn) at or above which neither the speech's score "
            "(with end_audio) nor a transcript trailing off in '...' makes the turn incomplete "
            "(held-out speech: 1.3% more complete clips wait 1.3 s longer at 0.3, 3.8% "
            "ungated; bench/end_of_turn.py --spoken)",
        },
    )
    end_asr_logprob: float = field(
        default=-0.5,
        metadata={
            "min": -100.0,
            "max": 0.0,
            "help": "Whisper's mean log-probability per token of the pause's transcript "
            "below which an LM score between end_unlikely and end_likely (unsure) makes the "
            "turn incomplete: Whisper fills cut speech with words it barely heard ('How many "
            "legs does a' -> 'How many lengths do I need?', -0.66; clear questions -0.05 to "
            "-0.3): cut heads projected premature 4.4 -> 2.8 % on bench/voice.py's clips, "
            "10.9 -> 10.0 % in held-out voices, 2 of 120 and 2 of 111 complete clips wait 1 s "
            "longer (bench/end_of_turn.py --spoken); -100 = off",
        },
    )
    end_complete_ms: int = field(
        default=200,
        metadata={
            "min": 30,
            "max": 10000,
            "help": "silence that ends a turn the LM scores likely complete",
        },
    )
    end_incomplete_ms: int = field(
        default=1500,
        metadata={
            "min": 30,
            "max": 10000,
            "help": "silence that ends a turn the LM scores likely incomplete ('What is "
            "the capital of')",
        },
    )
    reopen_ms: int = field(
        default=800,
        metadata={
            "min": 0,
            "max": 10000,
            "help": "speech this soon after the adaptive rule ended a turn continues that "
            "turn: its answer is cancelled and the two parts get one answer",
        },
    )
    speculation_min_words: int = field(
        default=2,
        metadata={"min": 1, "max": 50, "help": "stable words needed before speculating"},
    )
    speculation_tts: bool = field(
        default=True,
        metadata={"help": "also synthesize the speculative first clause (audio held)"},
    )
    first_clause_max_words: int = field(
        default=3,
        metadata={
            "min": 0,
            "max": 100,
            "help": "cut the answer's first TTS chunk at a word boundary after this many words "
            "when no punctuation came yet (0 = only at punctuation); Piper's first audio grows "
            "little with the clause (decoder in chunks, Zen 4: 2 words 29-43 ms, 3 33-41, "
            "4 38-50, 6 43-60; bench/speech.py)",
        },
    )
    barge_in: bool = field(
        default=True, metadata={"help": "let the user interrupt the agent by talking"}
    )
    barge_in_min_speech_ms: int = field(
        default=90,
        metadata={
            "min": 0,
            "max": 2000,
            "help": "user speech (from its onset) that pauses the agent's playback at once",
        },
    )
    barge_in_confirm_ms: int = field(
        default=300,
        metadata={
            "min": 0,
            "max": 5000,
            "help": "user speech that cancels the answer; shorter bursts resume playback",
        },
    )
    echo_guard_ms: int = field(
        default=0,
        metadata={
            "min": 0,
            "max": 2000,
            "help": "extra speech required while the agent's audio plays (speakers + mic "
            "without echo cancellation); 0 for headsets, files and the web client",
        },
    )
    backchannels: tuple[str, ...] = field(
        default=DEFAULT_BACKCHANNELS,
        metadata={"help": "utterances that never interrupt the agent and never start a turn"},
    )


@dataclass(frozen=True)
class TraceConfig:
    """The latency trace: one JSONL event per stage of every turn."""

    enabled: bool = field(default=True, metadata={"help": "write the latency trace"})
    path: str = field(
        default="",
        metadata={
            "help": "JSONL file, or folder for serve's serve-<session id>.jsonl ('' = "
            "trace-<UTC time>.jsonl in $XDG_STATE_HOME/dllm-voice/traces, ~/.local/state/...)"
        },
    )
    otel: bool = field(
        default=False,
        metadata={
            "help": "also export each answer's stages as OpenTelemetry spans, as the standard "
            "OTEL_* environment variables say (OTLP over HTTP to localhost:4318 by default; "
            "needs pip install 'dllm-voice[otel]'; docs/deploy.md)"
        },
    )
