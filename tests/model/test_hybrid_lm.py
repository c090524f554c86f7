"""Hybrid / parallel decoders with the bundled SmolLM2 through the engine: token-for-token
equal to ar with the trained drafter, without one and with a random one; refinement;
cancellation; the committed adapter and n-gram store load by default."""

from __future__ import annotations

import threading
import weakref
from dataclasses import replace

import pytest

from dllm_voice.model import hybrid, loader
from dllm_voice.model.drafter import DEFAULT_ADAPTER, BlockDrafter
from dllm_voice.model.engine import LM
from dllm_voice.model.errors import ModelLoadError
from dllm_voice.model.ngram import DEFAULT_STORE
from lab.prompts import conversations

PROMPTS = conversations("heldout")


@pytest.fixture(scope="module")
def lms(lm: LM) -> dict[str, LM]:
    """LMs sharing the session's weights, one per drafter setting."""
    hybrid.set_drafter(lm.model, "random", BlockDrafter.random(lm.model, seed=0))
    # "random" runs without the n-gram store, so the random drafter drafts at every step.
    settings = (("trained", "", ""), ("none", "none", ""), ("random", "random", "none"))
    return {
        # row_cost explicit: auto skips the drafter pass on GGUF blocks and at 1 thread.
        name: LM(
            lm.model,
            lm.tokenizer,
            replace(lm.cfg, decoder="hybrid", drafter=d, ngram=n, row_cost=0.1),
        )
        for name, d, n in settings
    }


def answer(lm: LM, conv, decoder: str, max_new: int, drafts=None):
    g = lm.session().generate(conv, decoder=decoder, max_new_tokens=max_new, drafts=drafts)
    text = "".join(g)
    return g.token_ids, text, g.stats


@pytest.fixture(scope="module")
def ar_answers(lm: LM) -> dict[tuple[int, int], tuple]:
    """ar references, computed once per (prompt index, max_new_tokens)."""
    memo: dict[tuple[int, int], tuple] = {}

    def get(i: int, max_new: int) -> tuple:
        if (i, max_new) not in memo:
            memo[i, max_new] = answer(lm, PROMPTS[i], "ar", max_new)
        return memo[i, max_new]

    return get


def test_trained_adapter_is_the_default(lms) -> None:
    assert DEFAULT_ADAPTER.exists()
    d = hybrid.drafter_for(lms["trained"].model, "")
    assert d is not None and d.args.block >= 2
    assert hybrid.drafter_for(lms["none"].model, "none") is None
    assert DEFAULT_STORE.exists() and hybrid.ngram_for(lms["trained"].model, "") is not None


def test_load_prepares_what_the_decoder_needs(lm, monkeypatch) -> None:
    monkeypatch.setattr(loader, "load", lambda *_: (lm.model, lm.tokenizer))
    monkeypatch.setattr(hybrid, "_DRAFTERS", weakref.WeakKeyDictionary())
    monkeypatch.setattr(hybrid, "_NGRAMS", weakref.WeakKeyDictionary())
    LM.load(replace(lm.cfg, decoder="ar"))
    assert lm.model not in hybrid._DRAFTERS and lm.model not in hybrid._NGRAMS
    LM.load(replace(lm.cfg, decoder="hybrid"))  # loaded before the first answer
    assert set(hybrid._DRAFTERS[lm.model]) == set(hybrid._NGRAMS[lm.model]) == {""}
    with pytest.raises(ModelLoadError, match="lm.drafter file not found"):  # at startup
        LM.load(replace(lm.cfg, decoder="parallel", drafter="missing.safetensors"))


@pytest.mark.parametrize("drafter", ["trained", "none", "random"])
def test_hybrid_equals_ar_quick(lms, ar_answers, drafter) -> None:
    ref, ref_text, ref_st = ar_answers(0, 16)
    got, text, st = answer(lms[drafter], PROMPTS[0], "hybrid", 16)
    assert got == ref and text == ref_text
    assert st.forwards <= ref_st.forwards


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["trained", "none", "random"])
def test_hybrid_equals_ar_ten_prompts(lms, ar_answers, drafter) -> None:
    for i in range(10):
        assert answer(lms[drafter], PROMPTS[i], "hybrid", 64)[0] == ar_answers(i, 64)[0]


def test_parallel_at_threshold_one_equals_hybrid(lms) -> None:
    lm = lms["trained"]
    lm1 = LM(lm.model, lm.tokenizer, replace(lm.cfg, threshold=1.0))
    conv = PROMPTS[2]
    assert answer(lm1, conv, "parallel", 16)[:2] == answer(lm1, conv, "hybrid", 16)[:2]


def test_refinement_reuses_an_earlier_answer(lms) -> None:
    """The answer drafted from a partial transcript becomes the drafts for the final one."""
    lm = lms["none"]
    partial = [{"role": "user", "content": "Name three colors"}]
    final = [{"role": "user", "content": "Name three colors."}]
    ref, _, ref_st = answer(lm, final, "ar", 20)
    s = lm.session()
    old = s.generate(partial, decoder="hybrid", max_new_tokens=20)
    list(old)
    g = s.generate(final, decoder="hybrid", max_new_tokens=20, drafts=old.token_ids)
    list(g)
    assert g.token_ids == ref
    assert g.stats.cached_tokens > 0  # the shared prompt prefix was kept
    # Its own answer as drafts: the whole answer is verified in a few forwards.
    same = lm.session().generate(final, decoder="hybrid", max_new_tokens=20, drafts=ref)
    list(same)
    assert same.token_ids == ref and same.stats.forwards <= 3 < ref_st.forwards


def test_cancel_stops_within_one_forward(lms) -> None:
    lm = lms["trained"]
    calls: list[int] = []
    hook = lm.model.register_forward_hook(lambda *_: calls.append(1))
    cancel = threading.Event()
    try:
        g = lm.session().generate(PROMPTS[3], decoder="hybrid", max_new_tokens=64, cancel=cancel)
        for _ in g:
            cancel.set()  # as the app's barge-in does, between two steps
            n = len(calls)
        assert len(calls) == n  # no forward after the cancel
        assert g.stats.stop_reason == "cancelled"
    finally:
        hook.remove()


def test_sampling_runs_and_is_seeded(lms) -> None:
    lm = lms["trained"]
    hot = LM(lm.model, lm.tokenizer, replace(lm.cfg, temperature=0.8, top_p=0.95, seed=7))
    a = answer(hot, PROMPTS[4], "hybrid", 12)
    b = answer(hot, PROMPTS[4], "hybrid", 12)
    assert a[0] == b[0] and len(a[0]) > 0
    assert all(0 <= t < lm.model.args.vocab_size for t in a[0])
