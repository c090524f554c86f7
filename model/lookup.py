"""Prompt lookup: free draft tokens copied from the context, no training needed.

If the last n tokens of the sequence (prompt + committed answer) occurred earlier, the tokens
that followed that earlier occurrence are a guess for what comes next: answers repeat names,
phrases and list patterns from the question and from themselves. The longest matching n-gram
(n = max_ngram .. min_ngram) wins; its most recent occurrence is used.

Each proposed token comes with a confidence: the measured rate at which such a draft is
accepted by greedy verification, by n-gram length and by offset in the draft (LOOKUP_CONF), so
the hybrid decoder can compare it with the drafter's own confidence slot by slot.

The index is incremental: `extend` costs O(max_ngram) per token, `propose` O(max_ngram + k).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# Acceptance of a lookup draft by greedy verification, by matched n-gram length (rows) and
# offset in the draft (columns), each given that the draft's earlier tokens were right (what the
# draft tree multiplies along a path), on the 982 greedy training answers
# (`python -m lab.lookup_conf`). Long matches are the small model repeating itself and
# are nearly always right; once a copied phrase has started, it tends to go on.
LOOKUP_CONF: dict[int, tuple[float, ...]] = {
    1: (0.17, 0.47, 0.60, 0.66, 0.70, 0.69, 0.77, 0.82),
    2: (0.50, 0.60, 0.67, 0.71, 0.72, 0.78, 0.82, 0.85),
    3: (0.60, 0.67, 0.72, 0.73, 0.78, 0.82, 0.85, 0.86),
    4: (0.67, 0.72, 0.74, 0.78, 0.82, 0.86, 0.86, 0.90),
    5: (0.72, 0.74, 0.79, 0.83, 0.86, 0.87, 0.91, 0.89),
    6: (0.75, 0.79, 0.83, 0.86, 0.87, 0.91, 0.89, 0.90),
    7: (0.78, 0.83, 0.86, 0.87, 0.91, 0.89, 0.90, 0.91),
    8: (0.94, 0.95, 0.96, 0.96, 0.96, 0.97, 0.97, 0.97),
}


class PromptLookup:
    def __init__(self, tokens: Iterable[int] = (), *, max_ngram: int = 8, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.tokens: list[int] = []
        # n-gram -> index of the token that followed its most recent complete occurrence.
        self._next: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        for t in tokens:
            i = len(self.tokens)
            # Before appending token i, every n-gram ending at i - 1 gets continuation i.
            for n in range(self.min_ngram, self.max_ngram + 1):
                if i >= n:
                    self._next[tuple(self.tokens[i - n : i])] = i
            self.tokens.append(int(t))

    def propose(
        self, k: int, suffix_of: Sequence[int] | None = None
    ) -> tuple[list[int], list[float]]:
        """Up to k tokens continuing the longest earlier match of the sequence's suffix (or of
        `suffix_of`'s suffix: another sequence looked up in this index), with confidences;
        ([], []) if no suffix n-gram occurred."""
        toks = self.tokens if suffix_of is None else suffix_of
        for n in range(min(self.max_ngram, len(toks)), self.min_ngram - 1, -1):
            j = self._next.get(tuple(toks[len(toks) - n :]))
            if j is None:
                continue
            out = self.tokens[j : j + k]
            conf_row = LOOKUP_CONF[min(n, max(LOOKUP_CONF))]
            confs = [conf_row[min(i, len(conf_row) - 1)] for i in range(len(out))]
            return out, confs
        return [], []
