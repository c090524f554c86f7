"""Tiny random-weight GGUF files of each architecture the LM runtime loads, and transformers'
logits for them.

`write_tiny_gguf(path, arch, qtype=..., seed=...)` writes a file the way llama.cpp's
convert_hf_to_gguf.py (and llama-quantize, for the quantized kinds) would write a small Hugging
Face checkpoint of that architecture: the same tensor names, metadata keys, and value transforms.
The weights are built in Hugging Face's layout first (`hf_weights`) and then converted, so a
reader that undoes the conversion gets them back:

- llama: attn_q / attn_k rows permuted from rotate-half pairs (i, i + d/2) to interleaved pairs
  (2i, 2i + 1) per head (`LlamaModel.permute`; k uses the KV head count); `rope_freqs.weight`
  holds Llama 3.1's per-frequency divisors (RoPE angle = pos * theta^(-2i/d) / rope_freqs[i]).
- qwen2: q/k/v biases; no permutation (NeoX RoPE, as in Hugging Face).
- qwen3: attn_q_norm / attn_k_norm (per-head RMSNorm, weight of head_dim) before RoPE; head_dim
  from `qwen3.attention.key_length`, with n_head * head_dim != embedding_length.
- gemma3: every `*norm.weight` stored with 1 added (Gemma's RMSNorm multiplies by 1 + w), tied
  embeddings scaled by sqrt(dim) on input, GELU(tanh) MLP, post-attention and post-FFN norms,
  sliding-window attention on five layers of six (llama.cpp's fixed pattern), global layers at
  `rope.freq_base` and local ones at `rope.freq_base_swa`, attention scaled by 1/sqrt(head_dim).

`reference_logits(path, ids)` / `reference_generate(path, ids, n)`: Hugging Face transformers
loading the same file (`from_pretrained(..., gguf_file=...)`, float32, eager attention).
transformers 5.x's GGUF loader reads all four architectures, but its config mapping misses three
things the file carries, which the reference supplies from the file itself (see `_load`).

The default sizes fit every qtype: the K-quants need every matrix row (the input width) to be a
multiple of 256.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType
from gguf.quants import dequantize, quantize

ARCHS = ("llama", "qwen2", "qwen3", "gemma3")
QTYPES = ("f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q5_k", "q6_k", "q4_k_m")

Q = GGMLQuantizationType
# qtype -> (type of the 2-D weights, general.file_type); q4_k_m is a per-tensor mix (_mix_type).
_PURE = {
    "f32": (Q.F32, LlamaFileType.ALL_F32),
    "f16": (Q.F16, LlamaFileType.MOSTLY_F16),
    "q8_0": (Q.Q8_0, LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (Q.Q4_0, LlamaFileType.MOSTLY_Q4_0),
    "q4_1": (Q.Q4_1, LlamaFileType.MOSTLY_Q4_1),
    "q5_0": (Q.Q5_0, LlamaFileType.MOSTLY_Q5_0),
    "q4_k": (Q.Q4_K, LlamaFileType.MOSTLY_Q4_K_S),
    "q5_k": (Q.Q5_K, LlamaFileType.MOSTLY_Q5_K_S),
    "q6_k": (Q.Q6_K, LlamaFileType.MOSTLY_Q6_K),
}

# Llama 3.1's rope_scaling, the one every Llama 3.1/3.2 checkpoint ships.
LLAMA3_ROPE_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
# llama.cpp's Gemma 3: five sliding-window layers, then one global (load_swa_pattern(ml, 6)).
GEMMA3_SWA_PATTERN = 6


@dataclass(frozen=True)
class Sizes:
    dim: int = 256
    n_layer: int = 2
    n_head: int = 4
    n_kv: int = 2
    head_dim: int = 64
    ffn: int = 512
    ctx: int = 4096
    rope_theta: float = 500000.0
    rms_eps: float = 1e-5
    # gemma3 only
    rope_theta_swa: float = 10000.0
    sliding_window: int = 4
    # llama only: write rope_freqs.weight (Llama 3.1+ scaling)
    rope_freqs: bool = True
    # llama/qwen2/qwen3: a separate output.weight (gemma3 always ties)
    tied: bool = True


DEFAULT_SIZES = {
    "llama": Sizes(),
    "qwen2": Sizes(rope_theta=1e6, rms_eps=1e-6),
    # n_head * head_dim = 512 != dim: the attention width comes from key_length, not dim / n_head.
    "qwen3": Sizes(n_head=8, rope_theta=1e6, rms_eps=1e-6),
    # Six layers: 0-4 sliding, 5 global. A window of 4 tokens makes any longer prompt show it.
    "gemma3": Sizes(n_layer=6, n_kv=1, head_dim=128, rope_theta=1e6, rms_eps=1e-6),
}


def tiny_sizes(arch: str, **sizes: float | bool) -> Sizes:
    """The arch's defaults with `sizes` (any `Sizes` field) replaced."""
    if arch not in DEFAULT_SIZES:
        raise ValueError(f"unknown arch {arch!r} (known: {', '.join(ARCHS)})")
    unknown = set(sizes) - {f.name for f in fields(Sizes)}
    if unknown:
        raise TypeError(f"unknown sizes: {sorted(unknown)}")
    return replace(DEFAULT_SIZES[arch], **sizes)


