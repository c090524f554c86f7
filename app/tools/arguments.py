"""A call's arguments decoded by the LM under the grammar of the tool's parameters.

For a tool with no parser of its own (yours, a client's), the LM writes the arguments as a
JSON object, constrained token by token so that the call is always valid: the keys, quotes
and punctuation are forced, a string takes tokens without a quote until the model picks one
that starts with a quote (its end), a number only digit tokens, an enum or a boolean one of
its options. The forced tokens go into the next forward together with the token chosen
before them, as rows already accepted: one forward for `{"city": "` and the first letters of
the value.
A string copies the request's own words; only required parameters are filled; arrays are
left empty.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from dllm_voice.app.tools.registry import Tool

if TYPE_CHECKING:
    from dllm_voice.app.conversation.ports import ChatSession, Tokenizer

MAX_VALUE_TOKENS = 24  # a spoken request's argument: a name, a place, a short phrase
MAX_TOKEN_CHARS = 24
_NUMBER_CHARS = frozenset("0123456789")

SYSTEM = (
    "You fill in the arguments of a function call from the user's request. "
    "Copy names and numbers exactly as the user says them."
)


@dataclass
class ArgumentStats:
    tokens: int = 0  # tokens of the JSON text, forced and chosen
    forwards: int = 0

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.forwards if self.forwards else 0.0


@dataclass(frozen=True)
class _Vocab:
    """Which tokens may continue a string or a number (one vocabulary, computed once)."""

    in_string: np.ndarray  # (V,) bool: text with no quote, backslash or control character
    digits: np.ndarray  # (V,) bool: only the digits 0-9
    closes: np.ndarray  # (V,) bool: starts with a quote ('"', '",', '"}'): the string ends
    dot: int | None  # the token of a lone '.'
    minus: int | None


@cache
def _vocab(token_bytes: tuple[bytes, ...], dot: int | None, minus: int | None) -> _Vocab:
    n = len(token_bytes)
    in_string = np.zeros(n, dtype=bool)
    digits = np.zeros(n, dtype=bool)
    closes = np.zeros(n, dtype=bool)
    for i, raw in enumerate(token_bytes):
        if not raw:
            continue
        text = raw.decode("utf-8", errors="ignore")
        in_string[i] = bool(text) and not any(c in text for c in '"\\') and text.isprintable()
        digits[i] = bool(text) and set(text) <= _NUMBER_CHARS
        closes[i] = text.startswith('"')
    return _Vocab(in_string, digits, closes, dot, minus)


def _one_token(tok: Tokenizer, text: str) -> int | None:
    ids = tok.encode(text)
    return ids[0] if len(ids) == 1 else None


@dataclass
class _Decoder:
    session: ChatSession
    tok: Tokenizer
    vocab: _Vocab
    ids: list[int]  # prompt + the JSON so far
    cancel: threading.Event | None
    request: str  # a string value copies a span of its words
    index: dict[str, list[int]]  # token ids by their lower-case text
    stats: ArgumentStats = field(default_factory=ArgumentStats)
    pending: list[int] = field(default_factory=list)  # forced tokens not yet fed

    def force(self, text: str) -> None:
        self.pending += self.tok.encode(text)

    def pick(self, allowed: np.ndarray) -> int | None:
        """Feed what is pending, then the best allowed token (not appended); None if cancelled."""
        logits = self.session.extend([*self.ids, *self.pending], cancel=self.cancel)
        if logits is None:
            return None
        self.stats.forwards += 1
        self.stats.tokens += len(self.pending)
        self.ids += self.pending
        self.pending = []
        scores = logits.float().numpy()
        scores = np.where(allowed[: len(scores)], scores, -np.inf)
        return int(scores.argmax())

    def take(self, token: int) -> None:
        self.pending.append(token)

    def string(self) -> str | None:
        """A span of the request's words, token by token (matched in any letter case, said as
        the user's words): a 135M model left free wrote "Shop has 10 shoes in stock" for a
        product's name."""
        v, said = self.vocab, self.request.lower()
        # (start, end) of each place in the request the value so far copies.
        spans = {(m.start(), m.start()) for m in re.finditer(r"\b\w", said)}
        for _ in range(MAX_VALUE_TOKENS):
            allowed = np.zeros(len(v.closes), dtype=bool)
            for _, at in spans:
                for ids in _spans(self.index, said, at):
                    allowed[ids] = True
            if any(a < e and _word_end(said, e) for a, e in spans):
                allowed |= v.closes  # a value ends where a word of the request ends
            if not allowed.any():
                break
            t = self.pick(allowed)
            if t is None:
                return None
            if v.closes[t]:
                break
            piece = self.tok.decode([t]).lower()
            spans = {(a, e + len(piece)) for a, e in spans if said.startswith(piece, e)}
            self.take(t)
        done = sorted((a, e) for a, e in spans if a < e and _word_end(said, e))
        return self.request[done[0][0] : done[0][1]].strip() if done else ""

    def number(self, integer: bool) -> float | int | None:
        v, text = self.vocab, ""
        for _ in range(MAX_VALUE_TOKENS):
            allowed = v.digits.copy()
            if text and v.dot is not None and not integer and "." not in text:
                allowed[v.dot] = True
            if not text and v.minus is not None:
                allowed[v.minus] = True
            ends = {self.tok.encode(c)[0] for c in ",}"} if text.strip("-.") else set()
            for e in ends:
                allowed[e] = True
            t = self.pick(allowed)
            if t is None:
                return None
            if t in ends:
                break
            self.take(t)
            text += self.tok.decode([t])
        text = text.rstrip(".") or "0"
        return int(text) if integer else float(text)

    def option(self, options: Sequence[object]) -> object | None:
        """One of ``options`` (JSON values), token by token among those still possible."""
        spelled = [(o, self.tok.encode(json.dumps(o))) for o in options]
        depth = 0
        while len(spelled) > 1:
            allowed = np.zeros(len(self.vocab.digits), dtype=bool)
            for _, ids in spelled:
                if depth < len(ids):
                    allowed[ids[depth]] = True
            if not allowed.any():
                break
            t = self.pick(allowed)
            if t is None:
                return None
            spelled = [(o, ids) for o, ids in spelled if depth < len(ids) and ids[depth] == t]
            self.take(t)
            depth += 1
        value, ids = spelled[0]
        self.pending += ids[depth:]
        return value


