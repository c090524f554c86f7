"""Training the block drafter: the run-time pass equals the training pass, training learns,
the recipe and the commands run end to end; gen_data's batched, left-padded generation equals
one-at-a-time greedy decoding."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open

from dllm_voice.model.args import ModelArgs
from dllm_voice.model.drafter import BlockDrafter
from dllm_voice.model.transformer import Transformer
from lab.gen_data import generate_batch
from lab.train_drafter import (
    block_forward,
    draft_vocab,
    features,
    targets_for,
)

STOP = 3


pytestmark = pytest.mark.usefixtures("one_thread")


# A Gemma 3-like base too: sliding-window layers (a window shorter than the answers) with their
# own rope, q/k and output norms, GeGLU and scaled embeddings; drafter layer 0 copies a global
# base layer, layer 1 a local one.
GEMMA_LIKE = {"sliding_window": 8, "global_every": 3, "qk_norm": True, "post_norms": True,
              "act": "gelu_tanh", "embed_scale": 8.0}  # fmt: skip


@pytest.fixture(scope="module", params=["llama", "gemma"])
def tiny(request) -> Transformer:
    torch.manual_seed(0)
    extra = GEMMA_LIKE if request.param == "gemma" else {}
    return Transformer(ModelArgs.preset("tiny", n_layers=4, **extra)).eval().requires_grad_(False)


@pytest.fixture(scope="module")
def records(tiny):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(4, 512, (n,), generator=g).tolist() for n in (5, 9, 7)]
    tok = SimpleNamespace(stop_ids=frozenset({STOP}))
    recs = generate_batch(tiny, tok, prompts, temperatures=[0.0, 0.0, 1.0], seed=0,
                          max_new_tokens=24, store_hidden=True)  # fmt: skip
    return prompts, recs


@torch.inference_mode()
def greedy(model: Transformer, ids: list[int], n: int) -> list[int]:
    cache = model.new_cache(128)
    logits = model(torch.tensor([ids]), cache=cache, logits="last").logits[0, -1]
    out = []
    for _ in range(n):
        out.append(int(logits.argmax()))
        if out[-1] == STOP:
            break
        logits = model(torch.tensor([[out[-1]]]), cache=cache).logits[0, -1]
    return out


def test_batched_generation_equals_single(tiny, records) -> None:
    prompts, recs = records
    for p, r in zip(prompts[:2], recs[:2], strict=True):  # the greedy ones
        assert r["ids"].tolist() == p + greedy(tiny, p, 24)
        assert r["greedy"].tolist() == r["ids"][len(p) :].tolist()
    sampled = recs[2]
    assert sampled["hidden"].shape == (len(sampled["ids"]) - 1, tiny.args.dim)
    assert len(sampled["greedy"]) == len(sampled["ids"]) - sampled["prompt_len"]


def test_token_only_records_get_the_stored_features(tiny, records) -> None:
    """gen_data --no-hidden data trains too: its features, one prefill of the lower layers,
    are the ones gen_data stores while it generates (batched, left-padded)."""
    _, recs = records
    for rec in recs:
        bare = {k: v for k, v in rec.items() if k != "hidden"}
        stored = rec["hidden"].float()  # bf16: ~3 significant digits
        torch.testing.assert_close(features(tiny, bare), stored, atol=2e-3, rtol=8e-3)
    bare = {k: v for k, v in recs[0].items() if k != "hidden"}
    s = int(recs[0]["prompt_len"]) + 2
    # The same drafter pass on both, to within the stored features' bf16 rounding.
    torch.testing.assert_close(
        block_forward(BlockDrafter.random(tiny, seed=2), tiny, [bare], [[s, s + 3]]),
        block_forward(BlockDrafter.random(tiny, seed=2), tiny, [recs[0]], [[s, s + 3]]),
        atol=5e-3,
        rtol=1e-2,
    )


def test_token_only_features_on_the_bundled_model(lm) -> None:
    """On the packed bundled model the lower layers run as one C call; the features still
    match gen_data's, captured from the torch layers (integer products in both)."""
    prompt = lm.tokenizer.encode("Why is the sky blue?")
    (rec,) = generate_batch(lm.model, lm.tokenizer, [prompt], temperatures=[0.0], seed=0,
                            max_new_tokens=12, store_hidden=True)  # fmt: skip
    bare = {k: v for k, v in rec.items() if k != "hidden"}
    torch.testing.assert_close(
        features(lm.model, bare), rec["hidden"].float(), atol=2e-2, rtol=1e-2
    )


