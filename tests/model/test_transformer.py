"""Transformer + KV cache semantics: cache reuse, rollback, masks, partial writes, positions."""

from __future__ import annotations

import pytest
import torch

import dllm_voice.model.layer_stack as layer_stack
import dllm_voice.model.transformer as transformer
from dllm_voice.kernels import cpu_layers, cpu_rows
from dllm_voice.model.args import ModelArgs
from dllm_voice.model.layers import causal_mask
from dllm_voice.model.loader import load
from dllm_voice.model.transformer import Transformer


@pytest.fixture(scope="module")
def tiny() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelArgs.preset("tiny")).eval()


def ids(n: int, seed: int = 0, vocab: int = 512) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, n), generator=g)  # (1, n)


@torch.inference_mode()
def test_incremental_equals_full_recompute(lm) -> None:
    model = lm.model
    x = torch.tensor([lm.tokenizer.apply_chat([{"role": "user", "content": "Name three colors."}])])
    full = model(x, cache=model.new_cache(128)).logits  # (1, T, V)
    cache = model.new_cache(128)
    parts = [model(x[:, :20], cache=cache).logits, model(x[:, 20:27], cache=cache).logits]
    for t in range(27, x.shape[1]):  # token by token, the decode path
        parts.append(model(x[:, t : t + 1], cache=cache).logits)
    inc = torch.cat(parts, dim=1)
    assert cache.length == x.shape[1]
    assert (inc - full).abs().max().item() < 1e-3


@pytest.mark.parametrize("t,s", [(1, 0), (4, 0), (3, 17), (13, 300)])
def test_causal_mask_is_the_lower_triangle_after_the_cache(t: int, s: int) -> None:
    want = torch.ones(t, s + t, dtype=torch.bool).tril(s)
    assert torch.equal(causal_mask(t, s, torch.device("cpu")), want)


@torch.inference_mode()
def test_truncate_rolls_back(tiny: Transformer) -> None:
    cache = tiny.new_cache(64)
    tiny(ids(10), cache=cache)
    ref = tiny(ids(3, seed=1), cache=cache).logits
    cache.truncate(10)
    tiny(ids(5, seed=2), cache=cache)  # garbage rows, then roll them back
    cache.truncate(10)
    again = tiny(ids(3, seed=1), cache=cache).logits
    torch.testing.assert_close(again, ref)
    with pytest.raises(ValueError):
        cache.truncate(cache.length + 1)


@torch.inference_mode()
def test_uncached_rows_see_what_the_mask_says_and_are_not_stored(tiny: Transformer) -> None:
    prefix, new = ids(8), ids(6, seed=3)
    ref_cache = tiny.new_cache(64)
    tiny(prefix, cache=ref_cache)
    ref = tiny(new, cache=ref_cache).logits  # (1, 6, V) plain causal

    cache = tiny.new_cache(64)
    tiny(prefix, cache=cache)
    causal = torch.ones(6, 8 + 6, dtype=torch.bool).tril(8)  # (T, S + T)
    out = tiny(new, cache=cache, mask=causal, write=2).logits
    torch.testing.assert_close(out, ref)
    assert cache.length == 10  # only the first 2 new rows were stored
    torch.testing.assert_close(cache.k[:, :, :, :10], ref_cache.k[:, :, :, :10])

    # A row that hides its predecessors differs; visibility really is taken from the mask.
    masked = causal.clone()
    masked[5, 8:13] = False
    cache.truncate(8)
    out2 = tiny(new, cache=cache, mask=masked, write=0).logits
    torch.testing.assert_close(out2[:, :5], ref[:, :5])
    assert (out2[:, 5] - ref[:, 5]).abs().max() > 1e-3
    assert cache.length == 8


