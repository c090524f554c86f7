"""The shape of a decoder-only model (Llama 2/3, SmolLM2, Mistral, Qwen2, Qwen3, Gemma 3):
`ModelArgs`, read from a checkpoint's metadata by model/loader.py or taken from `PRESETS` (the
bundled SmolLM2 sizes, and "tiny" for decoder-logic tests: random weights, milliseconds per
forward). The defaults are a plain Llama layer; the fields after `arch` switch on what the other
families add to it.
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
    # Per-frequency divisors of the rope's inverse frequencies (D/2,): a Llama 3.1+ GGUF's
    # rope_freqs tensor, its llama3 scaling precomputed; () = none.
    rope_factors: tuple[float, ...] = ()
    rope_scale: float = 1.0  # linear rope scaling of global layers (positions / rope_scale)
    qk_norm: bool = False  # RMSNorm of each q and k head before rope (Qwen3, Gemma 3)
    post_norms: bool = False  # RMSNorm of each sublayer's output before the residual (Gemma 3)
    act: str = "silu"  # MLP gate: "silu" (SwiGLU) or "gelu_tanh" (GeGLU, Gemma)
    embed_scale: float = 1.0  # input embeddings times this (Gemma: sqrt(dim))
    attn_scale: float = 0.0  # attention logits scale; 0 = head_dim ** -0.5
    # Sliding-window attention (Gemma 3): layers i with (i + 1) % global_every != 0 (every layer
    # where global_every is 0) see the last `sliding_window` positions only, with their own rope
    # base; sliding_window 0 = every layer global.
    sliding_window: int = 0
    global_every: int = 0
    rope_local_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.dim // self.n_heads)
        assert self.n_heads % self.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads"
        assert self.head_dim % 2 == 0, "rotary embeddings need an even head_dim"
        assert self.act in ("silu", "gelu_tanh"), f"unknown MLP activation {self.act!r}"

    @property
    def scale(self) -> float:
        """The attention logits' scale."""
        return self.attn_scale or self.head_dim**-0.5

    def local(self, layer: int) -> bool:
        """Layer `layer` attends through the sliding window."""
        if not self.sliding_window:
            return False
        return not self.global_every or (layer + 1) % self.global_every != 0

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
    rope_factors: tuple[float, ...]
    rope_scale: float
    qk_norm: bool
    post_norms: bool
    act: str
    embed_scale: float
    attn_scale: float
    sliding_window: int
    global_every: int
    rope_local_theta: float


PRESETS: dict[str, ModelArgs] = {
    "smollm2-135m": ModelArgs(),
    "smollm2-360m": ModelArgs(dim=960, n_layers=32, n_heads=15, n_kv_heads=5, ffn_dim=2560),
    # For decoder-logic tests: random weights, same structure, milliseconds per forward.
    "tiny": ModelArgs(
        vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128, max_seq_len=1024
    ),
}
