"""Row cost: one forward of T new rows vs one row, per matrix kernel.

    .venv/bin/python -m bench.rows --rows 1,2,3,5,9,13,17 --reps 15 [--threads 1]

What a verified decoder pays for k drafts is the cost of k extra rows in its forward. One copy
of the bundled model per `--kinds` entry is loaded: "auto" (what the loader picks:
kernels/cpu_rows.py from the GGUF file's Q4_1/Q8_0 blocks where it builds, with integer products
where the CPU has AVX-512 VNNI), "quant" (the same blocks expanded to fp32), "rows" (the same
kernel from fp32 weights), "onednn" (oneDNN-prepacked), "plain" (F.linear, MKL), and every
(rows, kind) case runs interleaved in one process after a `--prefill`-token context, logits for
every row (the verify step's shape). "onednn" forces the packed path even for a single row
(packing.gemv_wins switched off), where the model would keep MKL's gemv at 1 thread: "plain"
shows that choice. JSON to stdout: median ms per case and each case's ratio to the 1-row
forward of the first kind.

    .venv/bin/python -m bench.rows --formats q4_f,q4_1,q8_f,q8_0 --rows 1,2,4,8 --threads 1

times one random matrix per `--shapes` entry in each block format instead, its integer products
(where `integer_products` has them here) against the fp32 expansion of the same blocks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench/lm.py

import torch  # noqa: E402

import dllm_voice.model.packing as packing  # noqa: E402
from dllm_voice.kernels import cpu_rows  # noqa: E402
from dllm_voice.model.loader import load  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,3,5,9,13,17", help="comma list of row counts")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--prefill", type=int, default=120)
    ap.add_argument("--threads", type=int, default=0, help="0 = torch default")
    ap.add_argument("--kinds", default="auto,rows,onednn", help="comma list of weight kinds")
    ap.add_argument("--formats", default="", help="comma list of block formats: one matrix each")
    ap.add_argument("--shapes", default="640x1024,2048x640,4096x4096", help="NxK for --formats")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    rows = sorted({1, *(int(r) for r in a.rows.split(","))})  # 1 row: the reference
    if a.formats:
        return formats(a.formats.split(","), a.shapes.split(","), rows, a.reps)
    kinds = a.kinds.split(",")
    if {"auto", "quant", "rows"} & set(kinds) and not cpu_rows.available():
        raise SystemExit("the cpu_rows kernel is not available here (see the log line above)")
    models = {}
    for kind in kinds:
        models[kind], _ = load("")
        models[kind].unpack()
        models[kind].pack(kind)
    caches = {k: m.new_cache(a.prefill + max(rows) + 1) for k, m in models.items()}
    gemv_wins = packing.gemv_wins
    times: dict[tuple[str, int], list[float]] = {}
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for k, m in models.items():
            m(torch.randint(0, 1000, (1, a.prefill), generator=gen), cache=caches[k], logits="none")
        for rep in range(a.reps + 1):  # the first round warms up and is not counted
            for t in rows:
                for k, m in models.items():
                    packing.gemv_wins = (lambda x: False) if k == "onednn" else gemv_wins
                    ids = torch.randint(0, 1000, (1, t), generator=gen)
                    t0 = time.perf_counter()
                    m(ids, cache=caches[k], logits="all")
                    if rep:
                        times.setdefault((k, t), []).append(time.perf_counter() - t0)
                    caches[k].truncate(a.prefill)
    packing.gemv_wins = gemv_wins
    ms = {key: statistics.median(v) * 1e3 for key, v in times.items()}
    one = ms[(kinds[0], 1)]
    out = {
        "threads": torch.get_num_threads(),
        "prefill": a.prefill,
        "reps": a.reps,
        "median_ms": {f"{k}/{t}": round(v, 1) for (k, t), v in ms.items()},
        f"vs_{kinds[0]}_1_row": {f"{k}/{t}": round(v / one, 2) for (k, t), v in ms.items()},
    }
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


def formats(fmts: list[str], shapes: list[str], rows: list[int], reps: int) -> int:
    """Per format, shape and row count: ms of one product from the blocks, the integer products
    against the fp32 expansion, interleaved."""
    if not cpu_rows.available():
        raise SystemExit("the cpu_rows kernel is not available here (see the log line above)")
    gen = torch.Generator().manual_seed(0)
    out: dict[str, object] = {"threads": torch.get_num_threads(), "reps": reps}
    for fmt in fmts:
        for shape in shapes:
            n, k = (int(v) for v in shape.split("x"))
            q = cpu_rows.random_quantized(fmt, n, k, gen)
            w = cpu_rows.dequantize(q)
            kinds = {"fp32_expansion": cpu_rows.pack_quant(q, vnni=False)}
            if cpu_rows.integer_products(fmt):
                kinds["integer"] = cpu_rows.pack_quant(q, vnni=True)
            for m in rows:
                x = torch.randn(m, k, generator=gen)
                times: dict[str, list[float]] = {name: [] for name in kinds}
                for _ in range(reps):
                    for name, panels in kinds.items():
                        t0 = time.perf_counter()
                        for _ in range(20):
                            cpu_rows.matmul(x, w, panels)
                        times[name].append((time.perf_counter() - t0) / 20 * 1e3)
                ms = {name: round(statistics.median(v), 4) for name, v in times.items()}
                if "integer" in ms:
                    ms["expansion_over_integer"] = round(ms["fp32_expansion"] / ms["integer"], 2)
                out[f"{fmt}/{shape}/{m}"] = ms
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
