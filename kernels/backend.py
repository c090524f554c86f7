"""Backend switch shared by every kernel in this package: Triton or the torch fallback.

The choice is made once at import from the environment and can be forced later (tests, benches):

- ``DLLM_KERNEL_BACKEND`` = ``auto`` (default) | ``torch`` | ``triton``, or ``set_backend(name)``.
- ``auto`` runs Triton on CUDA tensors, and on CPU tensors only when ``TRITON_INTERPRET=1`` was set
  when this module was imported (the Triton interpreter runs kernels with numpy, ~1000x slower
  than torch); otherwise torch. So a CPU model on a CUDA machine gets the torch path, not an error.
- ``triton`` always runs Triton; CPU tensors need the interpreter.

Triton itself is imported lazily, on the first Triton launch: ``triton.jit`` decides compiled vs
interpreted when a kernel (and triton's own ``tl.max`` etc.) is decorated, so a test can set
``TRITON_INTERPRET=1`` any time before that first launch, and a CPU-only process that never
launches a Triton kernel never pays for importing triton.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from dllm_voice.kernels.errors import KernelBackendError

BACKENDS = ("auto", "torch", "triton")
ENV_VAR = "DLLM_KERNEL_BACKEND"

HAS_TRITON = importlib.util.find_spec("triton") is not None  # Linux-only wheels
INTERPRET = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def _check_name(name: str) -> str:
    if name not in BACKENDS:
        raise KernelBackendError(f"unknown kernel backend {name!r}; use one of {BACKENDS}")
    return name


_backend = _check_name(os.environ.get(ENV_VAR, "auto").strip().lower() or "auto")


def set_backend(name: str) -> str:
    """Force the backend for all kernels ("auto" | "torch" | "triton"); returns the previous one."""
    global _backend
    previous, _backend = _backend, _check_name(name)
    return previous


def get_backend() -> str:
    """The configured backend name (before per-tensor resolution of "auto")."""
    return _backend


def triton_interpreted() -> bool:
    """Whether triton runs (or, not yet imported, will run) kernels in the CPU interpreter."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.standard.max, InterpretedFunction)


def triton_unavailable(t: torch.Tensor) -> str:
    """Why Triton cannot run on ``t``'s device here, or "" when it can."""
    if not HAS_TRITON:
        return "triton is not installed (pip install triton)"
    if t.is_cuda or triton_interpreted():
        return ""
    return (
        "CPU tensors need the Triton interpreter: set TRITON_INTERPRET=1 before triton is "
        "first imported"
    )


def use_triton(t: torch.Tensor) -> bool:
    """Whether a kernel called on tensor ``t`` runs the Triton path under the current setting."""
    if _backend == "torch":
        return False
    if _backend == "triton":
        reason = triton_unavailable(t)
        if reason:
            raise KernelBackendError(
                f"backend 'triton' forced but {reason}; or set_backend('torch')"
            )
        return True
    return HAS_TRITON and (t.is_cuda or INTERPRET)
