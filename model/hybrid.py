"""Hybrid decoders: several tokens per forward pass. `hybrid` (verified, lossless) and
`parallel` (commits confident drafts unverified; lossy), registered in model.decode.

One step (= one base forward, the unit the engine counts):

1. Verify rows: the pending token (committed, not yet in the cache) + k draft tokens, causal,
   base weights only, all written to the KV cache. Greedy: the longest prefix of drafts equal
   to the row argmaxes is accepted, plus the next argmax as a bonus token. Sampling:
   speculative rejection sampling with one-hot drafts (accept draft i with probability
   p_i(d_i); on rejection sample the residual p with d_i removed), which samples exactly from
   the base's temperature/top-p distribution. Rejected rows are rolled back: cache.truncate.
2. Drafts for the next step: the block drafter (model/drafter.py) reads the base's cache and
   the last accepted row's hidden state, never writes; prompt lookup (model/lookup.py) takes a
   slot where its measured acceptance beats the drafter's confidence; with `drafts=` (an
   earlier answer, refinement) that answer is proposed `refine_len` tokens at a time while the
   new answer follows it, and is looked up by n-gram once it diverges.

`parallel` adds the diffusion dial: next-step drafts whose confidence >= lm.threshold (a
leading run of them) are committed at once, with the tokens of this step, without waiting for
the base; the next forward writes them like verified tokens. threshold 1.0 never does that, so
`parallel` at 1.0 is exactly `hybrid`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from kernels.verify_select import verify_select
from model.decode import PREFILL_CHUNK, DecodeRequest, register
from model.drafter import BlockDrafter, load_default
from model.lookup import PromptLookup
from model.transformer import Transformer

# lm.row_cost = -1 on CPU: the extra cost of a verify row relative to a 1-row forward, measured
# with prepacked weights on the 2-core dev box (5 rows ~1.3-1.55x one row, 9 rows ~1.5-1.8x,
# BENCHMARKS.md). On CUDA it is 0: a few rows are free next to reading the weights.
CPU_ROW_COST = 0.1

# Loaded drafters per base model and lm.drafter value: weights are shared by every session.
_DRAFTERS: weakref.WeakKeyDictionary[Transformer, dict[str, BlockDrafter | None]] = (
    weakref.WeakKeyDictionary()
)


def drafter_for(model: Transformer, spec: str) -> BlockDrafter | None:
    """The drafter named by lm.drafter for this base model, loaded once."""
    per_model = _DRAFTERS.setdefault(model, {})
    if spec not in per_model:
        per_model[spec] = load_default(spec, model)
    return per_model[spec]


def set_drafter(model: Transformer, spec: str, drafter: BlockDrafter | None) -> None:
    """Register an in-memory drafter under an lm.drafter name (tests, benchmarks)."""
    _DRAFTERS.setdefault(model, {})[spec] = drafter


@dataclass
class Verified:
    accepted: int  # drafts accepted
    tokens: list[int]  # accepted drafts + bonus token: the tokens this step commits
    hidden: torch.Tensor  # (dim,) final normed hidden of the row that produced the bonus


class HybridStepper:
    """The decode state between forwards: what is cached, the pending token, the drafts."""

    def __init__(self, req: DecodeRequest, drafter: BlockDrafter | None) -> None:
        self.req, self.model, self.cache = req, req.model, req.cache
        self.drafter = drafter
        cfg = req.cfg
        self.k = cfg.draft_len
        self.lookup = (
            PromptLookup(req.prompt, max_ngram=cfg.lookup_ngram) if cfg.lookup_ngram else None
        )
        self.old = list(req.drafts or [])  # earlier answer (refinement)
        vocab = self.model.args.vocab_size
        if any(not 0 <= t < vocab for t in self.old):
            raise ValueError(f"drafts= must be token ids in [0, {vocab}) of this model's tokenizer")
        self.old_lookup = PromptLookup(self.old) if self.old else None
        self.answer: list[int] = []  # committed answer tokens (the pending one included)
        self.aligned = bool(self.old)  # the answer so far equals a prefix of the earlier one
        self.dev = self.model.embed.weight.device
        auto = 0.0 if self.dev.type == "cuda" else CPU_ROW_COST
        self.row_cost = cfg.row_cost if cfg.row_cost >= 0 else auto

    # --- 1. verify ----------------------------------------------------------------------------

    def forward_rows(
        self, rows: list[int], first_logit_row: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append `rows` to the cache; logits (R, V) and normed hidden (R, dim) of rows
        first_logit_row.. (the output head runs only where a row checks a draft)."""
        ids = torch.tensor([rows], device=self.dev)  # (1, T)
        out = self.model(ids, cache=self.cache, logits="none", hidden=True)
        normed = out.hidden_normed[0, first_logit_row:]  # (R, dim)
        return self.model.head(normed), normed

    def accept(self, logits: torch.Tensor, drafts: list[int], forced: int) -> tuple[int, int]:
        """(accepted drafts, bonus token) from logits (k + 1, V) of [anchor] + drafts; the first
        `forced` drafts are committed already (parallel mode) and count as accepted."""
        sampler, k = self.req.sampler, len(drafts)
        d = torch.tensor(drafts, dtype=torch.long, device=logits.device)
        if sampler.greedy:
            res = verify_select(logits, d, check_drafts=False)
            ok = (res.argmax[:k] == d).tolist()
            a = _leading(ok, forced)
            return a, int(res.argmax[a])
        p = sampler.probs(logits)  # (k + 1, V): exactly the distribution `ar` samples from
        u = torch.rand(k, generator=sampler.generator, device=logits.device)
        ok = (u < p[:k].gather(1, d[:, None])[:, 0]).tolist() if k else []
        a = _leading(ok, forced)
        row = p[a]
        if a < k:  # rejected draft a: resample from the residual
            residual = row.clone()
            residual[drafts[a]] = 0.0
            if float(residual.sum()) > 0.0:
                row = residual / residual.sum()
        return a, sampler.sample_probs(row)

    def verify(self, pre: list[int], anchor: int, drafts: list[int], forced: int = 0) -> Verified:
        """One forward over pre + [anchor] + drafts (pre: prompt rows with no draft to check),
        then roll the cache back to anchor + accepted drafts."""
        start = self.cache.length
        logits, normed = self.forward_rows([*pre, anchor, *drafts], len(pre))
        a, bonus = self.accept(logits, drafts, forced)
        self.cache.truncate(start + len(pre) + 1 + a)
        return Verified(a, [*drafts[:a], bonus], normed[a])

    # --- 2. propose ---------------------------------------------------------------------------

    def commit(self, tokens: list[int]) -> None:
        if self.aligned:
            m = len(self.answer)
            self.aligned = self.old[m : m + len(tokens)] == tokens
        self.answer += tokens
        if self.lookup is not None:
            self.lookup.extend(tokens)

    def propose(
        self, pending: int, hidden: torch.Tensor, budget: int
    ) -> tuple[list[int], list[float]]:
        """Drafts (and confidences) for the positions after the pending token; at most
        `budget` of them (tokens still allowed before max_new_tokens)."""
        cfg, m = self.req.cfg, len(self.answer)
        if self.aligned and m < len(self.old):
            drafts = self.old[m : m + min(cfg.refine_len, budget)]
            return drafts, [0.0] * len(drafts)  # verified, never committed blind
        k = min(self.k, budget)
        drafts: list[int] = []
        confs: list[float] = []
        if self.drafter is not None and k > 0:
            drafts, confs = self.drafter.draft(self.model, self.cache, pending, hidden)
            drafts, confs = drafts[:k], confs[:k]
        for source in (self.lookup, self.old_lookup):
            if source is None or k == 0:
                continue
            lk, lk_conf = source.propose(k, None if source is self.lookup else self.answer)
            for i, (t, c) in enumerate(zip(lk, lk_conf, strict=True)):
                if i >= len(drafts):
                    drafts.append(t)
                    confs.append(c)
                elif c > confs[i]:
                    drafts[i], confs[i] = t, c
        return _worth_verifying(drafts, confs, self.row_cost, self.req.stop_ids)


