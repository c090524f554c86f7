"""Draft trees: best-first construction, visibility, parallel forcing, and a verify forward over a
tree on a tiny random model (accepted path, KV cache compaction, exactness vs ar)."""

from __future__ import annotations

import pytest
import torch

from dllm_voice.model.args import ModelArgs
from dllm_voice.model.config import LMConfig
from dllm_voice.model.decode import DecodeRequest, Sampler
from dllm_voice.model.hybrid import HybridStepper
from dllm_voice.model.kv_cache import KVCache
from dllm_voice.model.transformer import Transformer
from dllm_voice.model.tree import DraftTree, build

pytestmark = pytest.mark.usefixtures("one_thread")

NO_STOP: frozenset[int] = frozenset()


def grow(marginals, chains=(), n=8, depth=4, row_cost=0.0, stop=NO_STOP, threshold=1.0,
         first_row_cost=0.0):  # fmt: skip
    return build(marginals, list(chains), max_nodes=n, max_depth=depth, row_cost=row_cost,
                 stop_ids=stop, threshold=threshold, first_row_cost=first_row_cost)  # fmt: skip


def paths(tree: DraftTree) -> list[tuple[int, ...]]:
    out = []
    for j in range(len(tree)):
        p, node = [], j
        while node >= 0:
            p.append(tree.tokens[node])
            node = tree.parents[node]
        out.append(tuple(reversed(p)))
    return out


def test_best_first_spends_rows_where_acceptance_is_likely() -> None:
    marg = [[(10, 0.5), (11, 0.4)], [(20, 0.3), (21, 0.1)]]
    tree = grow(marg, n=4)
    # Scores: (10) .5, (11) .4, (10,20) .15, (11,20) .12, (10,21) .05, ...
    assert paths(tree) == [(10,), (11,), (10, 20), (11, 20)]
    assert tree.scores == pytest.approx([0.5, 0.4, 0.15, 0.12])
    assert tree.parents == [-1, -1, 0, 1] and tree.depths == [1, 1, 2, 2]
    assert not tree.is_chain()
    # Every node's parent comes first and scores never grow along a path.
    for j, p in enumerate(tree.parents):
        assert p < j and (p < 0 or tree.scores[p] >= tree.scores[j])
    assert grow(marg, n=8, depth=1).depths == [1, 1]  # depth cap


def test_lookup_chain_applies_along_its_own_path_only() -> None:
    marg = [[(10, 0.5)], [(20, 0.3)]]
    tree = grow(marg, chains=[([10, 30, 31], [0.6, 0.9, 0.9])], n=8)
    got = dict(zip(paths(tree), tree.scores, strict=True))
    assert got[(10,)] == pytest.approx(0.6)  # both propose 10: the higher confidence counts
    assert got[(10, 30)] == pytest.approx(0.54) and got[(10, 30, 31)] == pytest.approx(0.486)
    assert got[(10, 20)] == pytest.approx(0.18)  # the drafter's marginals apply under any node
    assert (10, 20, 31) not in got  # the lookup chain only continues its own path


def test_rows_are_kept_while_they_pay_and_stop_tokens_end_a_path() -> None:
    marg = [[(10, 0.9), (11, 0.05)], [(20, 0.8)], [(30, 0.5)]]
    assert paths(grow(marg, row_cost=0.1)) == [(10,), (10, 20), (10, 20, 30)]
    assert len(grow([[(10, 0.05)]], row_cost=0.1)) == 0  # not worth a row
    # A fixed cost for leaving the 1-row kernel: a few likely drafts no longer pay, many do.
    assert len(grow([[(10, 0.3)]], row_cost=0.05, first_row_cost=0.35)) == 0
    assert len(grow(marg, row_cost=0.05, first_row_cost=0.35)) == 3
    tree = grow(marg, stop=frozenset({20}))
    assert (10, 20) in paths(tree) and not any(len(p) == 3 and p[1] == 20 for p in paths(tree))


