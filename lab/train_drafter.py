"""Train the block drafter (model/drafter.py) on self-distilled data from gen_data.py.

Loss: cross-entropy of each draft row (offsets 1..K after a block start s) against the base's
greedy token at that position, over the draft vocabulary. Block starts are answer positions;
the context is the clean prefix (< s), seen through the base's own top-layer keys/values, which
are rebuilt from the layer-(L-3) features by running the 3 frozen top layers under no_grad. The
features are gen_data's stored ones, or, for token-only data (gen_data --no-hidden), one prefill
of the 27 lower layers per record, computed when the record is drawn (`features`). Targets are
exact greedy targets even on sampled answers: row i only counts when the answer's tokens
s+1..s+i-1 equal the base's greedy choices there, i.e. when the context is the greedy chain the
decoder would be verifying.

Held-out acceptance is logged every --eval-every steps on the held-out greedy answers: the
greedy hybrid decode is simulated exactly along each answer (accept the leading drafts that
match, commit them + 1 bonus token, draft again from there), giving tokens per verify step with
the drafter alone and with prompt-lookup slots mixed in by confidence. That log is the curve
tokens/step vs training tokens. Checkpoints make the run resumable (--resume).

CPU (1 thread, niced, on shared cores):
    nice -n 10 .venv/bin/python -m lab.train_drafter --data data/drafter --threads 1
Fine-tuning the bundled adapter on more (here token-only) data, a fresh optimiser:
    nice -n 10 .venv/bin/python -m lab.train_drafter --data data/drafter,data/bulk \
        --init model/adapters/drafter.safetensors --threads 2 --batch 4 --blocks 64 --lr 3e-4
One H200, data generation (aiming at >= 1e7 tokens) + the n-gram store + training, within one
10-minute device call, ONE command (bench/gpu.py runs it between two benchmarks):
    .venv/bin/python -m lab.train_drafter --recipe h200
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from dllm_voice.model.drafter import DEFAULT_ADAPTER, BlockDrafter
from dllm_voice.model.kv_cache import KVCache
from dllm_voice.model.layer_stack import run_layers
from dllm_voice.model.loader import load
from dllm_voice.model.lookup import PromptLookup
from dllm_voice.model.transformer import Transformer
from lab import gen_data, ngram
from lab.gen_data import FEATURE_DEPTH, Progress, Record, load_records


def usable(r: Record) -> bool:
    return not r["heldout"] and len(r["ids"]) - int(r["prompt_len"]) > 1


def draft_vocab(recs: list[Record], size: int, always: set[int]) -> tuple[torch.Tensor, float]:
    """The `size` most frequent greedy answer tokens (stop tokens always in), topped up with the
    lowest ids (BPE merge order: early merges are frequent pieces) when the data has fewer
    distinct tokens; and the coverage of the answer tokens."""
    counts: Counter[int] = Counter()
    for r in recs:
        counts.update(r["greedy"].tolist())
    keep = list(always) + [t for t, _ in counts.most_common() if t not in always]
    keep = keep[:size]
    chosen = set(keep)
    keep += [t for t in range(2 * size) if t not in chosen][: size - len(keep)]
    covered = sum(counts[t] for t in keep) / max(1, sum(counts.values()))
    return torch.tensor(sorted(keep)), covered


@functools.cache
def _lower_layers(base: Transformer) -> nn.ModuleList:
    """The base's layers below the features (one list, so its C layer stack is built once)."""
    return base.layers[: base.args.n_layers - FEATURE_DEPTH]


@torch.no_grad()
def features(base: Transformer, rec: Record) -> torch.Tensor:
    """The base's hidden states at the input of layer L-3 for all of rec's tokens but the
    last: gen_data's stored ones (bf16), or (token-only data) one prefill of the lower layers now,
    through the C layer stack on CPU (SmolLM2-135M: ~1.9K tokens/s on 2 cores)."""
    if "hidden" in rec:
        return rec["hidden"]
    lower, a, w = _lower_layers(base), base.args, base.embed.weight
    ids = rec["ids"][None, :-1].long().to(w.device)  # (1, N)
    n = ids.shape[1]
    cache = KVCache(len(lower), a.n_kv_heads, a.head_dim, n, dtype=w.dtype, device=w.device)
    cos, sin, local = base.rope_for(0, n, None, None, n > 1)
    x = run_layers(lower, base.embed(ids), cos, sin, cache, 0, n, None, n > 1, local)
    return x[0].float().cpu()  # fp32: Gemma 3's residual stream outgrows fp16 (NaN losses)