def _leading(ok: list[bool], forced: int) -> int:
    a = forced
    while a < len(ok) and ok[a]:
        a += 1
    return a


def _worth_verifying(
    drafts: list[int], confs: list[float], row_cost: float, stop_ids: frozenset[int]
) -> tuple[list[int], list[float]]:
    """The leading drafts that maximise expected committed tokens per unit of step cost,
    (1 + sum over i <= n of P(drafts 1..i accepted)) / (1 + row_cost * n), with P the product of
    the confidences; nothing after a stop token (nothing follows it)."""
    best_n, best_rate, expected, chain = 0, 1.0, 1.0, 1.0
    for i, (t, c) in enumerate(zip(drafts, confs, strict=True)):
        chain *= c
        expected += chain
        rate = expected / (1.0 + row_cost * (i + 1))
        if rate > best_rate:
            best_n, best_rate = i + 1, rate
        if t in stop_ids:
            break
    return drafts[:best_n], confs[:best_n]


def _decode(req: DecodeRequest, threshold: float) -> Iterator[list[int]]:
    st = HybridStepper(req, drafter_for(req.model, req.cfg.drafter))
    # Prompt rows beyond the last chunk: plain prefill, no logits (cancel checked per chunk).
    rest = req.prompt[req.cache.length :]
    while len(rest) > PREFILL_CHUNK:
        req.model(
            torch.tensor([rest[:PREFILL_CHUNK]], device=st.dev), cache=req.cache, logits="none"
        )
        rest = rest[PREFILL_CHUNK:]
        yield []
    # First forward: the last prompt rows, the last one anchoring the earlier answer's tokens
    # as drafts when refining.
    pre, anchor = rest[:-1], rest[-1]
    drafts = st.old[: min(req.cfg.refine_len, req.max_new_tokens - 1)]
    forced = 0
    produced = 0
    while True:
        v = st.verify(pre, anchor, drafts, forced)
        pre = []
        st.commit(v.tokens[forced:])
        out = v.tokens[forced:]
        produced += len(out)
        budget = req.max_new_tokens - produced
        if budget <= 0 or v.tokens[-1] in req.stop_ids or any(t in req.stop_ids for t in out):
            yield out
            return
        anchor = v.tokens[-1]
        drafts, confs = st.propose(anchor, v.hidden, budget - 1)
        forced = 0
        if threshold < 1.0:
            while forced < len(drafts) and confs[forced] >= threshold:
                forced += 1
            if forced:  # committed now, written by the next forward like verified tokens
                st.commit(drafts[:forced])
                out = out + drafts[:forced]
                produced += forced
        yield out
        if any(t in req.stop_ids for t in drafts[:forced]):
            return


@register("hybrid")
def decode_hybrid(req: DecodeRequest) -> Iterator[list[int]]:
    """Verified decoding: exactly the base model's tokens, several per forward."""
    return _decode(req, 1.0)


@register("parallel")
def decode_parallel(req: DecodeRequest) -> Iterator[list[int]]:
    """Confident drafts committed without verification (lm.threshold); lossy."""
    return _decode(req, req.cfg.threshold)