@torch.inference_mode()
def test_explicit_positions_embeds_and_hidden(tiny: Transformer) -> None:
    x = ids(7)
    a = tiny(x, cache=tiny.new_cache(32), hidden=True)
    emb = tiny.embed(x)  # (1, 7, dim)
    b = tiny(None, embeds=emb, positions=torch.arange(7), cache=tiny.new_cache(32), hidden=True)
    torch.testing.assert_close(b.logits, a.logits)
    torch.testing.assert_close(b.hidden_normed, a.hidden_normed)
    assert a.hidden.shape == (1, 7, tiny.args.dim)
    last = tiny(x, cache=tiny.new_cache(32), logits="last").logits
    torch.testing.assert_close(last, a.logits[:, -1:])
    # RoPE is relative: a uniform shift changes nothing, a gap changes the rows after it.
    shifted = tiny(x, cache=tiny.new_cache(32), positions=torch.arange(7) + 5).logits
    torch.testing.assert_close(shifted, a.logits, rtol=1e-4, atol=1e-4)
    gap = tiny(x, cache=tiny.new_cache(32), positions=torch.tensor([0, 1, 2, 3, 9, 10, 11])).logits
    torch.testing.assert_close(gap[:, :4], a.logits[:, :4])
    assert (gap[:, 4:] - a.logits[:, 4:]).abs().max() > 1e-3


@torch.inference_mode()
def test_batched_rows_match_single(tiny: Transformer) -> None:
    x = torch.cat([ids(9, seed=4), ids(9, seed=5)])  # (2, 9)
    both = tiny(x, cache=tiny.new_cache(32, batch=2)).logits
    one = tiny(x[1:], cache=tiny.new_cache(32)).logits
    torch.testing.assert_close(both[1:], one)


@torch.inference_mode()
@pytest.mark.parametrize("kind", ["auto", "quant", "rows", "onednn"])
def test_prepacked_weights_match_plain_and_are_dropped_when_stale(lm, kind: str) -> None:
    """The loader packs every CPU matrix; logits equal the plain F.linear path, greedy tokens
    included, for a prompt and for decode steps of 1 and 5 rows (each kernel the loader may
    pick: from the GGUF blocks, from fp32, oneDNN; with the integer products of AVX-512 VNNI
    up to the activations' rounding), and a .to() or load_state_dict drops the copies and the
    blocks instead of serving stale ones."""
    model = lm.model
    assert model.layers[0].mlp.w_down.packed is not None, "bundled model should load packed"
    if kind in ("auto", "quant", "rows") and not cpu_rows.available():
        pytest.skip("cpu_rows kernel not built here")
    x = torch.tensor([lm.tokenizer.apply_chat([{"role": "user", "content": "Name a planet."}])])
    steps = [x[:, :-6], x[:, -6:-5], x[:, -5:]]  # prompt, 1 row, 5 rows

    def logits() -> torch.Tensor:
        cache = model.new_cache(128)
        return torch.cat([model(s, cache=cache).logits for s in steps], 1)  # (1, T, V)

    model.unpack()
    try:
        plain = logits()
        model.pack(kind)
        integer = model.cpu_kernel == "vnni"
        packed = logits()
    finally:
        model.unpack()
        model.pack()
    assert (packed - plain).abs().max().item() < (0.05 if integer else 1e-3)  # int16: 0.02
    assert torch.equal(packed.argmax(-1), plain.argmax(-1))

    torch.manual_seed(0)
    small = Transformer(ModelArgs.preset("tiny")).eval().requires_grad_(False).pack()
    lin = small.layers[0].attn.wqkv
    assert lin.packed is not None and small._head_packed is not None
    small.load_state_dict(small.state_dict())
    assert lin.packed is None and small._head_packed is None
    small.pack().to(torch.float64)
    assert lin.packed is None and small._head_packed is None

    small = Transformer(ModelArgs.preset("tiny")).eval().requires_grad_(False)
    lin = small.layers[0].attn.wqkv
    small.set_quantized({"layers.0.attn.wqkv.weight": cpu_rows.quantize_q8_0(lin.weight)})
    assert lin.quant is not None and small.layers[0].attn.wo.quant is None
    small.load_state_dict(small.state_dict())
    assert lin.quant is None
    with pytest.raises(ValueError, match="attn.wo.weight"):
        small.set_quantized({"layers.0.attn.wo.weight": cpu_rows.quantize_q8_0(lin.weight)})