@functools.cache
def _top_layers(base: Transformer) -> nn.ModuleList:
    """The base's layers above the features."""
    return base.layers[base.args.n_layers - FEATURE_DEPTH :]


@torch.no_grad()
def context_features(base: Transformer, hidden: torch.Tensor) -> tuple[KVCache, torch.Tensor]:
    """hidden (B, N, dim) at the input of layer L-3 -> a cache holding the top 3 layers' K/V
    (cache layer l = base layer L-3+l) and the final normed hidden (B, N, dim)."""
    a = base.args
    bsz, n, _ = hidden.shape
    w = base.embed.weight
    cache = KVCache(FEATURE_DEPTH, a.n_kv_heads, a.head_dim, n, batch=bsz, dtype=w.dtype,
                    device=w.device)  # fmt: skip
    cos, sin, local = base.rope_for(0, n, None, None, True)
    x = hidden.to(device=w.device, dtype=w.dtype)
    x = run_layers(_top_layers(base), x, cos, sin, cache, 0, n, None, True, local)
    cache.length = n
    return cache, F.rms_norm(x, base.norm.shape, base.norm, a.norm_eps)


def targets_for(rec: Record, starts: list[int], k: int, to_vocab: torch.Tensor) -> torch.Tensor:
    """(M, K) draft-vocab targets of the blocks starting at `starts`; -100 = no loss."""
    ids, greedy, p = rec["ids"], rec["greedy"].long(), int(rec["prompt_len"])
    n = len(ids)
    match = (ids[p:].long() == greedy).tolist()
    g = to_vocab[greedy].tolist()
    out = torch.full((len(starts), k), -100, dtype=torch.long)
    for m, s in enumerate(starts):
        for i in range(1, k + 1):
            pos = s + i
            if pos >= n or (i > 1 and not match[pos - 1 - p]):
                break
            out[m, i - 1] = g[pos - p]
    return out


def block_forward(
    drafter: BlockDrafter, base: Transformer, recs: list[Record], starts: list[list[int]]
) -> torch.Tensor:
    """Draft logits (B, M, K, V_d) for blocks starting at starts[b] (M each) of recs[b]."""
    k1 = drafter.args.block + 1
    dev = base.embed.weight.device
    feats = [features(base, r) for r in recs]
    n = max(int(f.shape[0]) for f in feats)
    hid = torch.zeros(len(recs), n, base.args.dim)
    for b, f in enumerate(feats):
        hid[b, : f.shape[0]] = f
    cache, h_fin = context_features(base, hid)
    st = torch.tensor(starts, device=dev)  # (B, M)
    bsz, m = st.shape
    tok = torch.stack([r["ids"].long().to(dev)[st[b]] for b, r in enumerate(recs)])  # (B, M)
    h_last = torch.gather(h_fin, 1, (st - 1)[..., None].expand(-1, -1, h_fin.shape[-1]))
    x = drafter.block_inputs(base.embed, tok, h_last.to(drafter.norm.dtype))  # (B, M*(K+1), dim)
    pos = (st[..., None] + torch.arange(k1, device=dev)).view(bsz, m * k1)  # (B, Q)
    # Block rows see the context before their start and their own block, nothing else.
    ctx = torch.arange(n, device=dev)[None, None, :] < st.repeat_interleave(k1, 1)[..., None]
    blk = torch.arange(m, device=dev).repeat_interleave(k1)  # (Q,)
    own = (blk[:, None] == blk[None, :]).expand(bsz, -1, -1)  # (B, Q, Q)
    mask = torch.cat((ctx, own), dim=-1)[:, None]  # (B, 1, Q, N + Q)
    cos, sin, local = base.rope_for(n, m * k1, pos, mask, False)  # (B, Q, 1, D) each
    if local is not None:
        local = (local[0].to(x.dtype), local[1].to(x.dtype), local[2], local[3])
    off = FEATURE_DEPTH - drafter.args.n_layers
    return drafter.rows_logits(x, cos.to(x.dtype), sin.to(x.dtype), cache, mask, off, local)


