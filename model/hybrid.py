"""Hybrid decoders: several tokens per forward pass. `hybrid` (verified, lossless) and
`parallel` (commits confident drafts unverified; lossy), registered in model.decode's registry
when this module is imported.

One step (= one base forward, the unit the engine counts):

1. Verify rows: the pending token (committed, not yet in the cache) + a tree of draft tokens
   (model/tree.py; a chain is the simplest tree), base weights only, each row seeing the cache
   and its own ancestors, all written to the KV cache. Greedy: from the pending token, follow
   the child equal to the row's argmax while there is one; the argmax where none is the bonus
   token. Sampling: recursive rejection sampling over each node's children with one-hot
   drafts, which samples exactly from the base's temperature/top-p distribution. The accepted
   path's cache rows are moved next to each other, the rest rolled back (cache.truncate).
2. Drafts for the next step: the block drafter (model/drafter.py) reads the base's cache and
   the last accepted row's hidden state, never writes, and gives its top lm.draft_branch tokens
   per offset; prompt lookup (model/lookup.py) and the n-gram store (model/ngram.py) add chains
   with their measured acceptance, the store also one from the runner-up token at each of its
   chain's first positions and one after each of the drafter's candidates for the next token
   (the drafter's block is not autoregressive, the store is); the tree keeps the nodes that
   pay for their rows (lm.row_cost). With `drafts=` (an earlier answer, refinement) that answer
   is proposed `refine_len` tokens at a time while the new answer follows it, and is looked up
   by n-gram once it diverges. `hybrid` hands a step's tokens to the caller before this
   drafter pass, so drafting never delays verified tokens.

`parallel` adds the diffusion dial: next-step drafts on the tree's top-1 path whose confidence
>= lm.threshold (a leading run of them) are committed at once, with the tokens of this step,
without waiting for the base; the next forward writes them like verified tokens. threshold 1.0
never does that, so `parallel` at 1.0 is exactly `hybrid`.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

from dllm_voice.kernels import cpu_rows
from dllm_voice.kernels.verify_select import verify_select
from dllm_voice.model import drafts
from dllm_voice.model.config import LMConfig
from dllm_voice.model.decode import (
    PREFILL_CHUNK,
    DecodeRequest,
    Steps,
    feed_rows,
    register,
    tap_row,
)
from dllm_voice.model.drafter import BlockDrafter, load_default
from dllm_voice.model.layers import causal_mask
from dllm_voice.model.lookup import PromptLookup
from dllm_voice.model.ngram import NgramStore
from dllm_voice.model.ngram import load_default as load_ngram
from dllm_voice.model.transformer import Transformer
from dllm_voice.model.tree import DraftTree, build

# lm.row_cost = -1 on CPU: a verify row's extra cost next to a 1-row forward, per matrix kernel
# (Transformer.cpu_kernel; bench/rows.py), e.g. vnni's 0.3 was hybrid's fastest, also on AVX2's
# integer products (Gemma 3 270M: 1.23x ar, 1.19x at their measured 0.55). 0 on CUDA.
CPU_ROW_COST = {"vnni": 0.3, "quant": 0.15, "rows": 0.03, "onednn": 0.1, "plain": 0.1}
# oneDNN or plain weights at 1 thread: 1 row runs MKL's gemv, 2+ rows a gemm (2 rows cost 1.46x
# one), a jump charged once to a step that verifies a draft, which then skips the drafter pass.
GEMV_1THREAD_FIRST_ROW_COST = 0.35
# Whether the drafter's pass pays for itself per kernel (lm.drafter_pass auto with the row cost
# auto; `parallel` always drafts): where the layers are one C call the pass costs ~0.2 of a
# forward and gains less than that.
CPU_DRAFTER_PAYS = {"vnni": False, "quant": False, "rows": False, "onednn": True, "plain": True}

log = logging.getLogger(__name__)


def batch_row_cost(row_cost: float, sessions: int) -> float:
    """The row cost a draft tree is sized by when `sessions` sessions' steps share each forward
    (model/batch.py). A step then costs 1 + row_cost (R - 1) for all R rows of all sessions, and
    a draft row adds row_cost to every session's step, not only to its own. Maximizing all
    sessions' tokens per second, with every session's tree alike, gives the one-session rule
    with row_cost B / (1 + row_cost (B - 1)) for B sessions: vnni's 0.3 becomes 0.46 for 2,
    0.56 for 3, 0.72 for 6 (BENCHMARKS.md, "Several sessions")."""
    return row_cost * sessions / (1 + row_cost * (sessions - 1))


def row_cost(cfg: LMConfig, model: Transformer) -> float:
    """lm.row_cost, or its auto value: per CPU kernel, 0 on CUDA."""
    if cfg.row_cost >= 0:
        return cfg.row_cost
    return CPU_ROW_COST[model.cpu_kernel] if model.embed.weight.device.type == "cpu" else 0.0


def gemv_jump(cfg: LMConfig, model: Transformer) -> bool:
    """Whether a second row switches a 1-row gemv to a gemm (auto row cost only)."""
    cpu = model.embed.weight.device.type == "cpu"
    one_thread = torch.get_num_threads() == 1
    return cpu and cfg.row_cost < 0 and model.cpu_kernel in ("onednn", "plain") and one_thread


def runs_drafter(cfg: LMConfig, model: Transformer, threshold: float = 1.0) -> bool:
    """Whether a step runs the drafter's pass: lm.drafter_pass, whose off leaves `parallel`'s
    (its dial reads the drafter); auto where it pays."""
    if cfg.drafter_pass != "auto":
        return cfg.drafter_pass == "on" or threshold < 1.0
    auto_cpu = model.embed.weight.device.type == "cpu" and cfg.row_cost < 0
    pays = threshold < 1.0 or not auto_cpu or CPU_DRAFTER_PAYS[model.cpu_kernel]
    return pays and not gemv_jump(cfg, model)


T = TypeVar("T")
# Loaded drafters and n-gram stores per base model, by setting value: shared by every session.
_DRAFTERS: weakref.WeakKeyDictionary[Transformer, dict[str, BlockDrafter | None]] = (
    weakref.WeakKeyDictionary()
)
_NGRAMS: weakref.WeakKeyDictionary[Transformer, dict[str, NgramStore | None]] = (
    weakref.WeakKeyDictionary()
)


def _loaded(
    cache: weakref.WeakKeyDictionary[Transformer, dict[str, T]],
    model: Transformer,
    spec: str,
    load: Callable[[], T],
) -> T:
    per_model = cache.setdefault(model, {})
    if spec not in per_model:
        per_model[spec] = load()
    return per_model[spec]


def drafter_for(model: Transformer, spec: str) -> BlockDrafter | None:
    """The drafter named by lm.drafter for this base model, loaded once."""
    return _loaded(_DRAFTERS, model, spec, lambda: load_default(spec, model))


def ngram_for(model: Transformer, spec: str) -> NgramStore | None:
    """The n-gram store named by lm.ngram for this base model, loaded once."""
    return _loaded(_NGRAMS, model, spec, lambda: load_ngram(spec, model.args.vocab_size))


def set_drafter(model: Transformer, spec: str, drafter: BlockDrafter | None) -> None:
    """Register an in-memory drafter under an lm.drafter name (tests, benchmarks)."""
    _DRAFTERS.setdefault(model, {})[spec] = drafter


def set_ngram(model: Transformer, spec: str, store: NgramStore | None) -> None:
    """Register an in-memory n-gram store under an lm.ngram name (tests, benchmarks)."""
    _NGRAMS.setdefault(model, {})[spec] = store


@dataclass
class Verified:
    accepted: int  # drafts accepted
    tokens: list[int]  # accepted drafts + bonus token: the tokens this step commits
    hidden: torch.Tensor  # (dim,) final normed hidden of the row that produced the bonus


class HybridStepper:
    """The decode state between forwards: what is cached, the pending token, the drafts."""

    def __init__(
        self,
        req: DecodeRequest,
        drafter: BlockDrafter | None,
        ngram: NgramStore | None = None,
        threshold: float = 1.0,
    ) -> None:
        self.req, self.model, self.cache = req, req.model, req.cache
        self.drafter, self.ngram, self.threshold = drafter, ngram, threshold
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
        self.row_cost = row_cost(cfg, self.model)
        self.first_row_cost = GEMV_1THREAD_FIRST_ROW_COST if gemv_jump(cfg, self.model) else 0.0
        if not runs_drafter(cfg, self.model, threshold):
            self.drafter = None

    # --- 1. verify ----------------------------------------------------------------------------

    def forward_rows(
        self,
        rows: list[int],
        first_logit_row: int,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        head: bool = True,
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Append `rows` to the cache; logits (R, V) (None without the `head`) and normed hidden
        (R, dim) of rows first_logit_row.. (the head runs only where a row checks a draft)."""
        ids = torch.tensor([rows], device=self.dev)  # (1, T)
        out = self.req.run(
            ids, cache=self.cache, positions=positions, mask=mask,
            logits=first_logit_row if head else "none", hidden=True,
        )  # fmt: skip
        assert out.hidden_normed is not None
        logits = None if out.logits is None else out.logits[0]
        return logits, out.hidden_normed[0, first_logit_row:]  # (R, V), (R, dim)

    def accept(
        self, logits: torch.Tensor | None, tree: DraftTree, normed: torch.Tensor | None = None
    ) -> tuple[list[int], int]:
        """(accepted path of tree nodes, bonus token) from logits (1 + nodes, V) of [anchor] +
        tree (None: greedy on a sketched head, from the rows' normed hidden states); row 1 + j
        predicts what follows node j. The tree's forced nodes (a chain) are committed already
        (parallel mode) and count as accepted."""
        kids, sampler = tree.children(), self.req.sampler
        path = list(range(tree.forced))
        node = tree.forced - 1  # -1: the anchor
        if sampler.greedy:
            if logits is None:
                assert normed is not None
                argmax = self.model.head_argmax(normed)
            elif logits.is_cuda:  # the Triton kernel: one pass over the vocabulary per row
                d = torch.tensor(tree.tokens, dtype=torch.long, device=logits.device)
                argmax = verify_select(logits, d, check_drafts=False).argmax.tolist()
            else:  # its CPU fallback also computes softmax statistics greedy does not read
                argmax = cpu_rows.argmax(logits)
            while True:
                want = argmax[node + 1]
                node = next((c for c in kids[node] if tree.tokens[c] == want), -2)
                if node == -2:
                    return path, want
                path.append(node)
        # Recursive rejection sampling over each node's children (one-hot drafts): accept child
        # c with probability r(c), else remove c from r and renormalise; if none is accepted,
        # sample r. The committed token is distributed exactly as p, whatever the drafts.
        assert logits is not None
        p = sampler.probs(logits)  # (1 + nodes, V): exactly the distribution `ar` samples from
        while True:
            r = p[node + 1]
            for c in kids[node]:
                u = float(torch.rand((), generator=sampler.generator, device=r.device))
                if u < float(r[tree.tokens[c]]):
                    path.append(c)
                    node = c
                    break
                r = r.clone()
                r[tree.tokens[c]] = 0.0
                r = r / r.sum()  # > 0: c was rejected, so r(c) < 1
            else:
                return path, sampler.sample_probs(r)

    def verify(self, pre: list[int], anchor: int, tree: DraftTree) -> Verified:
        """One forward over pre + [anchor] + the tree's nodes (pre: prompt rows with no draft to
        check), then keep anchor + the accepted path in the cache, contiguous."""
        start = self.cache.length
        at = start + len(pre)  # the anchor's position
        rows = [*pre, anchor, *tree.tokens]
        positions = mask = None
        if not tree.is_chain():  # node j at at + depth(j), seeing the anchor and its ancestors
            t = len(rows)
            depths = [at + d for d in tree.depths]
            positions = torch.tensor([*range(start, at + 1), *depths], device=self.dev)  # (T,)
            mask = causal_mask(t, start, self.dev)
            mask[len(pre) + 1 :, at + 1 :] = tree.mask()  # (T, S + T), True = visible
        tap = tap_row(self.req, len(pre))
        first = len(pre) if tap is None else tap
        # greedy on a sketched head needs no logits for a lone row (no drafts to check), but
        # the tapped row's reader does; and the first answer token, as in `ar`, comes from the
        # logits: the model is often unsure there, where the sketch's pass is paid for nothing
        # (hybrid's prefill 1.33x llama.cpp's against 1.45x on the whole head, Gemma 3)
        lone = not pre and len(rows) - first <= cpu_rows.SKETCH_ROWS
        head = tap is not None or not (self.req.sketched and lone)
        logits, normed = self.forward_rows(rows, first, positions, mask, head)
        if tap is not None:
            assert logits is not None
            if self.req.on_tap is not None:
                self.req.on_tap(logits[0], normed[0])
            logits, normed = logits[len(pre) - tap :], normed[len(pre) - tap :]
        path, bonus = self.accept(logits, tree, normed)
        self.cache.move(at + 1, [at + 1 + j for j in path])
        self.cache.truncate(at + 1 + len(path))
        tokens = [tree.tokens[j] for j in path]
        return Verified(len(path), [*tokens, bonus], normed[path[-1] + 1 if path else 0])

    # --- 2. propose ---------------------------------------------------------------------------

    def commit(self, tokens: list[int]) -> None:
        if self.aligned:
            m = len(self.answer)
            self.aligned = self.old[m : m + len(tokens)] == tokens
        self.answer += tokens
        if self.lookup is not None:
            self.lookup.extend(tokens)

    def propose(self, pending: int, hidden: torch.Tensor, budget: int) -> DraftTree:
        """The draft tree for the positions after the pending token, at most `budget` deep
        (tokens still allowed before max_new_tokens); parallel: its forced nodes first."""
        cfg, m = self.req.cfg, len(self.answer)
        if self.aligned and m < len(self.old):
            drafts = self.old[m : m + min(cfg.refine_len, budget)]
            return DraftTree.chain(drafts, [0.0] * len(drafts))  # verified, never committed blind
        k = min(self.k, budget)
        chains = []
        context = self.req.prompt[-8:] + self.answer[-8:]  # for the n-gram store
        if k > 0:
            for source in (self.lookup, self.old_lookup):
                if source is not None:
                    chains.append(source.propose(k, None if source is self.lookup else self.answer))
            if self.ngram is not None:  # its chain and the runner-up forks off it
                chains += self.ngram.branches(context, k)
        chains = [c for c in chains if c[0]]
        sure = max((confs[0] for _, confs in chains), default=0.0) >= cfg.drafter_skip
        marginals: list[list[tuple[int, float]]] = []
        if self.drafter is not None and k > 0 and not sure:
            toks, probs = self.drafter.draft(
                self.model, self.cache, pending, hidden, cfg.draft_branch
            )
            marginals = [list(zip(t, q, strict=True)) for t, q in zip(toks, probs, strict=True)]
            if self.ngram is not None:  # each candidate next token, continued by the store
                for t, q in marginals[0]:
                    more, confs = self.ngram.propose([*context, t], k - 1)
                    if more:
                        chains.append(([t, *more], [q, *confs]))
        return build(
            marginals[:k], chains, max_nodes=k, max_depth=k,
            row_cost=batch_row_cost(self.row_cost, self.req.sharing()),
            stop_ids=self.req.stop_ids, threshold=self.threshold,
            first_row_cost=self.first_row_cost,
        )  # fmt: skip


