"""N-gram store: free drafts from what the base model itself said before (REST-like retrieval).

The self-distilled data of model/gen_data.py holds, at every answer position, the base's greedy
next token given the tokens before it. Counted by the last 1..4 tokens, that is an n-gram model
of the base's own habits ("Here are some", "I'm sorry, but"). At decode time the longest
context n-gram seen at least twice proposes its most frequent next token, with confidence
count / (total + 1); appending that token and looking again gives a chain of up to k drafts
for the draft tree (model/tree.py), like prompt lookup but over everything the base answered
in training. The context's runner-up next token (`alternative`), continued the same way, forks
the chain at each of its first FORKS positions (`branches`); the tree keeps a fork where it pays
for its row (BENCHMARKS.md, sessions 9 and 10). Cost: a few dictionary lookups per step, no
model pass.

Measured on 40 held-out answers (64 tokens, 227K training tokens in the store): the next token
is right 39 % of the time (the 2-layer drafter: 38 %), the first two 18 % (drafter 13 %), the
first four 5 % (drafter 1 %) - it is autoregressive, the drafter's block is not (BENCHMARKS.md).

Built by `python -m model.ngram --data data/drafter[,more] --out model/adapters/ngram.safetensors`
from the training answers only (held-out ones never enter it). File: per order n, the context
n-grams ((N_n, n)), their most frequent next token and its confidence (fp16), the runner-up and
its confidence (NO_ALT where the context was always followed by the same token); token ids in
uint16 (stores written before session 9 hold int32 and no runner-ups; both load).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from model.drafter import resolve_file
from model.errors import ModelLoadError

DEFAULT_STORE = Path(__file__).parent / "adapters" / "ngram.safetensors"
MAX_ORDER = 4
ID_BITS = 16  # token ids packed into one 64-bit key per context (vocab 49152 < 2^16)
MIN_TOTAL = 2  # a context seen once is a coincidence more often than a habit
NO_ALT = (1 << ID_BITS) - 1  # in the file: this context has no runner-up (no token id: vocab < it)
FORKS = 4  # `branches`: runner-ups at the first FORKS positions of the chain (more add ~nothing)
ID_MASK = (1 << ID_BITS) - 1
MASKS = [(1 << ID_BITS * n) - 1 for n in range(MAX_ORDER + 1)]  # the last n ids of a packed key
CONF_ONE = (1 << 16) - 1  # a confidence in the table: round(conf * CONF_ONE), above the token id


def _ids(values: list) -> torch.Tensor:
    """Token ids for the file: uint16, half of int32 (build checked they fit in ID_BITS)."""
    return torch.tensor(values, dtype=torch.int32).to(torch.uint16)


def _pack(ids: np.ndarray) -> np.ndarray:
    """(N, n) token ids -> N context keys: the ids in ID_BITS each, the first one highest."""
    key = np.zeros(len(ids), dtype=np.uint64)
    for j in range(ids.shape[1]):
        key = (key << np.uint64(ID_BITS)) | ids[:, j].astype(np.uint64)
    return key


def _values(tokens: np.ndarray, confs: np.ndarray) -> list[int]:
    return (
        tokens.astype(np.int64) | np.rint(confs * CONF_ONE).astype(np.int64) << ID_BITS
    ).tolist()


Entry = tuple[int, float]  # (next token, confidence)


class PackedTable(Mapping[tuple[int, ...], Entry]):
    """Context n-gram -> (next token, confidence), held per order n as a dict from the context's
    ids packed into one int to the token and its confidence packed into another: ~100 bytes an
    entry instead of ~300 with tuples (a 1.5M-token store: 96 MB of memory instead of 217)."""

    def __init__(self) -> None:
        self.orders: list[dict[int, int]] = [{} for _ in range(MAX_ORDER + 1)]

    @staticmethod
    def key(ctx: Sequence[int]) -> int:
        key = 0
        for t in ctx:
            key = key << ID_BITS | t
        return key

    @staticmethod
    def entry(value: int) -> Entry:
        return value & ID_MASK, (value >> ID_BITS) / CONF_ONE

    def __getitem__(self, ctx: Sequence[int]) -> Entry:
        if not 1 <= len(ctx) <= MAX_ORDER:
            raise KeyError(ctx)
        return self.entry(self.orders[len(ctx)][self.key(ctx)])

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        for n, table in enumerate(self.orders):
            for key in table:
                yield tuple(key >> ID_BITS * (n - 1 - j) & ID_MASK for j in range(n))

    def __len__(self) -> int:
        return sum(map(len, self.orders))


class NgramStore:
    def __init__(self, table: PackedTable, info: dict, alts: PackedTable | None = None) -> None:
        self.table = table  # context n-gram -> its most frequent next token
        self.alts = alts or PackedTable()  # -> its second most frequent, where it has one
        self.info = info
        self.max_order = max((n for n, t in enumerate(table.orders) if t), default=0)

    @classmethod
    def build(cls, sequences: Iterable[tuple[Sequence[int], int, Sequence[int]]]) -> NgramStore:
        """From (ids, prompt_len, greedy) records: greedy[i] is the base's next token after
        ids[:prompt_len + i]. Counted in numpy (1.1M tokens: 5 s; 22 s with Counters): per
        order n, every (context, next) pair, its context packed into one integer, sorted and
        run-length counted; each context keeps its most frequent next token and the runner-up,
        a tie going to the one seen first (as Counter.most_common would)."""
        ids, ends, nxt, firsts = [], [], [], []
        offset = 0
        for seq, plen, greedy in sequences:
            ids.append(np.asarray(seq, dtype=np.int64))
            ends.append(offset + plen + np.arange(len(greedy)))
            nxt.append(np.asarray(greedy, dtype=np.int64))
            firsts.append(np.full(len(greedy), offset))  # the record's first position
            offset += len(seq)
        table, alts = PackedTable(), PackedTable()
        if not ids:
            return cls(table, {"tokens": 0, "contexts": 0, "max_order": MAX_ORDER}, alts)
        flat, end, nxt_all = np.concatenate(ids), np.concatenate(ends), np.concatenate(nxt)
        starts = np.concatenate(firsts)
        if flat.size and flat.max() >= 1 << ID_BITS:
            raise ValueError(f"n-gram contexts pack token ids in {ID_BITS} bits")
        for n in range(1, MAX_ORDER + 1):
            ok = end - n >= starts  # the context lies within its own record
            e, x, first = end[ok], nxt_all[ok], np.flatnonzero(ok)
            key = _pack(flat[e[:, None] - n + np.arange(n)])
            o = np.lexsort((first, x, key))  # by context, next token, first sighting
            key, x, first = key[o], x[o], first[o]
            new = np.r_[True, (key[1:] != key[:-1]) | (x[1:] != x[:-1])]
            pair = np.flatnonzero(new)
            count = np.diff(np.r_[pair, len(key)])
            key, x, first = key[pair], x[pair], first[pair]
            ctx = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
            size = np.diff(np.r_[ctx, len(key)])  # distinct next tokens per context
            total = np.add.reduceat(count, ctx)
            ranked = np.lexsort((first, -count, key))  # per context: most often, then first
            keep = total >= MIN_TOTAL
            ctx, size, total = ctx[keep], size[keep], total[keep]
            for rank, into in ((0, table), (1, alts)):
                has = size > rank
                pick = ranked[ctx[has] + rank]
                conf = count[pick] / (total[has] + 1)
                into.orders[n] = dict(zip(key[pick].tolist(), _values(x[pick], conf), strict=True))
        info = {"tokens": len(nxt_all), "contexts": len(table), "max_order": MAX_ORDER}
        return cls(table, info, alts)

    def _tail(self, context: Sequence[int]) -> tuple[int, int]:
        """The last max_order ids of `context` as one key, and how many they are."""
        n = min(self.max_order, len(context))
        return PackedTable.key(context[len(context) - n :]), n

    def propose(self, context: Sequence[int], k: int) -> tuple[list[int], list[float]]:
        """Up to k drafts continuing `context` (the prompt + answer so far), with confidences."""
        orders, top = self.table.orders, self.max_order
        key, m = self._tail(context)
        out: list[int] = []
        confs: list[float] = []
        while len(out) < k:
            for n in range(m, 0, -1):
                hit = orders[n].get(key & MASKS[n])
                if hit is not None:
                    token, conf = PackedTable.entry(hit)
                    out.append(token)
                    confs.append(conf)
                    key, m = (key << ID_BITS | token) & MASKS[top], min(m + 1, top)
                    break
            else:
                break
        return out, confs

    def alternative(self, context: Sequence[int]) -> Entry | None:
        """The runner-up next token (and its confidence) of the longest known context n-gram
        `propose` would start from, where that context was followed by more than one token:
        the first node of a second branch for the draft tree."""
        key, m = self._tail(context)
        for n in range(m, 0, -1):
            ctx = key & MASKS[n]
            if ctx in self.table.orders[n]:
                hit = self.alts.orders[n].get(ctx)
                return None if hit is None else PackedTable.entry(hit)
        return None

    def branches(
        self, context: Sequence[int], k: int, forks: int = FORKS
    ) -> list[tuple[list[int], list[float]]]:
        """The store's guesses as chains for the draft tree: `propose`'s chain, and at each of
        its first `forks` positions the runner-up token there, continued by the store. A fork's
        chain repeats the main chain's tokens before it, which the tree merges into one path."""
        toks, confs = self.propose(context, k)
        out = [(toks, confs)]
        for d in range(min(forks, len(toks))):
            path = [*context, *toks[:d]]
            alt = self.alternative(path)
            if alt is not None:
                more, more_confs = self.propose([*path, alt[0]], k - d - 1)
                out.append(([*toks[:d], alt[0], *more], [*confs[:d], alt[1], *more_confs]))
        return out

    # --- file -------------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        tensors = {}
        for n in range(1, self.max_order + 1):
            table, alts = self.table.orders[n], self.alts.orders[n]
            if not table:
                continue
            keys = np.array(list(table), dtype=np.uint64)
            shifts = np.uint64(ID_BITS) * np.arange(n - 1, -1, -1, dtype=np.uint64)
            ctx = (keys[:, None] >> shifts) & np.uint64(ID_MASK)
            for name, values in (
                ("", list(table.values())),
                ("alt", [alts.get(k, -1) for k in table]),
            ):
                v = np.array(values, dtype=np.int64)
                tokens = np.where(v < 0, NO_ALT, v & ID_MASK)
                confs = np.where(v < 0, 0, v >> ID_BITS) / CONF_ONE
                tensors[f"{name or 'next'}{n}"] = _ids(tokens.tolist())
                tensors[f"{name}conf{n}"] = torch.tensor(confs, dtype=torch.float16)
            tensors[f"ctx{n}"] = _ids(ctx.astype(np.int64).tolist())
        save_file(tensors, str(path), metadata={"info": json.dumps(self.info)})

    @classmethod
    def load(cls, path: str | Path, vocab_size: int) -> NgramStore:
        try:
            with safe_open(str(path), "pt") as f:
                info = json.loads((f.metadata() or {})["info"])
            tensors = load_file(str(path))
        except (OSError, KeyError, ValueError, SafetensorError) as e:
            raise ModelLoadError(
                f"{path}: not an n-gram store ({type(e).__name__}: {e}); rebuild it with "
                "python -m model.ngram or set lm.ngram: none"
            ) from e
        table, alts = PackedTable(), PackedTable()
        for n in range(1, MAX_ORDER + 1):
            if f"ctx{n}" not in tensors:
                continue
            ctx, nxt = tensors[f"ctx{n}"].int(), tensors[f"next{n}"].int()  # uint16 / int32
            # Stores written before runner-ups were kept have no alt tensors.
            alt = tensors.get(f"alt{n}", torch.full_like(nxt, NO_ALT)).int()
            has_alt = alt != NO_ALT
            top = max(int(ctx.max()), int(nxt.max()), int(torch.where(has_alt, alt, 0).max()))
            if top >= vocab_size:
                raise ModelLoadError(
                    f"{path}: token ids beyond this model's vocabulary ({vocab_size}); it was "
                    "built for another tokenizer - rebuild it or set lm.ngram: none"
                )
            keys = _pack(ctx.numpy())
            confs = tensors[f"conf{n}"].float().numpy()
            table.orders[n] = dict(zip(keys.tolist(), _values(nxt.numpy(), confs), strict=True))
            h = has_alt.numpy()
            alt_confs = tensors.get(f"altconf{n}", torch.zeros(len(alt))).float().numpy()[h]
            alt_values = _values(alt.numpy()[h], alt_confs)
            alts.orders[n] = dict(zip(keys[h].tolist(), alt_values, strict=True))
        return cls(table, info, alts)


def load_default(spec: str, vocab_size: int) -> NgramStore | None:
    """lm.ngram: '' = the bundled store if present, 'none' = no store, else a path."""
    path = resolve_file(spec, DEFAULT_STORE, "lm.ngram")
    return None if path is None else NgramStore.load(path, vocab_size)


def main(argv: list[str] | None = None) -> None:
    from model.train_drafter import load_records

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default="data/drafter", help="gen_data folder(s), comma-separated")
    ap.add_argument("--out", default=str(DEFAULT_STORE))
    a = ap.parse_args(argv)
    recs = [r for r in load_records(a.data, set()) if not r["heldout"]]
    if not recs:
        raise SystemExit(f"{a.data}: no generated training answers; run model.gen_data first")
    store = NgramStore.build(
        (r["ids"].numpy(), int(r["prompt_len"]), r["greedy"].numpy()) for r in recs
    )
    store.info["answers"] = len(recs)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    store.save(a.out)
    print(json.dumps({**store.info, "bytes": Path(a.out).stat().st_size}))


if __name__ == "__main__":
    main()