def fill(
    session: ChatSession,
    tok: Tokenizer,
    tool: Tool,
    request: str,
    *,
    cancel: threading.Event | None = None,
) -> tuple[dict[str, object], ArgumentStats] | None:
    """The arguments of a call to ``tool`` for ``request``, decoded under its schema; None when
    cancelled."""
    props = tool.parameters.get("properties", {})
    required = tool.parameters.get("required", [])
    assert isinstance(props, Mapping) and isinstance(required, list)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{_describe(tool)}\nRequest: {request}"},
    ]
    token_bytes = tuple(tok.token_bytes)
    vocab = _vocab(token_bytes, _one_token(tok, "."), _one_token(tok, "-"))
    d = _Decoder(
        session, tok, vocab, tok.apply_chat(messages), cancel, request, _lower_index(token_bytes)
    )
    out: dict[str, object] = {}
    d.force("{")
    for i, key in enumerate(k for k in props if k in required):
        prop = props[key]
        assert isinstance(prop, Mapping)
        d.force(f'{", " if i else ""}"{key}": ')
        value: object | None
        if "enum" in prop:
            options = prop["enum"]
            assert isinstance(options, list)
            value = d.option(options)
        elif prop.get("type") == "boolean":
            value = d.option([True, False])
        elif prop.get("type") in ("number", "integer"):
            value = d.number(prop.get("type") == "integer")
        elif prop.get("type") == "string":
            d.force('"')
            value = d.string()
            d.force('"')
        else:
            value = []
            d.force("[]")
        if value is None:
            return None
        out[key] = value
    d.stats.tokens += len(d.pending) + 1  # the closing brace and what was forced before it
    return out, d.stats


@cache
def _lower_index(token_bytes: tuple[bytes, ...]) -> dict[str, list[int]]:
    """Token ids by their text in lower case (one vocabulary, built once)."""
    index: dict[str, list[int]] = {}
    for i, raw in enumerate(token_bytes):
        text = raw.decode("utf-8", errors="ignore")
        if raw and text and '"' not in text and "\\" not in text and text.isprintable():
            index.setdefault(text.lower(), []).append(i)
    return index


def _spans(index: dict[str, list[int]], said: str, at: int) -> Iterator[list[int]]:
    """The tokens whose text (any case) is ``said[at:at + n]`` for some n."""
    for n in range(1, min(MAX_TOKEN_CHARS, len(said) - at) + 1):
        ids = index.get(said[at : at + n])
        if ids:
            yield ids


def _word_end(said: str, at: int) -> bool:
    return at >= len(said) or not said[at].isalnum()


def _describe(tool: Tool) -> str:
    props = tool.parameters.get("properties", {})
    assert isinstance(props, Mapping)
    lines = [f"Function: {tool.name}: {tool.description}", "Arguments:"]
    for key, prop in props.items():
        assert isinstance(prop, Mapping)
        kind = prop.get("enum", prop.get("type", "value"))
        about = prop.get("description", "")
        lines.append(f"- {key} ({kind}){': ' + str(about) if about else ''}")
    return "\n".join(lines)