@torch.inference_mode()
@pytest.mark.parametrize("arch", [{}, {"ffn": 64, "hidden": False}, {"ffn": 32}])
def test_runtime_draft_equals_training_pass(tiny, records, arch) -> None:
    _, recs = records
    rec = recs[0]
    drafter = BlockDrafter.random(tiny, seed=3, **arch)
    p = int(rec["prompt_len"])
    s = p + 4  # block start: pending token at s, context < s
    logits = block_forward(drafter, tiny, [rec], [[s]])[0, 0]  # (K, V_d)
    conf, idx = torch.softmax(logits, -1).topk(3, -1)  # (K, 3)
    cache = tiny.new_cache(128)
    out = tiny(rec["ids"][None, :s].long(), cache=cache, hidden=True)
    h = out.hidden_normed[0, -1]
    drafts, confs = drafter.draft(tiny, cache, int(rec["ids"][s]), h, top=3)
    assert drafts == drafter.vocab_ids[idx].tolist()
    assert torch.allclose(torch.tensor(confs), conf, atol=1e-3)
    assert drafter.draft(tiny, cache, int(rec["ids"][s]), h)[0] == [[d[0]] for d in drafts]


def test_targets_only_on_the_greedy_chain() -> None:
    # A sampled answer: the base's greedy choice differs at answer positions 2 and 6.
    answer = [10, 11, 12, 13, 14, 15, 16, 17, 18]
    greedy = [10, 11, 99, 13, 14, 15, 98, 17, 18]
    r = {"ids": torch.tensor([1, 2, 3] + answer), "greedy": torch.tensor(greedy), "prompt_len": 3}
    p = 3
    to_vocab = torch.arange(512)
    match = [a == g for a, g in zip(answer, greedy, strict=True)]
    starts = list(range(p, len(r["ids"]) - 1))
    t = targets_for(r, starts, 4, to_vocab)
    for m, s in enumerate(starts):
        assert t[m, 0] == greedy[s + 1 - p]  # offset 1 is always exact
        for i in range(2, 5):
            chain = s + i < len(r["ids"]) and all(match[s + j - p] for j in range(1, i))
            assert (t[m, i - 1] != -100) == chain
            if chain:
                assert t[m, i - 1] == greedy[s + i - p]
    assert (t == -100).any() and (t[:, 1:] != -100).any()


