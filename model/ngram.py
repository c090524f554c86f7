"""N-gram store: free drafts from what the base model itself said before (REST-like retrieval).

The store maps the last 1..4 tokens of the base's own self-distilled training answers to the
base's greedy next token there, an n-gram model of its habits ("Here are some", "I'm sorry,
but"). At decode time the longest context n-gram seen at least twice proposes its most frequent
next token, with confidence count / (total + 1); appending that token and looking again gives a
chain of up to k drafts for the draft tree (model/tree.py), like prompt lookup but over
everything the base answered in training. The context's runner-up next token (`alternative`),
continued the same way, forks the chain at each of its first FORKS positions (`branches`); the
tree keeps a fork where it pays for its row. Cost: a few dictionary lookups per step, no model
pass; on held-out answers its next token is right about as often as the drafter's (39 % vs
38 %, BENCHMARKS.md).

This module reads the store; lab/ngram.py builds and writes it. File: per order n,
the context n-grams ((N_n, n)), their most frequent next token and its confidence (fp16), the
runner-up and its confidence (NO_ALT where the context was always followed by the same token);
token ids in uint16 (older stores hold int32 and no runner-ups; both load). A model whose
vocabulary does not fit 16 bits (Gemma 3: 262K ids) gets a `vocab` table: the store's ids are
indexes into it, the answers' most frequent tokens, and a context holding another token falls
back to its shorter n-grams.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from dllm_voice.model.drafter import resolve_file
from dllm_voice.model.errors import ModelLoadError

DEFAULT_STORE = Path(__file__).parent / "adapters" / "ngram.safetensors"
MAX_ORDER = 4
ID_BITS = 16  # token ids packed into one 64-bit key per context (vocab 49152 < 2^16)
NO_ALT = (1 << ID_BITS) - 1  # in the file: this context has no runner-up (no token id: vocab < it)
UNSEEN = NO_ALT - 1  # a token outside a `vocab` table: in no stored context
MAX_IDS = UNSEEN  # ids a store holds; a larger vocabulary is mapped through a `vocab` table
FORKS = 4  # `branches`: runner-ups at the first FORKS positions of the chain (more add ~nothing)
ID_MASK = (1 << ID_BITS) - 1
MASKS = [(1 << ID_BITS * n) - 1 for n in range(MAX_ORDER + 1)]  # the last n ids of a packed key
CONF_ONE = (1 << 16) - 1  # a confidence in the table: round(conf * CONF_ONE), above the token id


def pack_keys(ids: np.ndarray) -> np.ndarray:
    """(N, n) token ids -> N context keys: the ids in ID_BITS each, the first one highest."""
    key = np.zeros(len(ids), dtype=np.uint64)
    for j in range(ids.shape[1]):
        key = (key << np.uint64(ID_BITS)) | ids[:, j].astype(np.uint64)
    return key


def pack_entries(tokens: np.ndarray, confs: np.ndarray) -> list[int]:
    """Next tokens and their confidences -> one int each, as PackedTable holds them."""
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
    def __init__(
        self,
        table: PackedTable,
        info: dict,
        alts: PackedTable | None = None,
        vocab: Sequence[int] | None = None,
    ) -> None:
        self.table = table  # context n-gram -> its most frequent next token
        self.alts = alts or PackedTable()  # -> its second most frequent, where it has one
        self.info = info
        self.max_order = max((n for n, t in enumerate(table.orders) if t), default=0)
        # The model's token id of each store id, where the vocabulary does not fit ID_BITS.
        self.vocab = None if vocab is None else list(vocab)
        self._index = None if vocab is None else {t: i for i, t in enumerate(vocab)}

    def _tail(self, context: Sequence[int]) -> tuple[int, int]:
        """The last max_order ids of `context` as one key (store ids), and how many they are."""
        n = min(self.max_order, len(context))
        tail = context[len(context) - n :]
        if self._index is not None:
            tail = [self._index.get(t, UNSEEN) for t in tail]
        return PackedTable.key(tail), n

    def _token(self, store_id: int) -> int:
        return store_id if self.vocab is None else self.vocab[store_id]

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
                    out.append(self._token(token))
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
                if hit is None:
                    return None
                token, conf = PackedTable.entry(hit)
                return self._token(token), conf
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

    @classmethod
    def load(cls, path: str | Path, vocab_size: int) -> NgramStore:
        try:
            with safe_open(str(path), "pt") as f:
                info = json.loads((f.metadata() or {})["info"])
            tensors = load_file(str(path))
        except (OSError, KeyError, ValueError, SafetensorError) as e:
            raise ModelLoadError(
                f"{path}: not an n-gram store ({type(e).__name__}: {e}); rebuild it with "
                "python -m lab.ngram or set lm.ngram: none"
            ) from e
        table, alts = PackedTable(), PackedTable()
        vocab = tensors["vocab"].long() if "vocab" in tensors else None
        ids = vocab_size if vocab is None else len(vocab)
        beyond = f"{path}: token ids beyond this model's vocabulary ({vocab_size}); it was "
        beyond += "built for another tokenizer - rebuild it or set lm.ngram: none"
        if vocab is not None and (len(vocab) > MAX_IDS or int(vocab.max()) >= vocab_size):
            raise ModelLoadError(beyond)
        for n in range(1, MAX_ORDER + 1):
            if f"ctx{n}" not in tensors:
                continue
            ctx, nxt = tensors[f"ctx{n}"].int(), tensors[f"next{n}"].int()  # uint16 / int32
            # Stores written before runner-ups were kept have no alt tensors.
            alt = tensors.get(f"alt{n}", torch.full_like(nxt, NO_ALT)).int()
            has_alt = alt != NO_ALT
            top = max(int(ctx.max()), int(nxt.max()), int(torch.where(has_alt, alt, 0).max()))
            if top >= ids:
                raise ModelLoadError(beyond)
            keys = pack_keys(ctx.numpy())
            confs = tensors[f"conf{n}"].float().numpy()
            table.orders[n] = dict(
                zip(keys.tolist(), pack_entries(nxt.numpy(), confs), strict=True)
            )
            h = has_alt.numpy()
            alt_confs = tensors.get(f"altconf{n}", torch.zeros(len(alt))).float().numpy()[h]
            alt_values = pack_entries(alt.numpy()[h], alt_confs)
            alts.orders[n] = dict(zip(keys[h].tolist(), alt_values, strict=True))
        return cls(table, info, alts, None if vocab is None else vocab.tolist())


def load_default(spec: str, vocab_size: int) -> NgramStore | None:
    """lm.ngram: '' = the bundled store if present, 'none' = no store, else a path."""
    path = resolve_file(spec, DEFAULT_STORE, "lm.ngram")
    return None if path is None else NgramStore.load(path, vocab_size)
