"""A small architecture search for the block drafter (model/drafter.py).

Each candidate changes one thing of the shipped architecture (2 layers from the base's top, K = 4
drafts, an 8192-token draft vocabulary, the base's MLP width, rows reading the context's K/V and
the base's final hidden state) and is trained by train_drafter.py from its starting point on the
same data for the same budget of target tokens. Each is then scored on the held-out greedy
answers (train_drafter's simulated decode: tokens per verify step, with prompt lookup mixed in as
the decoder does) and timed here, on the loaded model and this machine's kernels:

    step cost   = forward of K + 1 rows + the drafter's pass, in 1-row forwards
    score       = tokens per step / step cost    (a projected speed-up over `ar` on this CPU)
    rows free   = tokens per step / (1 + pass)   (verify rows cost nothing, as on a GPU)

The front (the candidates no other beats on both tokens per step and step cost) and the best
score are printed and written to --out. Training is resumable per candidate (a finished one is
skipped), so a stopped search goes on with the same command.

    nice -n 10 .venv/bin/python -m lab.drafter_search --data data/drafter --target-tokens 300000
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from dllm_voice.model.drafter import BlockDrafter
from dllm_voice.model.loader import load
from dllm_voice.model.transformer import Transformer
from dllm_voice.model.tune import median_ms
from lab import train_drafter

# name -> train_drafter options that differ from the shipped architecture's
CANDIDATES: dict[str, list[str]] = {
    "as shipped": [],
    "1 layer": ["--layers", "1"],
    "3 layers": ["--layers", "3"],
    "MLP 768": ["--ffn", "768"],
    "MLP 384": ["--ffn", "384"],
    "K 2": ["--block", "2"],
    "K 6": ["--block", "6"],
    "vocab 4096": ["--vocab", "4096"],
    "vocab 16384": ["--vocab", "16384"],
    "K/V only": ["--context", "kv"],
}
PREFILL = 120  # context length the costs are timed at (a short answer's history)


def folder(out: Path, name: str) -> Path:
    return out / name.replace(" ", "_").replace("/", "")


def trained(run: Path, budget: int) -> dict | None:
    """The last eval row of a finished candidate's log, or None."""
    log = run / "log.jsonl"
    if not log.exists():
        return None
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return rows[-1] if rows and rows[-1]["target_tokens"] >= budget else None


@torch.inference_mode()
def costs(base: Transformer, drafter: BlockDrafter, reps: int) -> dict[str, float]:
    """ms of a 1-row forward, of a K + 1-row verify forward and of the drafter's pass, each
    after a PREFILL-token context."""
    gen = torch.Generator().manual_seed(0)
    k = drafter.args.block
    ids = torch.randint(0, min(1000, base.args.vocab_size), (1, PREFILL + k + 1), generator=gen)
    cache = base.new_cache(PREFILL + k + 2)
    out = base(ids[:, :PREFILL], cache=cache, logits="none", hidden=True)
    assert out.hidden_normed is not None
    h = out.hidden_normed[0, -1]

    def rows(r: int) -> None:
        base(ids[:, PREFILL : PREFILL + r], cache=cache, logits="all", hidden=True)
        cache.truncate(PREFILL)

    def draft() -> None:
        drafter.draft(base, cache, int(ids[0, PREFILL]), h)

    for warm in (lambda: rows(1), lambda: rows(k + 1), draft):
        warm()  # first-call allocations
    one, verify, pass_ = [], [], []
    for _ in range(3):  # interleaved, so a drift of the machine moves all three alike
        one.append(median_ms(lambda: rows(1), reps))
        verify.append(median_ms(lambda: rows(k + 1), reps))
        pass_.append(median_ms(draft, reps))
    return {"one_ms": statistics.median(one), "verify_ms": statistics.median(verify),
            "pass_ms": statistics.median(pass_)}  # fmt: skip


def score(ev: dict, c: dict[str, float]) -> dict[str, float]:
    tokens = ev["tokens_per_step_lookup"]
    step = (c["verify_ms"] + c["pass_ms"]) / c["one_ms"]
    return {"tokens_per_step": round(ev["tokens_per_step"], 3),
            "tokens_per_step_lookup": round(tokens, 3), "acc1": round(ev["acc1"], 3),
            "step_cost": round(step, 3), "pass": round(c["pass_ms"] / c["one_ms"], 3),
            "score": round(tokens / step, 3),
            "rows_free": round(tokens / (1 + c["pass_ms"] / c["one_ms"]), 3)}  # fmt: skip


def front(results: dict[str, dict]) -> list[str]:
    """Candidates no other beats on both tokens per step (with lookup) and step cost."""

    def beaten(a: dict) -> bool:
        return any(
            b["tokens_per_step_lookup"] >= a["tokens_per_step_lookup"]
            and b["step_cost"] <= a["step_cost"]
            and b != a
            for b in results.values()
        )

    return sorted((n for n, r in results.items() if not beaten(r)),
                  key=lambda n: results[n]["step_cost"])  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default="data/drafter", help="gen_data folder(s), comma-separated")
    ap.add_argument("--model", default="", help="lm.path ('' = bundled SmolLM2)")
    ap.add_argument("--target-tokens", type=int, default=300_000, help="each candidate's budget")
    ap.add_argument("--only", default="", help="comma-separated candidate names")
    ap.add_argument("--out-dir", default="runs/drafter_search")
    ap.add_argument("--out", default="", help="also write the results JSON here")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15, help="timings per cost, three times over")
    ap.add_argument("--eval-answers", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    names = [n.strip() for n in a.only.split(",") if n.strip()] or list(CANDIDATES)
    unknown = sorted(set(names) - set(CANDIDATES))
    if unknown:
        raise SystemExit(f"unknown candidates {unknown}; known: {', '.join(CANDIDATES)}")
    out = Path(a.out_dir)
    evals: dict[str, dict] = {}
    for i, name in enumerate(names):
        run = folder(out, name)
        ev = trained(run, a.target_tokens)
        if ev is None:
            print(f"[{i + 1}/{len(names)}] training {name!r}", flush=True)
            t0 = time.time()
            train_drafter.main([
                "--data", a.data, "--model", a.model, "--threads", str(a.threads),
                "--target-tokens", str(a.target_tokens), "--steps", str(10**9),
                "--eval-every", str(10**9), "--eval-answers", str(a.eval_answers),
                "--out-dir", str(run), "--save", str(run / "drafter.safetensors"),
                "--seed", str(a.seed), "--resume", *CANDIDATES[name],
            ])  # fmt: skip
            ev = trained(run, a.target_tokens)
            assert ev is not None, f"{name}: training ended short of its budget"
            print(f"  {name!r} trained in {time.time() - t0:.0f} s", flush=True)
        evals[name] = ev
    torch.set_num_threads(a.threads)
    base, _ = load(a.model)
    results = {}
    for name in names:
        drafter = BlockDrafter.load(folder(out, name) / "drafter.safetensors", base)
        results[name] = {**score(evals[name], costs(base, drafter, a.reps)),
                         "train_s": evals[name]["s"]}  # fmt: skip
        print(f"{name:>12}: {json.dumps(results[name])}", flush=True)
    best = max(results, key=lambda n: results[n]["score"])
    report = {"target_tokens": a.target_tokens, "data": a.data, "results": results,
              "front": front(results), "best": best}  # fmt: skip
    print(json.dumps({"front": report["front"], "best": best}))
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
