"""Choosing a tool for a user turn: a head on the LM's hidden state, and names said plainly.

The end-of-turn forward reads the row of the user's last word; its final-normed hidden state
(``ChatSession.generate(turn_state=)``) goes through a softmax regression trained on generated
requests (``python -m lab.train_tool_chooser``) over the built-in tools and "none": a 576 x 10
product on a row the turn computes anyway, where a 135M model prompted with a tool list does
not make calls.

A tool the head was not trained on (yours, a client's) is chosen when the user says its name
(``says_name``: its name's content words) or, when the head finds none, its description
plainly (``describes``: two of its content words) in the request.

A spoken request may come with what else the recognizer heard (``alternatives``): when the best
hearing gives no call, a parser that reads one of them in full makes it ("How great is it in
Chicago now?" beside "How late is it in Chicago now?"), unless the head on the best hearing is
sure the turn needs no tool ("Can parrots understand …" beside "Can Paris understand …"). So
does one whose parser knows the place or country where the best hearing's names none it knows
(a ``Guess``: "the time in Barco" beside "in Baku"), as a call of the same tool with every
argument the guess names (not the local time of "What time is it?"). Where none does, the
recognizer may hear the turn again, played slower (``slower``: "Multiply 19.6 for me." heard
"Multiply 19 by 6 for me."), read by the same rule; only then, and only where the head leans
to a tool (``HEAR_SLOWER_BELOW``), as it costs two passes (~90 ms).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dllm_voice.app.tools.builtin.numbers import digits
from dllm_voice.app.tools.registry import Guess, Tool, ToolBox

HEAD_FILE = Path(__file__).with_name("chooser.npz")
NONE = "none"
# The head's P(none) on the best hearing at or above which no alternative hearing is read: on
# the tool benchmark's spoken requests the misheard tool requests' best hearings gave it
# 0.002-0.63, the misheard no-tool request whose alternative named a country 0.97.
SURE_NONE = 0.9
# The head's P(none) under which a turn that no hearing at full speed reads a call for is heard
# again slower, the LM waiting ~90 ms for it (Xeon 207). bench/slower.py over the tool
# benchmark's 430 spoken tool requests: under 0.7, 15 more right calls (18 under 0.9, 13 under
# 0.5), heard slower on 15 % of its 267 requests that need none (19 %, 12 %) and on 1 of 56
# general questions ("Which fruit has the most vitamin C?" 0.64; 5 under 0.9, 0 under 0.5).
HEAR_SLOWER_BELOW = 0.7

_WORD = re.compile(r"[a-z]+")
_ASKS_WHY = re.compile(r"\W*(?:(?:so|and|but|okay|ok)\W+)?(?:why|how come)\b", re.IGNORECASE)
_CORRECTS = r"i mean|i meant|no wait|wait no|or rather|correction"
# A request the user corrected as they said it ("a two minute warning... I mean set a two
# minute timer"): what follows the last of these is read first, the whole turn if it reads none.
_REPAIR = re.compile(rf"\b(?:{_CORRECTS}|scratch that)\b\W*", re.IGNORECASE)
# A request amended by a new amount as it is said ("set a timer for five minutes, actually make
# it ten", "three minutes, I mean four"): the amount after the last of these takes the place of
# the one said before it.
_MAKE_IT = re.compile(
    rf"\W+(?:(?:no|oh|actually|sorry|wait|um|uh)\W+)*(?:make (?:it|that)|{_CORRECTS})\W+", re.I
)
_NUMBER = r"\d+(?:[.:]\d+)?(?: [0-5]\d)?"  # "7 30" too: digits() of "seven thirty"
_AMOUNT = re.compile(
    rf"^({_NUMBER})(?: (?!instead|please|then|now)([a-z]+))?(?: (?:instead|please|then|now))*$"
)


def _amended(text: str) -> str | None:
    """``text`` (in digits) with the amount after its last "make it" in place of the last one
    said before it: of the same unit where one is named ("15 percent of 80, make it 20
    percent"), else the last number (and its unit); None where the turn makes no such
    amendment."""
    found = list(_MAKE_IT.finditer(text))
    new = _AMOUNT.match(digits(text[found[-1].end() :].lower()).strip(" .,!?")) if found else None
    if new is None:
        return None
    head = digits(text[: found[-1].start()].lower())
    number, unit = new[1], new[2]
    olds = list(re.finditer(rf"{_NUMBER}(?= {unit}\b)", head)) if unit else []
    said = number
    if not olds:
        olds = list(re.finditer(rf"{_NUMBER}(?: [a-z]+)?" if unit else _NUMBER, head))
        said = f"{number} {unit}" if unit else number
    if not olds:
        return None
    return f"{head[: olds[-1].start()]}{said}{head[olds[-1].end() :]}"


# Words of a tool's name or description that say nothing of what it does.
_FILLER = frozenset(
    _WORD.findall(
        "a an the of to in on at for from by with and or is are be it its this that as get set "
        "make do does find check look lookup show tell give return returns current user users "
        "value values some any one given number"
    )
)


@dataclass(frozen=True)
class Choice:
    """The tool a turn calls; ``p``: the head's probability (1.0 when named or required);
    ``arguments``: what the tool's parser read in the words, when it did."""

    tool: Tool
    p: float
    how: str  # head+words | head+alternative | head+slower | head | named | required
    arguments: dict[str, object] | None = None


@dataclass(frozen=True)
class Head:
    """A softmax regression over ``labels`` on the LM's final-normed hidden state."""

    weight: np.ndarray  # (labels, dim)
    bias: np.ndarray  # (labels,)
    labels: tuple[str, ...]
    parameters: int  # of the LM it was trained on: another model's states mean nothing to it

    @classmethod
    def load(cls, path: Path = HEAD_FILE) -> Head | None:
        if not path.is_file():
            return None
        with np.load(path) as f:
            return cls(
                f["weight"].astype(np.float32),
                f["bias"].astype(np.float32),
                tuple(str(x) for x in f["labels"]),
                int(f["parameters"]),
            )

    def save(self, path: Path) -> None:
        np.savez(
            path, weight=self.weight, bias=self.bias, labels=np.array(self.labels),
            parameters=np.array(self.parameters),
        )  # fmt: skip

    def probs(self, state: np.ndarray) -> dict[str, float]:
        z = self.weight @ state.astype(np.float32) + self.bias
        z = np.exp(z - z.max())
        p = z / z.sum()
        return {label: float(x) for label, x in zip(self.labels, p, strict=True)}


def _words(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower().replace("_", " "))]


