"""Loader: one-line errors naming the file, and the HF-directory path round trip."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import pytest
import torch
from safetensors.torch import save_file

from dllm_voice.model.args import ModelArgs
from dllm_voice.model.errors import ModelLoadError
from dllm_voice.model.loader import load
from dllm_voice.model.transformer import Transformer


def test_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "nope.gguf"
    with pytest.raises(ModelLoadError, match="not found.*nope.gguf"):
        load(str(p))


def test_corrupt_gguf(tmp_path: Path) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"this is not a gguf file at all" * 10)
    with pytest.raises(ModelLoadError, match="bad.gguf.*not a readable GGUF"):
        load(str(p))


def test_truncated_gguf(tmp_path: Path) -> None:
    from dllm_voice.model.loader import default_model_path

    p = tmp_path / "cut.gguf"
    with default_model_path().open("rb") as f:
        p.write_bytes(f.read(3_000_000))  # metadata complete, tensor data cut off
    with pytest.raises(ModelLoadError, match="cut.gguf"):
        load(str(p))


def test_unsupported_gguf_architecture(tmp_path: Path) -> None:
    p = tmp_path / "gpt2.gguf"
    w = gguf.GGUFWriter(str(p), "gpt2")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", torch.zeros(4, 8).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelLoadError, match="gpt2.gguf.*'gpt2' is not supported.*llama"):
        load(str(p))


def test_unsupported_hf_architecture(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    save_file({"x": torch.zeros(1)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ModelLoadError, match="GPT2LMHeadModel.*not supported.*LlamaForCausalLM"):
        load(str(tmp_path))


def test_hf_dir_without_weights(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="config.json and \\*.safetensors"):
        load(str(tmp_path))


def test_hf_directory_round_trip(tmp_path: Path, lm) -> None:
    """A tiny random Llama (Qwen2-style q/k/v bias) written in HF layout loads back equal."""
    torch.manual_seed(0)
    args = ModelArgs.preset("tiny", qkv_bias=True, tie_embeddings=False, arch="qwen2")
    ref = Transformer(args).eval()
    for p in ref.parameters():
        torch.nn.init.normal_(p, std=0.2)  # biases and norms too: every tensor must map right
    d, h, hkv = args.head_dim, args.n_heads, args.n_kv_heads
    sd: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": ref.embed.weight,
        "model.norm.weight": ref.norm,
        "lm_head.weight": ref.output.weight,
    }
    for i, layer in enumerate(ref.layers):
        pre = f"model.layers.{i}."
        q, k, v = layer.attn.wqkv.weight.split([h * d, hkv * d, hkv * d])
        qb, kb, vb = layer.attn.wqkv.bias.split([h * d, hkv * d, hkv * d])
        gate, up = layer.mlp.w_gate_up.weight.split(args.ffn_dim)
        sd |= {
            pre + "input_layernorm.weight": layer.attn_norm,
            pre + "post_attention_layernorm.weight": layer.mlp_norm,
            pre + "self_attn.q_proj.weight": q, pre + "self_attn.q_proj.bias": qb,
            pre + "self_attn.k_proj.weight": k, pre + "self_attn.k_proj.bias": kb,
            pre + "self_attn.v_proj.weight": v, pre + "self_attn.v_proj.bias": vb,
            pre + "self_attn.o_proj.weight": layer.attn.wo.weight,
            pre + "mlp.gate_proj.weight": gate, pre + "mlp.up_proj.weight": up,
            pre + "mlp.down_proj.weight": layer.mlp.w_down.weight,
        }  # fmt: skip
    save_file({k: v.detach().contiguous() for k, v in sd.items()}, str(tmp_path / "m.safetensors"))
    cfg = {
        "architectures": ["Qwen2ForCausalLM"], "vocab_size": args.vocab_size,
        "hidden_size": args.dim, "num_hidden_layers": args.n_layers,
        "num_attention_heads": h, "num_key_value_heads": hkv,
        "intermediate_size": args.ffn_dim, "rms_norm_eps": args.norm_eps,
        "rope_theta": args.rope_theta, "max_position_embeddings": 1024,
        "tie_word_embeddings": False, "eos_token_id": 2,
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    lm.tokenizer._tok.save(str(tmp_path / "tokenizer.json"))
    model, tok = load(str(tmp_path), device="cpu")
    x = torch.tensor([[1, 5, 9, 200, 31]])
    with torch.inference_mode():
        a = model(x, cache=model.new_cache(16)).logits
        b = ref(x, cache=ref.new_cache(16)).logits
    torch.testing.assert_close(a, b)
    assert tok.encode("Hello world") == lm.tokenizer.encode("Hello world")
