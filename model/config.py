"""LM configuration: the `lm:` section of config.yaml as one frozen dataclass.

Defaults live here; the lead's loader validates values against the field metadata
(`choices`, `min`, `max`). The hybrid-decoder issue adds its own fields (draft_len, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LMConfig:
    """The language model: weights, decoder and sampling."""

    path: str = field(
        default="",
        metadata={
            "help": "weights: '' = bundled SmolLM2-135M-Instruct GGUF, or a .gguf file, "
            "or a Hugging Face dir (config.json + *.safetensors)"
        },
    )
    device: str = field(
        default="auto",
        metadata={
            "help": "compute device (auto = cuda if available)",
            "choices": ("auto", "cpu", "cuda"),
        },
    )
    dtype: str = field(
        default="auto",
        metadata={
            "help": "weight/activation dtype (auto = float32 on cpu, bfloat16 on cuda)",
            "choices": ("auto", "float32", "bfloat16", "float16"),
        },
    )
    decoder: str = field(
        default="hybrid",
        metadata={"help": "decoding mode", "choices": ("ar", "hybrid", "parallel")},
    )
    max_new_tokens: int = field(
        default=160, metadata={"help": "answer length cap in tokens", "min": 1, "max": 8192}
    )
    loop_guard: bool = field(
        default=True,
        metadata={
            "help": "end an answer that starts repeating itself at the last sentence end "
            "before the repetition (model/repeat.py)"
        },
    )
    temperature: float = field(
        default=0.0, metadata={"help": "sampling temperature, 0 = greedy", "min": 0.0, "max": 5.0}
    )
    top_p: float = field(
        default=1.0, metadata={"help": "nucleus sampling mass", "min": 0.01, "max": 1.0}
    )
    seed: int = field(default=0, metadata={"help": "sampling seed", "min": 0})
    context_tokens: int = field(
        default=2048,
        metadata={
            "help": "context budget; oldest non-system turns are dropped beyond it",
            "min": 64,
            "max": 131072,
        },
    )
    threads: int = field(
        default=0,
        metadata={
            "help": "torch CPU threads, 0 = torch default",
            "min": 0,
            "max": 256,
        },
    )
    # --- hybrid / parallel decoders (model/hybrid.py) ------------------------------------------
    draft_len: int = field(
        default=12,
        metadata={
            "help": "most draft tokens (tree nodes) verified per forward, and deepest draft "
            "(the drafter fills up to its block, prompt lookup the rest)",
            "min": 1,
            "max": 32,
        },
    )
    draft_branch: int = field(
        default=3,
        metadata={
            "help": "drafter candidates per draft position in the draft tree (1 = a chain)",
            "min": 1,
            "max": 8,
        },
    )
    threshold: float = field(
        default=0.9,
        metadata={
            "help": "parallel: commit drafts with confidence >= this without verification "
            "(1.0 = never, i.e. exactly hybrid)",
            "min": 0.0,
            "max": 1.0,
        },
    )
    drafter: str = field(
        default="",
        metadata={
            "help": "drafter adapter: '' = bundled model/adapters/drafter.safetensors (with the "
            "bundled model, lm.path ''), 'none' = free drafts only, or a .safetensors path"
        },
    )
    ngram: str = field(
        default="",
        metadata={
            "help": "n-gram store of the base's own answers (free drafts): '' = bundled "
            "model/adapters/ngram.safetensors (with the bundled model, lm.path ''), 'none' = off, "
            "or a .safetensors path"
        },
    )
    lookup_ngram: int = field(
        default=8,
        metadata={
            "help": "prompt lookup: longest n-gram matched (0 = no lookup)",
            "min": 0,
            "max": 8,
        },
    )
    refine_len: int = field(
        default=16,
        metadata={
            "help": "refinement: earlier-answer tokens verified per forward",
            "min": 1,
            "max": 64,
        },
    )
    row_cost: float = field(
        default=-1.0,
        metadata={
            "help": "cost of one more verify row as a fraction of a 1-row forward, which sizes "
            "each draft tree; -1 = auto (measured per CPU kernel, 0 on CUDA: model/hybrid.py)",
            "min": -1.0,
            "max": 1.0,
        },
    )
