"""Self-distillation data for the drafter: the base model answers prompts.py (or the bulk
set of prompt_bulk.py), batched.

Round 0 answers every conversation greedily (held-out ones included, for evaluation); rounds
1..R-1 sample the training conversations again at `--temperature` for volume. Each record keeps
the full token sequence (prompt + answer, stop token included), the base's greedy choice at each
answer position (so sampled answers still give exact greedy targets, see train_drafter.py) and,
optionally, the base's hidden states at the input of layer `n_layers - FEATURE_DEPTH` (bf16), so
training never runs the 27 lower layers again. Without them (--no-hidden) train_drafter.py
computes them itself, one prefill a record: on CPU that is the better trade (generation keeps the
batched C layer stack, ~2x the tokens/s, and nothing is stored: features are 1.1 KB a token).

Batches are cached under --out as one file per batch (written atomically), so an interrupted run
resumes where it stopped; meta.json pins the settings a resume must match.

CPU (~320 answers in 5 min on 2 idle cores):
    nice -n 10 .venv/bin/python -m lab.gen_data --out data/drafter --rounds 2 --threads 1
More sampled rounds later, in bigger batches (64 rows per step give ~2x the tokens/s of 16 with
prepacked weights), without repeating round 0: a second folder, trained on with the first
(`train_drafter --data data/drafter,data/drafter_more`):
    nice -n 10 .venv/bin/python -m lab.gen_data --out data/drafter_more --first-round 4 \
        --rounds 12 --batch 64 --threads 1
Many different conversations teach the drafter and the n-gram store more than many samples of
the same few: prompt_bulk.py's 10.4K, greedily, into a third folder (with --no-hidden each
decode step's 64 rows stay one C call: ~620 answer tokens/s on 2 cores with the integer
products, about twice the rate with the features hook):
    nice -n 10 .venv/bin/python -m lab.gen_data --out data/bulk --prompt-set bulk \\
        --rounds 1 --batch 64 --threads 2
One H200 (>= 1e7 tokens in a few minutes; see train_drafter.py for the one-command recipe):
    .venv/bin/python -m lab.gen_data --out data/drafter_gpu --rounds 72 --batch 1024 \\
        --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from dllm_voice.model.loader import load
from dllm_voice.model.tokenizer import Tokenizer
from dllm_voice.model.transformer import Transformer
from lab import prompt_bulk, prompts

# Hidden states are stored at the input of layer n_layers - 3: drafters with up to 3 layers can
# be trained from them (the trainer runs the frozen top layers to rebuild context keys/values).
FEATURE_DEPTH = 3


Record = dict[str, torch.Tensor | int]
Progress = Callable[[float, str], None]  # (share of the run done, a status line)


def load_records(folders: str | Path, seen: set[str]) -> list[Record]:
    """Records of the batch files (in one folder, or several comma-separated) not in `seen`
    (which is updated): gen_data may still be adding files while training runs; each eval picks
    up the new ones. Token-only data (--no-hidden) is fine: train_drafter.features computes
    what a record does not carry."""
    recs: list[Record] = []
    for folder in str(folders).split(","):
        for f in sorted(Path(folder).glob("b*.pt")):
            if str(f) not in seen:
                seen.add(str(f))
                recs += torch.load(f)
    return recs


@dataclass(frozen=True)
class Job:
    conv: int  # index into the prompt set: prompts.conversations("all") or prompt_bulk's
    sample: int  # 0 = greedy; >= 1 = sampled (the batch index seeds the sampler)
    heldout: bool


def plan_jobs(
    tok: Tokenizer, rounds: int, first_round: int = 0, prompt_set: str = "all", batch: int = 16
) -> tuple[list[Job], list[list[int]]]:
    """All jobs of rounds first_round..rounds-1 in generation order, and the prompt ids of each
    conversation. "all" (prompts.py): within a round, jobs are sorted by prompt length so
    a batch pads little. "bulk" (prompt_bulk.py, no held-out part): its shuffled order is
    kept, sorted by length only within runs of 16 batches, so a run stopped early has answered a
    spread of every category."""
    if prompt_set not in ("all", "bulk"):
        raise ValueError(f"prompt_set must be all|bulk, got {prompt_set!r}")
    if prompt_set == "bulk":
        convs, held_idx = prompt_bulk.conversations(), set()
    else:
        convs = prompts.conversations("all")
        held_keys = {tuple(m["content"] for m in c) for c in prompts.conversations("heldout")}
        held_idx = {i for i, c in enumerate(convs) if tuple(m["content"] for m in c) in held_keys}
    ids = [tok.apply_chat(c) for c in convs]
    w = 16 * batch if prompt_set == "bulk" else len(convs)  # sorted by length within runs of w
    order = [
        i
        for k in range(0, len(convs), w)
        for i in sorted(range(k, min(k + w, len(convs))), key=lambda i: len(ids[i]))
    ]
    jobs = [Job(i, 0, i in held_idx) for i in order] if first_round == 0 else []
    for r in range(max(1, first_round), rounds):
        jobs += [Job(i, r, False) for i in order if i not in held_idx]
    return jobs, ids


def sample(logits: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """One token per row of logits (R, V) from softmax(logits), by inverting the cumulative
    distribution at a uniform draw: torch.multinomial draws an exponential per vocabulary entry,
    which took a quarter of a batch-64 generation step on the CPU."""
    cdf = torch.softmax(logits.float(), dim=-1).cumsum(-1)  # (R, V)
    u = torch.rand(len(cdf), 1, generator=gen, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u)[:, 0].clamp_max(cdf.shape[-1] - 1)


@torch.no_grad()
def generate_batch(
    model: Transformer,
    tok: Tokenizer,
    prompt_ids: list[list[int]],
    *,
    temperatures: list[float],
    seed: int,
    max_new_tokens: int,
    store_hidden: bool,
) -> list[Record]:
    """Answer B prompts at once (left padding, explicit masks); one record per prompt."""
    dev = model.embed.weight.device
    bsz, plen = len(prompt_ids), max(len(p) for p in prompt_ids)
    pads = torch.tensor([plen - len(p) for p in prompt_ids], device=dev)  # (B,)
    x = torch.zeros(bsz, plen, dtype=torch.long, device=dev)
    for b, p in enumerate(prompt_ids):
        x[b, plen - len(p) :] = torch.tensor(p)
    cache = model.new_cache(plen + max_new_tokens, batch=bsz)

    feats: list[torch.Tensor] = []
    layer = model.layers[model.args.n_layers - FEATURE_DEPTH]
    # bf16, not fp16: Gemma 3's residual stream passes fp16's 65504 (NaN training losses).
    hook = (
        layer.register_forward_pre_hook(lambda _m, a: feats.append(a[0].to(torch.bfloat16).cpu()))
        if store_hidden
        else None
    )
    gen = torch.Generator(device=dev).manual_seed(seed)
    rows = torch.tensor(
        [b for b, t in enumerate(temperatures) if t > 0], dtype=torch.long, device=dev
    )  # the sampled rows; the others are greedy
    temps = torch.tensor(temperatures, device=dev).clamp_min(1e-6)[:, None]  # (B, 1)
    try:
        # Prefill: row i of sequence b sees columns pad_b..i; pad rows see only themselves.
        cols = torch.arange(plen, device=dev)
        causal = cols[None, :] <= cols[:, None]  # (T, T)
        mask = causal[None] & (cols[None, None, :] >= pads[:, None, None])  # (B, T, T)
        mask |= torch.eye(plen, dtype=torch.bool, device=dev)[None]
        # Each row at its cache index: rope sees only a query's distance to a key, and a
        # sliding-window layer (Gemma 3) measures its window in cache indexes.
        logits = model(x, cache=cache, mask=mask, logits="last").logits[:, -1]
        answers: list[list[int]] = [[] for _ in range(bsz)]
        greedy: list[list[int]] = [[] for _ in range(bsz)]
        done = torch.zeros(bsz, dtype=torch.bool, device=dev)
        stops = torch.tensor(sorted(tok.stop_ids), device=dev)
        for step in range(max_new_tokens):
            arg = logits.argmax(-1)  # (B,)
            nxt = arg.clone()
            if rows.numel():
                nxt[rows] = sample(logits[rows] / temps[rows], gen)
            arg_l, nxt_l, done_l = arg.tolist(), nxt.tolist(), done.tolist()
            for b in range(bsz):
                if not done_l[b]:
                    answers[b].append(nxt_l[b])
                    greedy[b].append(arg_l[b])
            done |= torch.isin(nxt, stops)
            if bool(done.all()) or step == max_new_tokens - 1:
                break
            s = cache.length
            mask = (torch.arange(s + 1, device=dev)[None, :] >= pads[:, None])[:, None]  # (B,1,S+1)
            logits = model(nxt[:, None], cache=cache, mask=mask, logits="last").logits[:, -1]
    finally:
        if hook is not None:
            hook.remove()

    hidden = torch.cat(feats, dim=1) if store_hidden else None  # (B, plen + steps, dim)
    out = []
    for b, p in enumerate(prompt_ids):
        n = len(p) + len(answers[b])
        rec: Record = {
            "ids": torch.tensor(p + answers[b], dtype=torch.int32),
            "greedy": torch.tensor(greedy[b], dtype=torch.int32),  # argmax at answer positions
            "prompt_len": len(p),
        }
        if hidden is not None:
            # Rows of every forwarded position (all but the last token), padding stripped.
            rec["hidden"] = hidden[b, plen - len(p) : plen - len(p) + n - 1].clone()
        out.append(rec)
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="data/drafter", help="cache folder (gitignored data/)")
    ap.add_argument("--model", default="", help="lm.path ('' = bundled SmolLM2)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--rounds", type=int, default=2, help="1 greedy round + sampled rounds")
    ap.add_argument(
        "--first-round",
        type=int,
        default=0,
        help="skip the rounds before it (another --out holds them; train on both folders)",
    )
    ap.add_argument(
        "--prompt-set",
        choices=("all", "bulk"),
        default="all",
        help="all: prompts.py (with its held-out part); bulk: prompt_bulk.py",
    )
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--temperature", type=float, default=0.8, help="for rounds >= 1")
    ap.add_argument("--no-hidden", action="store_true", help="do not store base features")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--max-batches", type=int, default=0, help="stop after N new batches")
    ap.add_argument("--minutes", type=float, default=0.0, help="stop after this long (0 = no cap)")
    return ap


def main(argv: list[str] | None = None, progress: Progress | None = None) -> None:
    """The command; `progress` hears the share of the batches (or of --minutes) done after each
    batch, and the answer tokens made so far in this call."""
    a = parser().parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {
        "model": a.model,
        "batch": a.batch,
        "max_new_tokens": a.max_new_tokens,
        "temperature": a.temperature,
        "hidden": not a.no_hidden,
        "feature_depth": FEATURE_DEPTH,
        "n_conversations": len(prompts.conversations()),
    }
    if a.first_round:
        settings["first_round"] = a.first_round
    if a.prompt_set != "all":
        settings["prompt_set"] = a.prompt_set
        settings["n_conversations"] = len(prompt_bulk.conversations())
    meta_file = out / "meta.json"
    if meta_file.exists():
        old = json.loads(meta_file.read_text())
        if {k: v for k, v in old.items() if k != "rounds"} != settings:
            raise SystemExit(f"{out} holds data made with other settings {old}; use another --out")
    meta_file.write_text(json.dumps({**settings, "rounds": a.rounds}, indent=1))

    model, tok = load(a.model, a.device, a.dtype)
    jobs, ids = plan_jobs(tok, a.rounds, a.first_round, a.prompt_set, a.batch)
    n_batches = (len(jobs) + a.batch - 1) // a.batch
    made, tokens, t0 = 0, 0, time.time()
    had = sum(1 for k in range(n_batches) if (out / f"b{k:05d}.pt").exists())  # a resumed run's
    for k in range(n_batches):
        f = out / f"b{k:05d}.pt"
        if f.exists():
            continue
        batch = jobs[k * a.batch : (k + 1) * a.batch]
        recs = generate_batch(
            model,
            tok,
            [ids[j.conv] for j in batch],
            temperatures=[0.0 if j.sample == 0 else a.temperature for j in batch],
            seed=(a.first_round << 20) + k,  # folders with other first rounds sample anew
            max_new_tokens=a.max_new_tokens,
            store_hidden=not a.no_hidden,
        )
        for j, r in zip(batch, recs, strict=True):
            r.update(conv=j.conv, sample=j.sample, heldout=int(j.heldout))
        tmp = f.with_suffix(".tmp")
        torch.save(recs, tmp)
        tmp.rename(f)
        made += 1
        tokens += sum(len(r["greedy"]) for r in recs)
        el = time.time() - t0
        line = f"batch {k + 1}/{n_batches}: {tokens} answer tokens in {el:.0f} s "
        line += f"({tokens / el:.1f} tok/s)"
        if progress is None:
            print(line, flush=True)
        else:
            spent = el / (60 * a.minutes) if a.minutes else 0.0
            progress(min(1.0, max((had + made) / n_batches, spent)), line)
        if (a.max_batches and made >= a.max_batches) or (a.minutes and el > 60 * a.minutes):
            break


if __name__ == "__main__":
    main()
