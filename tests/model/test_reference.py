"""Logits against independent references.

Fast: a float64 numpy forward written from the Llama equations, using the GGUF's own q/k rows
(interleaved-pair RoPE, llama.cpp's convention) — checks the q/k un-permutation, rotate-half
RoPE, GQA, norms (model/layers.py) and the tied head of model/transformer.py.
Slow: Hugging Face transformers' LlamaForCausalLM loading the same GGUF file.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dllm_voice.model.gguf_file import GGUFFile
from dllm_voice.model.loader import default_model_path

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about autumn leaves.",
    "Explain why the sky is blue in one sentence.",
    "Café, naïve, 😀: 12 + 30 = ?",
]
# fp32 torch vs float64 numpy over 30 layers: measured max |diff| ~1e-4 on logits of size ~20.
TOL_NUMPY = 2e-3
# Either with the integer products (AVX-512 VNNI: activations rounded to int16): 0.022.
TOL_INT16 = 0.05
# fp32 vs transformers fp32 (different op order, SDPA vs eager): measured ~1e-4.
TOL_HF = 2e-3


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rope_interleaved(x: np.ndarray, theta: float) -> np.ndarray:
    """x: (T, H, D); rotates pairs (2i, 2i+1) by angle pos * theta^(-2i/D)."""
    t, _, d = x.shape
    ang = np.arange(t)[:, None] * theta ** (-np.arange(0, d, 2) / d)[None, :]  # (T, D/2)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def numpy_logits(lm, ids: list[int]) -> np.ndarray:
    m, a = lm.model, lm.model.args
    f = GGUFFile(default_model_path())
    h, hkv, d = a.n_heads, a.n_kv_heads, a.head_dim
    w = lambda t: t.detach().double().numpy()
    x = w(m.embed.dense())[ids]  # (T, dim)
    t = len(ids)
    causal = np.tril(np.ones((t, t), dtype=bool))
    for i, layer in enumerate(m.layers):
        y = _rms(x, w(layer.attn_norm), a.norm_eps)
        wq = f.read(f"blk.{i}.attn_q.weight").astype(np.float64)  # llama.cpp row order
        wk = f.read(f"blk.{i}.attn_k.weight").astype(np.float64)
        wv = w(layer.attn.wqkv.dense())[(h + hkv) * d :]
        q = _rope_interleaved((y @ wq.T).reshape(t, h, d), a.rope_theta)
        k = _rope_interleaved((y @ wk.T).reshape(t, hkv, d), a.rope_theta)
        v = (y @ wv.T).reshape(t, hkv, d)
        k, v = np.repeat(k, h // hkv, axis=1), np.repeat(v, h // hkv, axis=1)  # (T, H, D)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)
        s = np.where(causal, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", p, v).reshape(t, h * d)
        x = x + o @ w(layer.attn.wo.dense()).T
        y = _rms(x, w(layer.mlp_norm), a.norm_eps)
        gate, up = np.split(y @ w(layer.mlp.w_gate_up.dense()).T, 2, axis=-1)
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w(layer.mlp.w_down.dense()).T
    return _rms(x, w(m.norm), a.norm_eps) @ w(m.embed.dense()).T  # (T, V)


def our_logits(lm, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return lm.model(torch.tensor([ids]), cache=lm.model.new_cache(len(ids))).logits[0]


@pytest.mark.parametrize("kind", ["auto", "quant"])
def test_logits_match_numpy_reference(lm, kind: str) -> None:
    """From the GGUF blocks with fp32 products ("quant") and with what the loader picks (the
    integer products where the CPU has AVX-512 VNNI)."""
    ids = lm.tokenizer.apply_chat([{"role": "user", "content": PROMPTS[0]}])
    ref = numpy_logits(lm, ids)
    try:
        lm.model.pack(kind)
        tol = TOL_INT16 if lm.model.cpu_kernel == "vnni" else TOL_NUMPY
        ours = our_logits(lm, ids).double().numpy()
    finally:
        lm.model.pack()
    assert np.abs(ours - ref).max() < tol
    assert (ours.argmax(-1) == ref.argmax(-1)).all()


@pytest.fixture(scope="module")
def hf():
    transformers = pytest.importorskip("transformers")
    path = default_model_path()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return model, tok


@pytest.mark.slow
def test_logits_and_greedy_match_transformers(lm, hf) -> None:
    model, hf_tok = hf
    for prompt in PROMPTS:
        msgs = [{"role": "user", "content": prompt}]
        ids = lm.tokenizer.apply_chat(msgs)
        ref_ids = hf_tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        ref_ids = ref_ids["input_ids"] if hasattr(ref_ids, "keys") else ref_ids
        assert ids == list(ref_ids), "tokenizer + chat template differ from transformers'"
        with torch.inference_mode():
            ref = model(torch.tensor([ids])).logits[0]
            tol = TOL_INT16 if lm.model.cpu_kernel == "vnni" else TOL_HF
            assert (our_logits(lm, ids) - ref).abs().max().item() < tol
            out = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False,
                                 min_new_tokens=32)  # fmt: skip
        ref_cont = out[0, len(ids) :].tolist()
        eos = model.generation_config.eos_token_id
        ours = _greedy(lm, ids, 32, eos if isinstance(eos, list) else [eos])
        assert ours == ref_cont


def _greedy(lm, ids: list[int], n: int, banned: list[int]) -> list[int]:
    """Our greedy continuation with `banned` masked, as min_new_tokens does in transformers."""
    m = lm.model
    cache = m.new_cache(len(ids) + n)
    out = []
    with torch.inference_mode():
        logits = m(torch.tensor([ids]), cache=cache, logits="last").logits[0, -1]
        for _ in range(n):
            logits[banned] = -torch.inf
            out.append(int(logits.argmax()))
            logits = m(torch.tensor([[out[-1]]]), cache=cache).logits[0, -1]
    return out


@pytest.mark.slow
def test_tokenizer_matches_transformers(lm, hf) -> None:
    _, hf_tok = hf
    texts = [
        *PROMPTS,
        "  two  spaces\n\nand 1234567 digits",
        "日本語 и русский текст",
        "<|im_start|>x",
    ]
    for text in texts:
        assert lm.tokenizer.encode(text) == hf_tok.encode(text, add_special_tokens=False)