@torch.no_grad()
def evaluate(
    drafter: BlockDrafter, base: Transformer, recs: list[Record], to_vocab: torch.Tensor
) -> dict[str, float]:
    """Simulated greedy hybrid decode along held-out greedy answers (see module docstring)."""
    k = drafter.args.block
    steps = committed = steps_lk = committed_lk = 0
    per_offset = torch.zeros(k)
    n_starts = 0
    for r in recs:
        p, n = int(r["prompt_len"]), len(r["ids"])
        starts = list(range(p, n - 1))
        if not starts:
            continue
        logits = block_forward(drafter, base, [r], [starts])[0].float()  # (M, K, V_d)
        conf, idx = torch.softmax(logits, -1).max(-1)
        drafts = drafter.vocab_ids[idx].cpu()  # (M, K)
        conf = conf.cpu()
        ids = r["ids"].tolist()
        truth = torch.full((len(starts), k), -1, dtype=torch.long)
        for m, s in enumerate(starts):
            seg = ids[s + 1 : s + 1 + k]
            truth[m, : len(seg)] = torch.tensor(seg)
        ok = (drafts == truth).long().cumprod(1)  # (M, K) leading-prefix correct
        per_offset += ok.sum(0)
        n_starts += len(starts)
        lookup = PromptLookup(ids[:p])
        mixed_ok: list[int] = []
        for m, s in enumerate(starts):
            lookup.extend([ids[s]])
            lk, lk_conf = lookup.propose(k)
            d = drafts[m].tolist()
            for i, (t, c) in enumerate(zip(lk, lk_conf, strict=False)):
                if c > conf[m, i]:
                    d[i] = t
            acc = 0
            while acc < k and s + 1 + acc < n and d[acc] == ids[s + 1 + acc]:
                acc += 1
            mixed_ok.append(acc)
        s = p
        while s < n - 1:
            a = int(ok[s - p].sum())
            steps, committed = steps + 1, committed + min(a + 1, n - 1 - s)
            s += a + 1
        s = p
        while s < n - 1:
            a = mixed_ok[s - p]
            steps_lk, committed_lk = steps_lk + 1, committed_lk + min(a + 1, n - 1 - s)
            s += a + 1
    out = {"tokens_per_step": committed / max(steps, 1),
           "tokens_per_step_lookup": committed_lk / max(steps_lk, 1)}  # fmt: skip
    for i in range(k):
        out[f"acc{i + 1}"] = float(per_offset[i]) / max(n_starts, 1)
    return out


