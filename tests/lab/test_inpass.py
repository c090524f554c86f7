"""Design (a) in-pass draft rows: verify rows and the cache never see the draft rows or the
adapter; with a zero LoRA the draft rows are plain base rows; training lowers the loss; the
simulated decode counts forwards as the real decoder would."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from dllm_voice.model.args import ModelArgs
from dllm_voice.model.transformer import Transformer
from lab.gen_data import generate_batch
from lab.inpass import (
    InPassAdapter,
    _block_mask,
    inpass_forward,
    rows_forward,
    sample_anchors,
    simulate,
    train_step,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelArgs.preset("tiny")).eval().requires_grad_(False).pack()


def randomized(base: Transformer, seed: int) -> InPassAdapter:
    ad = InPassAdapter.from_base(base, torch.arange(256), rank=4)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ad.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return ad


@pytest.mark.parametrize(("prefix", "tv"), [(0, 5), (7, 5), (7, 2), (7, 1)])
def test_verify_rows_and_cache_ignore_drafts(tiny, prefix, tv) -> None:
    g = torch.Generator().manual_seed(prefix)
    ctx, verify = torch.randint(0, 512, (1, 9), generator=g), torch.randint(0, 512, (1, tv))
    blocks = ((1, tuple(range(tv)), 5), (2, tuple(range(tv)), 5), (3, (0, tv - 1), 3), (4, (), 5))
    runs = []
    for seed, accept, rows in blocks:
        cache = tiny.new_cache(64)
        if prefix:
            tiny(ctx[:, :prefix], cache=cache, logits="none")
        out = inpass_forward(tiny, randomized(tiny, seed), cache, verify, accept, rows)
        assert out.draft_logits.shape == (1, len(accept), rows, 256)
        n = cache.length
        runs.append((out.verify_logits, cache.k[:, :, :, :n], cache.v[:, :, :, :n], n))
    plain = tiny.new_cache(64)
    if prefix:
        tiny(ctx[:, :prefix], cache=plain, logits="none")
    n = prefix + tv
    ref = (tiny(verify, cache=plain).logits, plain.k[:, :, :, :n], plain.v[:, :, :, :n])
    # Another adapter, other draft rows of the same count: bit for bit the same.
    assert all(torch.equal(a, b) for a, b in zip(runs[0][:3], runs[1][:3], strict=True))
    for run in runs:
        assert run[3] == plain.length == prefix + tv
        # Equal to the plain forward of the verify rows. Prepacked GEMMs give a row the same
        # bits at any row count >= 2; one row alone takes another kernel (~1e-6 apart).
        for a, b in zip(run[:3], ref, strict=True):
            if tv > 1:
                assert torch.equal(a, b)
            else:
                torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_zero_lora_draft_rows_are_base_rows(tiny) -> None:
    ad = randomized(tiny, 4)
    with torch.no_grad():
        for lora in ad.lora:
            for m in lora.values():
                m.b.zero_()
    g = torch.Generator().manual_seed(5)
    ctx, verify = torch.randint(0, 512, (1, 6), generator=g), torch.randint(0, 512, (1, 4))
    cache = tiny.new_cache(64)
    tiny(ctx, cache=cache, logits="none")
    accept, rows = (0, 2), 3
    out = inpass_forward(tiny, ad, cache, verify, accept, rows)
    # The base over the same rows: drafts as input embeddings, same positions, same mask.
    cache.truncate(6)
    x = torch.cat((tiny.embed(verify), ad.block_inputs(rows).repeat(2, 1)[None]), dim=1)
    anchors = torch.tensor(accept) + 6
    pos = torch.cat((torch.arange(6, 10), (anchors[:, None] + torch.arange(1, 4)).flatten()))
    mask = torch.cat((torch.ones(4, 10, dtype=torch.bool).tril(6),
                      torch.zeros(4, 6, dtype=torch.bool)), dim=1)  # fmt: skip
    mask = torch.cat((mask, _block_mask(anchors, rows, 10)), dim=0)  # (10, 16)
    ref = tiny(embeds=x, cache=cache, positions=pos, mask=mask, write=4).logits[0, 4:]
    torch.testing.assert_close(out.draft_logits.view(6, -1), ref[:, ad.vocab_ids])


@pytest.fixture(scope="module")
def records(tiny):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(4, 512, (n,), generator=g).tolist() for n in (5, 9, 7)]
    tok = SimpleNamespace(stop_ids=frozenset({3}))
    return generate_batch(tiny, tok, prompts, temperatures=[0.0, 0.0, 1.0], seed=0,
                          max_new_tokens=24, store_hidden=False)  # fmt: skip


def test_training_lowers_loss(tiny, records) -> None:
    torch.manual_seed(0)
    ad = InPassAdapter.from_base(tiny, torch.arange(512), rank=8, block=3).requires_grad_(True)
    opt = torch.optim.AdamW(ad.parameters(), lr=1e-2)
    rng, to_vocab = random.Random(0), torch.arange(512)
    fixed = [sample_anchors(r, 8, rng) for r in records]
    losses = [train_step(ad, tiny, opt, records, fixed, to_vocab)[0] for _ in range(25)]
    assert losses[-1] < 0.7 * losses[0]
    _, n, nd = train_step(ad, tiny, opt, records, fixed, to_vocab)
    assert 0 < nd < n <= 3 * 8 * 4


def test_block_rows_see_their_prefix_only(tiny) -> None:
    """A training block equals the decode-time block anchored at the same verify row."""
    ad = randomized(tiny, 6)
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(7))
    cache = tiny.new_cache(64)
    tiny(ids[:, :8], cache=cache, logits="none")
    step = inpass_forward(tiny, ad, cache, ids[:, 8:], (1,), 5).draft_logits[0, 0]
    full = tiny.new_cache(64)
    tiny(ids, cache=full, logits="none")  # the later rows 10, 11 must not matter
    x = ad.block_inputs(5)[None]
    _, hd = rows_forward(tiny, ad, full, x, 0, torch.arange(10, 15), _block_mask(
        torch.tensor([9]), 5, 12))  # fmt: skip
    # Rounding apart: the training path (gradients on) normalizes with F.rms_norm, decode with
    # the C kernel's norm.
    torch.testing.assert_close(
        torch.nn.functional.linear(hd[0], ad.head), step, atol=1e-4, rtol=1e-4
    )


def test_simulate_counts_like_the_decoder() -> None:
    ids = list(range(100, 120))  # prompt 0..4, answer 5..19
    p, rows = 5, 5
    perfect = torch.tensor([[ids[min(a + 1 + r, 19)] for r in range(rows)]
                            for a in range(p - 1, len(ids) - 1)])  # fmt: skip
    # 14 tokens after the first: 5 per forward with all 4 drafts right, capped at the end.
    assert simulate(perfect, ids, p) == (3, 14)
    assert simulate(perfect, ids, p, (0, 4)) == (3, 14)
    wrong = perfect.clone()
    wrong[:, 1:] = 0  # row 1 (bonus position) alone right: one token per forward
    assert simulate(wrong, ids, p) == (14, 14)
    two = perfect.clone()
    two[:, 3:] = 0  # 2 drafts right: 3 tokens per forward; with {0, 4}: the next block is
    assert simulate(two, ids, p) == (5, 14)  # block 0, whose row 4 is wrong -> 1 more token
    assert simulate(two, ids, p, (0, 4)) == (7, 14)