@torch.inference_mode()
def test_gguf_blocks_give_the_fp32_weights_outputs_bit_for_bit(lm) -> None:
    """The bundled Q4_1/Q8_0 file: the blocks the loader keeps are the fp32 weights it loads
    (q/k rows permuted alike), and logits through them equal the fp32 kernel's bit for bit."""
    if not cpu_rows.available():
        pytest.skip("cpu_rows kernel not built here")
    model = lm.model
    assert model.cpu_kernel == ("vnni" if cpu_rows.has_vnni() else "quant")
    ref = load("", "cpu", "auto", keep_float=True)[0]  # the shared model may hold blocks only
    for lin, want in (
        (model.layers[0].attn.wqkv, ref.layers[0].attn.wqkv),
        (model.layers[-1].mlp.w_down, ref.layers[-1].mlp.w_down),
    ):
        assert lin.quant.fmt == "q4_1"
        assert torch.equal(cpu_rows.dequantize(lin.quant), want.weight)
    assert torch.equal(cpu_rows.dequantize(model._head_quant), ref.embed.weight)
    x = torch.tensor([lm.tokenizer.apply_chat([{"role": "user", "content": "Name a planet."}])])
    steps = [x[:, :-8], x[:, -8:-7], x[:, -7:]]  # prompt, 1 row, 7 rows (two groups of rows)

    def logits() -> torch.Tensor:
        cache = model.new_cache(128)
        return torch.cat([model(s, cache=cache).logits for s in steps], 1)

    try:
        model.pack("quant")
        quant = logits()
        model.pack("rows")
        assert model.cpu_kernel == "rows"
        assert torch.equal(logits(), quant)
    finally:
        model.pack()


@torch.inference_mode()
def test_a_verify_row_is_bit_identical_to_the_row_decoded_alone(lm) -> None:
    """Rows of one forward - a chain, or tree siblings that see only their ancestors - give
    exactly the logits and cache entries each gets in a forward of its own after its path (norm,
    products and attention all compute a row on its own): hybrid's verified tokens are `ar`'s by
    construction, not by tolerance."""
    if not cpu_rows.available():
        pytest.skip("cpu_rows kernel not built here")
    model = lm.model
    prompt = torch.tensor([lm.tokenizer.apply_chat([{"role": "user", "content": "Hi there!"}])])
    a, b, c = 1000, 2000, 3000

    def alone(path: list[int]) -> torch.Tensor:
        cache = model.new_cache(128)
        model(prompt, cache=cache, logits="none")
        return torch.cat([model(torch.tensor([[x]]), cache=cache).logits for x in path], 1)

    cache = model.new_cache(128)
    model(prompt, cache=cache, logits="none")
    s = cache.length
    chain = model(torch.tensor([[a, b, c]]), cache=cache).logits
    assert torch.equal(chain, alone([a, b, c]))
    cache.truncate(s)
    # a tree: a, then its two children b and c, both at position s + 1
    mask = torch.ones(3, s + 3, dtype=torch.bool).tril(s)
    mask[2, s + 1] = False
    positions = torch.tensor([s, s + 1, s + 1])
    tree = model(torch.tensor([[a, b, c]]), cache=cache, positions=positions, mask=mask).logits
    assert torch.equal(tree[:, :2], alone([a, b]))
    assert torch.equal(tree[:, 2:], alone([a, c])[:, 1:])