# ---------------------------------------------------------------------------------------------
# Tokenizers


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, the spelling of byte-level BPE tokens."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    chars = list(keep)
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(keep, chars, strict=True)}


# Merges in priority order, written as text; a space is spelled as the byte alphabet's "Ġ" or
# SentencePiece's "▁" below. Each merge's parts are single characters or earlier results.
_MERGES = [
    ("h", "e"), (" ", "t"), (" ", "a"), ("i", "n"), ("e", "r"), ("o", "n"), (" t", "he"),
    ("r", "e"), (" ", "s"), ("a", "t"), ("e", "n"), (" ", "w"), ("o", "r"), ("i", "s"),
    (" ", "c"), ("e", "s"), ("a", "n"), (" ", "o"), ("l", "l"), ("in", "g"), (" a", "n"),
    (" an", "d"), (" ", "i"), ("o", "u"), (" w", "h"), (" ", "b"), ("a", "r"), ("i", "t"),
    (" ", "p"), (" ", "f"),
]  # fmt: skip

_LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)
_CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_GEMMA_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages %}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{%- endif %}"
)

# token types (llama.cpp's SentencePieceTokenTypes)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6


def _write_bpe_vocab(w: gguf.GGUFWriter, arch: str) -> int:
    """Byte-level BPE as convert_hf_to_gguf's _set_vocab_gpt2 writes it: the 256 byte tokens, the
    merges' results, then the added tokens (special ones CONTROL, the others USER_DEFINED)."""
    spell = _bytes_to_unicode()
    tokens = [spell[b] for b in range(256)]
    merges = []
    for a, b in _MERGES:
        a, b = (s.replace(" ", spell[32]) for s in (a, b))
        merges.append(f"{a} {b}")
        tokens.append(a + b)
    types = [NORMAL] * len(tokens)
    if arch == "llama":
        special = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>"]
        special += ["<|end_header_id|>", "<|eot_id|>"]
        added: list[tuple[str, int]] = [(t, CONTROL) for t in special]
        bos, eos, add_bos, template = "<|begin_of_text|>", "<|eot_id|>", True, _LLAMA3_TEMPLATE
    else:
        added = [(t, CONTROL) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")]
        if arch == "qwen3":
            added += [("<think>", USER_DEFINED), ("</think>", USER_DEFINED)]
        bos, eos, add_bos, template = "<|endoftext|>", "<|im_end|>", False, _CHATML_TEMPLATE
    tokens += [t for t, _ in added]
    types += [k for _, k in added]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe" if arch == "llama" else "qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index(bos))
    w.add_eos_token_id(tokens.index(eos))
    if arch != "llama":
        w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(add_bos)
    w.add_chat_template(template)
    return len(tokens)


