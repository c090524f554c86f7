"""Calibrate prompt lookup's confidences (model/lookup.py LOOKUP_CONF) on gen_data's answers.

    .venv/bin/python -m lab.lookup_conf [data/drafter]

prints, per matched n-gram length, the acceptance rate at each draft offset over the greedy
training answers; LOOKUP_CONF holds those rows.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from dllm_voice.model.lookup import PromptLookup
from lab.gen_data import load_records


def calibrate(
    sequences: Iterable[tuple[list[int], int]], k: int = 8, max_ngram: int = 8
) -> dict[int, list[tuple[float, int]]]:
    """Measured acceptance of lookup drafts on greedy sequences (ids, prompt_len).

    At every answer position the lookup proposes k tokens; returns, per matched n-gram length,
    per offset, (fraction equal to the greedy continuation where the offsets before it were,
    count)."""
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
                right = t == ids[s + 1 + i]
                hits[n][i][0] += right
                hits[n][i][1] += 1
                if not right:  # later offsets count only where everything before was right
                    break
    return {n: [(h / max(c, 1), c) for h, c in rows] for n, rows in hits.items()}


def _matched_n(lk: PromptLookup) -> int:
    toks = lk.tokens
    for n in range(min(lk.max_ngram, len(toks)), lk.min_ngram - 1, -1):
        if tuple(toks[len(toks) - n :]) in lk._next:
            return n
    return 0


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    folder = args[0] if args else "data/drafter"
    seqs = [
        (r["ids"].tolist(), int(r["prompt_len"]))
        for r in load_records(folder, set())
        if r["sample"] == 0 and not r["heldout"]  # greedy training answers
    ]
    print(f"{len(seqs)} greedy answers")
    for n, rows in calibrate(seqs).items():
        print(n, " ".join(f"{p:.2f}" for p, _ in rows), f"(n={rows[0][1]})")


if __name__ == "__main__":
    main()