def tiny_packed(fmt: str) -> Transformer:
    """The tiny preset packed for the C layers: from fp32 panels ("f32") or from random GGUF
    blocks of `fmt` (the weights set to what the blocks stand for)."""
    if not cpu_rows.available():
        pytest.skip("cpu_rows kernel not built here")
    torch.manual_seed(0)
    model = Transformer(ModelArgs.preset("tiny")).eval().requires_grad_(False)
    if fmt != "f32":
        gen = torch.Generator().manual_seed(1)
        quant = {}
        for name, p in model.named_parameters():
            if p.dim() == 2 and name != "embed.weight":
                quant[name] = cpu_rows.random_quantized(fmt, *p.shape, gen)
                p.copy_(cpu_rows.dequantize(quant[name]))
        model.set_quantized(quant)
    return model.pack("auto" if fmt != "f32" else "rows")


@pytest.mark.parametrize("fmt", ["f32", "q4_1", "q8_0"])
def test_the_layers_as_one_c_call_compute_what_the_torch_ops_compute(fmt, monkeypatch) -> None:
    """CPU inference runs the packed layers as one C call (layer_stack.run_layers). For a prefill,
    a decode row, a chain, a draft tree at explicit positions and rows kept out of the cache it
    gives the torch layers' logits and cache entries up to rounding - from fp32 panels and from
    GGUF blocks - and it is the path taken."""
    model = tiny_packed(fmt)
    quant = "vnni" if cpu_rows.integer_products(fmt) else "quant"
    assert model.cpu_kernel == ("rows" if fmt == "f32" else quant)

    def steps(cache) -> list[torch.Tensor]:
        with torch.inference_mode():
            out = [model(ids(9), cache=cache).logits, model(ids(1, 1), cache=cache).logits]
            out.append(model(ids(4, 2), cache=cache).logits)
            s = cache.length
            mask = torch.ones(3, s + 3, dtype=torch.bool).tril(s)
            mask[2, s + 1] = False
            pos = torch.tensor([s, s + 1, s + 1])
            out.append(model(ids(3, 3), cache=cache, positions=pos, mask=mask).logits)
            out.append(model(ids(5, 4), cache=cache, write=0).logits)
        assert cache.length == s + 3
        return out

    calls = []
    layers = cpu_layers.layers
    monkeypatch.setattr(cpu_layers, "layers", lambda *a: calls.append(1) or layers(*a))
    c_cache = model.new_cache(64)
    c_out = steps(c_cache)
    assert len(calls) == 5  # one per forward
    monkeypatch.setattr(layer_stack, "c_stack", lambda layers: None)
    t_cache = model.new_cache(64)
    # integer products: an input's rounding to int16 can flip with the attention's last bits
    tol = 1e-3 if model.cpu_kernel == "vnni" else 1e-4
    for c, t in zip(c_out, steps(t_cache), strict=True):
        torch.testing.assert_close(c, t, rtol=tol, atol=tol * t.abs().max().item())
    n = t_cache.length
    for c, t in ((c_cache.k, t_cache.k), (c_cache.v, t_cache.v)):
        big = t[..., :n, :].abs().max().item()
        torch.testing.assert_close(c[..., :n, :], t[..., :n, :], rtol=tol, atol=tol * max(big, 1))


