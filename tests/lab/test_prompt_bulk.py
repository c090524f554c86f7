"""Bulk prompts for self-distillation, and gen_data's sampler and --prompt-set bulk."""

from __future__ import annotations

import json

import torch

from dllm_voice.app.conversation.config import DEFAULT_SYSTEM_PROMPT
from lab import prompt_bulk, prompts
from lab.gen_data import sample


def test_bulk_is_deterministic_varied_and_never_a_held_out_question() -> None:
    convs = prompt_bulk.conversations()
    assert convs == prompt_bulk.conversations()
    users = [c[-1]["content"] for c in convs]
    assert len(set(map(tuple, ([m["content"] for m in c] for c in convs)))) == len(convs)
    held = {m["content"] for c in prompts.conversations("heldout") for m in c}
    assert not held & set(users)
    # Nor a near twin of one: "What is the difference between a crocodile and an alligator?"
    # is held out, so no bulk conversation is about alligators (its topic is left out).
    assert "What is the difference between a crocodile and an alligator?" in held
    assert not any("alligator" in u for u in users)
    # The first few hundred (what a short CPU run answers) touch every category.
    first = set(users[:400])
    for topics, templates in prompt_bulk.CATEGORIES.values():
        made = {tpl.format(t=t) for t in topics for tpl in templates}
        assert made & first
    assert {len(c) for c in convs} == {1, 2}  # with and without the system message


def test_bulk_system_message_is_the_apps() -> None:
    assert prompt_bulk.SYSTEM_APP == DEFAULT_SYSTEM_PROMPT


def test_sample_draws_from_the_softmax() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, float("-inf")]] * 4)
    gen = torch.Generator().manual_seed(0)
    draws = torch.cat([sample(logits, gen) for _ in range(2500)])  # 10000 draws
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    want = torch.softmax(logits[0], -1)
    assert freq[4] == 0  # an impossible token never comes out
    assert torch.allclose(freq, want, atol=0.015)
    again = torch.Generator().manual_seed(0)
    assert torch.equal(sample(logits, again), draws[:4])  # seeded: reproducible


def test_gen_data_answers_bulk_prompts(lm, tok, tmp_path) -> None:
    from lab import gen_data

    out = tmp_path / "bulk"
    gen_data.main(["--out", str(out), "--prompt-set", "bulk", "--rounds", "1", "--batch", "3",
                   "--max-new-tokens", "3", "--max-batches", "1"])  # fmt: skip
    assert json.loads((out / "meta.json").read_text())["prompt_set"] == "bulk"
    convs = prompt_bulk.conversations()
    recs = torch.load(out / "b00000.pt")
    assert len(recs) == 3 and {(r["sample"], r["heldout"]) for r in recs} == {(0, 0)}
    for r in recs:
        chat = tok.apply_chat(convs[r["conv"]])
        assert r["ids"][: r["prompt_len"]].tolist() == chat
        assert r["greedy"].tolist() == r["ids"][r["prompt_len"] :].tolist()  # greedy round
