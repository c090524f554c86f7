"""Calibrating prompt lookup's confidences: each offset counted only after right ones."""

from __future__ import annotations

from lab.lookup_conf import calibrate


def test_calibrate_counts_an_offset_only_after_right_ones() -> None:
    """The tree multiplies confidences along a path: each offset's rate is conditional on the
    draft being right so far. After (1, 2) the lookup proposes 3, 5; the answer goes 4, 5, so
    the right 5 is not counted: its draft was already dead."""
    stats = calibrate([([1, 2, 3, 5, 1, 2, 4, 5], 1)], k=2, max_ngram=2)
    assert stats[2] == [(0.0, 1), (0.0, 0)]


def test_calibrate_counts_hits() -> None:
    # A repeating answer: after one period every lookup draft is right.
    seq = [7, 8] + [1, 2, 3, 4] * 6
    stats = calibrate([(seq, 2)], k=2, max_ngram=3)
    rate3, count3 = stats[3][0]
    assert count3 > 10 and rate3 == 1.0