@pytest.mark.parametrize("fmt", ["f32", "q4_1"])
def test_a_batch_of_sequences_is_one_c_call_and_each_row_its_own(fmt, monkeypatch) -> None:
    """Batched generation (gen_data: left-padded prompts, explicit masks and positions) runs its
    rows of all sequences as one C call: the torch layers' logits and cache up to rounding, and a
    sequence's decode rows exactly what it gets decoded on its own."""
    model = tiny_packed(fmt)
    pads = torch.tensor([0, 3, 1])
    prompts = ids(3 * 7, seed=5).view(3, 7)
    cols = torch.arange(7)
    mask = (cols[None, :] <= cols[:, None])[None] & (cols[None, None, :] >= pads[:, None, None])
    mask |= torch.eye(7, dtype=torch.bool)[None]  # pad rows see themselves
    nxt = ids(3 * 4, seed=6).view(3, 4)

    def decode(cache) -> list[torch.Tensor]:
        pos = (cols[None, :] - pads[:, None]).clamp_min(0)
        out = [model(prompts, cache=cache, mask=mask, positions=pos).logits]
        for step in range(4):
            s = cache.length
            mk = (torch.arange(s + 1)[None, :] >= pads[:, None])[:, None]
            pos = (s - pads)[:, None]
            out.append(model(nxt[:, step : step + 1], cache=cache, mask=mk, positions=pos).logits)
        return out

    calls = []
    layers = cpu_layers.layers
    monkeypatch.setattr(cpu_layers, "layers", lambda *a: calls.append(1) or layers(*a))
    with torch.inference_mode():
        c_cache = model.new_cache(16, batch=3)
        c_out = decode(c_cache)
        assert len(calls) == 5
        for b in range(3):  # alone: no padding, its own cache
            alone = model.new_cache(16)
            model(prompts[b : b + 1, pads[b] :], cache=alone)
            for step in range(4):
                row = model(nxt[b : b + 1, step : step + 1], cache=alone).logits
                assert torch.equal(row, c_out[1 + step][b : b + 1]), (b, step)
        with monkeypatch.context() as m:
            m.setattr(layer_stack, "c_stack", lambda layers: None)
            t_cache = model.new_cache(16, batch=3)
            t_out = decode(t_cache)
    tol = 1e-3 if model.cpu_kernel == "vnni" else 1e-4
    for c, t in zip(c_out, t_out, strict=True):
        torch.testing.assert_close(c, t, rtol=tol, atol=tol * t.abs().max().item())


@pytest.mark.parametrize("fmt", ["f32", "q4_1"])
def test_several_sessions_in_one_forward_get_what_each_gets_alone(fmt, monkeypatch) -> None:
    """forward_many: sessions of different lengths (a decode row, a chain verify with logits
    after its prompt rows, a draft tree with its mask, positions and one written row) share one
    C call and one head product; each gets bit for bit its own forward's logits, hidden states
    and cache."""
    model = tiny_packed(fmt)

    def sessions() -> list:
        caches = [model.new_cache(64) for _ in range(3)]
        for i, (cache, n) in enumerate(zip(caches, (5, 17, 9), strict=True)):
            model(ids(n, seed=10 + i), cache=cache)
        s2 = caches[2].length
        mask = causal_mask(4, s2, torch.device("cpu"))
        mask[3, s2 + 2] = False  # two siblings after row 1
        return [
            transformer.Call(caches[0], ids(1, seed=20), logits="last"),
            transformer.Call(caches[1], ids(3, seed=21), logits=1, hidden=True),
            transformer.Call(
                caches[2],
                ids(4, seed=22),
                mask=mask,
                write=1,
                hidden=True,
                positions=torch.tensor([s2, s2 + 1, s2 + 2, s2 + 2]),
            ),  # fmt: skip
        ]

    calls = []
    layers = cpu_layers.layers
    monkeypatch.setattr(cpu_layers, "layers", lambda *a: calls.append(1) or layers(*a))
    with torch.inference_mode():
        together = sessions()
        calls.clear()
        outs = model.forward_many(together)
        assert len(calls) == 1
        for call, out in zip(sessions(), outs, strict=True):
            alone = model(**call.kwargs())
            for a, b in zip(alone, out, strict=True):
                assert (a is None) == (b is None)
                assert a is None or torch.equal(a, b)
        for a, b in zip(sessions(), together, strict=True):
            model(**a.kwargs())
            assert a.cache.length == b.cache.length
            n = a.cache.length
            assert torch.equal(a.cache.k[..., :n, :], b.cache.k[..., :n, :])
            assert torch.equal(a.cache.v[..., :n, :], b.cache.v[..., :n, :])