def _decode(req: DecodeRequest, threshold: float) -> Steps:
    cfg = req.cfg
    drafter = drafter_for(req.model, drafts.resolve(cfg.drafter, cfg.path, "drafter"))
    store = ngram_for(req.model, drafts.resolve(cfg.ngram, cfg.path, "ngram"))
    st = HybridStepper(req, drafter, store, threshold)
    # Prompt rows beyond the last chunk: plain prefill, no logits (cancel checked per chunk).
    rest = req.prompt[req.cache.length :]
    while len(rest) > PREFILL_CHUNK:
        feed_rows(req, rest[:PREFILL_CHUNK], last=False)
        rest = rest[PREFILL_CHUNK:]
        yield []
    # First forward: the last prompt rows, the last one anchoring the earlier answer's tokens
    # as drafts when refining.
    pre, anchor = rest[:-1], rest[-1]
    first = st.old[: min(req.cfg.refine_len, req.max_new_tokens - 1)]
    tree = DraftTree.chain(first, [0.0] * len(first))
    produced = 0
    while True:
        v = st.verify(pre, anchor, tree)
        pre = []
        out = v.tokens[tree.forced :]
        st.commit(out)
        produced += len(out)
        budget = req.max_new_tokens - produced
        if budget <= 0 or v.tokens[-1] in req.stop_ids or any(t in req.stop_ids for t in out):
            yield out
            return
        anchor = v.tokens[-1]
        if threshold >= 1.0:  # hybrid: hand the tokens over before the drafter pass
            yield out
            out = []
        tree = st.propose(anchor, v.hidden, budget - 1)
        committed = tree.tokens[: tree.forced]
        if committed:  # parallel: committed now, written by the next forward like verified ones
            st.commit(committed)
            out = out + committed
            produced += len(committed)
        if threshold < 1.0:
            yield out
        if any(t in req.stop_ids for t in committed):
            return


