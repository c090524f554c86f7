"""End-of-turn score on the bundled SmolLM2: separates complete from cut transcripts, reuses
the speculation's prefix, ignores the recognizer's final marks."""

from __future__ import annotations

import pytest

from dllm_voice.app.conversation.config import DEFAULT_SYSTEM_PROMPT, EndOfTurnConfig
from dllm_voice.model.engine import LM
from testkit.turn_end_set import labeled, roc_auc

SYSTEM = {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}


def turn(text: str) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": text}]


def test_complete_questions_score_above_the_same_questions_cut(lm: LM) -> None:
    s = lm.session()
    for full, cut in [
        ("What is the capital of France?", "What is the capital of"),
        ("How many legs does a spider have?", "How many legs does a"),
        ("Tell me a joke about cats.", "Tell me a joke about"),
    ]:
        p_full, p_cut = s.end_of_turn(turn(full)), s.end_of_turn(turn(cut))
        assert p_full is not None and p_cut is not None
        assert p_full > 0.1 > 0.01 > p_cut, (full, p_full, p_cut)
    # Whisper punctuates cut speech; the score reads the words only.
    assert s.end_of_turn(turn("What is the capital of?")) == s.end_of_turn(
        turn("What is the capital of")
    )
    assert s.end_of_turn(turn("...")) is None  # no words to score


def test_the_answer_after_the_score_feeds_only_what_changed(lm: LM) -> None:
    s = lm.session()
    msgs = turn("What is the capital of France?")
    s.end_of_turn(msgs)
    gen = s.generate(msgs, max_new_tokens=4)
    list(gen)
    # Everything but the final mark and the assistant header came from the score's prefill.
    assert gen.stats.prompt_tokens - gen.stats.cached_tokens <= 8
    fresh = lm.session().generate(msgs, max_new_tokens=4)
    list(fresh)
    assert gen.token_ids == fresh.token_ids


class _Counted:
    """The LM's forward, counted."""

    def __init__(self, forward) -> None:
        self.forward, self.calls = forward, 0

    def __call__(self, *a, **kw):
        self.calls += 1
        return self.forward(*a, **kw)

    def __getattr__(self, name: str):
        return getattr(self.forward, name)


@pytest.mark.parametrize("decoder", ["hybrid", "ar", "parallel"])
def test_an_answer_scores_the_end_of_turn_on_its_first_forward(lm: LM, monkeypatch, decoder):
    counted = _Counted(lm.batcher)
    monkeypatch.setattr(lm, "batcher", counted)
    follow_up = [
        SYSTEM,
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is Paris."},
        {"role": "user", "content": "And how big is it?"},
    ]
    for msgs in [turn("What is the capital of France?"), turn("How far is the"), follow_up]:
        apart, fused = lm.session(), lm.session()
        for s in (apart, fused):
            s.prefill([SYSTEM])
        n0 = counted.calls
        p = apart.end_of_turn(msgs)
        plain = apart.generate(msgs, max_new_tokens=8, decoder=decoder)
        text = "".join(plain)
        n1 = counted.calls
        got: list[float | None] = []
        gen = fused.generate(msgs, max_new_tokens=8, decoder=decoder, end_score=got.append)
        assert "".join(gen) == text and gen.token_ids == plain.token_ids
        assert got == [pytest.approx(p, rel=1e-3, abs=1e-6)]
        assert counted.calls - n1 == n1 - n0 - 1  # no forward of its own
    got = []
    list(lm.session().generate(turn("..."), max_new_tokens=2, end_score=got.append))
    assert got == [None]  # no words to score


def test_labeled_subset_auc(lm: LM) -> None:
    s = lm.session()
    data = labeled()[::4]  # 62 of the 248
    scores = [s.end_of_turn(turn(t)) or 0.0 for t, _ in data]
    assert roc_auc(scores, [y for _, y in data]) >= 0.95


@pytest.mark.slow
def test_labeled_set_auc_and_decisions(lm: LM) -> None:
    """The whole set (bench/end_of_turn.py reports the same): AUC >= 0.95, and at the default
    thresholds few cut transcripts are taken for complete."""
    s = lm.session()
    data = labeled()
    scores = [s.end_of_turn(turn(t)) or 0.0 for t, _ in data]
    labels = [y for _, y in data]
    assert roc_auc(scores, labels) >= 0.95
    likely = EndOfTurnConfig().likely
    premature = sum(p >= likely and not y for p, y in zip(scores, labels, strict=True))
    assert premature <= 0.03 * labels.count(False)
