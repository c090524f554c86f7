"""Kernel benchmark: prints one JSON object to stdout.

    .venv/bin/python -m bench.kernel_timings [--reps 30] [--threads 0] [--quick]

Shapes are SmolLM2-135M's attention (9 query heads, 3 KV heads, head_dim 64, B = 1) and its
49152-token vocabulary. Rows T: 1 (plain AR step), 5 (verify K = 4), 25 (verify + 5 draft blocks
of 4, design (a) preparing every acceptance length); kv_len S: 128, 512, 2048.

On CPU it times the torch fallback against a naive dense-mask reference (repeat K/V per query
head, materialize the T x S mask and full softmax); Triton timings need a GPU (on CPU, Triton only
runs in the interpreter, which is for tests). On CUDA it times Triton vs the torch fallback vs
the same naive reference, and kernels/exact_rows.py's row-invariant product and attention vs
cuBLAS / SDPA at an `ar` step's 1 row and a verify's 13. Every timing is a median of --reps
runs after warm-up; "max_abs_diff" cross-checks the implementations on the same inputs.

Measured here (2-core CPU shared with 4 other engineers, load average ~7, torch 2.13, fp32;
`.venv/bin/python -m bench.kernel_timings --reps 40 --threads 1`), median ms, torch fallback vs
dense ref:
  hybrid_attention T=1:  S=128 0.20 vs 0.30 | S=512 0.33 vs 0.82 | S=2048 1.36 vs 26.1
                   T=5:  S=128 0.18 vs 0.28 | S=512 0.65 vs 1.13 | S=2048 2.62 vs 18.2
                   T=25: S=128 0.32 vs 0.44 | S=512 1.29 vs 5.87 | S=2048 14.2 vs 46.6
  verify_select N=5, V=49152: 1.27 vs 1.18 (median per-round ratio 1.20: the fallback also
  returns lse and draft probabilities, and takes the argmax on the logits, not on the softmax)
Absolute numbers swing several-fold with the other processes; the per-round ratios hold better.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from dllm_voice.kernels import backend, exact_rows
from dllm_voice.kernels.hybrid_attention import (
    block_desc,
    causal_desc,
    hybrid_attention_torch,
    hybrid_attention_triton,
    visibility_mask,
)
from dllm_voice.kernels.verify_select import verify_select_torch, verify_select_triton

HQ, HKV, HEAD_DIM, VOCAB, K_DRAFT = 9, 3, 64, 49152, 4


def time_interleaved(
    impls: dict[str, Callable[[], object]], reps: int, cuda: bool, ref: str = "dense_ref"
) -> dict:
    """Median ms per implementation, timed round-robin so CPU contention from other processes
    hits all of them alike; plus the median per-round ratio of each to `ref`."""
    for fn in impls.values():  # warm-up (allocator, Triton compile)
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(reps):
        for name, fn in impls.items():
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) * 1000)
    out: dict[str, float] = {f"{n}_ms": round(statistics.median(t), 4) for n, t in times.items()}
    for name, t in times.items():
        if name != ref:
            ratios = [a / b for a, b in zip(t, times[ref], strict=True)]
            out[f"{name}_vs_{ref.removesuffix('_ref')}"] = round(statistics.median(ratios), 3)
    return out


def dense_attention(q, k, v, desc, S, scale):
    """Naive reference: per-query-head K/V copies, dense T x S mask, full softmax."""
    group = q.shape[1] // k.shape[1]
    kk = k[:, :, :S].repeat_interleave(group, dim=1)  # (B, Hq, S, D)
    vv = v[:, :, :S].repeat_interleave(group, dim=1)
    scores = (q @ kk.transpose(-1, -2)).float() * scale  # (B, Hq, T, S)
    scores = scores.masked_fill(~visibility_mask(desc, S), -math.inf)
    return (torch.softmax(scores, dim=-1).to(v.dtype) @ vv).to(q.dtype)


def dense_verify(logits, drafts):
    """Naive reference: materialized softmax, then max / argmax / gather."""
    p = torch.softmax(logits.float(), dim=-1)  # (N, V)
    max_prob, argmax = p.max(dim=-1)
    ok = argmax[: drafts.shape[0]] == drafts
    return argmax, max_prob, torch.cumprod(ok.long(), 0).sum()


def step_desc(T: int, S: int, device: torch.device) -> torch.Tensor:
    if T == 25:  # K + 1 verify rows, then K + 1 draft blocks of K rows
        return block_desc(S - T, K_DRAFT + 1, K_DRAFT, list(range(K_DRAFT + 1)), device)
    return causal_desc(T, S, device)


def bench_attention(device, dtype, reps, shapes, use_triton) -> list[dict]:
    cuda = device.type == "cuda"
    gen = torch.Generator(device=device).manual_seed(0)
    rows = []
    for T, S in shapes:
        q = torch.randn(1, HQ, T, HEAD_DIM, device=device, dtype=dtype, generator=gen)
        k = torch.randn(1, HKV, S, HEAD_DIM, device=device, dtype=dtype, generator=gen)
        v = torch.randn(1, HKV, S, HEAD_DIM, device=device, dtype=dtype, generator=gen)
        args = (q, k, v, step_desc(T, S, device), S, 1 / math.sqrt(HEAD_DIM))
        impls = {
            "torch": partial(hybrid_attention_torch, *args),
            "dense_ref": partial(dense_attention, *args),
        }
        if use_triton:
            impls["triton"] = partial(hybrid_attention_triton, *args)
        outs = {name: fn().float() for name, fn in impls.items()}
        row = {"op": "hybrid_attention", "T": T, "S": S, "dtype": str(dtype).split(".")[-1]}
        row.update(time_interleaved(impls, reps, cuda))
        row["max_abs_diff"] = max(float((o - outs["dense_ref"]).abs().max()) for o in outs.values())
        rows.append(row)
    return rows


def bench_verify(device, dtype, reps, use_triton) -> dict:
    cuda = device.type == "cuda"
    gen = torch.Generator(device=device).manual_seed(1)
    logits = (torch.randn(K_DRAFT + 1, VOCAB, device=device, generator=gen) * 4).to(dtype)
    drafts = logits.float().argmax(-1)[:K_DRAFT].clone()
    drafts[2] += 1  # accept 2 of 4
    impls = {
        "torch": lambda: verify_select_torch(logits, drafts, 0.0, None),
        "dense_ref": lambda: dense_verify(logits, drafts),
    }
    if use_triton:
        impls["triton"] = lambda: verify_select_triton(logits, drafts, 0.0, None)
    accepted = {name: int(out.accepted if hasattr(out, "accepted") else out[2])
                for name, out in ((n, fn()) for n, fn in impls.items())}  # fmt: skip
    row = {"op": "verify_select", "N": K_DRAFT + 1, "V": VOCAB, "dtype": str(dtype).split(".")[-1]}
    row.update(time_interleaved(impls, reps, cuda))
    row["accepted"] = accepted
    return row


def bench_exact_rows(device, dtype, reps) -> list[dict]:
    """kernels/exact_rows.py (CUDA only) against what torch picks for the same shapes: cuBLAS
    for the product, SDPA for attention; M / T rows as in an `ar` step (1) and a verify (13)."""
    cuda = device.type == "cuda"
    gen = torch.Generator(device=device).manual_seed(2)

    def randn(*shape):
        return torch.randn(*shape, device=device, dtype=dtype, generator=gen)

    rows = []
    for m, n in ((1, 960), (13, 960), (1, VOCAB), (13, VOCAB)):  # q/k/v product, the head
        x, w = randn(1, m, 576), randn(n, 576)
        impls = {"exact_rows": partial(exact_rows.linear, x, w), "torch": partial(F.linear, x, w)}
        row = {"op": "exact_rows.linear", "M": m, "N": n, "K": 576, "dtype": str(dtype)[6:]}
        row.update(time_interleaved(impls, reps, cuda, ref="torch"))
        row["max_abs_diff"] = float((impls["exact_rows"]() - impls["torch"]()).abs().max())
        rows.append(row)
    for t, s in ((1, 512), (13, 512)):
        q, k, v = randn(1, t, HQ, HEAD_DIM), randn(1, HKV, s, HEAD_DIM), randn(1, HKV, s, HEAD_DIM)
        mask = torch.ones(t, s, dtype=torch.bool, device=device).tril(s - t)

        def sdpa(q=q, k=k, v=v, mask=mask):
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask,
                                               enable_gqa=True)  # fmt: skip
            return y.transpose(1, 2).reshape(1, q.shape[1], -1)

        impls = {"exact_rows": partial(exact_rows.attention, q, k, v, mask, False), "torch": sdpa}
        row = {"op": "exact_rows.attention", "T": t, "S": s, "dtype": str(dtype)[6:]}
        row.update(time_interleaved(impls, reps, cuda, ref="torch"))
        row["max_abs_diff"] = float((impls["exact_rows"]() - sdpa()).abs().max())
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=30, help="timed runs per case (median)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads, 0 = default")
    ap.add_argument("--quick", action="store_true", help="one shape per T (smoke run)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    use_triton = cuda and not backend.triton_unavailable(torch.empty(0, device=device))
    dtypes = [torch.bfloat16, torch.float32] if cuda else [torch.float32]
    sizes = [512] if args.quick else [128, 512, 2048]
    shapes = [(T, S) for T in (1, 5, 25) for S in sizes]
    results = []
    for dtype in dtypes:
        results += bench_attention(device, dtype, args.reps, shapes, use_triton)
        results.append(bench_verify(device, dtype, args.reps, use_triton))
        if use_triton:
            results += bench_exact_rows(device, dtype, args.reps)
    report = {
        "bench": "kernels",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "reps": args.reps,
        "triton_timed": use_triton,
        "note": ""
        if use_triton
        else "Triton timings need a CUDA GPU; CPU compares the torch "
        "fallback with a naive dense-mask / materialized-softmax reference",
        "results": results,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
