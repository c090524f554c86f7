"""Block drafter at run time: 4-bit codes, the file round trip and its errors, loading in the
base's dtype."""

from __future__ import annotations

import pytest
import torch

from dllm_voice.model.args import ModelArgs
from dllm_voice.model.drafter import BlockDrafter, load_default, q4_decode, q4_encode
from dllm_voice.model.errors import ModelLoadError
from dllm_voice.model.transformer import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelArgs.preset("tiny", n_layers=4)).eval().requires_grad_(False)


def test_q4_code_roundtrip() -> None:
    x = torch.randn(6, 64) * torch.logspace(-3, 0, 6)[:, None]  # rows of different magnitudes
    codes, scales = q4_encode(x)
    assert codes.dtype == torch.uint8 and codes.shape == (6, 32) and scales.shape == (6, 2)
    err = (q4_decode(codes, scales) - x).abs().view(6, 2, 32)
    assert (err <= scales.float()[..., None] / 2 + 1e-6).all()
    assert torch.equal(q4_decode(*q4_encode(torch.zeros(2, 32))), torch.zeros(2, 32))


def test_save_load_roundtrip(tiny, tmp_path) -> None:
    d = BlockDrafter.from_base(tiny, torch.arange(100, 300), n_layers=2, block=3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # as after training: every tensor moved off its starting point
        for p in d.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    f = tmp_path / "d.safetensors"
    d.save(f, tiny, {"note": "test"})
    e = BlockDrafter.load(f, tiny)
    assert e.args == d.args and torch.equal(e.vocab_ids, d.vocab_ids)
    for (name, a), (_, b) in zip(d.state_dict().items(), e.state_dict().items(), strict=True):
        assert torch.allclose(a.float(), b.float(), atol=0.02 * 4 / 14 + 1e-3), name
    n_params = sum(p.numel() for p in d.parameters())
    assert f.stat().st_size < n_params  # 4-bit matrices: under a byte per parameter
    assert load_default("none", tiny) is None
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelLoadError, match="not a drafter adapter"):
        BlockDrafter.load(tmp_path / "bad.safetensors", tiny)
    with pytest.raises(ModelLoadError, match="not found"):
        load_default(str(tmp_path / "missing.safetensors"), tiny)
    other = Transformer(ModelArgs.preset("tiny", n_layers=3))
    with pytest.raises(ModelLoadError, match="lm.drafter: none"):
        BlockDrafter.load(f, other)
    torch.manual_seed(5)  # same shapes, other weights: the stored changes would not fit them
    retrained = Transformer(ModelArgs.preset("tiny", n_layers=4))
    with pytest.raises(ModelLoadError, match="other base weights.*lm.drafter: none"):
        BlockDrafter.load(f, retrained)


def test_loads_in_its_bases_dtype_and_drafts(tiny, tmp_path) -> None:
    """A bf16 base (the CUDA default) gets a bf16 drafter: its matrices meet the base's hidden
    states and head in one dtype (and the base's rope tables follow its `.to()`)."""
    import copy

    d = BlockDrafter.from_base(tiny, torch.arange(100, 300), n_layers=2, block=3)
    f = tmp_path / "d.safetensors"
    d.save(f, tiny)
    tiny.new_cache(64)  # rope tables built in fp32: the bf16 copy must not keep them
    base = copy.deepcopy(tiny).to(torch.bfloat16)
    e = BlockDrafter.load(f, base)
    assert {p.dtype for p in e.parameters()} == {torch.bfloat16}
    cache = base.new_cache(32)
    assert base.rope_cos.dtype == torch.bfloat16
    base(torch.tensor([[5, 6, 7]]), cache=cache, logits="none")
    toks, probs = e.draft(base, cache, 8, torch.randn(base.args.dim, dtype=torch.bfloat16))
    assert len(toks) == len(probs) == 3 and all(100 <= t[0] < 300 for t in toks)


def test_a_narrow_kv_only_drafter_round_trips_and_drafts(tiny, tmp_path) -> None:
    """The architecture search's variants: an MLP narrowed to the base's strongest units and
    rows that read only the context's K/V load back from their file and draft."""
    d = BlockDrafter.from_base(tiny, torch.arange(100, 300), n_layers=1, block=2, ffn=64,
                               hidden=False)  # fmt: skip
    assert d.layers[0].mlp.ffn_dim == 64 and d.args.ffn == 64 and not d.args.hidden
    base_mlp = tiny.layers[-1].mlp
    cut = d.layers[0].mlp
    down = base_mlp.w_down.weight
    # each kept unit is one of the base's, carried with its gate, up and down weights
    for j in range(64):
        col = cut.w_down.weight[:, j]
        k = int((down - col[:, None]).abs().sum(0).argmin())
        assert torch.equal(down[:, k], col)
        assert torch.equal(base_mlp.w_gate_up.weight[k], cut.w_gate_up.weight[j])
        assert torch.equal(base_mlp.w_gate_up.weight[128 + k], cut.w_gate_up.weight[64 + j])
    with torch.no_grad():
        d.layers[0].mlp.w_down.weight.add_(0.01)
    f = tmp_path / "narrow.safetensors"
    d.save(f, tiny)
    e = BlockDrafter.load(f, tiny)
    assert e.args == d.args
    assert torch.allclose(e.layers[0].mlp.w_down.weight, d.layers[0].mlp.w_down.weight, atol=2e-3)
    cache = tiny.new_cache(32)
    tiny(torch.tensor([[5, 6, 7]]), cache=cache, logits="none")
    h = torch.randn(tiny.args.dim)
    toks, _ = e.draft(tiny, cache, 8, h)
    assert len(toks) == 2 and toks == e.draft(tiny, cache, 8, -h)[0]  # the hidden state unread
