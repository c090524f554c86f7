"""LM decoding benchmark: fixed chat prompts, per-prompt and median speed, JSON to stdout.

    .venv/bin/python -m bench.lm --decoders ar --max-new-tokens 64 --prompts 20

Every prompt runs in a fresh session (no KV reuse between prompts); decoders alternate per
prompt so CPU noise (a shared 2-core box) hits them alike. Decoders other than `ar` are also
compared with `ar`'s tokens (exact-match rate, token agreement). `--reference transformers`
times transformers' LlamaForCausalLM.generate on the same prompts, interleaved, as an outside
yardstick; `--reference llama.cpp` times llama-cpp-python (`pip install -e '.[reference]'`,
which compiles llama.cpp) on the same GGUF, prompt tokens and greedy decoding: decode tokens/s
and time to first token beside ours. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

# Before torch loads libgomp (dllm_voice/__init__.py does the same, but torch is imported first
# here): spinning OpenMP workers starve the other processes on shared cores (~3x fewer tokens/s
# under load).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from dllm_voice.app.conversation.config import DEFAULT_SYSTEM_PROMPT  # noqa: E402
from dllm_voice.model import drafts  # noqa: E402
from dllm_voice.model.config import LMConfig  # noqa: E402
from dllm_voice.model.decode import DECODERS  # noqa: E402
from dllm_voice.model.engine import LM  # noqa: E402
from dllm_voice.model.hybrid import drafter_for  # noqa: E402
from lab.prompts import conversations  # noqa: E402

PROMPTS = [
    "What is the capital of France?",
    "Give me three tips for sleeping better.",
    "Explain what a black hole is in simple words.",
    "How do I boil an egg?",
    "What's a good name for a golden retriever puppy?",
    "Why is the sky blue?",
    "Write a short poem about the ocean.",
    "What are the benefits of drinking water?",
    "Can you recommend a book for a long flight?",
    "How does a rainbow form?",
    "Tell me a fun fact about octopuses.",
    "What should I pack for a weekend camping trip?",
    "Explain the difference between weather and climate.",
    "How can I stay focused while working from home?",
    "What is photosynthesis?",
    "Suggest a quick vegetarian dinner recipe.",
    "Why do cats purr?",
    "How do airplanes stay in the air?",
    "What is the best way to learn a new language?",
    "Describe a sunset to someone who has never seen one.",
    "What is the difference between a virus and a bacterium?",
    "How many planets are in the solar system, and which is the largest?",
    "Give me a motivational quote and explain it.",
    "What causes the seasons on Earth?",
]
CLAUSE_END = (",", ".", "?", "!")
# The LMConfig fields of the hybrid and parallel decoders, echoed in the report.
HYBRID_FIELDS = (
    "drafter",
    "ngram",
    "draft_len",
    "draft_branch",
    "row_cost",
    "lookup_ngram",
    "drafter_pass",
    "drafter_skip",
    "threshold",
)
# Accuracy under parallelism (d3LLM's AUP): the weight exp(-ALPHA (1 - y / y_max)) discounts a
# point by how far its accuracy y falls below the best one's.
AUP_ALPHA = 3.0


def run_one(lm: LM, decoder: str, prompt: str | list, max_new: int) -> dict[str, object]:
    """One answer; prompt: a user message, or a whole conversation (list of messages)."""
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    gen = lm.session().generate(messages, decoder=decoder, max_new_tokens=max_new)
    prompt = messages[-1]["content"]
    t0, cpu0, first_clause_ms = time.perf_counter(), time.process_time(), None
    for _piece in gen:
        if first_clause_ms is None and any(c in gen.text for c in CLAUSE_END):
            first_clause_ms = (time.perf_counter() - t0) * 1e3
    cpu_s = time.process_time() - cpu0
    st = gen.stats
    return {
        "prompt": prompt,
        **st.as_dict(),
        # committed tokens (the EOS too) per forward pass, prefill included: ar = 1.0
        "tokens_per_forward": (st.new_tokens + (st.stop_reason == "eos")) / max(st.forwards, 1),
        "first_clause_ms": first_clause_ms,
        # CPU time of all our threads: on a shared CPU, tokens per CPU-second at 1 thread is
        # what the code does when it actually runs (wall-clock figures include waiting).
        "cpu_ms": cpu_s * 1e3,
        "tokens_per_cpu_s": st.new_tokens / cpu_s if cpu_s > 0 else None,
        "e2e_tokens_per_s": st.new_tokens / st.total_ms * 1e3 if st.total_ms else None,
        "prefill_tokens_per_s": prefill_rate(st.prompt_tokens - st.cached_tokens, st.ttft_ms),
        "token_ids": gen.token_ids,
    }


def prefill_rate(tokens: int, ttft_ms: float) -> float | None:
    """Prompt tokens per second of the time to the first token (the prefill and one sample)."""
    return tokens / ttft_ms * 1e3 if ttft_ms > 0 else None


def load_transformers(lm: LM, path: str):
    """transformers' own LlamaForCausalLM on the same GGUF: an independent speed reference."""
    from transformers import AutoModelForCausalLM

    from dllm_voice.model.loader import default_model_path

    p = Path(path) if path else default_model_path()
    return AutoModelForCausalLM.from_pretrained(
        str(p.parent), gguf_file=p.name, dtype=lm.model.embed.weight.dtype
    ).eval()


