"""Shared fixtures: the bundled SmolLM2 loaded once per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from dllm_voice.model.config import LMConfig
from dllm_voice.model.engine import LM


@pytest.fixture(scope="session")
def lm() -> LM:
    return LM.load(LMConfig())


@pytest.fixture(scope="session")
def tok(lm: LM):
    return lm.tokenizer


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Tiny-model forwards are ~0.5 ms of work: 2 threads on shared cores cost 5-10x more."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
