"""Draft trees: several candidate continuations checked by one verify forward.

A chain of drafts dies at its first wrong token. The drafter knows more than its top-1 guess:
its second choice for the next token is right about as often as its top-1 choice two tokens
ahead. A tree spends the same verify rows where the expected gain is largest (EAGLE-2 /
SpecInfer style, built from the block drafter's per-offset top-r and prompt-lookup chains):

- `build` grows the tree best first. A node's score is the estimated probability that its whole
  path is accepted: the product of its tokens' confidences (drafter probability at that offset,
  or the lookup's measured acceptance where a lookup chain passes through the node; the larger
  when both propose the token). Children never score above their parent, so every prefix of the
  pop order is a tree. The expected tokens committed by a step are 1 + the sum of the chosen
  nodes' scores; the tree keeps the prefix that maximises that per unit of step cost
  (1 + row_cost * nodes, + first_row_cost where extra rows switch kernels), as the chain did.
- The verify forward puts node j at position anchor + depth(j); it sees the cache, the anchor
  and its own ancestors (`mask`), nothing else, so each row predicts exactly what `ar` would
  after that path. Acceptance walks from the anchor down the child that matches (model/hybrid.py).
- `parallel` (threshold < 1): while the best child of the last committed node has confidence
  >= threshold it is committed unseen (score 1: it is certain to stay) and its siblings are
  dropped; the tree grows below the committed chain.

Nodes are stored in topological order (parents first); parent -1 is the anchor.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class DraftTree:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # -1 = the anchor (pending token)
    scores: list[float] = field(default_factory=list)  # P(path to the node is accepted), est.
    confs: list[float] = field(default_factory=list)  # confidence of the node's own token
    depths: list[int] = field(default_factory=list)  # 1 = child of the anchor
    forced: int = 0  # parallel: nodes 0..forced-1, a chain, are committed without verification

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def chain(cls, tokens: Sequence[int], confs: Sequence[float]) -> DraftTree:
        tree, score = cls(), 1.0
        for i, (t, c) in enumerate(zip(tokens, confs, strict=True)):
            score *= c
            tree.add(t, i - 1, score, c)
        return tree

    def add(self, token: int, parent: int, score: float, conf: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.scores.append(score)
        self.confs.append(conf)
        self.depths.append(1 if parent < 0 else self.depths[parent] + 1)
        return len(self.tokens) - 1

    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def children(self) -> dict[int, list[int]]:
        """Node -> its children in order (best first), the anchor under -1."""
        kids: dict[int, list[int]] = {-1: []}
        for j, p in enumerate(self.parents):
            kids.setdefault(p, []).append(j)
            kids.setdefault(j, [])
        return kids

    def subset(self, keep: Sequence[int]) -> DraftTree:
        """The nodes `keep` (ascending, closed under parents), renumbered."""
        new = {-1: -1}
        out = DraftTree()
        for j in keep:
            new[j] = out.add(self.tokens[j], new[self.parents[j]], self.scores[j], self.confs[j])
        return out

    def mask(self) -> torch.Tensor:
        """(n, n) bool: node i sees node j iff j is i or an ancestor of i."""
        n = len(self)
        m = torch.eye(n, dtype=torch.bool)
        for i, p in enumerate(self.parents):
            if p >= 0:
                m[i] |= m[p]
        return m


def build(
    marginals: Sequence[Sequence[tuple[int, float]]],
    chains: Sequence[tuple[Sequence[int], Sequence[float]]],
    *,
    max_nodes: int,
    max_depth: int,
    row_cost: float,
    stop_ids: frozenset[int],
    threshold: float = 1.0,
    first_row_cost: float = 0.0,
) -> DraftTree:
    """Best-first draft tree. marginals[d]: the drafter's (token, prob) candidates for offset
    d + 1 (any node at depth d gets them as children); chains: (tokens, confidences) proposals
    that apply along their own path only (prompt lookup). Nothing grows below a stop token.
    threshold < 1: the leading confident chain is committed unverified (tree.forced). Step cost
    of n nodes: 1 + first_row_cost + row_cost * n (1 for none)."""
    tree = DraftTree()
    on_chain: dict[int, list[int]] = {-1: list(range(len(chains)))}
    heap: list[tuple[float, int, int, int, float]] = []  # (-score, order, parent, token, conf)
    order = itertools.count()

    def push_children(node: int, score: float, depth: int) -> None:
        if depth >= max_depth:
            return
        cand: dict[int, float] = {}
        if depth < len(marginals):
            cand.update((t, q) for t, q in marginals[depth])
        for c in on_chain[node]:
            toks, confs = chains[c]
            if depth < len(toks):
                cand[toks[depth]] = max(cand.get(toks[depth], 0.0), confs[depth])
        for t, q in cand.items():
            if q > 0.0:
                heapq.heappush(heap, (-score * q, next(order), node, t, q))

    push_children(-1, 1.0, 0)
    best_n, best_rate, expected = 0, 1.0, 1.0
    while heap and len(tree) < max_nodes:
        neg, _, parent, t, q = heapq.heappop(heap)
        score = -neg
        if threshold < 1.0 and parent == tree.forced - 1 == len(tree) - 1 and q >= threshold:
            score = 1.0 if parent < 0 else tree.scores[parent]
            tree.forced += 1
            heap.clear()  # the siblings of a committed token can never be accepted
        j = tree.add(t, parent, score, q)
        depth = tree.depths[j]
        on_chain[j] = [
            c
            for c in on_chain[parent]
            if len(chains[c][0]) >= depth and chains[c][0][depth - 1] == t
        ]
        expected += score
        rate = expected / (1.0 + first_row_cost + row_cost * len(tree))
        if rate > best_rate or j < tree.forced:
            best_n, best_rate = len(tree), rate
        if t not in stop_ids:
            push_children(j, score, depth)
    kept = tree.subset(range(best_n))
    kept.forced = tree.forced
    return kept
