"""N-gram store curve: free drafts only (prompt lookup + model/ngram.py's store), greedy hybrid
decoding simulated exactly along the `unseen` held-out greedy answers (64 tokens), with stores
built from growing shares of the training answers (of --data; --base: folders always included
whole, e.g. the first data when --data is more of it). JSON lines to stdout; no model needed.
`handwritten`: the same on the unseen answers to hand-written prompts only (16 of 105); the
others are topic x template prompts (lab/prompts.py) whose topic the training data
asks about in other words, which flatters a store of the base's own phrases.

    .venv/bin/python -m bench.ngram --data data/drafter,data/drafter_more
    .venv/bin/python -m bench.ngram --base data/drafter,data/drafter_more --data data/bulk
"""

from __future__ import annotations

import argparse
import json
import random
import sys

from dllm_voice.model.lookup import PromptLookup
from dllm_voice.model.ngram import NgramStore
from dllm_voice.model.tree import build
from lab import ngram
from lab.gen_data import load_records
from lab.prompts import TEMPLATES, TOPICS, conversations

STOP = frozenset({0, 2})  # SmolLM2's end-of-text / im_end


def simulate(held: list, store: NgramStore | None, tokens: int, row_cost: float) -> dict:
    steps = committed = positions = 0
    right = [0, 0, 0, 0]  # first i + 1 store drafts all right
    for r in held:
        ids, p0 = r["ids"].tolist(), int(r["prompt_len"])
        n = min(len(ids), p0 + tokens)
        for s in range(p0, n - 1):
            toks = store.propose(ids[max(0, s - 7) : s + 1], 4)[0] if store else []
            ok = True
            for i in range(4):
                ok = ok and i < len(toks) and s + 1 + i < n and toks[i] == ids[s + 1 + i]
                right[i] += ok
            positions += 1
        lookup, s = PromptLookup(ids[: p0 + 1]), p0
        while s < n - 1:
            k = min(8, n - 1 - s)
            chains = [lookup.propose(k)]
            if store is not None:  # as model/hybrid.py: its chain and the runner-up forks
                chains += store.branches(ids[max(0, s - 7) : s + 1], k)
            tree = build([], [c for c in chains if c[0]], max_nodes=k, max_depth=k,
                         row_cost=row_cost, stop_ids=STOP)  # fmt: skip
            kids, node, a = tree.children(), -1, 0
            while s + 1 + a < n:
                node = next((c for c in kids[node] if tree.tokens[c] == ids[s + 1 + a]), -2)
                if node == -2:
                    break
                a += 1
            c = min(a + 1, n - 1 - s)
            steps, committed = steps + 1, committed + c
            lookup.extend(ids[s + 1 : s + 1 + c])
            s += c
    return {
        "tokens_per_step": round(committed / max(steps, 1), 3),
        "first_i_right": [round(x / max(positions, 1), 3) for x in right],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/drafter", help="gen_data folder(s), comma-separated")
    ap.add_argument("--base", default="", help="gen_data folder(s) every store holds whole")
    ap.add_argument("--tokens", type=int, default=64, help="answer tokens simulated")
    ap.add_argument("--row-cost", type=float, default=0.1)
    a = ap.parse_args()
    base_recs = load_records(a.base, set()) if a.base else []
    recs = load_records(a.data, set())
    unseen = {tuple(m["content"] for m in c) for c in conversations("unseen")}
    every = conversations("all")
    unseen_idx = {i for i, c in enumerate(every) if tuple(m["content"] for m in c) in unseen}
    held = [
        r
        for r in base_recs + recs
        if r["heldout"] and r["sample"] == 0 and int(r["conv"]) in unseen_idx
    ]
    templated = {tpl.format(t=t) for t in TOPICS for tpl in TEMPLATES}
    hand = [r for r in held if every[int(r["conv"])][-1]["content"] not in templated]
    base = [r for r in base_recs if not r["heldout"]]
    train = [r for r in recs if not r["heldout"]]
    if not train or not held:
        raise SystemExit(
            f"{a.data}: no training or unseen held-out answers; run python -m lab.gen_data"
        )
    random.Random(0).shuffle(train)
    sizes = {"unseen_answers": len(held), "handwritten": len(hand), "train_answers": len(train)}
    print(json.dumps({**sizes, "base_answers": len(base)}))
    if not base:
        row = {"store_tokens": 0, **simulate(held, None, a.tokens, a.row_cost)}
        row["handwritten"] = simulate(hand, None, a.tokens, a.row_cost)["tokens_per_step"]
        print(json.dumps(row))
    for share in (0.0, 0.125, 0.25, 0.5, 1.0) if base else (0.125, 0.25, 0.5, 1.0):
        part = base + train[: int(len(train) * share)]
        store = ngram.build(
            (r["ids"].tolist(), int(r["prompt_len"]), r["greedy"].tolist()) for r in part
        )
        row = {"share": share, "store_tokens": store.info["tokens"], "contexts": len(store.table)}
        row |= simulate(held, store, a.tokens, a.row_cost)
        row["handwritten"] = simulate(hand, store, a.tokens, a.row_cost)["tokens_per_step"]
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
