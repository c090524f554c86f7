"""Fixtures shared across packages: the real models, loaded once per test session."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from dllm_voice.app.config import Config

# Short answers keep the end-to-end tests quick; the pipeline does not depend on the length.
E2E_CONFIG = replace(Config(), lm=replace(Config().lm, max_new_tokens=40))


@pytest.fixture(scope="session")
def components() -> Iterator[Any]:
    """LM (SmolLM2), Whisper tiny.en and Piper, each with its worker, shared by every test."""
    from dllm_voice.app.conversation.components import Components

    comps = Components.load(E2E_CONFIG, warmup=False)
    yield comps
    comps.close()
