"""Design (a) pilot of the hybrid decoder: in-pass draft rows with a LoRA (TiDAR-like).

One base forward carries the verify rows (pending token + drafts; causal, base weights, written
to the KV cache) and, for each acceptance length j prepared for, a block of mask rows anchored at
verify row j: rows at positions p+j+1 .. p+j+R that see the cache, verify rows 0..j and each
other (bidirectional in the block), never written to the cache. Draft rows run the base's own
nn.Linear weights plus a LoRA delta (rank r, on wqkv, wo, w_gate_up, w_down of every layer) that
only they get; their input is a learned mask embedding + a learned per-offset embedding; their
head is the tied output embedding restricted to a draft vocabulary (as in design (b)).

Block geometry. The first block row sits at the bonus position p+j+1, whose token the verify row
j yields exactly in the same forward; the block cannot see it. So a block has R = K + 1 rows:
row 1 is trained on the bonus token (auxiliary) and rows 2..K+1 are the K drafts of the next
step, the same K = 4 drafts per step as design (b) (whose blocks are K + 1 rows as well).

Verify rows: one GEMM per projection runs all rows (one weight read per forward, the point of
this design); the LoRA is added to the draft rows' slice only; attention of the verify rows is
its own SDPA call over cache + verify rows, identical to Transformer.forward's. So the verify
logits and the cache do not depend on the draft rows or the adapter, bit for bit, and equal a
plain forward of the verify rows wherever the GEMM gives a row the same bits at any row count:
measured with the loader's oneDNN-prepacked weights from 2 verify rows on (a 1-row GEMM takes
another kernel: logits ~5e-5 apart, as ar's 1-row steps already are from hybrid's 5-row ones).

Training (`python -m lab.inpass train`): self-distilled records of gen_data.py,
one base forward per batch under no_grad for the context K/V of all layers, then many blocks per
record in one forward (block-diagonal + prefix mask), CE against the base's greedy tokens where
the greedy chain holds (train_drafter.targets_for). Evaluation (`eval`): the greedy hybrid decode
simulated along held-out greedy answers, as train_drafter.evaluate does for design (b).
`rowcost`: forward times of the step shapes, to turn tokens/step into speed vs ar. The command
line is __main__.py, beside this file.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from dllm_voice.model.drafter import read_adapter, write_adapter
from dllm_voice.model.errors import ModelLoadError
from dllm_voice.model.kv_cache import KVCache
from dllm_voice.model.layers import Block, apply_rope, attend, rms_norm
from dllm_voice.model.packing import linear, prepack
from dllm_voice.model.transformer import Transformer
from lab.gen_data import Record
from lab.train_drafter import targets_for

PROJECTIONS = ("wqkv", "wo", "w_gate_up", "w_down")


@dataclass(frozen=True)
class InPassArgs:
    rank: int = 32
    block: int = 4  # K drafts per step; a block has K + 1 rows (see the module docstring)
    vocab: int = 8192  # draft vocabulary size
    base_dim: int = 576
    base_layers: int = 30


class LoRA(nn.Module):
    def __init__(self, d_in: int, d_out: int, rank: int) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.randn(rank, d_in) / math.sqrt(d_in))
        self.b = nn.Parameter(torch.zeros(d_out, rank))  # zero: starts as the base exactly

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x, self.a), self.b)


class InPassAdapter(nn.Module):
    def __init__(self, base: Transformer, args: InPassArgs, vocab_ids: torch.Tensor) -> None:
        super().__init__()
        assert vocab_ids.shape == (args.vocab,), "vocab_ids must list args.vocab token ids"
        self.args = args
        self.lora = nn.ModuleList(
            nn.ModuleDict({n: LoRA(m.in_features, m.out_features, args.rank)
                           for n in PROJECTIONS for m in [_linear(blk, n)]})
            for blk in base.layers
        )  # fmt: skip
        self.mask_embed = nn.Parameter(base.embed.dense().detach().mean(0).clone())
        self.offset_embed = nn.Parameter(torch.zeros(args.block + 1, base.args.dim))
        self.register_buffer("vocab_ids", vocab_ids.long())
        self.head: torch.Tensor | None = None  # (V_d, dim) rows of the base's output embedding
        self.head_packed: torch.Tensor | None = None

    @classmethod
    def from_base(
        cls, base: Transformer, vocab_ids: torch.Tensor, *, rank: int = 32, block: int = 4
    ) -> InPassAdapter:
        a = base.args
        args = InPassArgs(rank, block, int(vocab_ids.numel()), a.dim, a.n_layers)
        w = base.embed.weight
        return cls(base, args, vocab_ids).to(device=w.device, dtype=w.dtype).bind(base)

    def bind(self, base: Transformer) -> InPassAdapter:
        if (base.args.dim, base.args.n_layers) != (self.args.base_dim, self.args.base_layers):
            raise ModelLoadError(
                f"in-pass adapter was trained for a base with dim={self.args.base_dim}, "
                f"layers={self.args.base_layers}; the loaded model has {base.args.dim}, "
                f"{base.args.n_layers}: retrain it with python -m lab.inpass train"
            )
        self.head = base.head_matrix.rows(self.vocab_ids).detach()
        self.head_packed = prepack(self.head)  # CPU inference: see model/packing.py
        return self

    def block_inputs(self, rows: int) -> torch.Tensor:
        """(R, dim): the mask embedding + the offset embedding of block rows 1..R."""
        return self.mask_embed + self.offset_embed[:rows]

    def save(self, path: str | Path, info: dict | None = None) -> None:
        tensors = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        write_adapter(path, tensors, self.args, info)

    @classmethod
    def load(cls, path: str | Path, base: Transformer) -> InPassAdapter:
        args, tensors, _ = read_adapter(
            path,
            InPassArgs,
            "an in-pass adapter",
            "train one with python -m lab.inpass train",
        )
        ad = cls(base, args, tensors["vocab_ids"].long())
        ad.load_state_dict(tensors, strict=True)
        w = base.embed.weight
        return ad.to(device=w.device, dtype=w.dtype).eval().requires_grad_(False).bind(base)


def _linear(blk: Block, name: str) -> nn.Linear:
    return getattr(blk.attn, name) if name in ("wqkv", "wo") else getattr(blk.mlp, name)


def _proj(lin: nn.Linear, lora: LoRA, x: torch.Tensor, tv: int) -> torch.Tensor:
    """Base projection of all rows (one GEMM) + the LoRA delta on the draft rows (tv..)."""
    y = lin(x)  # (B, T, out)
    if tv == x.shape[1]:
        return y
    return torch.cat((y[:, :tv], y[:, tv:] + lora(x[:, tv:])), dim=1)


def _layer(
    blk: Block, lora: nn.ModuleDict, x: torch.Tensor, tv: int, rope: tuple[torch.Tensor, ...],
    cache: KVCache, i: int, verify_mask: torch.Tensor | None, draft_mask: torch.Tensor | None,
) -> torch.Tensor:  # fmt: skip
    """One base block over verify rows x[:, :tv] (written to the cache) + draft rows x[:, tv:]."""
    at = blk.attn
    bsz, t, _ = x.shape
    h, hkv, d = at.n_heads, at.n_kv_heads, at.head_dim
    qkv = _proj(at.wqkv, lora["wqkv"], rms_norm(x, blk.attn_norm, blk.eps), tv)
    qk = apply_rope(qkv[..., : (h + hkv) * d].view(bsz, t, h + hkv, d), *rope)  # (B, T, H+Hkv, D)
    q = qk[:, :, :h]  # (B, T, H, D)
    k = qk[:, :, h:].transpose(1, 2)  # (B, Hkv, T, D)
    v = qkv[..., (h + hkv) * d :].view(bsz, t, hkv, d).transpose(1, 2)  # (B, Hkv, T, D)
    s = cache.length
    ys = []
    if tv:  # exactly Transformer.forward's attention for these rows
        cache.write(i, k[:, :, :tv], v[:, :, :tv])
        keys, values = cache.view(i, s + tv)  # (B, Hkv, S + Tv, D)
        ys.append(attend(q[:, :tv], keys, values, verify_mask, verify_mask is None and tv > 1))
    else:
        keys, values = cache.view(i, s)
    if t > tv:
        keys = torch.cat((keys, k[:, :, tv:]), dim=2)  # (B, Hkv, S + T, D)
        values = torch.cat((values, v[:, :, tv:]), dim=2)
        ys.append(attend(q[:, tv:], keys, values, draft_mask, False))
    y = ys[0] if len(ys) == 1 else torch.cat(ys, dim=1)  # (B, T, H * D)
    x = x + _proj(at.wo, lora["wo"], y, tv)
    gate, up = _proj(
        blk.mlp.w_gate_up, lora["w_gate_up"], rms_norm(x, blk.mlp_norm, blk.eps), tv
    ).split(blk.mlp.ffn_dim, dim=-1)  # 2 x (B, T, F)
    return x + _proj(blk.mlp.w_down, lora["w_down"], F.silu(gate) * up, tv)


def rows_forward(
    base: Transformer, adapter: InPassAdapter, cache: KVCache, x: torch.Tensor, tv: int,
    positions: torch.Tensor, draft_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """x (B, T, dim): tv verify rows (input embeddings) then draft rows; positions (T,) or
    (B, T); draft_mask bool (B or 1, Td, S + T) over cache + all rows. Writes the verify rows to
    the cache. Returns final normed hidden (B, Tv, dim) and (B, Td, dim)."""
    s = cache.length
    cache.check_room(tv)
    base._ensure_rope(int(positions.max()) + 1)
    pos = positions.view(-1, x.shape[1])  # (B or 1, T)
    rope = (base.rope_cos[pos].unsqueeze(2), base.rope_sin[pos].unsqueeze(2))  # (B|1, T, 1, D)
    verify_mask = None  # Transformer.forward's choice: none for 1 row or a fresh prefill
    if tv > 1 and s > 0:
        verify_mask = torch.ones(tv, s + tv, dtype=torch.bool, device=x.device).tril(s)
    if draft_mask is not None:  # additive float mask, converted once instead of per layer
        draft_mask = torch.zeros(draft_mask.shape, dtype=x.dtype, device=x.device).masked_fill(
            ~draft_mask, float("-inf")
        )
        draft_mask = draft_mask.unsqueeze(1) if draft_mask.dim() == 3 else draft_mask
    for i, blk in enumerate(base.layers):
        x = _layer(blk, adapter.lora[i], x, tv, rope, cache, i, verify_mask, draft_mask)
    cache.length = s + tv
    normed = rms_norm(x, base.norm, base.args.norm_eps)  # (B, T, dim)
    return normed[:, :tv], normed[:, tv:]


class InPassOut(NamedTuple):
    verify_logits: torch.Tensor  # (1, Tv, vocab) float32, base weights only
    draft_logits: torch.Tensor  # (1, J, R, V_d) float32; block j row r -> position p+j+1+r


@torch.no_grad()
def inpass_forward(
    base: Transformer, adapter: InPassAdapter, cache: KVCache, verify_ids: torch.Tensor,
    accept: Sequence[int], rows: int = 0,
) -> InPassOut:  # fmt: skip
    """One decode step: verify_ids (1, Tv) at positions S.. (written to the cache) + one block of
    `rows` (default K + 1) mask rows per acceptance length j in `accept` (0 <= j < Tv)."""
    rows = rows or adapter.args.block + 1
    s, tv, dev = cache.length, verify_ids.shape[1], verify_ids.device
    assert all(0 <= j < tv for j in accept), "acceptance lengths must index verify rows"
    anchors = torch.tensor(list(accept), dtype=torch.long, device=dev) + s  # (J,) last seen
    xd = adapter.block_inputs(rows).repeat(len(accept), 1)  # (J * R, dim)
    x = torch.cat((base.embed(verify_ids), xd[None].to(base.embed.weight.dtype)), dim=1)
    draft_pos = (anchors[:, None] + torch.arange(1, rows + 1, device=dev)).flatten()  # (J * R,)
    positions = torch.cat((torch.arange(s, s + tv, device=dev), draft_pos))
    mask = _block_mask(anchors, rows, s + tv)  # (J * R, S + Tv + J * R)
    hv, hd = rows_forward(base, adapter, cache, x, tv, positions, mask)
    vl = base.head(hv)
    dl = linear(hd, adapter.head, adapter.head_packed).float()
    return InPassOut(vl, dl.view(1, len(accept), rows, len(adapter.vocab_ids)))


def _block_mask(anchors: torch.Tensor, rows: int, n_ctx: int) -> torch.Tensor:
    """Bool (..., M * R, n_ctx + M * R) for blocks anchored at anchors (..., M): a row sees
    context columns <= its anchor and the rows of its own block."""
    a = anchors.repeat_interleave(rows, dim=-1)  # (..., M * R)
    ctx = torch.arange(n_ctx, device=a.device) <= a[..., None]  # (..., M * R, n_ctx)
    blk = torch.arange(anchors.shape[-1], device=a.device).repeat_interleave(rows)  # (M * R,)
    own = (blk[:, None] == blk[None, :]).expand(*ctx.shape[:-1], -1)  # (..., M * R, M * R)
    return torch.cat((ctx, own), dim=-1)


# --- training -------------------------------------------------------------------------------


def block_logits(
    adapter: InPassAdapter, base: Transformer, recs: list[Record], anchors: list[list[int]],
    rows: int = 0,
) -> torch.Tensor:  # fmt: skip
    """Draft logits (B, M, R, V_d) of blocks anchored at anchors[b] (M each) in recs[b]; the
    context K/V of every layer comes from one base forward under no_grad."""
    rows = rows or adapter.args.block + 1
    dev = base.embed.weight.device
    n = max(len(r["ids"]) for r in recs)
    ids = torch.zeros(len(recs), n, dtype=torch.long, device=dev)
    for b, r in enumerate(recs):
        ids[b, : len(r["ids"])] = r["ids"].long()
    cache = base.new_cache(n, batch=len(recs))
    with torch.no_grad():
        base(ids, cache=cache, logits="none")  # causal: right padding is never seen
    an = torch.tensor(anchors, device=dev)  # (B, M)
    bsz, m = an.shape
    pos = (an[..., None] + torch.arange(1, rows + 1, device=dev)).view(bsz, m * rows)  # (B, Q)
    x = adapter.block_inputs(rows).repeat(m, 1).expand(bsz, -1, -1)  # (B, Q, dim)
    _, hd = rows_forward(base, adapter, cache, x, 0, pos, _block_mask(an, rows, n))
    return linear(hd, adapter.head, adapter.head_packed).float().view(bsz, m, rows, -1)


def train_step(
    adapter: InPassAdapter, base: Transformer, opt: torch.optim.Optimizer, recs: list[Record],
    anchors: list[list[int]], to_vocab: torch.Tensor,
) -> tuple[float, int, int]:  # fmt: skip
    """One optimizer step; (loss, supervised rows, supervised draft rows i.e. rows 2..K+1)."""
    r = adapter.args.block + 1
    tgt = torch.stack(
        [targets_for(rec, a, r, to_vocab) for rec, a in zip(recs, anchors, strict=True)]
    )
    for b, a in enumerate(anchors):  # padded duplicate anchors: no loss
        tgt[b, len(set(a)) :] = -100
    tgt = tgt.to(base.embed.weight.device)  # (B, M, R)
    logits = block_logits(adapter, base, recs, anchors)  # (B, M, R, V_d)
    loss = F.cross_entropy(logits.flatten(0, 2), tgt.flatten(), ignore_index=-100)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(adapter.parameters(), 1.0)
    opt.step()
    ok = tgt != -100
    return loss.item(), int(ok.sum()), int(ok[..., 1:].sum())


def sample_anchors(rec: Record, m: int, rng: random.Random) -> list[int]:
    """m distinct block anchors p-1 .. n-2 (the last prompt row first predicts the answer),
    padded with repeats of the first when the answer is short."""
    p, n = int(rec["prompt_len"]), len(rec["ids"])
    a = rng.sample(range(p - 1, n - 1), min(m, n - p))
    return a + [a[0]] * (m - len(a))


# --- evaluation -----------------------------------------------------------------------------


def simulate(
    pred: torch.Tensor, ids: list[int], p: int, prepared: Sequence[int] | None = None
) -> tuple[int, int]:
    """Greedy hybrid decode along a greedy answer ids[p:] -> (forwards, tokens committed).

    pred (A, R): block predictions for anchors p-1 .. p+A-2, row r at position anchor+1+r.
    The pending token q (the bonus of the last forward) is verified with the drafts its
    block offers for q+1..; `prepared` = acceptance lengths with a block (None = all): after
    accepting a drafts the next block is the one of max{j <= a}, anchored at q + j."""
    assert pred.shape[1] > 1 and (prepared is None or 0 in prepared), "rows past the bonus"
    n = len(ids)
    q, anchor, forwards, committed = p, p - 1, 0, 0
    while q < n - 1:
        drafts = pred[anchor - (p - 1), q - anchor :].tolist()  # positions q+1 .. anchor+R
        a = 0
        while a < len(drafts) and q + 1 + a < n and drafts[a] == ids[q + 1 + a]:
            a += 1
        forwards, committed = forwards + 1, committed + min(a + 1, n - 1 - q)
        j = a if prepared is None else max(x for x in prepared if x <= a)
        anchor, q = q + j, q + a + 1
    return forwards, committed


@torch.no_grad()
def evaluate(
    adapter: InPassAdapter, base: Transformer, recs: list[Record], rows: int = 0,
    subsets: Sequence[Sequence[int]] = ((0, 4),),
) -> dict[str, float]:  # fmt: skip
    """tokens/step of the simulated decode (all acceptance lengths prepared, and each subset),
    acc0 = block row 1 at the bonus position, acc_i = first i drafts right (i = 1..K)."""
    rows = rows or adapter.args.block + 1
    k = rows - 1
    tot = {"all": [0, 0], **{",".join(map(str, s)): [0, 0] for s in subsets}}
    hits, n_q = torch.zeros(rows), 0
    for r in recs:
        ids, p = r["ids"].tolist(), int(r["prompt_len"])
        n = len(ids)
        if n - p < 2:
            continue
        logits = block_logits(adapter, base, [r], [list(range(p - 1, n - 1))], rows)[0]
        pred = adapter.vocab_ids[logits.argmax(-1)].cpu()  # (A, R) token ids
        for key, sub in [("all", None), *((",".join(map(str, s)), s) for s in subsets)]:
            f, c = simulate(pred, ids, p, sub)
            tot[key][0] += f
            tot[key][1] += c
        truth = torch.full((n - p, rows), -1, dtype=torch.long)  # (A, R) ids at anchor+1+r
        for a in range(n - p):
            seg = ids[p + a : p + a + rows]
            truth[a, : len(seg)] = torch.tensor(seg)
        ok = pred == truth
        hits[0] += ok[:-1, 0].sum()  # row 1 vs the bonus token q (exact from verify row q-1)
        hits[1:] += ok[:-1, 1:].long().cumprod(1).sum(0)  # pending q = anchor+1 in p..n-2
        n_q += n - 1 - p
    out = {f"tokens_per_step{'' if key == 'all' else '_' + key}": v[1] / max(v[0], 1)
           for key, v in tot.items()}  # fmt: skip
    for i in range(k + 1):
        out[f"acc{i}"] = float(hits[i]) / max(n_q, 1)
    return out
