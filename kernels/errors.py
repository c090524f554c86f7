"""Exceptions raised by the kernel launchers (one place, as the style guide asks)."""


class KernelInputError(ValueError):
    """A launcher got tensors it cannot run on (shape, dtype, device or descriptor bounds)."""


class KernelBackendError(RuntimeError):
    """The requested backend cannot run here (Triton missing, CPU tensors without interpreter)."""
