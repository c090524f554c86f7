"""End-of-turn scorer benchmark: the bundled LM's P(end of user turn) on a labeled set.

Scores every transcript of bench/turn_end_set.py (complete turns, the same turns cut at a word
that cannot end a sentence, hesitations) as the pipeline does at a pause: the app's system
prompt and the transcript as the user message, through one ChatSession, so each call reuses
the cached system prompt as a live session would. Prints JSON: ROC AUC, accuracy of the
adaptive endpointer's three-way decision at the configured thresholds, the cost per call, and
the misjudged transcripts.

    .venv/bin/python bench/end_of_turn.py [--set conversation.end_likely=0.5] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.config import load_config  # noqa: E402
from bench.turn_end_set import labeled  # noqa: E402


def roc_auc(scores: list[float], labels: list[bool]) -> float:
    """P(a complete turn scores above an incomplete one), ties counted half."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--seed", type=int, default=0, help="seed of the labeled set's cuts")
    args = ap.parse_args()

    from app.turns import end_decision
    from model.engine import LM

    cfg = load_config(args.config, args.overrides)
    conv = cfg.conversation
    lm = LM.load(cfg.lm)
    session = lm.session()
    system = [{"role": "system", "content": conv.system_prompt}]
    session.end_of_turn([*system, {"role": "user", "content": "Hello."}])  # warm-up
    data = labeled(args.seed)
    scores, costs = [], []
    for text, _ in data:
        t0 = time.perf_counter()
        p = session.end_of_turn([*system, {"role": "user", "content": text}])
        costs.append(1000.0 * (time.perf_counter() - t0))
        scores.append(float(p) if p is not None else 0.5)
    labels = [y for _, y in data]
    pairs = list(zip(scores, labels, strict=True))
    decisions = [end_decision(p, conv, t) for p, (t, _) in zip(scores, data, strict=True)]
    complete = [d for d, y in zip(decisions, labels, strict=True) if y]
    incomplete = [d for d, y in zip(decisions, labels, strict=True) if not y]
    decided = [(d, y) for d, y in zip(decisions, labels, strict=True) if d != "unsure"]
    result = {
        "bench": "end_of_turn",
        "transcripts": len(data),
        "complete": len(complete),
        "incomplete": len(incomplete),
        "roc_auc": round(roc_auc(scores, labels), 4),
        "thresholds": {"end_likely": conv.end_likely, "end_unlikely": conv.end_unlikely},
        "complete_decided": {k: complete.count(k) for k in ("complete", "unsure", "incomplete")},
        "incomplete_decided": {
            k: incomplete.count(k) for k in ("complete", "unsure", "incomplete")
        },
        "accuracy_when_decided": round(
            sum((d == "complete") == y for d, y in decided) / max(1, len(decided)), 4
        ),
        "accuracy_at_0.5": round(
            sum((p >= 0.5) == y for p, y in zip(scores, labels, strict=True)) / len(data), 4
        ),
        "cost_ms": {
            "p50": round(statistics.median(costs), 2),
            "p95": round(sorted(costs)[int(0.95 * (len(costs) - 1))], 2),
        },
        "median_p": {
            "complete": round(statistics.median(s for s, y in pairs if y), 4),
            "incomplete": round(statistics.median(s for s, y in pairs if not y), 4),
        },
        "misjudged": [
            {"text": t, "complete": y, "p": round(p, 4)}
            for (t, y), p, d in zip(data, scores, decisions, strict=True)
            if d != "unsure" and (d == "complete") != y
        ],
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
