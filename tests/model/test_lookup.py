"""Prompt lookup: longest / most recent n-gram match, incremental index."""

from __future__ import annotations

import pytest

from dllm_voice.model.lookup import LOOKUP_CONF, PromptLookup


def test_continues_the_most_recent_longest_match() -> None:
    #          0  1  2  3  4  5  6  7  8  9
    seq = [5, 6, 7, 8, 1, 6, 7, 9, 2, 6, 7]
    lk = PromptLookup(seq, max_ngram=3)
    # Suffix (6, 7): last seen at 5..6, followed by 9, 2, 6, 7.
    out, conf = lk.propose(3)
    assert out == [9, 2, 6]
    assert conf == list(LOOKUP_CONF[2][:3])
    # A longer match wins over a more recent shorter one.
    lk.extend([9])  # suffix (6, 7, 9) occurred at 5..7 -> continues with 2
    assert lk.propose(2)[0] == [2, 6]
    assert lk.propose(2)[1] == list(LOOKUP_CONF[3][:2])


def test_no_match_and_short_tail() -> None:
    lk = PromptLookup([1, 2, 3])
    assert lk.propose(4) == ([], [])
    lk.extend([1])  # (1,) seen at 0, followed by 2, 3, 1 (the tail is cut at the end)
    assert lk.propose(8)[0] == [2, 3, 1]


def test_incremental_equals_batch_build() -> None:
    seq = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3]
    inc = PromptLookup(seq[:5])
    for t in seq[5:]:
        inc.extend([t])
    full = PromptLookup(seq)
    assert inc.tokens == full.tokens and inc._next == full._next
    assert inc.propose(5) == full.propose(5)


def test_suffix_of_another_sequence() -> None:
    old = [10, 11, 12, 13, 14, 15]
    lk = PromptLookup(old)
    assert lk.propose(3, suffix_of=[99, 11, 12])[0] == [13, 14, 15]
    assert lk.propose(3, suffix_of=[98, 99]) == ([], [])


def test_bad_ngram_range() -> None:
    with pytest.raises(ValueError, match="min_ngram"):
        PromptLookup(max_ngram=1, min_ngram=2)
