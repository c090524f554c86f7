"""One configuration setting per line: ``silence_ms: int = setting(700, "why", min=0)``.

A leaf module (it imports nothing of the project), so audio/, model/ and app/ all declare their
config sections with it. The field's metadata holds ``help`` and, when given, ``min``, ``max`` and
``choices``: app/config.py checks every loaded or changed value against them and writes them into
config.yaml's comments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def setting(
    default: T,
    help: str,
    *,
    min: float | None = None,
    max: float | None = None,
    choices: Sequence[Any] | None = None,
) -> T:
    """A frozen-dataclass field defaulting to ``default`` (immutable: a tuple, not a list), with
    its help and allowed values (``min``/``max`` inclusive, or one of ``choices``) in metadata."""
    meta: dict[str, Any] = {"help": help}
    if min is not None:
        meta["min"] = min
    if max is not None:
        meta["max"] = max
    if choices is not None:
        meta["choices"] = tuple(choices)
    return dataclasses.field(default=default, metadata=meta)
