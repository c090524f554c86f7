"""Kernel test setup: Triton's CPU interpreter for the Triton path, and backend fixtures.

``TRITON_INTERPRET=1`` has to be in the environment when triton is first imported (``triton.jit``
picks interpreted vs compiled when a kernel, or triton's own ``tl.max``, is decorated). kernels/
imports triton lazily at the first Triton launch, so setting it here, at collection time, is
early enough; ``kernels.backend`` is imported first so its ``auto`` choice keeps following the
shell's environment and later (model) tests in the same session still get the torch fallback on
CPU. On a CUDA machine nothing is set and the Triton tests run the compiled kernels.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
import torch

from dllm_voice.kernels import backend

if not torch.cuda.is_available() and "triton" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(params=["torch", "triton"])
def backend_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test once per backend, forcing it; skip Triton where it cannot run here."""
    if request.param == "triton":
        reason = backend.triton_unavailable(torch.empty(0, device=DEVICE))
        if reason:
            pytest.skip(f"Triton path: {reason}")
    previous = backend.set_backend(request.param)
    yield request.param
    backend.set_backend(previous)


@pytest.fixture
def torch_backend() -> Iterator[None]:
    previous = backend.set_backend("torch")
    yield
    backend.set_backend(previous)