def train(a: argparse.Namespace, progress: Progress | None = None) -> None:
    """The training loop; `progress` hears the share of --steps (or of --minutes) done."""
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    base, tok = load(a.model, a.device, a.dtype, keep_float=True)  # trains through it
    dev = base.embed.weight.device
    files: set[str] = set()
    recs = load_records(a.data, files)
    train_recs = [r for r in recs if usable(r)]
    if not train_recs:
        raise SystemExit(f"{a.data}: no generated training data; run lab.gen_data first")
    # The held-out set is fixed at start so the curve compares like with like.
    held = [r for r in recs if r["heldout"] and r["sample"] == 0][: a.eval_answers]
    for r in held:  # every eval reads them: computed once (token-only data)
        r["hidden"] = features(base, r)
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_file = out_dir / "ckpt.pt"
    ckpt = torch.load(ckpt_file, weights_only=False) if a.resume and ckpt_file.exists() else None

    init = BlockDrafter.load(a.init, base) if a.init and not ckpt else None
    if ckpt:
        vocab_ids = ckpt["vocab_ids"]
    elif init:
        vocab_ids = init.vocab_ids.cpu()
    else:
        vocab_ids = draft_vocab(train_recs, a.vocab, set(tok.stop_ids))[0]
    _, coverage = draft_vocab(train_recs, a.vocab, set(tok.stop_ids))
    to_vocab = torch.full((base.args.vocab_size,), -100, dtype=torch.long)
    to_vocab[vocab_ids] = torch.arange(len(vocab_ids))
    layers, block = (init.args.n_layers, init.args.block) if init else (a.layers, a.block)
    ffn, hidden = (init.args.ffn, init.args.hidden) if init else (a.ffn, a.context == "kv+hidden")
    drafter = BlockDrafter.from_base(base, vocab_ids.to(dev), n_layers=layers, block=block,
                                     ffn=ffn, hidden=hidden)  # fmt: skip
    if init:
        drafter.load_state_dict(init.state_dict())
    drafter.float().requires_grad_(True).train()  # fp32 master weights; bf16 autocast on GPU
    drafter.bind(base)
    drafter.head = drafter.head.float()
    opt = torch.optim.AdamW(drafter.parameters(), lr=a.lr, weight_decay=0.0, betas=(0.9, 0.95))
    step, seen, curve = 0, 0, []
    if ckpt:
        drafter.load_state_dict(ckpt["drafter"])
        opt.load_state_dict(ckpt["opt"])
        step, seen, curve = ckpt["step"], ckpt["seen"], ckpt["curve"]
        rng.setstate(ckpt["rng"])
    n_tokens = sum(len(r["greedy"]) for r in train_recs)
    print(f"{len(train_recs)} train answers ({n_tokens} tokens), {len(held)} held-out; "
          f"draft vocab {len(vocab_ids)} covers {coverage:.3f}", flush=True)  # fmt: skip
    log = (out_dir / "log.jsonl").open("a")
    autocast = torch.autocast("cuda", torch.bfloat16, enabled=dev.type == "cuda")
    t0 = time.time() - (curve[-1]["s"] if curve else 0)  # a resumed run keeps its clock

    def done() -> float:
        share = step / max(1, a.steps)
        if a.target_tokens:  # a token budget: whichever ends first
            share = max(share, seen / a.target_tokens)
        if a.minutes:  # a wall-clock budget: whichever ends first
            share = max(share, (time.time() - t0) / (60 * a.minutes))
        return min(1.0, share)

    def checkpoint_and_eval() -> None:
        nonlocal n_tokens
        new = [r for r in load_records(a.data, files) if usable(r)]
        train_recs.extend(new)
        n_tokens += sum(len(r["greedy"]) for r in new)
        drafter.eval()
        with autocast:
            ev = evaluate(drafter, base, held, to_vocab)
        drafter.train()
        row = {"step": step, "target_tokens": seen, "data_tokens": n_tokens,
               "s": round(time.time() - t0), **ev}  # fmt: skip
        curve.append(row)
        if progress is None:
            print(json.dumps(row), flush=True)
        else:
            progress(done(), f"eval at step {step}: {ev['tokens_per_step']:.3f} tokens/step")
        log.write(json.dumps(row) + "\n")
        log.flush()
        torch.save({"drafter": drafter.state_dict(), "opt": opt.state_dict(), "step": step,
                    "seen": seen, "curve": curve, "rng": rng.getstate(), "vocab_ids": vocab_ids},
                   ckpt_file)  # fmt: skip
        width = f", MLP {ffn}" if ffn else ""
        reads = "K/V and final hidden" if hidden else "K/V"
        info = {"design": f"block drafter (b), {layers} layers from base top{width}, K={block}, "
                          f"reads {reads}",
                "train_answers": len(train_recs), "data_tokens": n_tokens,
                "target_tokens_seen": seen, "steps": step, "vocab_coverage": round(coverage, 4),
                "device": str(dev), "heldout": ev}  # fmt: skip
        drafter.save(a.save, base, info)

    if step == 0:
        checkpoint_and_eval()
    while done() < 1.0:
        batch = rng.sample(train_recs, min(a.batch, len(train_recs)))
        starts, tgts = [], []
        for r in batch:
            p, n = int(r["prompt_len"]), len(r["ids"])
            pool = list(range(p, n - 1))
            st = rng.sample(pool, min(a.blocks, len(pool)))
            st += [st[0]] * (a.blocks - len(st))  # pad: duplicates get no loss below
            t = targets_for(r, st, block, to_vocab)
            t[len(pool) :] = -100
            starts.append(st)
            tgts.append(t)
        target = torch.stack(tgts).to(dev)  # (B, M, K)
        lr = a.lr * min(1.0, (step + 1) / a.warmup)
        lr *= 0.5 * (1 + math.cos(math.pi * done()))  # the cosine follows steps or minutes
        for g in opt.param_groups:
            g["lr"] = lr
        with autocast:
            logits = block_forward(drafter, base, batch, starts)  # (B, M, K, V_d)
        loss = F.cross_entropy(logits.float().flatten(0, 2), target.flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        step += 1
        seen += int((target != -100).sum())
        if step % a.log_every == 0:
            el = time.time() - t0
            line = f"step {step} loss {loss.item():.3f} targets {seen} ({el:.0f} s)"
            if progress is None:
                print(line, flush=True)
            else:
                progress(done(), line)
        if step % a.eval_every == 0:
            checkpoint_and_eval()
    if not curve or curve[-1]["step"] != step:
        checkpoint_and_eval()


RECIPES = {
    # One H200 (caps, not measurements). Data: prompts.py's conversations in 4
    # rounds (the greedy one gives the held-out answers training evaluates on), then
    # prompt_bulk.py's 10.4K in up to 8 (greedy + 7 sampled; many conversations teach more
    # than many samples of few), into --data and --data + "_bulk": up to ~1.2e7 tokens at the
    # CPU data's 137 tokens an answer if generation keeps up with its cap (batch 1024, bf16; a
    # fifth of the minutes to the first set, the rest to the bulk). Then the n-gram store, then
    # ~1 min to load the features and the training cap. Sized to fit one 10-minute device call
    # with the benchmarks around it (bench/gpu.py). Writes model/adapters/drafter.safetensors and
    # model/adapters/ngram.safetensors.
    "h200": {
        "gen": {"rounds": 4, "bulk_rounds": 8, "batch": 1024, "minutes": 3.5},
        "train": {"data": "data/drafter_h200", "device": "cuda", "dtype": "bfloat16",
                  "batch": 64, "blocks": 64, "steps": 4000, "minutes": 3.0, "eval_every": 500,
                  "out_dir": "runs/drafter_h200", "lr": 1e-3},
    },
}  # fmt: skip
GEN_FIRST_SHARE = 0.2  # of --gen-minutes, to the first (prompts.py) set


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        help="generate data into --data, build the n-gram store beside --save, then train; the "
        "recipe sets the other options, any given here win",
    )
    ap.add_argument("--gen-rounds", type=int, help="with --recipe: gen_data --rounds")
    ap.add_argument(
        "--gen-bulk-rounds", type=int, help="with --recipe: gen_data --rounds of the bulk set"
    )
    ap.add_argument("--gen-batch", type=int, help="with --recipe: gen_data --batch")
    ap.add_argument("--gen-minutes", type=float, help="with --recipe: gen_data --minutes")
    ap.add_argument("--data", default="data/drafter", help="gen_data folder(s), comma-separated")
    ap.add_argument("--model", default="", help="lm.path ('' = bundled SmolLM2)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--layers", type=int, default=2, choices=(1, 2, 3))
    ap.add_argument("--block", type=int, default=4, help="K draft tokens")
    ap.add_argument("--vocab", type=int, default=8192, help="draft vocabulary size")
    ap.add_argument("--ffn", type=int, default=0, help="MLP width of each layer (0 = the base's)")
    ap.add_argument(
        "--context",
        choices=("kv+hidden", "kv"),
        default="kv+hidden",
        help="what the rows read of the context: the base's K/V and its final hidden state, or K/V",
    )
    ap.add_argument("--batch", type=int, default=8, help="answers per step")
    ap.add_argument("--blocks", type=int, default=32, help="block starts per answer per step")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--minutes", type=float, default=0.0, help="wall-clock cap (0 = none)")
    ap.add_argument(
        "--target-tokens", type=int, default=0, help="stop after this many targets (0 = none)"
    )
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-answers", type=int, default=60, help="held-out answers per eval")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--out-dir", default="runs/drafter", help="checkpoint + log.jsonl")
    ap.add_argument("--save", default=str(DEFAULT_ADAPTER), help="adapter written at each eval")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument(
        "--init", default="", help="start from this adapter file (e.g. the bundled one), new data"
    )
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(argv: list[str] | None = None, progress: Progress | None = None) -> None:
    a = parser().parse_args(argv)
    if a.recipe:
        recipe = RECIPES[a.recipe]
        ap = parser()
        ap.set_defaults(**recipe["train"], **{f"gen_{k}": v for k, v in recipe["gen"].items()})
        a = ap.parse_args(argv)  # options on the command line win over the recipe's
        common = ["--model", a.model, "--device", a.device, "--dtype", a.dtype,
                  "--batch", str(a.gen_batch)]  # fmt: skip
        first = GEN_FIRST_SHARE * a.gen_minutes
        gen_data.main(["--out", a.data, *common, "--rounds", str(a.gen_rounds),
                       "--minutes", str(first)])  # fmt: skip
        bulk = f"{a.data}_bulk"
        gen_data.main(["--out", bulk, *common, "--prompt-set", "bulk",
                       "--rounds", str(a.gen_bulk_rounds),
                       "--minutes", str(a.gen_minutes - first)])  # fmt: skip
        a.data = f"{a.data},{bulk}"
        store = Path(a.save).with_name(ngram.DEFAULT_STORE.name)  # the n-gram store, same data
        ngram.main(["--data", a.data, "--out", str(store)])
    train(a, progress)


if __name__ == "__main__":
    main()
