"""Degeneration guard: stop an answer that has started repeating itself.

A small model under greedy decoding falls into loops ("A dragon, no. A dragon, no. ...") that
run to the token limit: 40 s of speech. The guard watches the answer's words as they stream. A
tail that repeats the words ``p`` before it (1 <= p <= MAX_PERIOD) is a loop once the repeated
part is at least one whole period and the periodic run covers LOOP_WORDS words; the answer then
ends at the last sentence end before the repetition began.

While a repetition is forming (two or more words equal to the words ``p`` before them) its text
is held back, so a confirmed loop is dropped before anything downstream has seen it; a repeat
that breaks off is released at the next word. The guard works on the committed text only, so
every decoder (ar, hybrid, parallel) stops at the same place for the same tokens.
"""

from __future__ import annotations

import re

MAX_PERIOD = 40  # words; a repeated sentence is rarely longer
LOOP_WORDS = 8  # a run of 8 words that is two copies of one unit, or 8 times one word
HOLD_WORDS = 2  # repeated words held back while a loop may be forming
_WORD = re.compile(r"\S+")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)|\n")


class RepeatGuard:
    """Feed it the whole text so far; it says how much may be emitted and when to stop."""

    def __init__(self) -> None:
        self.loop = False

    def check(self, text: str, final: bool = False) -> int:
        """Chars of ``text`` that are safe to emit. Sets ``self.loop`` when a loop is confirmed;
        ``kept(text)`` then gives what the answer keeps."""
        if final:
            return len(text)
        words = list(_WORD.finditer(text))
        n = len(words)
        hold_from = len(text)
        for p in range(1, min(MAX_PERIOD, n // 2) + 1):
            c = 0  # trailing words equal to the word p before them
            while c < n - p and words[n - 1 - c].group() == words[n - 1 - c - p].group():
                c += 1
            if c >= p and c + p >= LOOP_WORDS:
                self.loop = True
                self._loop_at = words[n - c].start()
                return words[n - c].start()
            if c >= HOLD_WORDS:
                hold_from = min(hold_from, words[n - c].start())
        return hold_from

    def kept(self, text: str) -> str:
        """The answer to keep after a loop: up to the last sentence end before the repetition
        (the text before it when no sentence ended there)."""
        head = text[: self._loop_at]
        ends = [m.end() for m in _SENTENCE_END.finditer(head)]
        return head[: ends[-1]].rstrip() if ends else head.rstrip()
