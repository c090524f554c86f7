"""Sampler: greedy, top-p nucleus (fast topk path == full sort), seeded reproducibility."""

from __future__ import annotations

import pytest
import torch

from dllm_voice.model.decode import Sampler


def nucleus_reference(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    p = torch.softmax(logits / temperature, dim=-1)
    sorted_p, order = p.sort(descending=True)
    keep = sorted_p.cumsum(-1) - sorted_p < top_p
    out = torch.zeros_like(p).scatter_(-1, order, sorted_p * keep)
    return out / out.sum()


@pytest.mark.parametrize("scale", [8.0, 0.01])  # peaked (topk path), nearly flat (full sort)
@pytest.mark.parametrize("top_p", [0.5, 0.9])
def test_top_p_matches_full_sort(scale: float, top_p: float) -> None:
    logits = torch.randn(49152, generator=torch.Generator().manual_seed(1)) * scale
    s = Sampler(0.8, top_p, 0, torch.device("cpu"))
    torch.testing.assert_close(s.probs(logits), nucleus_reference(logits, 0.8, top_p))


def test_greedy_and_seeded() -> None:
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(2))
    assert Sampler(0.0, 1.0, 0, torch.device("cpu"))(logits) == int(logits.argmax())
    draws = [[Sampler(1.0, 0.95, seed, torch.device("cpu"))(logits) for _ in range(3)]
             for seed in (5, 5)]  # fmt: skip
    assert draws[0] == draws[1]
    tiny = Sampler(1.0, 1e-6, 0, torch.device("cpu"))  # top_p -> 0 keeps only the argmax
    assert tiny(logits) == int(logits.argmax())