def _write_spm_vocab(w: gguf.GGUFWriter) -> int:
    """SentencePiece as _set_vocab_sentencepiece writes Gemma's: control tokens first, byte
    fallback `<0xNN>` tokens, then pieces with scores; merges are left for readers to derive.
    Pieces come in merge order with falling scores, so deriving merges by score (llama.cpp) and by
    file position (transformers' Gemma) agree."""
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    types = [CONTROL, CONTROL, CONTROL, UNKNOWN, CONTROL, CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [BYTE] * 256
    pieces = ["▁", *"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'"]
    pieces += ["".join(m).replace(" ", "▁") for m in _MERGES]
    scores = [0.0] * (len(tokens))
    tokens += pieces
    types += [NORMAL] * len(pieces)
    scores += [-float(i) for i in range(len(pieces))]
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template(_GEMMA_TEMPLATE)
    return len(tokens)


def vocab_size(arch: str) -> int:
    """The number of tokens (= embedding rows) in a tiny file of `arch`."""
    w = gguf.GGUFWriter(None, arch)
    return _write_spm_vocab(w) if arch == "gemma3" else _write_bpe_vocab(w, arch)


# ---------------------------------------------------------------------------------------------
# Weights


def llama3_rope_freqs(head_dim: int, theta: float, scaling: dict[str, float]) -> np.ndarray:
    """rope_freqs.weight as LlamaModel.generate_extra_tensors computes it: per frequency, the
    divisor of its angle (1 at high frequencies, `factor` at low, smooth in between)."""
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_ctx = scaling["original_max_position_embeddings"]
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    out = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# The layers' writes to the residual stream outweigh the token's own embedding, so that with a tied
# head the next-token argmax is not simply the current token.
RESIDUAL_GAIN = 2.0


def hf_weights(arch: str, seed: int = 0, **sizes: float | bool) -> dict[str, np.ndarray]:
    """The float32 weights in Hugging Face's names and layout (what `write_tiny_gguf` converts),
    read-only arrays shared between calls.

    Scales: linear layers N(0, 1/fan_in) (the two that write to the residual stream
    RESIDUAL_GAIN times that), embeddings N(0, 3/sqrt(dim)) so tied logits spread a few units,
    norm gains near 1 (Gemma's stored near 0, its norm adds the 1)."""
    return _hf_weights(arch, seed, tiny_sizes(arch, **sizes))


@functools.lru_cache(maxsize=16)
def _hf_weights(arch: str, seed: int, s: Sizes) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    d, hd, f = s.dim, s.head_dim, s.ffn

    def lin(rows: int, cols: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float32)

    def gain(n: int) -> np.ndarray:
        centre = 0.0 if arch == "gemma3" else 1.0
        return (centre + 0.1 * rng.standard_normal(n)).astype(np.float32)

    v = vocab_size(arch)
    # Gemma multiplies the embedding by sqrt(dim) on the way in, so its rows are kept smaller and
    # its final norm's gain larger (2) for the same logit spread.
    emb = (1.5 if arch == "gemma3" else 3.0) / math.sqrt(d)
    out = {"model.embed_tokens.weight": rng.standard_normal((v, d)) * emb}
    for i in range(s.n_layer):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = gain(d)
        out[p + "self_attn.q_proj.weight"] = lin(s.n_head * hd, d)
        out[p + "self_attn.k_proj.weight"] = lin(s.n_kv * hd, d)
        out[p + "self_attn.v_proj.weight"] = lin(s.n_kv * hd, d)
        out[p + "self_attn.o_proj.weight"] = lin(d, s.n_head * hd, RESIDUAL_GAIN)
        if arch == "qwen2":
            for n, rows in (("q", s.n_head * hd), ("k", s.n_kv * hd), ("v", s.n_kv * hd)):
                out[p + f"self_attn.{n}_proj.bias"] = 0.5 * rng.standard_normal(rows)
        if arch in ("qwen3", "gemma3"):
            out[p + "self_attn.q_norm.weight"] = gain(hd)
            out[p + "self_attn.k_norm.weight"] = gain(hd)
        out[p + "post_attention_layernorm.weight"] = gain(d)
        if arch == "gemma3":
            out[p + "pre_feedforward_layernorm.weight"] = gain(d)
            out[p + "post_feedforward_layernorm.weight"] = gain(d)
        out[p + "mlp.gate_proj.weight"] = lin(f, d)
        out[p + "mlp.up_proj.weight"] = lin(f, d)
        out[p + "mlp.down_proj.weight"] = lin(d, f, RESIDUAL_GAIN)
    out["model.norm.weight"] = gain(d) + np.float32(1.0 if arch == "gemma3" else 0.0)
    if not s.tied and arch != "gemma3":
        out["lm_head.weight"] = rng.standard_normal((v, d)) * 3 / math.sqrt(d)
    weights = {k: np.asarray(a, dtype=np.float32) for k, a in out.items()}
    for a in weights.values():
        a.setflags(write=False)
    return weights


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """LlamaModel.permute: per head, rows (i, i + d/2) -> rows (2i, 2i + 1)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp's choice of the layers that get more bits in the _M mixes."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _mix_type(name: str, n_layer: int, tied: bool) -> GGMLQuantizationType:
    """llama-quantize's Q4_K_M choice for one 2-D tensor: Q6_K for the output (or the tied
    embedding that serves as it) and for attn_v / ffn_down of the layers _use_more_bits picks."""
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        return Q.Q6_K
    more = name.endswith(("attn_v.weight", "ffn_down.weight"))
    return Q.Q6_K if more and _use_more_bits(int(name.split(".")[1]), n_layer) else Q.Q4_K


# K-quant block layouts: byte offsets of the fp16 super-block scale d, and of dmin where there is
# one; the rest of the block (sub-block scales, quants) is left random.
_K_FIELDS = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208, None)}
# dmin as a multiple of d: half the quant range, so a sub-block's values centre near zero.
_K_DMIN = {Q.Q4_K: 7.5, Q.Q5_K: 15.5}


def _random_k_blocks(
    rng: np.random.Generator, shape: tuple[int, int], qtype: GGMLQuantizationType, std: float
) -> np.ndarray:
    """Well-formed random blocks of a K-quant gguf cannot quantize to: every sub-block scale and
    quant bit random, the fp16 scales finite and sized so the tensor's values have spread `std`."""
    block, type_size = GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    raw = rng.integers(0, 256, size=(rows * cols // block, type_size), dtype=np.uint8)
    at_d, at_dmin = _K_FIELDS[qtype]
    d = rng.uniform(0.5, 1.5, size=len(raw)).astype(np.float32)

    def put(scale: float) -> None:
        raw[:, at_d : at_d + 2] = (d * scale).astype(np.float16).view(np.uint8).reshape(-1, 2)
        if at_dmin is not None:
            dmin = (d * scale * _K_DMIN[qtype]).astype(np.float16)
            raw[:, at_dmin : at_dmin + 2] = dmin.view(np.uint8).reshape(-1, 2)

    put(1.0)
    # The values are linear in the fp16 scales: a sample of blocks measures the factor.
    spread = float(dequantize(raw[:256], qtype).std())
    put(std / spread)
    return raw.reshape(rows, -1)


def _encode(rng: np.random.Generator, w: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """`w` as stored: float arrays for F32/F16, (rows, bytes per row) uint8 blocks otherwise."""
    if qtype == Q.F32:
        return w
    if qtype == Q.F16:
        return w.astype(np.float16)
    try:
        return quantize(w, qtype)
    except NotImplementedError:
        return _random_k_blocks(rng, w.shape, qtype, float(w.std()))


def _check_rows(arch: str, s: Sizes, qtype: str) -> None:
    types = [_PURE[qtype][0]] if qtype in _PURE else [Q.Q4_K, Q.Q6_K]
    block = max(GGML_QUANT_SIZES[t][0] for t in types)
    widths = {"dim": s.dim, "ffn": s.ffn, "n_head * head_dim": s.n_head * s.head_dim}
    bad = [f"{k}={v}" for k, v in widths.items() if v % block]
    if bad:
        raise ValueError(f"{arch} {qtype}: row lengths must be multiples of {block} ({bad})")


# ---------------------------------------------------------------------------------------------
# The file


def write_tiny_gguf(
    path: str | Path, arch: str, *, qtype: str = "f32", seed: int = 0, **sizes: float | bool
) -> Path:
    """Write a tiny random `arch` model (see the module docstring) to `path`; return the path.

    `qtype`: "f32"/"f16": the 2-D weights in that type; "q8_0", "q4_0", "q4_1", "q5_0", "q4_k",
    "q5_k", "q6_k": every 2-D weight in that one type (like `llama-quantize --pure`); "q4_k_m":
    llama-quantize's Q4_K_M mix (`_mix_type`). Norms, biases and rope_freqs stay F32, as in
    every llama.cpp file. Types gguf-py cannot quantize (the K-quants) get random blocks.
    `sizes`: any `Sizes` field, e.g. `n_layer=3`, `tied=False`, `rope_freqs=False`.
    """
    if qtype not in QTYPES:
        raise ValueError(f"unknown qtype {qtype!r} (known: {', '.join(QTYPES)})")
    s = tiny_sizes(arch, **sizes)
    _check_rows(arch, s, qtype)
    if arch == "gemma3" and s.n_layer < GEMMA3_SWA_PATTERN:
        raise ValueError(f"gemma3 needs {GEMMA3_SWA_PATTERN}+ layers to have a global one")
    weights = hf_weights(arch, seed, **sizes)
    path = Path(path)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-random-{arch}")
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    file_type = LlamaFileType.MOSTLY_Q4_K_M if qtype == "q4_k_m" else _PURE[qtype][1]
    w.add_file_type(file_type)
    _write_hparams(w, arch, s)
    if arch == "gemma3":
        _write_spm_vocab(w)
    else:
        _write_bpe_vocab(w, arch)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], s.n_layer)
    rng = np.random.default_rng(seed + 1)
    if arch == "llama" and s.rope_freqs:
        freqs = llama3_rope_freqs(s.head_dim, s.rope_theta, LLAMA3_ROPE_SCALING)
        w.add_tensor("rope_freqs.weight", freqs)
    for hf_name, tensor in weights.items():
        base, _, suffix = hf_name.rpartition(".")
        name = f"{names.get_name(base)}.{suffix}"
        if arch == "llama" and hf_name.endswith("q_proj.weight"):
            tensor = _permute(tensor, s.n_head)
        elif arch == "llama" and hf_name.endswith("k_proj.weight"):
            tensor = _permute(tensor, s.n_kv)
        if arch == "gemma3" and hf_name.endswith("norm.weight"):
            tensor = tensor + np.float32(1.0)
        if tensor.ndim == 1:
            w.add_tensor(name, tensor)
            continue
        target = _mix_type(name, s.n_layer, s.tied) if qtype == "q4_k_m" else _PURE[qtype][0]
        data = _encode(rng, tensor, target)
        w.add_tensor(name, data, raw_dtype=target if data.dtype == np.uint8 else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _write_hparams(w: gguf.GGUFWriter, arch: str, s: Sizes) -> None:
    w.add_context_length(s.ctx)
    w.add_embedding_length(s.dim)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.ffn)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_kv)
    w.add_rope_freq_base(s.rope_theta)
    w.add_layer_norm_rms_eps(s.rms_eps)
    # Written where the Hugging Face config names head_dim: Llama 3.2, Qwen3 and Gemma 3 do,
    # Qwen2.5 does not (its head_dim is dim / n_head).
    if arch != "qwen2":
        w.add_key_length(s.head_dim)
        w.add_value_length(s.head_dim)
    elif s.head_dim * s.n_head != s.dim:
        raise ValueError("qwen2 has no key_length: head_dim must be dim / n_head")
    if arch == "llama":
        w.add_vocab_size(vocab_size(arch))
        w.add_rope_dimension_count(s.head_dim)
    if arch == "gemma3":
        w.add_rope_freq_base_swa(s.rope_theta_swa)
        w.add_sliding_window(s.sliding_window)