def prepare(model: Transformer, cfg: LMConfig) -> None:
    """Load the drafter and n-gram store the config names (LM.load, before the first answer);
    say which were built for this model, and once where a model of the user's own has neither."""
    specs = {k: drafts.resolve(getattr(cfg, k), cfg.path, k) for k in ("drafter", "ngram")}
    drafter = drafter_for(model, specs["drafter"])
    store = ngram_for(model, specs["ngram"])
    built = [s for k, s in specs.items() if not getattr(cfg, k) and s not in ("", "none")]
    if built:
        log.info("lm: drafts built for this model: %s", ", ".join(built))
    missing = [name for name, have in (("drafter", drafter), ("n-gram store", store)) if not have]
    if cfg.path and missing:
        log.warning(
            "lm: %s has no %s: hybrid drafts without it, from prompt lookup%s (build them with "
            "python -m lab.drafts --model %s)",
            Path(cfg.path).name,
            " or ".join(missing),
            "" if len(missing) == 2 else " and the other",
            cfg.path,
        )


@register("hybrid", prepare)
def decode_hybrid(req: DecodeRequest) -> Steps:
    """Verified decoding: exactly the base model's tokens, several per forward."""
    return _decode(req, 1.0)


@register("parallel", prepare)
def decode_parallel(req: DecodeRequest) -> Steps:
    """Confident drafts committed without verification (lm.threshold); lossy."""
    return _decode(req, req.cfg.threshold)