def test_mask_shows_each_node_its_ancestors() -> None:
    tree = grow([[(10, 0.5), (11, 0.4)], [(20, 0.3)]], n=4)  # (10) (11) (10,20) (11,20)
    m = tree.mask()
    assert m.tolist() == [
        [True, False, False, False],
        [False, True, False, False],
        [True, False, True, False],
        [False, True, False, True],
    ]


def test_parallel_commits_the_confident_chain_and_grows_below_it() -> None:
    marg = [[(10, 0.95), (11, 0.04)], [(20, 0.92), (21, 0.05)], [(30, 0.6), (31, 0.3)]]
    tree = grow(marg, n=4, threshold=0.9)
    assert tree.forced == 2 and tree.tokens[:2] == [10, 20] and tree.parents[:2] == [-1, 0]
    assert all(p == (10, 20) or p[:2] == (10, 20) or p == (10,) for p in paths(tree))
    assert grow(marg, n=4, threshold=1.0).forced == 0
    # Even a saturated confidence is never committed blind at threshold 1.0.
    assert grow([[(10, 1.0)]], threshold=1.0).forced == 0


def test_kv_move_makes_the_accepted_path_contiguous() -> None:
    c = KVCache(2, 1, 3, 16)
    c.k[:, :, :, :10] = torch.arange(10.0)[:, None]
    c.v[:, :, :, :10] = -torch.arange(10.0)[:, None]
    c.length = 10
    c.move(5, [6, 8, 9])
    c.truncate(8)
    assert c.k[0, 0, 0, :8, 0].tolist() == [0, 1, 2, 3, 4, 6, 8, 9]
    assert c.v[1, 0, 0, :8, 0].tolist() == [0, -1, -2, -3, -4, -6, -8, -9]


@torch.inference_mode()
def test_verify_follows_the_matching_branch_and_keeps_its_cache_rows() -> None:
    torch.manual_seed(0)
    model = Transformer(ModelArgs.preset("tiny", n_layers=3)).eval().requires_grad_(False)
    ids = torch.randint(0, 512, (10,)).tolist()
    ar, cache = [], model.new_cache(64)
    logits = model(torch.tensor([ids]), cache=cache).logits[0, -1]
    for _ in range(3):
        ar.append(int(logits.argmax()))
        logits = model(torch.tensor([[ar[-1]]]), cache=cache).logits[0, -1]
    g1, g2, g3 = ar
    wrong = (g1 + 1) % 512
    tree = DraftTree()
    tree.add(wrong, -1, 0.5, 0.5)  # 0: wrong first token
    tree.add(g1, -1, 0.4, 0.4)  # 1: right, second branch
    tree.add(g2, 0, 0.3, 0.6)  # 2: right token under the wrong parent: must not count
    tree.add(g2, 1, 0.3, 0.75)  # 3
    tree.add((g3 + 1) % 512, 3, 0.1, 0.3)  # 4: wrong third token
    cache = model.new_cache(64)
    req = DecodeRequest(model, cache, ids, Sampler(0, 1, 0, torch.device("cpu")), 8, NO_STOP,
                        LMConfig(drafter="none", ngram="none"), None)  # fmt: skip
    v = HybridStepper(req, None).verify(ids[:-1], ids[-1], tree)
    assert v.tokens == [g1, g2, g3] and v.accepted == 2
    n = len(ids) + 2
    assert cache.length == n
    fresh = model.new_cache(64)
    out = model(torch.tensor([ids + [g1, g2]]), cache=fresh, hidden=True)
    assert torch.allclose(cache.k[:, :, :, :n], fresh.k[:, :, :, :n], atol=1e-5)
    assert torch.allclose(cache.v[:, :, :, :n], fresh.v[:, :, :, :n], atol=1e-5)
    assert torch.allclose(v.hidden, out.hidden_normed[0, -1], atol=1e-5)
