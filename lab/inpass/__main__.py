"""Command line of the design (a) pilot (__init__.py): train, eval, rowcost.

python -m lab.inpass {train,eval,rowcost} --help
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from pathlib import Path

import torch

from dllm_voice.model.loader import load
from lab import inpass
from lab.gen_data import Record, load_records
from lab.inpass import (
    InPassAdapter,
    evaluate,
    inpass_forward,
    sample_anchors,
    train_step,
)
from lab.train_drafter import draft_vocab, usable


def _held(recs: list[Record], n: int) -> list[Record]:
    """The first n held-out greedy answers in file order (n = 0: all); design (b)'s trainer
    picks its eval set the same way (13 answers in model/adapters/card.md)."""
    held = [r for r in recs if r["heldout"] and r["sample"] == 0]
    return held[:n] if n else held


def train(a: argparse.Namespace) -> None:
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    base, tok = load(a.model, a.device, a.dtype, keep_float=True)  # trains through it
    recs = load_records(Path(a.data), set())
    for r in recs:
        r.pop("hidden")  # design (b)'s layer-27 features: not used here (all layers recomputed)
    train_recs = [r for r in recs if usable(r)]
    held = _held(recs, a.eval_answers)
    if not train_recs or not held:
        raise SystemExit(f"{a.data}: no training/held-out data; run python -m lab.gen_data")
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab_ids, coverage = draft_vocab(train_recs, a.vocab, set(tok.stop_ids))
    to_vocab = torch.full((base.args.vocab_size,), -100, dtype=torch.long)
    to_vocab[vocab_ids] = torch.arange(len(vocab_ids))
    adapter = InPassAdapter.from_base(base, vocab_ids, rank=a.rank, block=a.block)
    adapter.requires_grad_(True).train()
    opt = torch.optim.AdamW(adapter.parameters(), lr=a.lr, weight_decay=0.0, betas=(0.9, 0.95))
    st = {"step": 0, "targets": 0, "draft_targets": 0, "train_s": 0.0, "evaluated": -1}
    n_params = sum(p.numel() for p in adapter.parameters())
    print(
        f"{len(train_recs)} train answers, {len(held)} held-out; LoRA r={a.rank}, "
        f"{n_params / 1e6:.2f} M trainable; draft vocab covers {coverage:.3f}",
        flush=True,
    )
    log = (out / "log.jsonl").open("a")

    def checkpoint_and_eval() -> None:  # the adapter file is the checkpoint
        t = time.time()
        adapter.eval()
        ev = evaluate(adapter, base, held)
        adapter.train()
        row = {k: st[k] for k in ("step", "targets", "draft_targets")}
        row |= {"train_s": round(st["train_s"]), "eval_s": round(time.time() - t), **ev}
        st["evaluated"] = st["step"]
        print(json.dumps(row), flush=True)
        log.write(json.dumps(row) + "\n")
        log.flush()
        info = {"design": f"in-pass draft rows (a), LoRA r={a.rank}, K={a.block}",
                "answers": len(train_recs), "coverage": round(coverage, 4), **row}  # fmt: skip
        adapter.save(out / "inpass.safetensors", info)

    checkpoint_and_eval()
    while st["step"] < a.steps and st["train_s"] < 60 * a.minutes:
        t0 = time.time()
        batch = rng.sample(train_recs, a.batch)
        anchors = [sample_anchors(r, a.blocks, rng) for r in batch]
        progress = max(st["step"] / a.steps, st["train_s"] / (60 * a.minutes))
        lr = a.lr * min(1.0, (st["step"] + 1) / a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        loss, n, nd = train_step(adapter, base, opt, batch, anchors, to_vocab)
        st["step"] += 1
        st["targets"] += n
        st["draft_targets"] += nd
        st["train_s"] += time.time() - t0
        if st["step"] % a.log_every == 0:
            print(f"step {st['step']} loss {loss:.3f} targets {st['targets']} draft targets "
                  f"{st['draft_targets']} ({st['train_s']:.0f} s)", flush=True)  # fmt: skip
        if (st["draft_targets"] - nd) // a.eval_targets < st["draft_targets"] // a.eval_targets:
            checkpoint_and_eval()  # at multiples of --eval-targets: design (b)'s curve points
    if st["evaluated"] != st["step"]:
        checkpoint_and_eval()


def evaluate_cli(a: argparse.Namespace) -> None:
    base, _ = load(a.model, a.device, a.dtype)
    held = _held(load_records(Path(a.data), set()), a.eval_answers)
    adapter = InPassAdapter.load(a.adapter, base)
    t = time.time()
    ev = evaluate(adapter, base, held, a.rows)
    print(json.dumps({"design": "a", "answers": len(held), "rows": a.rows or adapter.args.block
                      + 1, "s": round(time.time() - t), **ev}), flush=True)  # fmt: skip
    if a.drafter:  # design (b) on the same answers, for a like-for-like line
        from dllm_voice.model.drafter import BlockDrafter
        from lab import train_drafter

        drafter = BlockDrafter.load(a.drafter, base)
        to_vocab = torch.full((base.args.vocab_size,), -100, dtype=torch.long)
        to_vocab[drafter.vocab_ids] = torch.arange(len(drafter.vocab_ids))
        ev = train_drafter.evaluate(drafter, base, held, to_vocab)
        print(json.dumps({"design": "b", "answers": len(held), **ev}), flush=True)


@torch.no_grad()
def rowcost(a: argparse.Namespace) -> None:
    """Median forward ms of the step shapes after a `--prefill`-token prefill, interleaved."""
    base, _ = load(a.model, a.device, a.dtype)
    ad = (InPassAdapter.load(a.adapter, base) if a.adapter else
          InPassAdapter.from_base(base, torch.arange(a.vocab)))  # fmt: skip
    g = torch.Generator().manual_seed(0)
    cache = base.new_cache(a.prefill + 64)
    base(torch.randint(100, 20000, (1, a.prefill), generator=g), cache=cache, logits="none")
    v1, v5 = torch.tensor([[42]]), torch.randint(100, 20000, (1, 5), generator=g)
    v13, v30 = torch.randint(100, 20000, (1, 13)), torch.randint(100, 20000, (1, 30))
    cases = {"1 row": lambda: base(v1, cache=cache), "5 verify": lambda: base(v5, cache=cache),
             "5 verify, in-pass loop": lambda: inpass_forward(base, ad, cache, v5, ())}  # fmt: skip
    # The same row counts as plain causal rows: what the in-pass masks + LoRA add.
    cases["13 plain rows"] = lambda: base(v13, cache=cache)
    cases["30 plain rows"] = lambda: base(v30, cache=cache)
    for j, r in ((5, 4), (5, 5), (2, 4), (2, 5)):
        acc = tuple(range(5)) if j == 5 else (0, 4)
        cases[f"5 verify + {j}x{r} draft"] = lambda acc=acc, r=r: inpass_forward(
            base, ad, cache, v5, acc, r
        )
    if a.drafter:  # design (b): the verify rows, then its drafter pass
        from dllm_voice.model.drafter import BlockDrafter

        dr = BlockDrafter.load(a.drafter, base)
        cases["5 verify + design (b) drafter pass"] = lambda: dr.draft(
            base, cache, 7, base(v5, cache=cache, hidden=True).hidden_normed[0, -1]
        )
    times: dict[str, list[float]] = {k: [] for k in cases}
    for rep in range(a.reps + 2):
        for name, fn in cases.items():
            t = time.perf_counter()
            fn()
            if rep >= 2:  # two warm-up rounds
                times[name].append(1000 * (time.perf_counter() - t))
            cache.truncate(a.prefill)
    one = statistics.median(times["1 row"])
    for name, ts in times.items():
        ms = statistics.median(ts)
        print(json.dumps({"case": name, "median_ms": round(ms, 1), "vs_1_row": round(ms / one, 2)}))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m lab.inpass",
        description=inpass.__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    tr, ev, rc = sub.add_parser("train"), sub.add_parser("eval"), sub.add_parser("rowcost")
    for p in (tr, ev, rc):
        p.add_argument("--model", default="", help="lm.path ('' = bundled SmolLM2)")
        p.add_argument("--device", default="cpu")
        p.add_argument("--dtype", default="auto")
        p.add_argument("--threads", type=int, default=1)
    for p in (tr, ev):
        p.add_argument("--data", default="data/drafter", help="lab.gen_data output")
        p.add_argument("--eval-answers", type=int, default=13, help="held-out answers; 0 = all")
    tr.add_argument("--rank", type=int, default=32)
    tr.add_argument("--block", type=int, default=4, help="K drafts per step (K + 1 block rows)")
    for p in (tr, rc):
        p.add_argument("--vocab", type=int, default=8192, help="draft vocabulary size")
    tr.add_argument("--batch", type=int, default=2, help="answers per step")
    tr.add_argument("--blocks", type=int, default=64, help="blocks per answer per step")
    tr.add_argument("--steps", type=int, default=100000)
    tr.add_argument("--minutes", type=float, default=30.0, help="training time cap (no evals)")
    tr.add_argument("--lr", type=float, default=1e-3)
    tr.add_argument("--warmup", type=int, default=20)
    tr.add_argument("--eval-targets", type=int, default=24000, help="eval every N draft targets")
    tr.add_argument("--log-every", type=int, default=10)
    tr.add_argument("--out-dir", default="data/inpass", help="log.jsonl + the adapter")
    tr.add_argument("--seed", type=int, default=0)
    ev.add_argument("--adapter", default="data/inpass/inpass.safetensors")
    ev.add_argument("--rows", type=int, default=0, help="rows per block (0 = K + 1)")
    for p in (ev, rc):
        p.add_argument("--drafter", default="", help="design (b) adapter to compare with")
    rc.add_argument("--adapter", default="", help="'' = untrained (same cost)")
    rc.add_argument("--prefill", type=int, default=120)
    rc.add_argument("--reps", type=int, default=15)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    {"train": train, "eval": evaluate_cli, "rowcost": rowcost}[a.cmd](a)


if __name__ == "__main__":
    main()
