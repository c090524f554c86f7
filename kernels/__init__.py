"""Triton kernels of the hybrid decoder, one op per file, each with a torch fallback.

- ``kernels.hybrid_attention``: decode-step attention with per-row visibility descriptors.
- ``kernels.verify_select``: per-row argmax / max probability / accepted draft prefix in one
  pass over the logits.

Import the ops from their modules (``from kernels.hybrid_attention import hybrid_attention``); the
package re-exports only the backend switch and the errors, so module names are never shadowed.
"""

from kernels.backend import get_backend, set_backend
from kernels.errors import KernelBackendError, KernelInputError

__all__ = ["KernelBackendError", "KernelInputError", "get_backend", "set_backend"]
