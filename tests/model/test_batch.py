"""Continuous batching across sessions (model/batch.py) on the bundled model: concurrent
sessions' steps share forwards and each gets exactly its tokens alone."""

from __future__ import annotations

import threading

import pytest
import torch

from dllm_voice.model.batch import StepBatcher
from dllm_voice.model.engine import LM
from dllm_voice.model.transformer import Call

QUESTIONS = [
    "Why is the sky blue?",
    "Tell me a short joke about a cat.",
    "What is the capital of France? Answer in one sentence.",
]


def answers(lm: LM, decoder: str, cancel_at: dict[int, int] | None = None) -> list:
    """Each question in its own session and thread, all at once; question i's generation is
    cancelled after cancel_at[i] pieces. (text, token ids, stop reason) per question."""
    cancel_at = cancel_at or {}
    out: list = [None] * len(QUESTIONS)
    start = threading.Barrier(len(QUESTIONS))

    def run(i: int) -> None:
        cancel = threading.Event()
        gen = lm.session().generate(
            [{"role": "user", "content": QUESTIONS[i]}], decoder=decoder, cancel=cancel,
            max_new_tokens=40,
        )  # fmt: skip
        start.wait()
        for n, _ in enumerate(gen, 1):
            if cancel_at.get(i) == n:
                cancel.set()
        out[i] = (gen.text, gen.token_ids, gen.stats.stop_reason)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(QUESTIONS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("decoder", ["ar", "hybrid"])
def test_sessions_decoding_together_get_their_tokens_alone(lm: LM, decoder: str) -> None:
    alone = []
    for q in QUESTIONS:
        gen = lm.session().generate(
            [{"role": "user", "content": q}], decoder=decoder, max_new_tokens=40
        )
        for _ in gen:
            pass
        alone.append((gen.text, gen.token_ids, gen.stats.stop_reason))
    before = (lm.batcher.batches, lm.batcher.calls)
    together = answers(lm, decoder)
    batches, calls = lm.batcher.batches - before[0], lm.batcher.calls - before[1]
    assert together == alone
    assert calls > batches * 1.5, (calls, batches)  # the steps did share forwards


def test_a_cancelled_session_leaves_the_others_unchanged(lm: LM) -> None:
    full = answers(lm, "hybrid")
    cut = answers(lm, "hybrid", cancel_at={1: 2})
    assert cut[1][2] == "cancelled" and len(cut[1][1]) < len(full[1][1])
    assert cut[0] == full[0] and cut[2] == full[2]


def test_a_failing_call_fails_only_its_own_session(lm: LM) -> None:
    """A full cache in one session's call: that call raises, the others' forwards still run."""
    model = lm.model
    batcher = StepBatcher(model, wait_ms=50)
    full = model.new_cache(8)
    full.length = 8
    ok = model.new_cache(8)
    results: dict[str, object] = {}

    def call(name: str, cache) -> None:
        try:
            results[name] = batcher(torch.tensor([[1, 2]]), cache=cache, logits="last")
        except Exception as e:  # noqa: BLE001
            results[name] = e

    threads = [threading.Thread(target=call, args=a) for a in (("full", full), ("ok", ok))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert type(results["full"]).__name__ == "ContextOverflowError"
    with torch.inference_mode():
        alone = model(**Call(model.new_cache(8), torch.tensor([[1, 2]]), logits="last").kwargs())
    assert torch.equal(results["ok"].logits, alone.logits)
    assert ok.length == 2
