"""Shared fixtures: the bundled SmolLM2 loaded once per test session."""

from __future__ import annotations

import pytest

from model.config import LMConfig
from model.engine import LM


@pytest.fixture(scope="session")
def lm() -> LM:
    return LM.load(LMConfig())


@pytest.fixture(scope="session")
def tok(lm: LM):
    return lm.tokenizer