def _stem(word: str) -> str:
    for suffix in ("ing", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def says_name(tool: Tool, text: str) -> bool:
    """Every content word of ``tool``'s name is among the request's words."""
    name = [w for w in _words(tool.name) if w not in _FILLER]
    return bool(name) and set(name) <= set(_words(text))


def describes(tool: Tool, text: str) -> bool:
    """Two content words of ``tool``'s description are among the request's words."""
    described = {w for w in _words(tool.description) if w not in _FILLER and len(w) > 2}
    return len(described & set(_words(text))) >= 2


def _ranked(probs: dict[str, float], box: ToolBox) -> list[str]:
    """The box's tools the head knows, likeliest first."""
    return sorted((x for x in probs if x != NONE and x in box), key=probs.__getitem__)[::-1]


def _parsed(box: ToolBox, probs: dict[str, float], text: str, how: str) -> Choice | None:
    """The likeliest tool, in the head's order, whose parser reads its arguments in ``text``."""
    for label in _ranked(probs, box):
        tool = box.tools[label]
        args = tool.parse(text) if tool.parse is not None else None
        if args is not None:
            return Choice(tool, probs[label], how, args)
    return None


class ToolChooser:
    """Picks the tool of a turn from ``box``: a tool called by its name; else the head's
    (``_by_head``); else a tool whose description the user gave."""

    def __init__(
        self, head: Head | None, threshold: float, slower_below: float = HEAR_SLOWER_BELOW
    ) -> None:
        self.head, self.threshold, self.slower_below = head, threshold, slower_below

    def choose(
        self,
        box: ToolBox,
        state: np.ndarray | None,
        text: str,
        alternatives: tuple[str, ...] = (),
        slower: Callable[[], tuple[str, ...]] | None = None,
    ) -> Choice | None:
        """``alternatives``: what else the recognizer heard of ``text``; ``slower``: what it
        hears in the turn played slower, asked only where neither makes a call (module
        docstring)."""
        if box.choice == "none" or not len(box):
            return None
        if box.choice not in ("auto", "required"):
            forced = box.get(box.choice)
            return Choice(forced, 1.0, "required") if forced is not None else None
        trained = set(self.head.labels) if self.head is not None else set()
        untrained = [t for t in box.tools.values() if t.name not in trained]
        # A tool called by its name goes first; its description's words only when the head
        # finds none of the tools it knows.
        probs = self._probs(state)
        best = next((Choice(t, 1.0, "named") for t in untrained if says_name(t, text)), None)
        best = best or self._by_head(box, probs, text)
        if best is None or isinstance(best.arguments, Guess):
            best = self._by_alternatives(box, probs, alternatives, best) or best
        unread = best is None or isinstance(best.arguments, Guess)
        if unread and slower is not None and self._hears_slower(probs, text):
            best = self._by_alternatives(box, probs, slower(), best, "head+slower") or best
        best = best or next(
            (Choice(t, 1.0, "named") for t in untrained if describes(t, text)), None
        )
        if best is None and box.choice == "required":
            scores = probs or {}
            tool = max(box.tools.values(), key=lambda t: scores.get(t.name, 0.0))
            best = Choice(tool, scores.get(tool.name, 0.0), "required")
        return best

    def _by_head(self, box: ToolBox, probs: dict[str, float] | None, text: str) -> Choice | None:
        """The likeliest tool whose parser reads its arguments in ``text``, whatever the head
        gives it: the built-in parsers read 2 of 1498 generated requests that need no tool, so
        the head only orders them ("cut 350 in half" was a timer to it). Else the likeliest
        tool if the head is sure of it (``threshold``) and it has no parser, its arguments
        left to the LM. A parser that refuses its own tool's turn means no call: built-in
        parsers read 99.7 % of their tools' generated requests, and the LM's arguments for a
        built-in tool were wrong in most of the benchmark's calls."""
        if probs is None or _ASKS_WHY.match(text):  # a reason: no clock, timer or table gives it
            return None
        corrected = _REPAIR.split(text)[-1]
        tries = (corrected, text) if corrected.strip() and corrected != text else (text,)
        amended = _amended(text)
        for said in (amended, *tries) if amended else tries:
            read = _parsed(box, probs, said, "head+words")
            if read is not None:
                return read
        ranked = _ranked(probs, box)
        sure = bool(ranked) and probs[ranked[0]] >= self.threshold
        top = box.tools[ranked[0]] if ranked else None
        if sure and top is not None and top.parse is None:
            return Choice(top, probs[ranked[0]], "head")
        return None

    def _hears_slower(self, probs: dict[str, float] | None, text: str) -> bool:
        """Whether a turn no hearing reads a call for is worth a pass at slower speeds: the head
        leans to a tool (``slower_below``) and the turn asks no reason."""
        leans = probs is not None and probs.get(NONE, 0.0) < self.slower_below
        return leans and not _ASKS_WHY.match(text)

    def _probs(self, state: np.ndarray | None) -> dict[str, float] | None:
        """The head's probabilities on ``state``; None without a head or a state it reads."""
        if self.head is None or state is None or state.shape[-1] != self.head.weight.shape[1]:
            return None
        return self.head.probs(state)

    @staticmethod
    def _by_alternatives(
        box: ToolBox,
        probs: dict[str, float] | None,
        alternatives: tuple[str, ...],
        guess: Choice | None,
        how: str = "head+alternative",
    ) -> Choice | None:
        """The first alternative hearing a parser reads with arguments its tool knows (no
        ``Guess``: "the time in a narrow beat" heard as "in I'll be" says nothing the user
        asked), tools in the head's order on the best hearing; none where the head is sure the
        turn needs no tool. Where the best hearing's call is a ``guess``, only a call of its
        tool that names every argument the guess does ("in Baku" for "in Barco", not the local
        time of "What time is it?")."""
        if probs is None or probs.get(NONE, 0.0) >= SURE_NONE:
            return None
        for heard in alternatives:
            read = None if _ASKS_WHY.match(heard) else _parsed(box, probs, heard, how)
            if read is None or isinstance(read.arguments, Guess):
                continue
            named = set(read.arguments or {})
            if guess is None or (read.tool is guess.tool and set(guess.arguments or {}) <= named):
                return read
        return None
