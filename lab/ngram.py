"""Build the n-gram store (model/ngram.py reads it) from gen_data's training answers.

Every answer position of the self-distilled data holds the base's greedy next token given the
tokens before it; counted by the last 1..MAX_ORDER tokens, each context seen at least MIN_TOTAL
times keeps its most frequent next token and its runner-up. Held-out answers never enter it.

    .venv/bin/python -m lab.ngram --data data/drafter,data/bulk,data/bulk_more

writes model/adapters/ngram.safetensors (--out to write elsewhere); seconds on a CPU.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from dllm_voice.model.ngram import (
    CONF_ONE,
    DEFAULT_STORE,
    ID_BITS,
    ID_MASK,
    MAX_IDS,
    MAX_ORDER,
    NO_ALT,
    UNSEEN,
    NgramStore,
    PackedTable,
    pack_entries,
    pack_keys,
)
from lab.gen_data import load_records

MIN_TOTAL = 2  # a context seen once is a coincidence more often than a habit


def _ids(values: list) -> torch.Tensor:
    """Token ids for the file: uint16, half of int32 (store ids: they fit in ID_BITS)."""
    return torch.tensor(values, dtype=torch.int32).to(torch.uint16)


def build(sequences: Iterable[tuple[Sequence[int], int, Sequence[int]]]) -> NgramStore:
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
        return NgramStore(table, {"tokens": 0, "contexts": 0, "max_order": MAX_ORDER}, alts)
    flat, end, nxt_all = np.concatenate(ids), np.concatenate(ends), np.concatenate(nxt)
    starts = np.concatenate(firsts)
    vocab = None
    if max(flat.max(), nxt_all.max()) >= MAX_IDS:
        vocab, flat, nxt_all = store_ids(flat, nxt_all)
    for n in range(1, MAX_ORDER + 1):
        ok = end - n >= starts  # the context lies within its own record
        e, x, first = end[ok], nxt_all[ok], np.flatnonzero(ok)
        ctx_ids = flat[e[:, None] - n + np.arange(n)]
        if vocab is not None:  # n-grams with a token outside the table are left out
            known = (ctx_ids != UNSEEN).all(1) & (x != UNSEEN)
            ctx_ids, x, first = ctx_ids[known], x[known], first[known]
        if not len(x):
            continue
        key = pack_keys(ctx_ids)
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
            into.orders[n] = dict(zip(key[pick].tolist(), pack_entries(x[pick], conf), strict=True))
    info = {"tokens": len(nxt_all), "contexts": len(table), "max_order": MAX_ORDER}
    return NgramStore(table, info, alts, None if vocab is None else vocab.tolist())


def store_ids(flat: np.ndarray, nxt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a vocabulary past ID_BITS: the table of the MAX_IDS most frequent token ids of the
    records (sorted), and the records' tokens and next tokens as indexes into it (UNSEEN for
    the rest)."""
    tokens, counts = np.unique(np.concatenate((flat, nxt)), return_counts=True)
    vocab = np.sort(tokens[np.argsort(-counts, kind="stable")[:MAX_IDS]])
    index = np.full(int(tokens.max()) + 1, UNSEEN, dtype=np.int64)
    index[vocab] = np.arange(len(vocab))
    return vocab, index[flat], index[nxt]


def save(store: NgramStore, path: str | Path) -> None:
    tensors = {}
    for n in range(1, store.max_order + 1):
        table, alts = store.table.orders[n], store.alts.orders[n]
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
    if store.vocab is not None:
        tensors["vocab"] = torch.tensor(store.vocab, dtype=torch.int32)
    save_file(tensors, str(path), metadata={"info": json.dumps(store.info)})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default="data/drafter", help="gen_data folder(s), comma-separated")
    ap.add_argument("--out", default=str(DEFAULT_STORE))
    a = ap.parse_args(argv)
    recs = [r for r in load_records(a.data, set()) if not r["heldout"]]
    if not recs:
        raise SystemExit(f"{a.data}: no generated training answers; run python -m lab.gen_data")
    store = build((r["ids"].numpy(), int(r["prompt_len"]), r["greedy"].numpy()) for r in recs)
    store.info["answers"] = len(recs)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    save(store, a.out)
    print(json.dumps({**store.info, "bytes": Path(a.out).stat().st_size}))


if __name__ == "__main__":
    main()
