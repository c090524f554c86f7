"""The shape of a Llama-family model (Llama 2/3, SmolLM2, Mistral, Qwen2): `ModelArgs`, read from
a checkpoint's metadata by model/loader.py or taken from `PRESETS` (the bundled SmolLM2 sizes, and
"tiny" for decoder-logic tests: random weights, milliseconds per forward).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypedDict, Unpack


@dataclass(frozen=True)
class ModelArgs:
    vocab_size: int = 49152
    dim: int = 576
    n_layers: int = 30
    n_heads: int = 9
    n_kv_heads: int = 3
    ffn_dim: int = 1536
    norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    max_seq_len: int = 8192
    tie_embeddings: bool = True
    qkv_bias: bool = False
    head_dim: int = 0  # 0 = dim // n_heads
    # llama3 rope scaling: (factor, low_freq_factor, high_freq_factor, original_max_len); () = none
    rope_llama3: tuple[float, ...] = ()
    arch: str = "llama"

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)
        assert self.n_heads % self.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads"
        assert self.head_dim % 2 == 0, "rotary embeddings need an even head_dim"

    @classmethod
    def preset(cls, name: str, **overrides: Unpack[ArgsOverrides]) -> ModelArgs:
        return replace(PRESETS[name], **overrides)


class ArgsOverrides(TypedDict, total=False):
    """ModelArgs fields to change in a preset."""

    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    norm_eps: float
    rope_theta: float
    max_seq_len: int
    tie_embeddings: bool
    qkv_bias: bool
    head_dim: int
    rope_llama3: tuple[float, ...]
    arch: str


PRESETS: dict[str, ModelArgs] = {
    "smollm2-135m": ModelArgs(),
    "smollm2-360m": ModelArgs(dim=960, n_layers=32, n_heads=15, n_kv_heads=5, ffn_dim=2560),
    # For decoder-logic tests: random weights, same structure, milliseconds per forward.
    "tiny": ModelArgs(
        vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128, max_seq_len=1024
    ),
}