def gguf_sizes(path: str | Path) -> tuple[str, Sizes]:
    """(arch, Sizes) read back from a file `write_tiny_gguf` wrote."""
    from dllm_voice.model.gguf_file import GGUFFile

    f = GGUFFile(path)
    arch = str(f.meta["general.architecture"])

    def get(key: str, default: float | None = None) -> float:
        value = f.meta.get(f"{arch}.{key}", default)
        assert isinstance(value, (int, float)), key
        return value

    s = Sizes(
        dim=int(get("embedding_length")),
        n_layer=int(get("block_count")),
        n_head=int(get("attention.head_count")),
        n_kv=int(get("attention.head_count_kv")),
        head_dim=int(
            get("attention.key_length", get("embedding_length") // get("attention.head_count"))
        ),
        ffn=int(get("feed_forward_length")),
        ctx=int(get("context_length")),
        rope_theta=float(get("rope.freq_base")),
        rms_eps=float(get("attention.layer_norm_rms_epsilon")),
        rope_theta_swa=float(get("rope.freq_base_swa", 10000.0)),
        sliding_window=int(get("attention.sliding_window", 0)),
        rope_freqs="rope_freqs.weight" in f.tensors,
        tied="output.weight" not in f.tensors,
    )
    return arch, s


# ---------------------------------------------------------------------------------------------
# The reference


@functools.lru_cache(maxsize=32)
def _load(path: str, mtime_ns: int) -> torch.nn.Module:
    """transformers' model for the file, with what its GGUF config mapping leaves out put back:

    - llama: it ignores rope_freqs.weight, so the rotary embedding's inverse frequencies are
      divided by the file's factors here (what llama.cpp's ggml_rope_ext does with them).
    - qwen3: it does not map key_length to head_dim (Qwen3Config then assumes 128).
    - gemma3: query_pre_attn_scalar stays Gemma3TextConfig's 256; llama.cpp scales by
      1/sqrt(head_dim) (every size but 27B). freq_base_swa is not read either.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    p = Path(path)
    arch, s = gguf_sizes(p)
    config = AutoConfig.from_pretrained(p.parent, gguf_file=p.name)
    if arch == "qwen3":
        config.head_dim = s.head_dim
    if arch == "gemma3":
        config.head_dim = s.head_dim
        config.query_pre_attn_scalar = s.head_dim
        config.sliding_window = s.sliding_window
        config.rope_parameters["sliding_attention"]["rope_theta"] = s.rope_theta_swa
        config.rope_parameters["full_attention"]["rope_theta"] = s.rope_theta
    model = AutoModelForCausalLM.from_pretrained(
        p.parent,
        gguf_file=p.name,
        config=config,
        dtype=torch.float32,
        attn_implementation="eager",
    )
    model.eval()
    if arch == "llama" and s.rope_freqs:
        from dllm_voice.model.gguf_file import GGUFFile

        factors = torch.from_numpy(GGUFFile(p).read("rope_freqs.weight"))
        rotary = model.model.rotary_emb
        rotary.inv_freq = rotary.inv_freq / factors
        rotary.original_inv_freq = rotary.inv_freq
    return model


def reference_model(path: str | Path) -> torch.nn.Module:
    """The transformers model `reference_logits` runs (cached per file and modification time)."""
    p = Path(path).resolve()
    return _load(str(p), p.stat().st_mtime_ns)


@torch.no_grad()
def reference_logits(path: str | Path, ids: list[int]) -> torch.Tensor:
    """transformers' float32 logits (T, vocab) for `ids` at positions 0..T-1."""
    model = reference_model(path)
    out = model(torch.tensor([ids]), use_cache=False)
    return out.logits[0].float()


def reference_generate(path: str | Path, ids: list[int], n: int) -> list[int]:
    """`n` greedy tokens after `ids`, each from a full forward over the sequence so far (no cache,
    no stop tokens)."""
    seq = list(ids)
    for _ in range(n):
        seq.append(int(reference_logits(path, seq)[-1].argmax()))
    return seq[len(ids) :]
