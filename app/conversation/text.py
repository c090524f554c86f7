"""Text helpers the conversation's rooms share: normalized comparison and a token estimate."""

from __future__ import annotations

import re

_NON_WORD = re.compile(r"[^\w' ]+")
_SPACES = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Lower case, punctuation and hyphens dropped, spaces collapsed: 'Mm-hmm.' -> 'mm hmm'."""
    text = _NON_WORD.sub(" ", text.lower().replace("-", " "))
    return _SPACES.sub(" ", text).strip(" '")


def approx_tokens(text: str) -> int:
    """Token estimate when no tokenizer is at hand: ~4 characters per BPE token in English."""
    return len(text) // 4 + 1
