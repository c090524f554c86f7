"""Preallocated, truncatable key/value cache for the transformer in model/transformer.py.

One tensor pair for all layers, allocated once: `k`, `v` have shape (L, B, Hkv, capacity, D).
`length` is the number of valid positions; rows past it are garbage and never read. Rolling back
(rejected draft rows, edited chat history) is `truncate(n)`: O(1), no copy, because the next
write simply overwrites the stale slots. A draft tree's accepted path is first made contiguous
with `move` (a few positions copied).
"""

from __future__ import annotations

import torch

from dllm_voice.model.errors import ContextOverflowError


class KVCache:
    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        capacity: int,
        *,
        batch: int = 1,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        shape = (n_layers, batch, n_kv_heads, capacity, head_dim)
        # Uninitialised: nothing reads past `length` (a chat session's 94 MB took ~40 ms zeroed).
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        self.capacity = capacity
        self.batch = batch
        self.length = 0

    def truncate(self, n: int) -> None:
        """Keep the first `n` positions (0 <= n <= length); later ones become free slots."""
        if not 0 <= n <= self.length:
            raise ValueError(f"truncate({n}) outside the cache's valid range 0..{self.length}")
        self.length = n

    def move(self, dst: int, src: list[int]) -> None:
        """Copy positions `src` to dst, dst + 1, ... in every layer (the accepted path of a draft
        tree, made contiguous before `truncate`); src[i] >= dst + i, ascending."""
        if src == list(range(dst, dst + len(src))):
            return
        idx = torch.tensor(src, device=self.k.device)
        end = dst + len(src)
        # index_select copies before the write; 15 us here where k[:, :, :, idx] took 200
        self.k[:, :, :, dst:end] = self.k.index_select(3, idx)
        self.v[:, :, :, dst:end] = self.v.index_select(3, idx)

    def reset(self) -> None:
        self.length = 0

    def check_room(self, n: int) -> None:
        """Raise ContextOverflowError if `n` more positions do not fit."""
        if self.length + n > self.capacity:
            raise ContextOverflowError(
                f"KV cache full: {self.length} + {n} positions > capacity {self.capacity}; "
                "raise lm.context_tokens or shorten the conversation"
            )

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v of shape (B, Hkv, W, D) at positions length..length+W of one layer.

        `length` is advanced by the caller once all layers are written (Transformer.forward).
        """
        w = k.shape[2]
        self.k[layer, :, :, self.length : self.length + w] = k
        self.v[layer, :, :, self.length : self.length + w] = v

    def view(self, layer: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `n` cached positions of one layer: two (B, Hkv, n, D) views, no copy."""
        return self.k[layer, :, :, :n], self.v[layer, :, :, :n]
