"""N-gram store at run time: chained proposals with back-off, runner-up forks, the file round
trip and its errors, and the hybrid decoder drafting from it (exact, fewer forwards, the
drafter pass skipped where the store is sure). Stores are built with lab.ngram."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file, save_file

from dllm_voice.model import drafts, hybrid
from dllm_voice.model.args import ModelArgs
from dllm_voice.model.config import LMConfig
from dllm_voice.model.decode import DecodeRequest, Sampler, get_decoder
from dllm_voice.model.drafter import BlockDrafter
from dllm_voice.model.errors import ModelLoadError
from dllm_voice.model.ngram import NgramStore, load_default
from dllm_voice.model.transformer import Transformer
from lab.ngram import MIN_TOTAL, build, save
from tests.lab.test_ngram_build import near, records

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_runner_up_starts_a_second_branch() -> None:
    store = build(records())
    assert store.alts[(2, 3, 4)] == (6, near(1 / 4))  # 5 twice, then 6 once
    assert store.alternative([1, 2, 3, 4]) == store.alts[(2, 3, 4)]  # (1, 2, 3, 4): unseen
    assert store.alternative([2, 3]) is None  # (2, 3) is always followed by 4
    assert store.alternative([42]) is None


def test_branches_fork_the_chain_at_its_runner_ups() -> None:
    store = build(records())
    main, fork = store.branches([99, 2], 4)  # (2, 3, 4) -> 5, runner-up 6, third in the chain
    assert main == store.propose([99, 2], 4)
    assert fork == ([3, 4, 6], near([3 / 4, 3 / 4, 1 / 4]))  # 6 then: seen once
    assert store.branches([99, 2], 4, forks=2) == [main]  # the fork is at position 3
    assert store.branches([42], 4) == [([], [])]


def test_proposes_a_chain_backing_off_to_shorter_contexts() -> None:
    store = build(records())
    toks, confs = store.propose([99, 2], 4)
    # (99, 2) unseen -> (2,) gives 3; then (99, 2, 3) -> (2, 3) gives 4; then 5 and 9.
    assert toks == [3, 4, 5, 9]
    assert confs[0] == near(3 / 4) and len(confs) == 4
    assert store.propose([42], 3) == ([], [])
    assert store.propose([99, 2], 2)[0] == [3, 4]


def test_file_round_trip_and_errors(tmp_path) -> None:
    store = build(records())
    f = tmp_path / "ngram.safetensors"
    save(store, f)
    back = NgramStore.load(f, vocab_size=100)
    assert back.table.keys() == store.table.keys()
    assert all(back.table[k][0] == v[0] for k, v in store.table.items())
    toks, confs = back.propose([99, 2], 4)
    assert toks == store.propose([99, 2], 4)[0]
    assert confs == pytest.approx(store.propose([99, 2], 4)[1], abs=1e-3)  # stored in fp16
    assert {k: t for k, (t, _) in back.alts.items()} == {k: t for k, (t, _) in store.alts.items()}
    # A store written before runner-ups were kept loads without them.
    old = {k: v for k, v in load_file(f).items() if not k.startswith("alt")}
    save_file(old, tmp_path / "old.safetensors", metadata={"info": "{}"})
    assert NgramStore.load(tmp_path / "old.safetensors", 100).alts == {}
    with pytest.raises(ModelLoadError, match="vocabulary"):
        NgramStore.load(f, vocab_size=8)
    (tmp_path / "bad.safetensors").write_bytes(b"nope")
    with pytest.raises(ModelLoadError, match="not an n-gram store"):
        NgramStore.load(tmp_path / "bad.safetensors", 100)
    assert load_default("none", 100) is None
    with pytest.raises(ModelLoadError, match="not found"):
        load_default(str(tmp_path / "missing.safetensors"), 100)


def test_a_vocabulary_past_16_bits_goes_through_a_table(tmp_path, monkeypatch) -> None:
    """Gemma's 262K ids: the store holds the records' most frequent tokens as 16-bit indexes;
    a context with a token outside the table backs off to the n-grams after it."""
    big = 200_000
    recs = [([big + t for t in ids], p, [big + t for t in g]) for ids, p, g in records()]
    store = build(recs)
    assert store.vocab is not None and max(store.vocab) < big + 10
    assert store.propose([big + 2, big + 3], 2) == ([big + 4, big + 5], [near(3 / 4), near(2 / 4)])
    f = tmp_path / "ngram.safetensors"
    save(store, f)
    back = NgramStore.load(f, vocab_size=big + 10)
    assert back.propose([big + 2, big + 3], 2)[0] == [big + 4, big + 5]
    assert back.propose([5, big + 3, big + 4], 1)[0] == [big + 5]  # 5: not in the table
    runner_up = back.alternative([big + 2, big + 3, big + 4])
    assert runner_up == (big + 6, pytest.approx(1 / 4, abs=1e-3))
    with pytest.raises(ModelLoadError, match="vocabulary"):
        NgramStore.load(f, vocab_size=big)
    # Past MAX_IDS distinct tokens, the most frequent are kept and the rest are never drafted.
    monkeypatch.setattr("lab.ngram.MAX_IDS", 4)
    small = build(recs)
    assert small.vocab == [big + 2, big + 3, big + 4, big + 5]  # 9 ties 2, seen later
    assert small.propose([big + 2, big + 3], 3)[0] == [big + 4, big + 5]  # then 9: not kept


@pytest.fixture(scope="module")
def tiny() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelArgs.preset("tiny", n_layers=3)).eval().requires_grad_(False)


def decode(model, ids, decoder, cfg, max_new=40):
    cache = model.new_cache(256)
    req = DecodeRequest(model, cache, ids, Sampler(0, 1, 0, torch.device("cpu")), max_new,
                        frozenset(), cfg, None)  # fmt: skip
    out, forwards = [], 0
    with torch.inference_mode():
        for toks in get_decoder(decoder)(req):
            forwards += 1
            out += toks
    return out[:max_new], forwards


def test_hybrid_drafts_from_the_store_exactly(tiny, monkeypatch) -> None:
    cfg = LMConfig(drafter="random", ngram="store", row_cost=0.0, lookup_ngram=0)
    ids = torch.randint(0, 512, (12,), generator=torch.Generator().manual_seed(3)).tolist()
    ref, ref_fw = decode(tiny, ids, "ar", cfg)
    # A store of what this model said on the same prompt: its drafts are right.
    store = build([(ids + ref, len(ids), ref)])
    hybrid.set_ngram(tiny, "store", store)
    drafter = BlockDrafter.random(tiny, seed=2)
    hybrid.set_drafter(tiny, "random", drafter)
    calls = []
    real = drafter.draft
    monkeypatch.setattr(drafter, "draft", lambda *a, **k: calls.append(1) or real(*a, **k))
    got, fw = decode(tiny, ids, "hybrid", cfg)
    assert got == ref and fw < ref_fw / 2
    assert len(calls) < fw / 2  # the store was sure most of the time: no drafter pass then
    # A store of unrelated text changes nothing but speed.
    junk = [(list(range(100, 140)), 5, list(range(105, 140)))] * 2
    hybrid.set_ngram(tiny, "store", build(junk))
    assert decode(tiny, ids, "hybrid", cfg)[0] == ref
    assert decode(tiny, ids, "hybrid", replace(cfg, ngram="none"))[0] == ref


def test_the_store_continues_each_drafter_candidate(tiny, monkeypatch) -> None:
    """The drafter's block guesses each offset on its own; the store chains after each of its
    candidates for the next token, so a right second choice can carry a right continuation."""
    ids = [5, 6, 7, 8]
    store = build([([3, 60, 61, 62, 63], 2, [61, 62, 63])] * MIN_TOTAL)  # not after 8
    drafter = BlockDrafter.random(tiny, seed=2)
    block = ([[50, 60], [51, 52], [53, 54], [55, 56]], [[0.5, 0.3]] + [[0.4, 0.2]] * 3)
    monkeypatch.setattr(drafter, "draft", lambda *a, **k: block)
    cfg = LMConfig(drafter="none", ngram="none", row_cost=0.0, lookup_ngram=0, draft_branch=2)
    req = DecodeRequest(tiny, tiny.new_cache(64), ids, Sampler(0, 1, 0, torch.device("cpu")), 16,
                        frozenset(), cfg, None)  # fmt: skip
    st = hybrid.HybridStepper(req, drafter, store)
    st.commit([8])
    tree = st.propose(8, torch.zeros(tiny.args.dim), 15)
    paths = set()
    for j in range(len(tree)):
        path, node = [], j
        while node >= 0:
            path.insert(0, tree.tokens[node])
            node = tree.parents[node]
        paths.add(tuple(path))
    assert (60, 61, 62, 63) in paths and (50, 51) in paths
    assert not any(p[:2] == (50, 61) for p in paths)  # the store knows nothing after 50


def test_bundled_files_apply_to_the_bundled_model_only(tmp_path) -> None:
    other = tmp_path / "other.gguf"
    other.write_bytes(b"weights")
    assert drafts.resolve("", "", "drafter") == ""  # bundled model: bundled drafter / store
    assert drafts.resolve("", str(other), "ngram") == "none"
    assert drafts.resolve("mine.safetensors", str(other), "drafter") == "mine.safetensors"


def test_drafts_built_for_a_model_are_its_default(tmp_path, monkeypatch) -> None:
    """lab.drafts writes into the model's folder; '' then loads them, for that model only."""
    monkeypatch.setenv(drafts.DRAFTS_ENV, str(tmp_path / "drafts"))
    model, twin = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf"
    for f, data in ((model, b"weights"), (twin, b"other weights")):
        f.parent.mkdir()
        f.write_bytes(data)
    folder = drafts.model_dir(str(model))
    assert folder.parent == tmp_path / "drafts" and folder != drafts.model_dir(str(twin))
    folder.mkdir(parents=True)
    (folder / "ngram.safetensors").write_bytes(b"")
    assert drafts.resolve("", str(model), "ngram") == str(folder / "ngram.safetensors")
    assert drafts.resolve("", str(model), "drafter") == "none"  # not built
    assert drafts.resolve("", str(twin), "ngram") == "none"
    assert drafts.resolve("none", str(model), "ngram") == "none"
