"""An online chooser of decoding settings per session (a bandit over the few best), measured
side by side with the fixed choice `python main.py tune` writes.

    .venv/bin/python -m lab.profile_bandit [--arms 3] [--rounds 3] [--prompts 24]

1. Arms: the untuned settings and tune's one-setting moves from them (model/tune.py `space`),
   each timed against `ar` on the tuning prompts; the `--arms` fastest whose answers equal
   `ar`'s. The fastest is what tune's search would keep.
2. Sessions: the unseen held-out conversations (lab/prompts.py), one session per round. Each is
   answered by `ar`, the untuned settings, the fastest arm and the bandit, in an order rotated
   per prompt. The bandit picks an arm per answer by Thompson sampling on the log of the arm's
   tokens per second, learned from its own earlier answers in the session only, as a session
   of the agent would.
3. Report: per decoder, the median over all answers of `ar`'s time over its time on the same
   prompt, whether every answer equals `ar`'s, and the arms the bandit played.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from dataclasses import dataclass, field

from dllm_voice.model.config import LMConfig
from dllm_voice.model.engine import LM
from dllm_voice.model.profile import Settings
from dllm_voice.model.tune import DRAFTER_ONLY, Search, measure_costs, prompts, space, start
from lab.prompts import conversations

PRIOR_SD = 0.3  # spread of log tokens/s assumed before an arm has two answers of its own


@dataclass
class Arm:
    settings: Settings
    rates: list[float] = field(default_factory=list)  # log tokens/s of each answer it gave

    def draw(self, rng: random.Random, spread: float) -> float:
        """A sample of the arm's mean log rate from its posterior (flat prior, known spread)."""
        if not self.rates:
            return math.inf  # every arm once before any is compared
        return rng.gauss(statistics.fmean(self.rates), spread / math.sqrt(len(self.rates)))


class Bandit:
    """Thompson sampling over arms, one answer at a time; the spread of an answer's log rate is
    pooled over the arms (a session gives each arm only a few answers)."""

    def __init__(self, settings: list[Settings], seed: int) -> None:
        self.arms = [Arm(s) for s in settings]
        self.rng = random.Random(seed)

    def spread(self) -> float:
        devs = [
            r - statistics.fmean(a.rates) for a in self.arms if len(a.rates) > 1 for r in a.rates
        ]
        return statistics.pstdev(devs) if len(devs) > 2 else PRIOR_SD

    def pick(self) -> Arm:
        sd = self.spread()
        return max(self.arms, key=lambda a: a.draw(self.rng, sd))

    @staticmethod
    def learn(arm: Arm, tokens: int, seconds: float) -> None:
        arm.rates.append(math.log(max(tokens, 1) / seconds))


def candidates(first: Settings, values: dict) -> list[Settings]:
    """The untuned settings and every one-setting move from them (the drafter's own settings
    only where its pass runs)."""
    out = [first]
    for name, options in values.items():
        if name in DRAFTER_ONLY and first.get("drafter_pass") != "on":
            continue
        out += [{**first, name: v} for v in options if v != first[name]]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="sessions over the unseen prompts")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    a = ap.parse_args(argv)
    log = sys.stderr
    lm = LM.load(LMConfig(profile="none"))
    costs = measure_costs(lm)
    tuning = Search(lm, prompts("", 16), a.max_new_tokens, log)
    tuning.warm()
    first = start(lm)
    trials = [tuning.time(s) for s in candidates(first, space(lm, costs))]
    ranked = sorted((t for t in trials if t.exact), key=lambda t: -t.speedup)
    arms = [t.settings for t in ranked[: a.arms]]
    chats = conversations("unseen")[: a.prompts]
    test = Search(lm, chats, a.max_new_tokens, log)
    test.warm()
    fixed = {"untuned": test.lm_for(first), "fastest arm": test.lm_for(arms[0])}
    arm_lms = [test.lm_for(s) for s in arms]
    names = ["ar", *fixed, "bandit"]
    ratios: dict[str, list[float]] = {n: [] for n in names[1:]}
    exact = dict.fromkeys(names[1:], True)
    played: list[int] = []
    spreads: list[float] = []
    for r in range(a.rounds):
        bandit = Bandit(arms, seed=r)
        for i, (chat, want) in enumerate(zip(chats, test.reference, strict=True)):
            shift = (r * len(chats) + i) % len(names)
            seconds: dict[str, float] = {}
            for name in names[shift:] + names[:shift]:
                if name == "bandit":
                    arm = bandit.pick()
                    k = bandit.arms.index(arm)
                    ids, seconds[name], _ = test.answer(arm_lms[k], "hybrid", chat)
                    bandit.learn(arm, len(ids), seconds[name])
                    played.append(k)
                else:
                    decoder = "ar" if name == "ar" else "hybrid"
                    ids, seconds[name], _ = test.answer(fixed.get(name, lm), decoder, chat)
                if name != "ar":
                    exact[name] = exact[name] and ids == want
            for name in ratios:
                ratios[name].append(seconds["ar"] / seconds[name])
        spreads.append(bandit.spread())
    print(f"arms (fastest first, vs ar on the {len(tuning.chats)} tuning prompts):")
    for k, t in enumerate(ranked[: a.arms]):
        print(f"  {k}: {t.speedup:.3f}x  {t.settings}  played {played.count(k)}")
    print(
        f"{len(chats)} unseen prompts x {a.rounds} sessions, paired vs ar (median), "
        f"candidates timed: {len(trials)}; an answer's log tokens/s spreads by "
        f"{statistics.median(spreads):.3f} (sd) within an arm"
    )
    for name, rs in ratios.items():
        print(f"  {name:12s} {statistics.median(rs):.3f}x  exact {exact[name]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
