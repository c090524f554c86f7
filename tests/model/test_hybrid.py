"""Hybrid / parallel decoders on a tiny random model: exactness vs ar, rollback, isolation of
the drafter, distribution of speculative sampling, one forward per step, refinement."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from dllm_voice.kernels import cpu_rows
from dllm_voice.model import hybrid
from dllm_voice.model.args import ModelArgs
from dllm_voice.model.config import LMConfig
from dllm_voice.model.decode import DecodeRequest, Sampler, get_decoder
from dllm_voice.model.drafter import BlockDrafter
from dllm_voice.model.hybrid import HybridStepper
from dllm_voice.model.transformer import Transformer
from dllm_voice.model.tree import DraftTree, build
from tests.lab.test_train_drafter import GEMMA_LIKE

CFG = LMConfig(drafter="none", ngram="none", row_cost=0.0)  # every draft slot verified


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny() -> Transformer:
    torch.manual_seed(0)
    model = Transformer(ModelArgs.preset("tiny", n_layers=4)).eval().requires_grad_(False)
    hybrid.set_drafter(model, "random", BlockDrafter.random(model, block=4, seed=1))
    trained_like = BlockDrafter.from_base(model, torch.arange(512), n_layers=2, block=4)
    hybrid.set_drafter(model, "from_base", trained_like)
    return model


def prompt(seed: int, n: int = 12, vocab: int = 512) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def run(model, ids, decoder, cfg=CFG, max_new=40, drafts=None, temperature=0.0, seed=0, top_p=1.0):
    """Drive a decoder like the engine does (stop at max_new); returns tokens, forwards, cache."""
    cache = model.new_cache(256)
    sampler = Sampler(temperature, top_p, seed, torch.device("cpu"))
    req = DecodeRequest(model, cache, ids, sampler, max_new, frozenset(), cfg, drafts)
    out, forwards = [], 0
    with torch.inference_mode():
        for toks in get_decoder(decoder)(req):
            forwards += 1
            out += toks
            if len(out) >= max_new:
                break
    return out[:max_new], forwards, cache


@pytest.mark.parametrize("drafter", ["none", "random", "from_base"])
def test_hybrid_equals_ar_greedy(tiny, drafter) -> None:
    cfg = replace(CFG, drafter=drafter)
    for seed in range(4):
        ids = prompt(seed)
        ref, ref_fw, _ = run(tiny, ids, "ar")
        got, fw, _ = run(tiny, ids, "hybrid", cfg)
        assert got == ref
        assert fw <= ref_fw


def test_hybrid_with_a_drafter_equals_ar_on_a_sliding_window_base() -> None:
    """Gemma 3's layout: the drafter's copies of a local and a global layer drafting past the
    window, the verify rows exact."""
    torch.manual_seed(0)
    model = Transformer(ModelArgs.preset("tiny", n_layers=4, **GEMMA_LIKE)).eval()
    model.requires_grad_(False)
    drafter = BlockDrafter.from_base(model, torch.arange(512), n_layers=2, block=4)
    assert [layer.local for layer in drafter.layers] == [False, True]  # base layers 2 and 3
    hybrid.set_drafter(model, "from_base", drafter)
    for seed in range(3):
        ids = prompt(seed)
        ref, ref_fw, _ = run(model, ids, "ar")
        got, fw, _ = run(model, ids, "hybrid", replace(CFG, drafter="from_base"))
        assert got == ref
        assert fw <= ref_fw


def test_lookup_drafts_cut_forwards(tiny) -> None:
    """A random tiny model falls into loops; prompt lookup then drafts them exactly."""
    ids = prompt(3)
    ref, ref_fw, _ = run(tiny, ids, "ar", max_new=60)
    got, fw, _ = run(tiny, ids, "hybrid", max_new=60)
    assert got == ref
    assert fw < ref_fw


def test_rollback_equals_recompute(tiny) -> None:
    ids = prompt(5)
    cfg = replace(CFG, drafter="random")
    out, _, cache = run(tiny, ids, "hybrid", cfg, max_new=30)
    n = cache.length
    seq = (ids + out)[:n]
    fresh = tiny.new_cache(256)
    with torch.inference_mode():
        tiny(torch.tensor([seq]), cache=fresh)
    assert fresh.length == n
    assert torch.allclose(cache.k[:, :, :, :n], fresh.k[:, :, :, :n], atol=1e-5)
    assert torch.allclose(cache.v[:, :, :, :n], fresh.v[:, :, :, :n], atol=1e-5)


@torch.inference_mode()
@pytest.mark.parametrize("packed", [False, True])
def test_drafter_never_touches_cache_or_verify_rows(tiny, packed: bool) -> None:
    """Whatever the drafter's weights and inputs, the cached positions and the next verify
    logits stay the same; packed, the drafter's layers run as C calls, which may use the free
    slots past cache.length as scratch, never the ones below."""
    if packed and not cpu_rows.available():
        pytest.skip("cpu_rows kernel not built here")
    ids = prompt(7)
    logits_seen = []
    if packed:
        tiny.pack("rows")
    try:
        with torch.inference_mode(packed):
            for weight_seed in (1, 2):
                cache = tiny.new_cache(256)
                req = DecodeRequest(tiny, cache, ids, Sampler(0, 1, 0, torch.device("cpu")), 40,
                                    frozenset(), CFG, None)  # fmt: skip
                drafter = BlockDrafter.random(tiny, seed=weight_seed)
                if packed:
                    drafter.requires_grad_(False).pack("rows")
                st = HybridStepper(req, drafter)
                v = st.verify(ids[:-1], ids[-1], DraftTree())
                n = cache.length
                k_before, v_before = cache.k[..., :n, :].clone(), cache.v[..., :n, :].clone()
                # Perturbed inputs too: another pending token and hidden state.
                st.propose(v.tokens[-1] + weight_seed, v.hidden * weight_seed, 4)
                assert cache.length == n
                assert torch.equal(cache.k[..., :n, :], k_before)
                assert torch.equal(cache.v[..., :n, :], v_before)
                logits, _ = st.forward_rows([v.tokens[-1], 5, 6, 7], 0)
                logits_seen.append(logits)
    finally:
        tiny.unpack()
    assert torch.equal(logits_seen[0], logits_seen[1])


def test_one_forward_per_step(tiny) -> None:
    """Each decoder step runs exactly one base forward: the engine's cancel check (before
    every step) therefore stops a generation within one forward."""
    calls = []
    hook = tiny.register_forward_hook(lambda *_: calls.append(1))
    try:
        cfg = replace(CFG, drafter="random")
        cache = tiny.new_cache(256)
        req = DecodeRequest(tiny, cache, prompt(9), Sampler(0, 1, 0, torch.device("cpu")), 30,
                            frozenset(), cfg, prompt(10, n=20))  # fmt: skip
        with torch.inference_mode():
            for _ in get_decoder("parallel")(replace(req, cfg=replace(cfg, threshold=0.0))):
                assert len(calls) == 1
                calls.clear()
    finally:
        hook.remove()


def test_tokens_are_handed_over_before_the_drafter_pass(tiny, monkeypatch) -> None:
    """hybrid yields a step's tokens first and drafts the next tree on the next resume, so the
    drafter pass never delays tokens that are already verified."""
    drafter = hybrid.drafter_for(tiny, "random")
    calls = []
    real = drafter.draft
    monkeypatch.setattr(drafter, "draft", lambda *a, **k: calls.append(1) or real(*a, **k))
    cache = tiny.new_cache(256)
    req = DecodeRequest(tiny, cache, prompt(14), Sampler(0, 1, 0, torch.device("cpu")), 30,
                        frozenset(), replace(CFG, drafter="random"), None)  # fmt: skip
    with torch.inference_mode():
        steps = get_decoder("hybrid")(req)
        assert len(next(steps)) == 1 and not calls
        next(steps)
        assert len(calls) == 1
        steps.close()


def test_one_thread_auto_cost_skips_the_drafter_pass_where_a_second_row_jumps(tiny) -> None:
    """At 1 thread F.linear/oneDNN run one row on MKL's gemv and more on a gemm (a 1.46x jump):
    there auto row costs charge the jump and drop the drafter pass; cpu_rows has no jump (and
    drops the pass because it does not pay there either)."""
    req = DecodeRequest(tiny, tiny.new_cache(64), prompt(1), Sampler(0, 1, 0, torch.device("cpu")),
                        8, frozenset(), replace(CFG, row_cost=-1.0), None)  # fmt: skip
    drafter = BlockDrafter.random(tiny, seed=4)
    assert tiny.cpu_kernel == "plain"
    st = HybridStepper(req, drafter)  # this test runs at 1 thread
    assert st.drafter is None and st.first_row_cost > 0 and st.row_cost == 0.1
    assert HybridStepper(replace(req, cfg=CFG), drafter).drafter is drafter
    if cpu_rows.available():
        tiny.pack("rows")
        try:
            st = HybridStepper(req, drafter)
            assert st.drafter is None and st.first_row_cost == 0 and st.row_cost == 0.03
        finally:
            tiny.unpack()


def test_auto_cost_skips_the_drafter_pass_where_it_does_not_pay(tiny, monkeypatch) -> None:
    """From GGUF blocks on CPU ("quant") a verify row costs arithmetic and the drafter's pass
    does not pay: auto drops it for hybrid, keeps it for parallel and for an explicit cost."""
    monkeypatch.setattr(Transformer, "cpu_kernel", property(lambda self: "quant"))
    req = DecodeRequest(tiny, tiny.new_cache(64), prompt(1), Sampler(0, 1, 0, torch.device("cpu")),
                        8, frozenset(), replace(CFG, row_cost=-1.0), None)  # fmt: skip
    drafter = BlockDrafter.random(tiny, seed=4)
    st = HybridStepper(req, drafter)
    assert st.drafter is None and st.row_cost == 0.15
    assert HybridStepper(req, drafter, threshold=0.9).drafter is drafter
    assert HybridStepper(replace(req, cfg=CFG), drafter).drafter is drafter


def test_the_drafter_pass_setting_overrides_auto(tiny, monkeypatch) -> None:
    """lm.drafter_pass on runs the pass where auto would drop it, off drops it where auto runs it
    (a tuned profile sets either); parallel always drafts."""
    monkeypatch.setattr(Transformer, "cpu_kernel", property(lambda self: "quant"))
    req = DecodeRequest(tiny, tiny.new_cache(64), prompt(1), Sampler(0, 1, 0, torch.device("cpu")),
                        8, frozenset(), replace(CFG, row_cost=-1.0), None)  # fmt: skip
    drafter = BlockDrafter.random(tiny, seed=4)
    assert HybridStepper(req, drafter).drafter is None
    on = replace(req, cfg=replace(req.cfg, drafter_pass="on"))
    assert HybridStepper(on, drafter).drafter is drafter
    off = replace(req, cfg=replace(CFG, drafter_pass="off"))
    assert HybridStepper(replace(req, cfg=CFG), drafter).drafter is drafter
    assert HybridStepper(off, drafter).drafter is None
    assert HybridStepper(off, drafter, threshold=0.9).drafter is drafter  # parallel's dial


def test_parallel_threshold_one_is_hybrid(tiny) -> None:
    for drafter in ("random", "from_base"):
        cfg = replace(CFG, drafter=drafter, threshold=1.0)
        ids = prompt(11)
        assert run(tiny, ids, "parallel", cfg)[:2] == run(tiny, ids, "hybrid", cfg)[:2]


def test_parallel_low_threshold_commits_unverified(tiny) -> None:
    cfg = replace(CFG, drafter="random", threshold=0.0, lookup_ngram=0)
    ids = prompt(12)
    out, fw, cache = run(tiny, ids, "parallel", cfg, max_new=40)
    # Every draft is committed: the drafter's 4 drafts + 1 token per forward after the prefill.
    assert len(out) == 40 and fw <= 1 + 40 // (4 + 1) + 1
    assert cache.length <= len(ids) + len(out)


def test_refinement_from_own_answer_is_cheap(tiny) -> None:
    ids = prompt(13)
    ref, ref_fw, _ = run(tiny, ids, "ar", max_new=40)
    got, fw, _ = run(tiny, ids, "hybrid", max_new=40, drafts=ref)
    assert got == ref
    assert fw <= 40 // (CFG.refine_len + 1) + 2
    # A corrupted earlier answer still gives exactly the ar text.
    bad = ref[:10] + [(ref[10] + 1) % 512] + ref[11:]
    got, fw, _ = run(tiny, ids, "hybrid", max_new=40, drafts=bad)
    assert got == ref and fw < ref_fw


def _chi2_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    n = counts.sum()
    expected = probs * n
    keep = expected > 0
    stat = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    df = int(keep.sum()) - 1
    return float(1 - torch.special.gammainc(torch.tensor(df / 2.0), stat / 2.0))


@pytest.mark.parametrize("top_p", [1.0, pytest.param(0.8, marks=pytest.mark.slow)])
def test_speculative_sampling_preserves_distribution(top_p) -> None:
    """3-token continuations of a 4-token-vocab model: hybrid (with drafter + lookup drafts
    that are often rejected) samples the same joint distribution as the exact one."""
    torch.manual_seed(3)
    vocab = 4
    model = Transformer(ModelArgs.preset("tiny", vocab_size=vocab, n_layers=4)).eval()
    model.requires_grad_(False)
    model.embed.weight.mul_(0.1)  # small logits: every token keeps real probability mass
    hybrid.set_drafter(model, "random", BlockDrafter.random(model, seed=5))
    cfg = replace(CFG, drafter="random", draft_len=2)
    ids, temp = [0, 1, 2, 3, 1], 1.0
    sampler = Sampler(temp, top_p, 0, torch.device("cpu"))
    exact = torch.zeros(vocab**3)
    with torch.inference_mode():
        for seq in itertools.product(range(vocab), repeat=3):
            logits = model(torch.tensor([ids + list(seq[:2])]), cache=model.new_cache(16)).logits
            p = sampler.probs(logits[0, -3:])  # (3, V): rows predicting seq[0], seq[1], seq[2]
            exact[seq[0] * 16 + seq[1] * 4 + seq[2]] = p[0, seq[0]] * p[1, seq[1]] * p[2, seq[2]]
    assert (exact > 0.005).sum() >= 16  # a spread-out target, not a near point mass
    counts, accepted, n = torch.zeros(vocab**3), 0, 600
    for seed in range(n):
        out, fw, _ = run(model, ids, "hybrid", cfg, max_new=3, temperature=temp, seed=seed,
                         top_p=top_p)  # fmt: skip
        counts[out[0] * 16 + out[1] * 4 + out[2]] += 1
        accepted += fw < 3
    assert n // 10 < accepted < n - n // 10  # drafts were both accepted and rejected, often
    assert counts[exact == 0].sum() == 0  # nothing outside the top-p support
    assert _chi2_pvalue(counts, exact) > 1e-3


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_tree_sampling_preserves_distribution(top_p) -> None:
    """Recursive rejection sampling over a tree with siblings: the first committed token is
    distributed as the anchor row's p, the second (after a draft node) as that node's row."""
    vocab = 5
    tree = DraftTree()
    for token, parent in ((1, -1), (2, -1), (3, -1), (0, 0), (4, 0), (1, 1)):
        tree.add(token, parent, 0.5, 0.5)
    logits = torch.randn(1 + len(tree), vocab, generator=torch.Generator().manual_seed(4)) * 1.5
    model = Transformer(ModelArgs.preset("tiny", vocab_size=vocab, n_layers=1))
    sampler = Sampler(1.0, top_p, 0, torch.device("cpu"))
    req = DecodeRequest(model, model.new_cache(8), [0], sampler, 8, frozenset(), CFG, None)
    st = HybridStepper(req, None)
    p = sampler.probs(logits)  # (7, V)
    # Outcome (first, second) for a first token that is a root child, (first, -) otherwise.
    exact = torch.zeros(vocab, vocab + 1)
    for x in range(vocab):
        node = next((j for j in range(len(tree)) if tree.parents[j] < 0 and tree.tokens[j] == x),
                    None)  # fmt: skip
        if node is None:
            exact[x, vocab] = p[0, x]
        else:
            exact[x, :vocab] = p[0, x] * p[node + 1]
    counts, deep, n = torch.zeros_like(exact), 0, 4000
    for _ in range(n):
        path, bonus = st.accept(logits, tree)
        toks = [tree.tokens[j] for j in path] + [bonus]
        counts[toks[0], toks[1] if len(toks) > 1 and path[0] < 3 else vocab] += 1
        deep += len(path) == 2
    assert deep > n // 20  # second-level nodes were accepted too
    assert counts[exact == 0].sum() == 0
    assert _chi2_pvalue(counts.flatten(), exact.flatten()) > 1e-3


def test_drafts_verified_while_they_pay_for_their_rows() -> None:
    def worth(drafts, confs, row_cost, stop_ids):
        tree = build([], [(drafts, confs)], max_nodes=8, max_depth=8, row_cost=row_cost,
                     stop_ids=stop_ids)  # fmt: skip
        assert tree.is_chain()
        return tree.tokens, tree.confs

    drafts, confs = [1, 2, 3, 4], [0.9, 0.8, 0.5, 0.9]
    assert worth(drafts, confs, 0.0, frozenset()) == (drafts, confs)  # free rows: all of them
    # chain 0.9, 0.72, 0.36, 0.324 -> expected tokens 1.9, 2.62, 2.98, 3.30 for n = 1..4;
    # at 0.5 per row the rates are 1.27, 1.31, 1.19, 1.10: two drafts are worth their rows.
    assert worth(drafts, confs, 0.5, frozenset()) == ([1, 2], [0.9, 0.8])
    assert worth(drafts, [0.05] * 4, 0.1, frozenset()) == ([], [])  # unlikely: not worth a row
    assert worth(drafts, confs, 0.0, frozenset({2})) == ([1, 2], [0.9, 0.8])  # stop ends it


def test_bad_draft_ids_are_rejected(tiny) -> None:
    with pytest.raises(ValueError, match="drafts="):
        run(tiny, prompt(1), "hybrid", drafts=[1, 2, 10**6])
