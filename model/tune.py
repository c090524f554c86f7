"""`python main.py tune`: this machine's decoding profile for the loaded model.

1. Cost: what a forward of R rows costs next to one row, and the drafter's pass next to a
   forward, for this model on this kernel and thread count.
2. Reference: `ar`'s greedy answers to `TUNE_PROMPTS` (written for tuning, in no training set),
   half of them under the agent's system prompt.
3. Search: coordinate descent over the `TUNED` settings (model/profile.py) from the defaults,
   each candidate timed against `ar` prompt by prompt, in turn, and every answer checked
   identical to `ar`'s: a candidate that changes one token is dropped, whatever its speed.
4. Confirm: the few fastest each decode the prompts again beside the untuned settings, the two
   in turn on each prompt (the best of many noisy timings is flattered by its noise); the one
   whose median prompt-by-prompt gain over the untuned settings is largest is written as the
   profile where that gain beats MARGIN, else the untuned settings are, and the Pareto front of
   tokens per forward against time per forward printed.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO, TypedDict

import torch

from dllm_voice.model import drafts
from dllm_voice.model import profile as profiles
from dllm_voice.model.config import LMConfig
from dllm_voice.model.engine import LM
from dllm_voice.model.hybrid import drafter_for, row_cost, runs_drafter
from dllm_voice.model.profile import Settings, Value

# Everyday requests of the kinds a voice agent gets, none of them in lab/'s training prompts
# (tests/model/test_tune.py checks it).
TUNE_PROMPTS = (
    "What should I know before adopting a rescue dog?",
    "How do I get red wine out of a carpet?",
    "Why do onions make people cry?",
    "Plan a simple three-day workout for a beginner.",
    "How do hedgehogs get through the winter?",
    "How long should I steep green tea?",
    "Explain how a refrigerator keeps food cold.",
    "Give me some ideas for a rainy Sunday afternoon.",
    "What makes bread rise?",
    "How can I tell if an avocado is ripe?",
    "Why does the moon change shape during the month?",
    "Write a two-line birthday message for my grandmother.",
    "What are some ways to save money on groceries?",
    "What is the best way to keep cut flowers fresh?",
    "What is a good stretch for a stiff neck?",
    "Explain what inflation means in everyday terms.",
    "How do I start learning to play the guitar?",
    "Why do leaves turn red and yellow in autumn?",
    "What is the healthiest way to cook broccoli?",
    "Tell me about the history of the bicycle.",
    "How should I prepare for a job interview?",
    "What causes thunder?",
    "Suggest a name for a small bakery by the sea.",
    "How do noise-cancelling headphones work?",
)
ROWS = (1, 2, 3, 5, 9, 13, 17)  # forward sizes timed for the row cost
DRAFTER_ONLY = ("draft_branch", "drafter_skip")  # what only the drafter's candidates read
# A move of the search must gain this much: two timings of nearly the same settings differ by
# up to ~5 % on a 2-core machine, so smaller gains are mostly noise.
MARGIN = 0.03
# Passes over the prompts of each finalist's head-to-head with the untuned settings: two
# timings of one setting differed by 8 % on one 2-core Xeon, where a profile chosen on them
# ran 0.91x ar on held-out prompts and the untuned settings 1.00x.
CONFIRM_ROUNDS = 2


class Costs(TypedDict, total=False):
    """What a step costs here: ms of a forward by its rows, and the extra cost of a row and of
    the drafter's pass as fractions of a 1-row forward."""

    forward_ms: dict[str, float]
    row_cost: float
    drafter_pass: float


@dataclass
class Trial:
    """One candidate's settings and what it measured against ar."""

    settings: Settings
    speedups: list[float] = field(default_factory=list)  # ar time / its time, one per timing
    tokens_per_forward: float = 0.0
    ms_per_forward: float = 0.0
    exact: bool = True

    @property
    def speedup(self) -> float:
        return statistics.median(self.speedups) if self.speedups else 0.0


