"""A GGUF model on CPU holds each matrix packed from its blocks once: no fp32 copy (`Released`),
the same logits bit for bit as with the fp32 weights kept, and the fp32 values back on demand."""

from __future__ import annotations

import pytest
import torch

from dllm_voice.kernels import cpu_rows
from dllm_voice.model.loader import load
from dllm_voice.model.packing import Linear, Released, ReleasedWeightError

pytestmark = pytest.mark.skipif(not cpu_rows.available(), reason="cpu_rows kernel not built here")


@pytest.fixture(scope="module")
def pair():
    """The bundled SmolLM2 loaded twice: as by default, and with keep_float."""
    (lean, tok), (full, _) = load("", device="cpu"), load("", device="cpu", keep_float=True)
    return lean, full, tok


def _matrices(model):
    return [m for m in model.modules() if isinstance(m, Linear)] + [model.embed]


@torch.inference_mode()
def test_no_fp32_copy_and_the_same_logits_bit_for_bit(pair) -> None:
    lean, full, tok = pair
    assert all(m.released for m in _matrices(lean))
    assert not any(m.released for m in _matrices(full))
    assert lean.cpu_kernel == full.cpu_kernel
    text = " ".join(["The quick brown fox jumps over the lazy dog."] * 30)
    ids = torch.tensor([tok.encode(text)[:300]])
    assert ids.shape[1] == 300 > cpu_rows.MAX_INT_ROWS // 2 > cpu_rows.MAX_ROWS
    for model in (lean, full):  # the embedding from the blocks: the fp32 rows
        assert torch.equal(model.embed(ids), lean.embed.dense()[ids])

    def run(model) -> list[torch.Tensor]:
        cache = model.new_cache(512)
        out = [model(ids[:, :260], cache=cache).logits]  # past max_rows: on the kernel anyway
        out += [model(ids[:, 260 + i : 261 + i], cache=cache).logits for i in range(3)]
        out.append(model(ids[:, 263:270], cache=cache).logits)
        return out

    for a, b in zip(run(lean), run(full), strict=True):
        assert torch.equal(a, b)


def test_a_released_weight_never_computes(pair) -> None:
    lean, _, _ = pair
    lin = lean.layers[0].attn.wqkv
    with pytest.raises(ReleasedWeightError):
        torch.nn.functional.linear(torch.randn(2, lin.in_features), lin.weight)
    with pytest.raises(ReleasedWeightError):
        lean.lm_head_weight.mean(0)
    x = torch.randn(1, 2, lin.in_features, requires_grad=True)  # training takes the weight
    with pytest.raises(ReleasedWeightError):
        lin(x)


@torch.inference_mode()
def test_fp32_values_on_demand(pair) -> None:
    lean, full, _ = pair
    state, ref = lean.state_dict(), full.state_dict()
    assert state.keys() == ref.keys()
    assert all(torch.equal(state[k], ref[k]) for k in ref)
    assert isinstance(lean.embed.weight, Released)  # state_dict made copies, kept none
    ids = torch.tensor([[5, 900, 49151]])
    assert torch.equal(lean.head_matrix.rows(ids), full.lm_head_weight[ids])


@torch.inference_mode()
def test_repacking_and_materialize() -> None:
    model, tok = load("", device="cpu")
    ids = torch.tensor([tok.encode("Name a planet, please.")])

    def logits() -> torch.Tensor:
        return model(ids, cache=model.new_cache(64)).logits

    blocks = logits()
    model.pack("rows")  # f32 panels: from fp32 weights, put back for it
    assert model.cpu_kernel == "rows" and not model.layers[0].mlp.w_down.released
    assert torch.equal(logits(), blocks) or cpu_rows.integer_products("q8_0")
    model.pack()
    model.materialize()
    assert not any(m.released for m in _matrices(model))
    assert torch.equal(logits(), blocks)