def run_transformers(hf, lm: LM, prompt: str | list, max_new: int) -> dict[str, object]:
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    ids = torch.tensor([lm.tokenizer.apply_chat(messages)])
    prompt = messages[-1]["content"]
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = hf.generate(ids, max_new_tokens=max_new, do_sample=False,
                          eos_token_id=sorted(lm.tokenizer.stop_ids))  # fmt: skip
    total = time.perf_counter() - t0
    n = out.shape[1] - ids.shape[1]
    return {"prompt": prompt, "new_tokens": n, "total_ms": total * 1e3,
            "e2e_tokens_per_s": n / total}  # fmt: skip


def load_llama_cpp(path: str, threads: int):
    """llama.cpp on the same GGUF file (CPU, greedy): the yardstick for a fast decoder."""
    try:
        from llama_cpp import Llama
    except ImportError:
        sys.exit(
            "--reference llama.cpp needs llama-cpp-python: .venv/bin/pip install -e '.[reference]'"
        )
    from dllm_voice.model.loader import default_model_path

    p = Path(path) if path else default_model_path()
    n = threads or torch.get_num_threads()
    return Llama(model_path=str(p), n_ctx=2048, n_threads=n, n_threads_batch=n, verbose=False)


def run_llama_cpp(llm, lm: LM, prompt: str | list, max_new: int) -> dict[str, object]:
    """One greedy answer from the same prompt tokens, the cache emptied first (as our fresh
    sessions): time to first token includes the prefill, tokens/s is the decode after it."""
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    ids = lm.tokenizer.apply_chat(messages)
    llm.reset()
    out: list[int] = []
    t0 = time.perf_counter()
    t_first = t_end = t0
    for tok in llm.generate(ids, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
        t_end = time.perf_counter()
        if not out:
            t_first = t_end
        if tok in lm.tokenizer.stop_ids:
            break
        out.append(tok)
        if len(out) >= max_new:
            break
    decode_s = t_end - t_first
    return {
        "prompt": messages[-1]["content"],
        "new_tokens": len(out),
        "ttft_ms": (t_first - t0) * 1e3,
        "prefill_tokens_per_s": prefill_rate(len(ids), (t_first - t0) * 1e3),
        "tokens_per_s": (len(out) - 1) / decode_s if len(out) > 1 and decode_s > 0 else None,
        "e2e_tokens_per_s": len(out) / (t_end - t0) if t_end > t0 else None,
        "token_ids": out,
    }


def median(rows: list[dict[str, object]], key: str) -> float | None:
    vals = [float(r[key]) for r in rows if r.get(key) is not None]
    return round(statistics.median(vals), 2) if vals else None


def summarize_vs_ar(rows: list[dict[str, object]], ar_rows: list[dict[str, object]]) -> dict:
    """Exact-match rate and token agreement of ``rows`` with ar's answers to the same prompts."""
    same = agree = total = 0
    for r, a in zip(rows, ar_rows, strict=True):
        x, y = r["token_ids"], a["token_ids"]
        same += x == y
        agree += sum(p == q for p, q in zip(x, y, strict=False))
        total += max(len(x), len(y))
    return {
        "exact_match_vs_ar": round(same / len(rows), 3),
        "token_agreement_vs_ar": round(agree / max(total, 1), 3),
    }


def summarize(rows: list[dict[str, object]], ar_rows: list[dict[str, object]] | None) -> dict:
    keys = ("tokens_per_s", "e2e_tokens_per_s", "tokens_per_cpu_s", "ttft_ms", "first_clause_ms",
            "prefill_tokens_per_s")  # fmt: skip
    out = {k: median(rows, k) for k in (*keys, "tokens_per_forward", "forwards", "new_tokens")}
    if ar_rows is not None:
        out.update(summarize_vs_ar(rows, ar_rows))
        # Per prompt, this decoder's tokens/s over ar's on the same prompt, run next to it: less
        # sensitive to a shared machine's drifting load than the ratio of the two medians.
        ratios = [r["tokens_per_s"] / a["tokens_per_s"] for r, a in zip(rows, ar_rows, strict=True)
                  if r["tokens_per_s"] and a["tokens_per_s"]]  # fmt: skip
        out["paired_speed_vs_ar"] = round(statistics.median(ratios), 2) if ratios else None
    # All tokens over all forwards (a long answer weighs more than in the per-prompt median).
    forwards = sum(int(r["forwards"]) for r in rows)
    out["tokens_per_forward_pooled"] = round(
        sum(int(r["new_tokens"]) + (r["stop_reason"] == "eos") for r in rows) / max(forwards, 1), 3
    )
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decoders", default="ar", help="comma list, e.g. ar,hybrid,parallel")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help=f"<= {len(PROMPTS)}")
    ap.add_argument("--model", default="", help="lm.path ('' = bundled SmolLM2)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument(
        "--reference",
        choices=("", "transformers", "llama.cpp"),
        default="",
        help="also time transformers' generate or llama.cpp on the same GGUF, prompt by prompt",
    )
    ap.add_argument(
        "--prompt-set",
        choices=("fixed", "heldout", "unseen"),
        default="fixed",
        help="fixed: the 24 prompts above (several are also in the drafter's training list); "
        "heldout: lab/prompts.py conversations the drafter never saw; unseen: those "
        "of them whose questions occur in no training conversation either",
    )
    # Hybrid / parallel settings (lm.* fields) and the parallel threshold sweep.
    ap.add_argument("--drafter", default="", help="lm.drafter ('' = bundled adapter, 'none')")
    ap.add_argument("--draft-len", type=int, default=LMConfig.draft_len)
    ap.add_argument("--draft-branch", type=int, default=LMConfig.draft_branch)
    ap.add_argument("--row-cost", type=float, default=LMConfig.row_cost, help="-1 = auto")
    ap.add_argument("--lookup-ngram", type=int, default=LMConfig.lookup_ngram)
    ap.add_argument("--threshold", type=float, default=LMConfig.threshold)
    ap.add_argument(
        "--thresholds", default="", help="parallel sweep, e.g. 0.5,0.7,0.9: adds parallel@T rows"
    )
    ap.add_argument("--ngram", default="", help="lm.ngram ('' = bundled store, 'none')")
    ap.add_argument(
        "--lookup-only",
        action="store_true",
        help="add a hybrid row with lm.drafter none (free drafts: lookup + n-gram store)",
    )
    ap.add_argument("--no-ngram", action="store_true", help="add a hybrid row with lm.ngram none")
    ap.add_argument(
        "--compare-ngram",
        default="",
        help="another n-gram store file: adds a hybrid row with lm.ngram set to it (free drafts "
        "only with --lookup-only: its hybrid/lookup row too)",
    )
    ap.add_argument(
        "--system",
        default="",
        help="system message put before every conversation that has none; 'app' = the app's "
        "default (what the voice agent sends)",
    )
    ap.add_argument(
        "--no-loop-guard",
        action="store_true",
        help="add every decoder again with lm.loop_guard off (the guard's cost, paired)",
    )
    ap.add_argument(
        "--chain", action="store_true", help="add a hybrid row with lm.draft_branch 1 (no tree)"
    )
    ap.add_argument(
        "--compare-tree",
        default="",
        help="another draft tree size LEN,BRANCH (e.g. 24,4): adds a hybrid/treeLENxBRANCH row "
        "with that lm.draft_len and lm.draft_branch",
    )
    ap.add_argument(
        "--with-drafter",
        action="store_true",
        help="add a hybrid row with lm.drafter_pass on (the pass runs where auto skips it)",
    )
    ap.add_argument(
        "--profile",
        default="",
        help="lm.profile: '' = this machine's from `main.py tune` if any, 'none', or a file",
    )
    ap.add_argument(
        "--untuned",
        action="store_true",
        help="add a hybrid/untuned row: the same settings without the profile",
    )
    ap.add_argument(
        "--whole-head",
        action="store_true",
        help="add DECODER/whole-head rows: greedy steps on the whole head, not its sketch",
    )
    ap.add_argument(
        "--compare-drafter",
        default="",
        help="another drafter adapter file: adds a hybrid/drafter2 row that runs it (the drafter "
        "pass on, as with --with-drafter)",
    )
    ap.add_argument(
        "--kernels",
        default="",
        help="other CPU matrix kernels, e.g. onednn,plain: adds every decoder's row again on a "
        "second copy of the weights packed for each (model/packing.py prepack kinds)",
    )
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked; ``decoder_names``, ``tree`` (LEN, BRANCH or None) and ``chats`` (the
    prompts the run answers) added."""
    ap = build_parser()
    a = ap.parse_args(argv)
    a.decoder_names = [d.strip() for d in a.decoders.split(",") if d.strip()]
    unknown = [d for d in a.decoder_names if d not in DECODERS]
    if unknown:
        ap.error(f"unknown decoder(s) {unknown}; available: {', '.join(sorted(DECODERS))}")
    a.tree = None
    if a.compare_tree:
        try:
            n, b = (int(v) for v in a.compare_tree.split(","))
        except ValueError as e:
            ap.error(f"--compare-tree wants LEN,BRANCH (e.g. 24,4): {e}")
        a.tree = (n, b)
    prompts = prompt_set(a.prompt_set, a.system)
    if not 1 <= a.prompts <= len(prompts):
        ap.error(f"--prompts must be 1..{len(prompts)}")
    a.chats = prompts[: a.prompts]
    return a


def prompt_set(name: str, system: str) -> list:
    """The named prompt set, each conversation led by ``system`` where it has no system message
    ('app': the app's default; '': none added)."""
    prompts: list = PROMPTS if name == "fixed" else conversations(name)
    if not system:
        return prompts
    system = DEFAULT_SYSTEM_PROMPT if system == "app" else system
    chats = [[{"role": "user", "content": p}] if isinstance(p, str) else p for p in prompts]
    return [c if c[0]["role"] == "system" else [{"role": "system", "content": system}, *c]
            for c in chats]  # fmt: skip


def load_model(a: argparse.Namespace) -> tuple[LMConfig, LM, float]:
    """The LM config the options describe, the LM, and its load time in seconds."""
    cfg = replace(LMConfig(), path=a.model, device=a.device, dtype=a.dtype, threads=a.threads,
                  drafter=a.drafter, ngram=a.ngram, draft_len=a.draft_len,
                  draft_branch=a.draft_branch, row_cost=a.row_cost, lookup_ngram=a.lookup_ngram,
                  threshold=a.threshold, profile=a.profile)  # fmt: skip
    t = time.perf_counter()
    lm = LM.load(cfg)
    return cfg, lm, time.perf_counter() - t


def decoder_runs(a: argparse.Namespace, cfg: LMConfig, lm: LM) -> dict[str, tuple[LM, str]]:
    """label -> (LM sharing the weights, decoder): each decoder, then the rows the options add."""
    decoders = a.decoder_names

    def variant(**changes) -> LM:
        return LM(lm.model, lm.tokenizer, replace(cfg, **changes), lm.profile)

    runs = {d: (lm, d) for d in decoders}
    for th in (float(x) for x in a.thresholds.split(",") if x.strip()):
        runs[f"parallel@{th:g}"] = (variant(threshold=th), "parallel")
    if a.lookup_only:
        runs["hybrid/lookup"] = (variant(drafter="none"), "hybrid")
    if a.no_ngram:
        runs["hybrid/no-ngram"] = (variant(ngram="none"), "hybrid")
    if a.compare_ngram:
        runs["hybrid/ngram2"] = (variant(ngram=a.compare_ngram), "hybrid")
        if a.lookup_only:
            runs["hybrid/lookup/ngram2"] = (
                variant(ngram=a.compare_ngram, drafter="none"),
                "hybrid",
            )
    if a.no_loop_guard:
        free = variant(loop_guard=False)
        runs.update({f"{d}/no-loop-guard": (free, d) for d in decoders})
    if a.chain:
        runs["hybrid/chain"] = (variant(draft_branch=1), "hybrid")
    if a.tree:
        n, b = a.tree
        runs[f"hybrid/tree{n}x{b}"] = (variant(draft_len=n, draft_branch=b), "hybrid")
    if a.with_drafter:
        runs["hybrid/drafter"] = (variant(drafter_pass="on"), "hybrid")
    if a.compare_drafter:
        runs["hybrid/drafter2"] = (
            variant(drafter_pass="on", drafter=a.compare_drafter),
            "hybrid",
        )
    if a.untuned:
        runs["hybrid/untuned"] = (LM(lm.model, lm.tokenizer, cfg), "hybrid")
    if a.whole_head:
        whole = variant(head_sketch=False)
        runs.update({f"{d}/whole-head": (whole, d) for d in decoders})
    for kind in (k.strip() for k in a.kernels.split(",") if k.strip()):
        runs.update(kernel_runs(a, cfg, kind))
    return runs


def kernel_runs(a: argparse.Namespace, cfg: LMConfig, kind: str) -> dict[str, tuple[LM, str]]:
    """Every decoder again on a second copy of the weights packed for the CPU kernel ``kind``."""
    other = LM.load(cfg)
    other.model.unpack()
    other.model.pack(kind)
    drafter = drafter_for(other.model, drafts.resolve(cfg.drafter, cfg.path, "drafter"))
    if drafter is not None:
        drafter.pack(kind)
    runs = {f"{d}/{kind}": (other, d) for d in a.decoder_names}
    if a.lookup_only and "hybrid" in a.decoder_names:
        free = LM(other.model, other.tokenizer, replace(cfg, drafter="none"), other.profile)
        runs[f"hybrid/lookup/{kind}"] = (free, "hybrid")
    return runs


def warm_up(runs: dict[str, tuple[LM, str]]) -> None:
    """First-call allocations, lazy tables, the drafter file: out of the timed answers."""
    for lm, decoder in runs.values():
        run_one(lm, decoder, "Hi", 4)


def load_reference(a: argparse.Namespace, lm: LM) -> tuple[object, object]:
    """(transformers model, llama.cpp model), the one --reference names loaded and warmed up."""
    hf = load_transformers(lm, a.model) if a.reference == "transformers" else None
    if hf is not None:
        run_transformers(hf, lm, "Hi", 4)
    cpp = load_llama_cpp(a.model, a.threads) if a.reference == "llama.cpp" else None
    if cpp is not None:
        run_llama_cpp(cpp, lm, "Hi", 4)
    return hf, cpp


def run_prompts(
    a: argparse.Namespace, runs: dict[str, tuple[LM, str]], lm: LM, hf, cpp
) -> tuple[dict[str, list[dict[str, object]]], list[dict[str, object]]]:
    """Each prompt answered by the reference, then by every run in turn: (rows per run label,
    the reference's rows)."""
    rows: dict[str, list[dict[str, object]]] = {d: [] for d in runs}
    ref_rows: list[dict[str, object]] = []
    for i, prompt in enumerate(a.chats):
        if hf is not None:
            ref_rows.append(run_transformers(hf, lm, prompt, a.max_new_tokens))
        if cpp is not None:
            ref_rows.append(run_llama_cpp(cpp, lm, prompt, a.max_new_tokens))
            print(f"[{i + 1}/{a.prompts}] llama.cpp: {ref_rows[-1]['tokens_per_s']} tok/s",
                  file=sys.stderr)  # fmt: skip
        for d, (run_lm, decoder) in runs.items():
            r = run_one(run_lm, decoder, prompt, a.max_new_tokens)
            rows[d].append(r)
            msg = f"{r['tokens_per_s']:.1f} tok/s, {r['new_tokens']} tokens"
            print(f"[{i + 1}/{a.prompts}] {d}: {msg}", file=sys.stderr)
    return rows, ref_rows


def setup_report(a: argparse.Namespace, cfg: LMConfig, lm: LM, load_s: float) -> dict:
    """What ran: device, dtype, threads, the OpenMP policy, the options and the hybrid settings."""
    return {
        "device": str(lm.device),
        "dtype": str(lm.model.embed.weight.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT", ""),
        "load_s": round(load_s, 2),
        "max_new_tokens": a.max_new_tokens,
        "prompts": a.prompts,
        "prompt_set": a.prompt_set,
        "system": a.system,
        "compare_ngram": a.compare_ngram,
        "compare_drafter": a.compare_drafter,
        "hybrid": {k: getattr(lm.cfg, k) for k in HYBRID_FIELDS},
        "profile": str(lm.profile.path) if lm.profile else None,
    }


def decoders_report(rows: dict[str, list[dict[str, object]]]) -> dict:
    """Per run label: the medians (against ar's where ar ran) and the per-prompt rows."""
    ar_rows = rows.get("ar")
    ar_speed = median(ar_rows, "tokens_per_s") if ar_rows else None
    out = {}
    for d, d_rows in rows.items():
        summary = summarize(d_rows, ar_rows if d != "ar" and ar_rows else None)
        if d != "ar" and ar_rows and summary["tokens_per_s"] and ar_speed:
            summary["speed_vs_ar"] = round(summary["tokens_per_s"] / ar_speed, 2)
        per_prompt = [{k: v for k, v in r.items() if k != "token_ids"} for r in d_rows]
        out[d] = {"median": summary, "per_prompt": per_prompt}
    return out


def weighted(y: float, y_max: float) -> float:
    """y discounted by its distance below y_max (AUP's quality weight)."""
    return y * min(math.exp(-AUP_ALPHA * (1 - y / y_max)), 1.0)


def parallel_curve(report: dict) -> dict | None:
    """The lossy dial as a curve: (tokens/forward pooled, % of tokens agreeing with ar) for ar,
    hybrid and every parallel@T run; its area (AUP: trapezoids of the weighted agreement over
    tokens/forward, from ar's point) and the threshold whose point gives the most weighted
    agreement x tokens/forward."""
    runs = {d: r["median"] for d, r in report.items() if d == "hybrid" or d.startswith("parallel@")}
    if "ar" not in report or not any(d.startswith("parallel@") for d in runs):
        return None
    points = {"ar": (1.0, 100.0)}
    for d, m in runs.items():
        points[d] = (m["tokens_per_forward_pooled"], 100 * m["token_agreement_vs_ar"])
    y_max = max(y for _, y in points.values())
    curve = sorted(points.values())
    area = sum(
        (x1 - x0) * (weighted(y0, y_max) + weighted(y1, y_max)) / 2
        for (x0, y0), (x1, y1) in zip(curve, curve[1:], strict=False)
    )
    dial = {d: x * weighted(y, y_max) / 100 for d, (x, y) in points.items() if d.startswith("par")}
    return {
        "points": {d: [round(x, 3), round(y, 1)] for d, (x, y) in points.items()},
        "aup": round(area, 2),
        "best_threshold": float(max(dial, key=dial.__getitem__).split("@")[1]),
    }


def transformers_report(rows: dict[str, list[dict[str, object]]], ref_rows: list) -> dict:
    ref = median(ref_rows, "e2e_tokens_per_s")
    ours = {d: median(d_rows, "e2e_tokens_per_s") for d, d_rows in rows.items()}
    return {
        "median_e2e_tokens_per_s": ref,
        "speed_vs_transformers": {d: round(v / ref, 2) for d, v in ours.items() if v and ref},
        "per_prompt": ref_rows,
    }


def llama_cpp_report(rows: dict[str, list[dict[str, object]]], ref_rows: list) -> dict:
    keys = ("tokens_per_s", "ttft_ms", "e2e_tokens_per_s", "prefill_tokens_per_s")
    ref = {k: median(ref_rows, k) for k in keys}
    ar_rows = rows.get("ar")

    def ratios(key: str) -> dict[str, float]:
        """Each run's median `key` over llama.cpp's."""
        ours = {d: median(d_rows, key) for d, d_rows in rows.items()}
        return {d: round(v / ref[key], 2) for d, v in ours.items() if v and ref[key]}

    return {
        "median": {**ref, **(summarize_vs_ar(ref_rows, ar_rows) if ar_rows else {})},
        "speed_vs_llama_cpp": ratios("tokens_per_s"),
        "prefill_vs_llama_cpp": ratios("prefill_tokens_per_s"),
        "per_prompt": [{k: v for k, v in r.items() if k != "token_ids"} for r in ref_rows],
    }


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    cfg, lm, load_s = load_model(a)
    runs = decoder_runs(a, cfg, lm)
    warm_up(runs)
    hf, cpp = load_reference(a, lm)
    rows, ref_rows = run_prompts(a, runs, lm, hf, cpp)
    result = {**setup_report(a, cfg, lm, load_s), "decoders": decoders_report(rows)}
    curve = parallel_curve(result["decoders"])
    if curve is not None:
        result["accuracy_under_parallelism"] = curve
    if hf is not None:
        result["transformers"] = transformers_report(rows, ref_rows)
    if cpp is not None:
        result["llama.cpp"] = llama_cpp_report(rows, ref_rows)
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