def median_ms(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def measure_costs(lm: LM, reps: int = 9, prefill: int = 120) -> Costs:
    """Median ms of a forward of each ROWS size after a prefill, the fitted extra cost of a row
    as a fraction of a 1-row forward, and the drafter pass's cost next to that forward."""
    model, gen = lm.model, torch.Generator().manual_seed(0)
    cache = model.new_cache(prefill + max(ROWS) + 1)
    ids = torch.randint(
        0, min(1000, model.args.vocab_size), (1, prefill + max(ROWS)), generator=gen
    )
    ms: dict[int, float] = {}
    with torch.inference_mode():
        out = model(ids[:, :prefill], cache=cache, logits="none", hidden=True)

        def rows(r: int) -> None:
            model(ids[:, prefill : prefill + r], cache=cache, logits=0, hidden=True)
            cache.truncate(prefill)

        for r in ROWS:
            rows(r)  # first-call allocations
        for r in ROWS:
            ms[r] = median_ms(lambda r=r: rows(r), reps)
        one = ms[1]
        xs = [r - 1 for r in ROWS]
        slope = statistics.linear_regression(xs, [ms[r] for r in ROWS]).slope
        report: Costs = {
            "forward_ms": {str(r): round(v, 3) for r, v in ms.items()},
            "row_cost": round(max(slope / one, 0.0), 4),
        }
        drafter = drafter_for(model, drafts.resolve(lm.cfg.drafter, lm.cfg.path, "drafter"))
        if drafter is not None and out.hidden_normed is not None:
            hidden = out.hidden_normed[0, -1]

            def draft() -> None:
                drafter.draft(model, cache, int(ids[0, prefill]), hidden, lm.cfg.draft_branch)

            draft()
            report["drafter_pass"] = round(median_ms(draft, reps) / one, 4)
    return report


def prompts(system: str, n: int) -> list[list[dict[str, str]]]:
    """The first n tuning prompts, every other one under the system prompt."""
    out = []
    for i, q in enumerate(TUNE_PROMPTS[:n]):
        head = [{"role": "system", "content": system}] if system and i % 2 else []
        out.append([*head, {"role": "user", "content": q}])
    return out


class Search:
    """Candidates timed against ar on the same prompts, in turn, in this process."""

    def __init__(self, lm: LM, chats: list, max_new: int, log: TextIO) -> None:
        self.lm, self.chats, self.max_new, self.log = lm, chats, max_new, log
        self.base = dataclasses.replace(lm.cfg, profile="none")
        self.reference: list[list[int]] = []
        self.trials: dict[tuple, Trial] = {}

    def answer(self, lm: LM, decoder: str, chat: list) -> tuple[list[int], float, int]:
        gen = lm.session().generate(chat, decoder=decoder, max_new_tokens=self.max_new)
        t = time.perf_counter()
        for _ in gen:
            pass
        return gen.token_ids, time.perf_counter() - t, gen.stats.forwards

    def warm(self) -> None:
        """ar's answers, the reference every candidate must match."""
        for chat in self.chats:
            self.answer(self.lm, "ar", chat)  # first-call allocations, lazy tables
        self.reference = [self.answer(self.lm, "ar", c)[0] for c in self.chats]

    def time(self, settings: Settings) -> Trial:
        """Time the settings against ar, prompt by prompt; a new trial or one more timing."""
        trial = self.trials.setdefault(_key(settings), Trial(dict(settings)))
        lm = self.lm_for(settings)
        ar_s = own_s = 0.0
        tokens = forwards = 0
        for chat, want in zip(self.chats, self.reference, strict=True):
            ar_s += self.answer(self.lm, "ar", chat)[1]
            ids, s, n = self.answer(lm, "hybrid", chat)
            own_s, forwards, tokens = own_s + s, forwards + n, tokens + len(ids)
            trial.exact = trial.exact and ids == want
        trial.speedups.append(ar_s / own_s)
        trial.tokens_per_forward = tokens / max(forwards, 1)
        trial.ms_per_forward = own_s * 1e3 / max(forwards, 1)
        flag = "" if trial.exact else "  NOT EXACT: dropped"
        print(
            f"tune: {_show(settings)}: {trial.speedup:.3f}x ar, "
            f"{trial.tokens_per_forward:.2f} tokens/forward{flag}",
            file=self.log,
            flush=True,
        )
        return trial

    def versus(self, settings: Settings, base: Settings, rounds: int) -> float:
        """The median, over the prompts and ``rounds`` passes, of ``base``'s time over
        ``settings``' time on the same prompt, the two decoded in turn (which goes first
        alternating); 0.0 where ``settings`` changes an answer."""
        lms = [self.lm_for(settings), self.lm_for(base)]
        ratios = []
        for r in range(rounds):
            for i, (chat, want) in enumerate(zip(self.chats, self.reference, strict=True)):
                seconds = [0.0, 0.0]
                for k in (0, 1) if (r + i) % 2 == 0 else (1, 0):
                    ids, seconds[k], _ = self.answer(lms[k], "hybrid", chat)
                    if ids != want:
                        return 0.0
                ratios.append(seconds[1] / seconds[0])
        gain = statistics.median(ratios)
        print(
            f"tune: {_show(settings)}: {gain:.3f}x the untuned, paired", file=self.log, flush=True
        )
        return gain

    def lm_for(self, settings: Settings) -> LM:
        """An LM on the same weights decoding with ``settings``."""
        return LM(self.lm.model, self.lm.tokenizer, dataclasses.replace(self.base, **settings))

    def score(self, settings: Settings) -> float:
        trial = self.trials.get(_key(settings)) or self.time(settings)
        return trial.speedup if trial.exact else 0.0


def _key(settings: Settings) -> tuple:
    return tuple(sorted(settings.items()))


def _show(settings: Settings) -> str:
    return " ".join(
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in settings.items()
    )


def space(lm: LM, costs: Costs) -> dict[str, Sequence[Value]]:
    """Each tuned setting's values to try; the measured row cost seeds row_cost's."""
    auto, c = row_cost(lm.cfg, lm.model), costs["row_cost"]
    row_costs = sorted({round(min(max(v, 0.0), 1.0), 3) for v in (auto, c / 2, c, 1.5 * c, 2 * c)})
    values: dict[str, Sequence[Value]] = {
        "row_cost": row_costs,
        "draft_len": (4, 6, 8, 12, 16),
        "lookup_ngram": (0, 4, 8),
    }
    if "drafter_pass" in costs:
        values["drafter_pass"] = ("off", "on")
        values["draft_branch"] = (1, 2, 3, 4)
        values["drafter_skip"] = (0.4, 0.6, 0.8, 1.0)
    return values


def start(lm: LM) -> Settings:
    """The untuned settings, with row_cost and the drafter pass as auto resolves them."""
    settings = {k: getattr(lm.cfg, k) for k in profiles.TUNED}
    settings["row_cost"] = row_cost(lm.cfg, lm.model)
    settings["drafter_pass"] = "on" if runs_drafter(lm.cfg, lm.model) else "off"
    return settings


def pareto(trials: Sequence[Trial]) -> list[Trial]:
    """Exact trials no other beats on both tokens per forward and ms per forward."""
    front: list[Trial] = []
    for t in sorted(
        (t for t in trials if t.exact), key=lambda t: (-t.tokens_per_forward, t.ms_per_forward)
    ):
        if not front or t.ms_per_forward < front[-1].ms_per_forward:
            front.append(t)
    return front[::-1]


def search(s: Search, current: Settings, values: dict[str, Sequence[Value]], rounds: int) -> None:
    """Coordinate descent: each setting in turn moved to its fastest value, while a move gains
    more than MARGIN; every timing stays in s.trials."""
    best = s.score(current)
    for _ in range(rounds):
        moved = False
        for name, options in values.items():
            if name in DRAFTER_ONLY and current.get("drafter_pass") != "on":
                continue  # without the pass these change nothing
            for v in options:
                cand = {**current, name: v}
                score = s.score(cand)
                if score > best * (1 + MARGIN):
                    best, current, moved = score, cand, True
        if not moved:
            return


def run(
    cfg: LMConfig,
    *,
    system: str = "",
    n_prompts: int = 16,
    max_new: int = 64,
    rounds: int = 2,
    confirm: int = 3,
    out: str = "",
    log: TextIO = sys.stderr,
    report: TextIO = sys.stdout,
) -> int:
    """Measure, search, confirm, write the profile; the front and the choice to `report`."""
    t0 = time.perf_counter()
    lm = LM.load(dataclasses.replace(cfg, profile="none"))
    key = profiles.machine_key(lm.model, cfg.path)
    print(f"tune: {key}", file=log, flush=True)
    costs = measure_costs(lm)
    print(f"tune: costs {costs}", file=log, flush=True)
    s = Search(lm, prompts(system, n_prompts), max_new, log)
    s.warm()
    first = start(lm)
    search(s, first, space(lm, costs), rounds)
    exact = sorted((t for t in s.trials.values() if t.exact), key=lambda t: -t.speedup)
    untuned = s.trials[_key(first)]
    finalists = [t for t in exact[:confirm] if t is not untuned]
    gains = [s.versus(t.settings, untuned.settings, CONFIRM_ROUNDS) for t in finalists]
    choice, gain = max(
        zip(finalists, gains, strict=True), key=lambda x: x[1], default=(untuned, 1.0)
    )
    if gain < 1 + MARGIN:
        choice, gain = untuned, 1.0
    minutes = (time.perf_counter() - t0) / 60
    front = pareto(list(s.trials.values()))
    path = Path(out) if out else profiles.default_path(key)
    summary = {
        "costs": costs,
        "speedup": round(choice.speedup, 4),
        "untuned_speedup": round(untuned.speedup, 4),
        "paired_vs_untuned": round(gain, 4),
        "tokens_per_forward": round(choice.tokens_per_forward, 3),
        "prompts": len(s.chats),
        "max_new_tokens": max_new,
        "trials": len(s.trials),
        "minutes": round(minutes, 1),
        "written": time.strftime("%Y-%m-%d"),
    }
    profiles.write(path, key, choice.settings, summary)
    print("tokens/forward  ms/forward  vs ar  settings (the Pareto front)", file=report)
    for t in front:
        mark = "  <- chosen" if t is choice else ""
        print(
            f"{t.tokens_per_forward:14.2f}  {t.ms_per_forward:10.2f}  {t.speedup:5.3f}  "
            f"{_show(t.settings)}{mark}",
            file=report,
        )
    print(
        f"chosen: {_show(choice.settings)}\n"
        f"{choice.speedup:.3f}x ar ({untuned.speedup:.3f}x untuned; {gain:.3f}x the untuned "
        "prompt by prompt), "
        f"{choice.tokens_per_forward:.2f} tokens/forward, every answer identical to ar's; "
        f"{len(s.trials)} candidates in {minutes:.1f} min\nwrote {path}",
        file=report,
    )
    return 0
