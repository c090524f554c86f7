"""Building the n-gram store: the base's most frequent greedy next token (and runner-up) per
context, counted in numpy exactly as a plain Counter would."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest

from lab.ngram import MIN_TOTAL, build


def near(x):  # the table keeps confidences in 16 bits
    return pytest.approx(x, abs=1e-4)


def records():
    # (ids, prompt_len, greedy): greedy[i] follows ids[:prompt_len + i].
    return [
        ([1, 2, 3, 4, 5], 2, [3, 4, 5, 9]),
        ([7, 2, 3, 4, 6], 2, [3, 4, 6, 9]),
        ([8, 2, 3, 4, 5], 2, [3, 4, 5, 9]),
    ]


def test_counts_the_most_frequent_next_token_per_context() -> None:
    store = build(records())
    assert store.info["tokens"] == 12
    assert store.table[(2, 3, 4)] == (5, near(2 / 4))  # 5 twice, 6 once
    assert store.table[(2,)] == (3, near(3 / 4))
    assert (1, 2) not in store.table  # seen once: below MIN_TOTAL
    assert MIN_TOTAL == 2


def test_build_equals_a_plain_count_ties_to_the_first_seen() -> None:
    """The numpy build against Counter counting on random records over a 6-token vocabulary,
    where equal counts are common."""
    rng = random.Random(0)
    recs = []
    for _ in range(300):
        n = rng.randint(3, 30)
        p = rng.randint(1, n - 1)
        recs.append(
            ([rng.randrange(6) for _ in range(n)], p, [rng.randrange(6) for _ in range(n - p)])
        )
    counts: dict[tuple[int, ...], Counter[int]] = defaultdict(Counter)
    for ids, p, greedy in recs:
        for i, nxt in enumerate(greedy):
            for n in range(1, 5):
                if p + i - n >= 0:
                    counts[tuple(ids[p + i - n : p + i])][nxt] += 1
    want, want_alts = {}, {}
    for ctx, c in counts.items():
        if c.total() >= MIN_TOTAL:
            ranked = c.most_common(2)
            want[ctx] = (ranked[0][0], ranked[0][1] / (c.total() + 1))
            if len(ranked) > 1:
                want_alts[ctx] = (ranked[1][0], ranked[1][1] / (c.total() + 1))
    store = build(recs)
    for got, expected in ((store.table, want), (store.alts, want_alts)):
        assert {c: t for c, (t, _) in got.items()} == {c: t for c, (t, _) in expected.items()}
        assert {c: q for c, (_, q) in got.items()} == near({c: q for c, (_, q) in expected.items()})
    assert store.vocab is None  # ids that fit 16 bits are stored as they are
    assert build([([1, 70000, 2], 1, [70000, 2])]).vocab == [1, 2, 70000]
