"""Several sessions decoding at once: what a shared forward costs and what batching gains.

Usage: .venv/bin/python -m bench.batch [--sessions 1,2,3,4,6] [--rows 1,4] [--reps 20]

1. Forward cost: B sessions (different cache lengths) each handing in `--rows` rows (1: an ar
   step; 4: a hybrid verify of 3 drafts) as one Transformer.forward_many, median ms and the ratio
   to one session's 1-row forward; `row_cost` is the measured extra cost per extra row.
2. Decoding: B questions answered by B sessions in B threads at once (their steps batched by
   model/batch.py) against the same answers one after another in this process, per decoder:
   wall time, tokens per second, calls per batched forward, and whether every answer equals its
   answer alone token for token.
JSON to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench/lm.py

import torch  # noqa: E402

from dllm_voice.model.config import LMConfig  # noqa: E402
from dllm_voice.model.engine import LM  # noqa: E402
from dllm_voice.model.transformer import Call  # noqa: E402

QUESTIONS = [
    "Tell me a story about a dragon and a knight.",
    "Explain how a rainbow forms.",
    "Describe a day at the beach.",
    "Why do cats purr?",
    "Tell me about the history of bread.",
    "How does a bicycle stay upright?",
]


def forward_costs(lm: LM, sessions: list[int], rows: list[int], reps: int) -> list[dict]:
    model = lm.model
    caches = []
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for i in range(max(sessions)):
            cache = model.new_cache(1024)
            model(torch.randint(0, 49000, (1, 60 + 37 * i), generator=gen), cache=cache)
            caches.append(cache)
        times: dict[tuple[int, int], list[float]] = {(b, r): [] for b in sessions for r in rows}
        for _ in range(reps):  # interleaved: drift on a noisy machine hits every case alike
            for b, r in times:
                lengths = [c.length for c in caches[:b]]
                calls = [
                    Call(c, torch.randint(0, 49000, (1, r), generator=gen), logits="all")
                    for c in caches[:b]
                ]
                t0 = time.perf_counter()
                model.forward_many(calls)
                times[b, r].append(time.perf_counter() - t0)
                for c, n in zip(caches, lengths, strict=False):
                    c.truncate(n)
    one = statistics.median(times[min(sessions), min(rows)]) / min(sessions)
    out = []
    for (b, r), ts in times.items():
        ms = statistics.median(ts) * 1e3
        extra = b * r - 1
        cost = (ms / (one * 1e3) - 1) / extra if extra else 0.0
        out.append(
            {"sessions": b, "rows_each": r, "ms": round(ms, 2),
             "vs_one_row": round(ms / (one * 1e3), 2), "row_cost": round(cost, 3)}
        )  # fmt: skip
    return out


def answer(lm: LM, q: str, decoder: str, max_new: int) -> tuple[list[int], str]:
    gen = lm.session().generate([{"role": "user", "content": q}], decoder=decoder,
                                max_new_tokens=max_new)  # fmt: skip
    for _ in gen:
        pass
    return gen.token_ids, gen.stats.stop_reason


def decoding(lm: LM, sessions: list[int], decoders: list[str], max_new: int) -> list[dict]:
    out = []
    for decoder in decoders:
        for b in sessions:
            qs = [QUESTIONS[i % len(QUESTIONS)] for i in range(b)]
            t0 = time.perf_counter()
            alone = [answer(lm, q, decoder, max_new) for q in qs]
            serial = time.perf_counter() - t0
            together: list = [None] * b
            start = threading.Barrier(b)

            def run(i: int, qs: list[str] = qs, together: list = together,
                    start: threading.Barrier = start, decoder: str = decoder) -> None:  # fmt: skip
                start.wait()
                together[i] = answer(lm, qs[i], decoder, max_new)

            before = lm.batcher.batches, lm.batcher.calls
            threads = [threading.Thread(target=run, args=(i,)) for i in range(b)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            tokens = sum(len(ids) for ids, _ in alone)
            batches = lm.batcher.batches - before[0]
            out.append(
                {"decoder": decoder, "sessions": b, "tokens": tokens,
                 "serial_ms": round(serial * 1e3), "together_ms": round(wall * 1e3),
                 "speedup": round(serial / wall, 2),
                 "tokens_per_s_together": round(tokens / wall, 1),
                 "calls_per_forward": round((lm.batcher.calls - before[1]) / max(batches, 1), 2),
                 "identical": together == alone}
            )  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", default="1,2,3,4,6")
    ap.add_argument("--rows", default="1,4", help="rows each session hands in per forward")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--decoders", default="ar,hybrid")
    ap.add_argument("--max-new", type=int, default=64)
    a = ap.parse_args()
    sessions = [int(s) for s in a.sessions.split(",")]
    lm = LM.load(LMConfig())
    answer(lm, "Hi", "ar", 4)  # warm-up
    result = {
        "kernel": lm.model.cpu_kernel,
        "threads": torch.get_num_threads(),
        "forward": forward_costs(lm, sessions, [int(r) for r in a.rows.split(",")], a.reps),
        "decoding": decoding(lm, sessions, a.decoders.split(","), a.max_new),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
