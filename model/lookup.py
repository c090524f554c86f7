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
# offset in the draft (columns): measured with `python -m model.lookup` on 128 greedy answers of
# model/prompts.py (16K answer tokens; 9.5K positions had a match). Long matches are the small
# model repeating itself and are nearly always right.
LOOKUP_CONF: dict[int, tuple[float, ...]] = {
    1: (0.15, 0.10, 0.06, 0.05, 0.04, 0.03, 0.04, 0.03),
    2: (0.48, 0.32, 0.22, 0.17, 0.12, 0.11, 0.10, 0.08),
    3: (0.58, 0.40, 0.29, 0.22, 0.20, 0.18, 0.16, 0.14),
    4: (0.62, 0.46, 0.37, 0.33, 0.27, 0.24, 0.22, 0.22),
    5: (0.69, 0.57, 0.50, 0.40, 0.36, 0.33, 0.32, 0.27),
    6: (0.76, 0.66, 0.55, 0.50, 0.46, 0.43, 0.38, 0.35),
    7: (0.80, 0.69, 0.62, 0.57, 0.53, 0.47, 0.45, 0.38),
    8: (0.96, 0.93, 0.90, 0.87, 0.85, 0.84, 0.82, 0.77),
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


def calibrate(
    sequences: Iterable[tuple[list[int], int]], k: int = 8, max_ngram: int = 8
) -> dict[int, list[tuple[float, int]]]:
    """Measured acceptance of lookup drafts on greedy sequences (ids, prompt_len).

    At every answer position the lookup proposes k tokens; returns, per matched n-gram length,
    per offset, (fraction equal to the greedy continuation, count)."""
    hits: dict[int, list[list[int]]] = {
        n: [[0, 0] for _ in range(k)] for n in range(1, max_ngram + 1)
    }
    for ids, plen in sequences:
        lk = PromptLookup(ids[:plen], max_ngram=max_ngram)
        for s in range(plen, len(ids) - 1):
            lk.extend([ids[s]])
            n = _matched_n(lk)
            if n == 0:
                continue
            out, _ = lk.propose(k)
            for i, t in enumerate(out):
                if s + 1 + i >= len(ids):
                    break
                hits[n][i][0] += int(t == ids[s + 1 + i])
                hits[n][i][1] += 1
    return {n: [(h / max(c, 1), c) for h, c in rows] for n, rows in hits.items()}


def _matched_n(lk: PromptLookup) -> int:
    toks = lk.tokens
    for n in range(min(lk.max_ngram, len(toks)), lk.min_ngram - 1, -1):
        if tuple(toks[len(toks) - n :]) in lk._next:
            return n
    return 0


if __name__ == "__main__":
    import sys
    from pathlib import Path

    import torch

    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "data/drafter")
    seqs = []
    for f in sorted(folder.glob("b*.pt")):
        for r in torch.load(f):
            if r["sample"] == 0:  # greedy answers (lookup has nothing trained: all of them)
                seqs.append((r["ids"].tolist(), int(r["prompt_len"])))
    print(f"{len(seqs)} greedy answers")
    for n, rows in calibrate(seqs).items():
        print(n, " ".join(f"{p:.2f}" for p, _ in rows), f"(n={rows[0][1]})")
