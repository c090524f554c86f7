"""Fixtures shared across packages: the real models, loaded once per test session."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from dllm_voice.app.config import Config

if TYPE_CHECKING:
    from dllm_voice.model.engine import LM

# No decoding profile or drafts the developer's own `main.py tune` or `lab.drafts` wrote reach a
# test (model/profile.py, model/drafts.py).
os.environ["DLLM_VOICE_PROFILES"] = tempfile.mkdtemp(prefix="profiles-")
os.environ["DLLM_VOICE_DRAFTS"] = tempfile.mkdtemp(prefix="drafts-")

# Short answers keep the end-to-end tests quick; the pipeline does not depend on the length.
E2E_CONFIG = replace(Config(), lm=replace(Config().lm, max_new_tokens=40))


@pytest.fixture(scope="session")
def components() -> Iterator[Any]:
    """LM (SmolLM2), Whisper tiny.en and Piper, each with its worker, shared by every test."""
    from dllm_voice.app.conversation.components import Components

    comps = Components.load(E2E_CONFIG, warmup=False)
    yield comps
    comps.close()


@pytest.fixture(scope="session")
def lm() -> LM:
    """The bundled SmolLM2 alone (tests/model, tests/lab)."""
    from dllm_voice.model.config import LMConfig
    from dllm_voice.model.engine import LM

    return LM.load(LMConfig())


@pytest.fixture(scope="session")
def tok(lm: LM):
    return lm.tokenizer


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Tiny-model forwards are ~0.5 ms of work: 2 threads on shared cores cost 5-10x more."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
