"""Exceptions of the model package, defined in one place."""

from __future__ import annotations


class ModelError(RuntimeError):
    """Base class for model-package errors."""


class ModelLoadError(ModelError, ValueError):
    """Weights or tokenizer cannot be loaded: missing/corrupt file or unsupported architecture."""


class UnknownDecoderError(ModelError, ValueError):
    """A decoder name that is not registered (see model.decode.DECODERS)."""


class ContextOverflowError(ModelError, ValueError):
    """The prompt cannot fit the context budget even after dropping old turns."""
