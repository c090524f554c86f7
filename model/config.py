"""LM configuration: the `lm:` section of config.yaml as one frozen dataclass.

Defaults live here; each field is a ``setting`` (dllm_voice/settings.py) whose metadata
(``choices``, ``min``, ``max``) the app's loader validates values against.
"""

from __future__ import annotations

from dataclasses import dataclass

from dllm_voice.settings import setting

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class LMConfig:
    """The language model: weights, decoder and sampling."""

    path: str = setting(
        "", "weights: '' = bundled SmolLM2-135M-Instruct GGUF, a .gguf file or a Hugging Face dir"
    )
    device: str = setting(
        "auto", "compute device (auto = cuda if available)", choices=("auto", "cpu", "cuda")
    )
    dtype: str = setting("auto", "auto = float32 on cpu, bfloat16 on cuda", choices=DTYPES)
    decoder: str = setting("hybrid", "decoding mode", choices=("ar", "hybrid", "parallel"))
    max_new_tokens: int = setting(160, "answer length cap in tokens", min=1, max=8192)
    loop_guard: bool = setting(
        True, "end an answer that starts repeating itself at the last sentence end before it"
    )
    temperature: float = setting(0.0, "sampling temperature, 0 = greedy", min=0.0, max=5.0)
    top_p: float = setting(1.0, "nucleus sampling mass", min=0.01, max=1.0)
    seed: int = setting(0, "sampling seed", min=0)
    context_tokens: int = setting(
        2048, "context budget; oldest non-system turns are dropped beyond it", min=64, max=131072
    )
    threads: int = setting(0, "torch CPU threads, 0 = torch default", min=0, max=256)
    head_sketch: bool = setting(
        True, "greedy steps find the next token through a 4-bit sketch of a large head (100K+ "
        "rows, CPU), the same token from ~half its bytes"
    )  # fmt: skip
    # --- hybrid / parallel decoders (model/hybrid.py) ------------------------------------------
    draft_len: int = setting(
        12, "draft tokens (tree nodes) verified per forward, and the deepest draft", min=1, max=32
    )
    draft_branch: int = setting(
        3, "drafter candidates per draft position (1 = a chain)", min=1, max=8
    )
    threshold: float = setting(
        0.95, "parallel: commit drafts this confident unverified (1.0 = hybrid; 0.95: the best "
        "weighted agreement x tokens/forward)", min=0.0, max=1.0,
    )  # fmt: skip
    drafter: str = setting(
        "", "drafter: '' = built by lab.drafts, else bundled; 'none' = free drafts; or a path"
    )
    ngram: str = setting(
        "", "n-gram store: '' = built by lab.drafts, else bundled; 'none' = off; or a path"
    )
    lookup_ngram: int = setting(
        8, "prompt lookup: longest n-gram matched (0 = no lookup)", min=0, max=8
    )
    refine_len: int = setting(
        16, "refinement: earlier-answer tokens verified per forward", min=1, max=64
    )
    row_cost: float = setting(
        -1.0, "verify row cost as a fraction of a 1-row forward; -1 = auto", min=-1.0, max=1.0
    )
    drafter_pass: str = setting(
        "auto", "hybrid's drafter pass; auto = where it pays on this kernel or lm.row_cost is set "
        "(parallel: always)", choices=("auto", "on", "off"),
    )  # fmt: skip
    drafter_skip: float = setting(
        0.6, "skip the drafter pass where a free draft is this sure of the next token (0.6: the "
        "fastest of 0.4-0.8)", min=0.0, max=1.0,
    )  # fmt: skip
    profile: str = setting(
        "", "decoding profile: '' = this machine's from `main.py tune` if any, 'none', or a .json"
    )