def test_training_reduces_loss(tiny, records) -> None:
    _, recs = records
    vocab, coverage = draft_vocab(recs, 64, {STOP})
    assert coverage > 0.5
    to_vocab = torch.full((512,), -100, dtype=torch.long)
    to_vocab[vocab] = torch.arange(len(vocab))
    drafter = BlockDrafter.from_base(tiny, vocab, n_layers=2, block=4).requires_grad_(True)
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    starts = [list(range(int(r["prompt_len"]), len(r["ids"]) - 1))[:16] for r in recs[:2]]
    target = torch.stack(
        [targets_for(r, s, 4, to_vocab) for r, s in zip(recs[:2], starts, strict=True)]
    )
    losses = []
    for _ in range(30):
        logits = block_forward(drafter, tiny, recs[:2], starts)  # (B, M, K, V_d)
        loss = F.cross_entropy(logits.flatten(0, 2), target.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_recipes_name_real_options() -> None:
    """A recipe's options become the parser's defaults: a misspelt one would be ignored."""
    from lab import train_drafter

    known = vars(train_drafter.parser().parse_args([]))
    for name, recipe in train_drafter.RECIPES.items():
        assert set(recipe["train"]) <= set(known), name
        assert {f"gen_{k}" for k in recipe["gen"]} <= set(known), name


@pytest.mark.slow
def test_the_gpu_recipe_runs_at_toy_scale_with_its_options_overridden(tmp_path) -> None:
    """`--recipe h200` with CPU-sized options given on the command line: data generated into
    --data, the n-gram store written beside --save, an adapter trained from that data."""
    from dllm_voice.model.ngram import NgramStore
    from lab import train_drafter

    data, adapter = tmp_path / "data", tmp_path / "drafter.safetensors"
    train_drafter.main(["--recipe", "h200", "--device", "cpu", "--dtype", "float32",
                        "--gen-batch", "4", "--gen-minutes", "0.001", "--data", str(data),
                        "--steps", "2", "--batch", "2", "--blocks", "2", "--minutes", "0",
                        "--out-dir", str(tmp_path / "run"), "--save", str(adapter)])  # fmt: skip
    train = 0
    for folder in (data, tmp_path / "data_bulk"):  # prompts.py's set, then the bulk one
        recs = torch.load(folder / "b00000.pt")
        assert len(recs) == 4  # the first batch, then the time cap
        assert not (folder / "b00001.pt").exists()
        train += sum(not r["heldout"] for r in recs)
    assert NgramStore.load(tmp_path / "ngram.safetensors", 49152).info["answers"] == train
    with safe_open(str(adapter), "pt") as f:
        assert json.loads(f.metadata()["info"])["steps"] == 2


def test_generate_then_train_from_the_command_line(lm, tmp_path) -> None:
    """The two documented commands, end to end on the bundled model at toy scale: data on
    disk, a resumable checkpoint, an eval row, and an adapter the decoder loads."""
    from dllm_voice.model.ngram import NgramStore
    from lab import gen_data, ngram, train_drafter

    data, run, adapter = tmp_path / "data", tmp_path / "run", tmp_path / "drafter.safetensors"
    gen_data.main(["--out", str(data), "--rounds", "1", "--batch", "4", "--max-new-tokens", "6",
                   "--max-batches", "1"])  # fmt: skip
    assert len(torch.load(data / "b00000.pt")) == 4
    train = ["--data", str(data), "--steps", "2", "--batch", "2", "--blocks", "2",
             "--eval-every", "1", "--out-dir", str(run), "--save", str(adapter)]  # fmt: skip
    train_drafter.main(train)
    # More sampled rounds into a second folder (no round 0 again), then train on both.
    more = tmp_path / "more"
    gen_data.main(["--out", str(more), "--first-round", "1", "--rounds", "2", "--batch", "4",
                   "--max-new-tokens", "6", "--max-batches", "1"])  # fmt: skip
    assert {(r["sample"], r["heldout"]) for r in torch.load(more / "b00000.pt")} == {(1, 0)}
    assert len(gen_data.load_records(f"{data},{more}", set())) == 8
    train_drafter.main(["--data", f"{data},{more}", "--steps", "3", *train[4:], "--resume"])
    rows = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    with safe_open(str(adapter), "pt") as f:
        assert json.loads(f.metadata()["info"])["steps"] == 3
    assert BlockDrafter.load(adapter, lm.model).head_packed is not None  # CPU: prepacked
    # Token-only data (no base features) builds the n-gram store and, the features computed as
    # records are drawn, fine-tunes the adapter trained above (--init: its vocabulary too).
    tokens_only = tmp_path / "tokens"
    gen_data.main(["--out", str(tokens_only), "--rounds", "1", "--batch", "4", "--no-hidden",
                   "--max-new-tokens", "6", "--max-batches", "1"])  # fmt: skip
    ngram.main(["--data", str(tokens_only), "--out", str(tmp_path / "store.safetensors")])
    assert NgramStore.load(tmp_path / "store.safetensors", 49152).info["answers"] >= 1
    tuned = tmp_path / "tuned.safetensors"
    train_drafter.main(["--data", str(tokens_only), "--steps", "1", "--batch", "2",
                        "--blocks", "2", "--out-dir", str(tmp_path / "run2"), "--save", str(tuned),
                        "--init", str(adapter)])  # fmt: skip
    first, again = BlockDrafter.load(adapter, lm.model), BlockDrafter.load(tuned, lm.model)
    assert torch.equal(first.vocab_ids, again.vocab_ids)
    assert not torch.equal(first.mask_embed, again.mask_embed)
