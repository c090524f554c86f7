"""testkit.gguf_models: the tiny GGUF files read back as written, and transformers' reference
for them loads them and gives usable logits.

Every arch x qtype file is read back with our GGUFFile (names, shapes, types, values); transformers
loads every arch in f32 and Q4_K_M, and each other qtype on one arch (rotating), to keep the file
within ~30 s. Our own loader against the reference belongs to the loader's tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from dllm_voice.model.gguf_file import GGUFFile, ints, strings
from testkit.gguf_models import (
    ARCHS,
    LLAMA3_ROPE_SCALING,
    QTYPES,
    hf_weights,
    reference_generate,
    reference_logits,
    reference_model,
    tiny_sizes,
    vocab_size,
    write_tiny_gguf,
)

PURE = {"f32": Q.F32, "f16": Q.F16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1,
        "q5_0": Q.Q5_0, "q4_k": Q.Q4_K, "q5_k": Q.Q5_K, "q6_k": Q.Q6_K}  # fmt: skip
# Max |error| of a quantized weight against the float one, relative to the tensor's max |value|.
QUANT_TOL = {Q.F16: 1e-3, Q.Q8_0: 0.01, Q.Q4_0: 0.1, Q.Q4_1: 0.1, Q.Q5_0: 0.05}
# transformers on every arch at f32 and Q4_K_M; the other qtypes each on one of the three quick
# archs (gemma3's six layers cost the most to load).
QUICK = ("llama", "qwen2", "qwen3")
OTHER_QTYPES = [q for q in QTYPES if q not in ("f32", "q4_k_m")]
HF_CASES = [(a, q) for a in ARCHS for q in ("f32", "q4_k_m")]
HF_CASES += [(QUICK[i % len(QUICK)], q) for i, q in enumerate(OTHER_QTYPES)]
IDS = [2, 40, 41, 42, 100, 7, 200, 13, 60, 61, 62, 63]


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """(arch, qtype) -> the file, written once per module."""
    root = tmp_path_factory.mktemp("gguf_models")
    cache: dict[tuple[str, str], Path] = {}

    def get(arch: str, qtype: str) -> Path:
        if (arch, qtype) not in cache:
            cache[arch, qtype] = write_tiny_gguf(root / arch / f"{qtype}.gguf", arch, qtype=qtype)
        return cache[arch, qtype]

    for arch in ARCHS:
        (root / arch).mkdir()
    return get


def _expected_names(arch: str) -> set[str]:
    s = tiny_sizes(arch)
    names = {"token_embd.weight", "output_norm.weight"}
    per_layer = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                 "ffn_gate", "ffn_up", "ffn_down"]  # fmt: skip
    if arch == "qwen2":
        names |= {f"blk.{i}.attn_{x}.bias" for i in range(s.n_layer) for x in "qkv"}
    if arch in ("qwen3", "gemma3"):
        per_layer += ["attn_q_norm", "attn_k_norm"]
    if arch == "gemma3":
        per_layer += ["post_attention_norm", "post_ffw_norm"]
    if arch == "llama":
        names.add("rope_freqs.weight")
    return names | {f"blk.{i}.{n}.weight" for i in range(s.n_layer) for n in per_layer}


# llama-quantize's Q4_K_M picks for attn_v / ffn_down by layer count (use_more_bits: i < n/8,
# i >= 7n/8, or (i - n/8) % 3 == 2).
MIX_Q6K_LAYERS = {2: [1], 6: [2, 5]}


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_file_reads_back(gguf_path: Callable[[str, str], Path], arch: str, qtype: str) -> None:
    f = GGUFFile(gguf_path(arch, qtype))
    s = tiny_sizes(arch)
    assert f.meta["general.architecture"] == arch
    assert set(f.tensors) == _expected_names(arch)
    v = vocab_size(arch)
    assert f.tensors["token_embd.weight"].shape == (v, s.dim)
    assert f.tensors["blk.0.attn_q.weight"].shape == (s.n_head * s.head_dim, s.dim)
    assert f.tensors["blk.0.attn_k.weight"].shape == (s.n_kv * s.head_dim, s.dim)
    assert f.tensors["blk.0.attn_output.weight"].shape == (s.dim, s.n_head * s.head_dim)
    assert f.tensors["blk.0.ffn_down.weight"].shape == (s.dim, s.ffn)
    assert f.meta[f"{arch}.embedding_length"] == s.dim
    assert f.meta[f"{arch}.block_count"] == s.n_layer
    assert f.meta[f"{arch}.attention.head_count_kv"] == s.n_kv
    if arch != "qwen2":
        assert f.meta[f"{arch}.attention.key_length"] == s.head_dim
    if arch == "gemma3":
        assert f.meta["gemma3.attention.sliding_window"] == s.sliding_window
        assert f.meta["gemma3.rope.freq_base_swa"] == s.rope_theta_swa
    for name, t in f.tensors.items():
        if len(t.shape) == 1:
            want = Q.F32
        elif qtype != "q4_k_m":
            want = PURE[qtype]
        elif name == "token_embd.weight":  # tied: the output matrix too
            want = Q.Q6_K
        elif name.endswith(("attn_v.weight", "ffn_down.weight")):
            more = int(name.split(".")[1]) in MIX_Q6K_LAYERS[s.n_layer]
            want = Q.Q6_K if more else Q.Q4_K
        else:
            want = Q.Q4_K
        assert t.qtype == want, name

    # Values: what the converter would write, to the type's precision.
    hf = hf_weights(arch)
    embd = f.read("token_embd.weight")
    assert np.isfinite(embd).all()
    want = hf["model.embed_tokens.weight"]
    err = np.abs(embd - want).max() / np.abs(want).max()
    tol = QUANT_TOL.get(f.tensors["token_embd.weight"].qtype, 0.0)
    if f.tensors["token_embd.weight"].qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        # gguf cannot quantize K-quants: random blocks, with the float tensor's spread.
        assert embd.std() == pytest.approx(want.std(), rel=0.05)
    else:
        assert err <= tol
    for name in ("attn_v", "ffn_down"):  # the last layer's: Q6_K in the mix
        w = f.read(f"blk.{s.n_layer - 1}.{name}.weight")
        assert np.isfinite(w).all() and w.std() > 0


def test_f32_values_are_the_converter_transforms(gguf_path: Callable[[str, str], Path]) -> None:
    """llama's q/k rows permuted per head (k with the KV head count), Gemma's norms + 1, others
    as they are."""
    s = tiny_sizes("llama")
    f = GGUFFile(gguf_path("llama", "f32"))
    hf = hf_weights("llama")
    q = hf["model.layers.0.self_attn.q_proj.weight"]
    k = hf["model.layers.0.self_attn.k_proj.weight"]
    half = s.head_dim // 2
    got_q = f.read("blk.0.attn_q.weight").reshape(s.n_head, s.head_dim, -1)
    got_k = f.read("blk.0.attn_k.weight").reshape(s.n_kv, s.head_dim, -1)
    q, k = q.reshape(s.n_head, s.head_dim, -1), k.reshape(s.n_kv, s.head_dim, -1)
    # GGUF row 2i is HF row i, row 2i + 1 is HF row i + d/2 (within each head).
    np.testing.assert_array_equal(got_q[:, 0::2], q[:, :half])
    np.testing.assert_array_equal(got_q[:, 1::2], q[:, half:])
    np.testing.assert_array_equal(got_k[:, 0::2], k[:, :half])
    np.testing.assert_array_equal(got_k[:, 1::2], k[:, half:])
    np.testing.assert_array_equal(
        f.read("blk.1.attn_v.weight"), hf["model.layers.1.self_attn.v_proj.weight"]
    )

    g = GGUFFile(gguf_path("gemma3", "f32"))
    hg = hf_weights("gemma3")
    for gname, hname in [
        ("blk.0.attn_norm", "model.layers.0.input_layernorm"),
        ("blk.0.attn_q_norm", "model.layers.0.self_attn.q_norm"),
        ("blk.0.post_attention_norm", "model.layers.0.post_attention_layernorm"),
        ("blk.0.ffn_norm", "model.layers.0.pre_feedforward_layernorm"),
        ("blk.0.post_ffw_norm", "model.layers.0.post_feedforward_layernorm"),
        ("output_norm", "model.norm"),
    ]:
        np.testing.assert_array_equal(g.read(gname + ".weight"), hg[hname + ".weight"] + 1)
    np.testing.assert_array_equal(
        g.read("blk.0.attn_q.weight"), hg["model.layers.0.self_attn.q_proj.weight"]
    )

    qn = GGUFFile(gguf_path("qwen3", "f32"))
    hq = hf_weights("qwen3")
    np.testing.assert_array_equal(
        qn.read("blk.1.attn_k_norm.weight"), hq["model.layers.1.self_attn.k_norm.weight"]
    )


def test_llama_rope_freqs_are_transformers_llama3_scaling(
    gguf_path: Callable[[str, str], Path],
) -> None:
    """The file's factors divide the default inverse frequencies into transformers' own llama3
    ones, and the reference model runs with exactly those."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    s = tiny_sizes("llama")
    path = gguf_path("llama", "f32")
    factors = torch.from_numpy(GGUFFile(path).read("rope_freqs.weight"))
    assert factors.shape == (s.head_dim // 2,)
    assert factors.min() == 1.0 and factors.max() == LLAMA3_ROPE_SCALING["factor"]
    assert ((factors > 1) & (factors < 8)).any()  # the smooth band is exercised too
    rope = {"rope_type": "llama3", "rope_theta": s.rope_theta, **LLAMA3_ROPE_SCALING}
    cfg = LlamaConfig(
        hidden_size=s.dim, num_attention_heads=s.n_head, head_dim=s.head_dim, rope_parameters=rope
    )
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    base = 1.0 / s.rope_theta ** (torch.arange(0, s.head_dim, 2, dtype=torch.float32) / s.head_dim)
    torch.testing.assert_close(base / factors, scaled, rtol=1e-6, atol=0)
    torch.testing.assert_close(
        reference_model(path).model.rotary_emb.inv_freq, scaled, rtol=1e-6, atol=0
    )

    plain = write_tiny_gguf(path.parent / "norope.gguf", "llama", rope_freqs=False)
    assert "rope_freqs.weight" not in GGUFFile(plain).tensors
    torch.testing.assert_close(reference_model(plain).model.rotary_emb.inv_freq, base)


@pytest.mark.parametrize("arch", ARCHS)
def test_transformers_reads_back_the_hf_weights(
    gguf_path: Callable[[str, str], Path], arch: str
) -> None:
    """What transformers' GGUF loader gets after undoing llama.cpp's transforms (the permutation,
    Gemma's + 1) is the float checkpoint the file was made from: the writer's transforms are
    the converter's."""
    model = reference_model(gguf_path(arch, "f32"))
    state = model.state_dict()
    for name, want in hf_weights(arch).items():
        torch.testing.assert_close(state[name], torch.tensor(want), rtol=0, atol=1e-6)
    c = model.config
    s = tiny_sizes(arch)
    assert getattr(c, "head_dim", s.dim // s.n_head) == s.head_dim
    if arch == "gemma3":
        assert c.layer_types == ["sliding_attention"] * 5 + ["full_attention"]
        assert c.sliding_window == s.sliding_window
        assert c.query_pre_attn_scalar == s.head_dim
        assert c.rope_parameters["sliding_attention"]["rope_theta"] == s.rope_theta_swa
        assert c.rope_parameters["full_attention"]["rope_theta"] == s.rope_theta


@pytest.mark.parametrize(("arch", "qtype"), HF_CASES)
def test_reference_logits(gguf_path: Callable[[str, str], Path], arch: str, qtype: str) -> None:
    path = gguf_path(arch, qtype)
    logits = reference_logits(path, IDS)
    assert logits.dtype == torch.float32
    assert logits.shape == (len(IDS), vocab_size(arch))
    assert torch.isfinite(logits).all()
    spread = logits.std(-1)
    assert (spread > 1.0).all() and (spread < 10.0).all(), spread
    assert len(set(logits.argmax(-1).tolist())) > 2  # not one token everywhere
    # Causal: a later token changes nothing before it.
    torch.testing.assert_close(reference_logits(path, IDS[:5]), logits[:5], rtol=1e-4, atol=1e-4)


def test_gemma3_sliding_window_shows(gguf_path: Callable[[str, str], Path]) -> None:
    """Positions past the 4-token window still see token 0 through the global layer, so changing
    it moves them, and a sliding-only model would not: the window is in force either way."""
    path = gguf_path("gemma3", "f32")
    a = reference_logits(path, IDS)
    b = reference_logits(path, [3, *IDS[1:]])
    assert not torch.allclose(a[-1], b[-1])
    model = reference_model(path)
    assert all(layer.self_attn.sliding_window == 4 for layer in model.model.layers[:5])
    assert model.model.layers[5].self_attn.sliding_window is None


def test_reference_generate(gguf_path: Callable[[str, str], Path]) -> None:
    path = gguf_path("qwen3", "f32")
    out = reference_generate(path, IDS[:4], 4)
    assert len(out) == 4 and all(0 <= t < vocab_size("qwen3") for t in out)
    seq = IDS[:4] + out
    logits = reference_logits(path, seq)
    assert out == logits[3:-1].argmax(-1).tolist()
    assert reference_generate(path, IDS[:4], 4) == out


@pytest.mark.parametrize("arch", ARCHS)
def test_tokenizer_metadata(gguf_path: Callable[[str, str], Path], arch: str) -> None:
    """transformers builds a tokenizer from the file that round-trips text and renders the
    chat template; for the byte-level ones our own Tokenizer does too, to the same ids."""
    from transformers import AutoTokenizer

    path = gguf_path(arch, "f32")
    meta = GGUFFile(path).meta
    tokens = strings(meta, "tokenizer.ggml.tokens")
    assert len(tokens) == vocab_size(arch) == len(ints(meta, "tokenizer.ggml.token_type"))
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    text = "the cat sat on the mat. Héllo!"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode())  # the merges apply
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    turn = {"llama": "<|start_header_id|>", "gemma3": "<start_of_turn>"}.get(arch, "<|im_start|>")
    assert chat.count(turn) == 2
    bos = int(meta["tokenizer.ggml.bos_token_id"])
    eos = int(meta["tokenizer.ggml.eos_token_id"])
    assert tokens[eos] in {"<|eot_id|>", "<|im_end|>", "<eos>"}
    assert tokens[bos] in {"<|begin_of_text|>", "<|endoftext|>", "<bos>"}
    if arch == "gemma3":
        assert meta["tokenizer.ggml.model"] == "llama"
        assert all(f"<0x{b:02X}>" in tokens for b in range(256))
        assert len(strings(meta, "tokenizer.ggml.tokens")) == len(meta["tokenizer.ggml.scores"])
        return
    from dllm_voice.model.tokenizer import Tokenizer

    ours = Tokenizer.from_gguf_meta(meta)
    assert ours.encode(text) == ids
    assert ours.decode(ids) == text


def test_sizes_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multiples of 256"):
        write_tiny_gguf(tmp_path / "x.gguf", "llama", qtype="q4_k", dim=128)
    with pytest.raises(ValueError, match="global"):
        write_tiny_gguf(tmp_path / "x.gguf", "gemma3", n_layer=4)
    with pytest.raises(ValueError, match="unknown arch"):
        write_tiny_gguf(tmp_path / "x.gguf", "gpt2")
    small = write_tiny_gguf(tmp_path / "s.gguf", "qwen2", dim=64, n_head=2, n_kv=1, head_dim=32,
                            ffn=128, n_layer=3, tied=False)  # fmt: skip
    f = GGUFFile(small)
    assert f.tensors["output.weight"].shape == (vocab_size("qwen2"), 64)
    assert f.meta["qwen2.block_count"] == 3
    assert math.isfinite(float(reference_logits(small, IDS).std()))
