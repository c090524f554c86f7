"""Degeneration guard: stop an answer that has started repeating itself.

A small model under greedy decoding falls into loops ("A dragon, no. A dragon, no. ...") that
run to the token limit: 40 s of speech. The guard watches the answer's words as they stream. A
tail that repeats the words ``p`` before it (1 <= p <= MAX_PERIOD) is a loop once the repeated
part is at least one whole period and the periodic run covers LOOP_WORDS words; the answer then
ends at the last sentence end before the repetition began. Loops with variation ("The original
text is: X. The correct sentence is: X. The original text was: X.") are caught by their
phrases: a NGRAM-word phrase (case and punctuation aside) said a third time ends the answer at
the last sentence end before that third time.

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
NGRAM = 4  # a 4-word phrase a third time: "a joke about computers" x3 in one answer
NGRAM_TIMES = 3
_WORD = re.compile(r"\S+")
_PUNCT = re.compile(r"[^\w']+")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)|\n")


class RepeatGuard:
    """Feed it the whole text so far; it says how much may be emitted and when to stop."""

    def __init__(self) -> None:
        self.loop = False
        self._last: tuple[str, int] = ("", 0)  # the engine checks each new text twice

    def check(self, text: str, final: bool = False) -> int:
        """Chars of ``text`` that are safe to emit. Sets ``self.loop`` when a loop is confirmed;
        ``kept(text)`` then gives what the answer keeps."""
        if final:
            return len(text)
        if text != self._last[0]:
            self._last = (text, self._safe(text))
        return self._last[1]

    def _safe(self, text: str) -> int:
        words = list(_WORD.finditer(text))
        n = len(words)
        # The last word may still grow ("sorry" -> "sorry,"): it matches as a prefix for holding
        # back, and counts towards a loop only once it equals its counterpart.
        open_end = not text[-1:].isspace()
        hold_from = len(text)
        for p in range(1, min(MAX_PERIOD, n // 2) + 1):
            c = 0  # trailing words equal to the word p before them
            while c < n - p:
                w, twin = words[n - 1 - c].group(), words[n - 1 - c - p].group()
                if not (w == twin or (c == 0 and open_end and twin.startswith(w))):
                    break
                c += 1
            done = c - (open_end and c > 0 and words[n - 1].group() != words[n - 1 - p].group())
            if done >= p and done + p >= LOOP_WORDS:
                self.loop = True
                self._loop_at = words[n - c].start()
                return words[n - c].start()
            if c >= HOLD_WORDS:
                hold_from = min(hold_from, words[n - c].start())
        third = self._phrase_again(words[: n - 1] if open_end else words)
        if third is not None:
            self.loop = True
            self._loop_at = words[third].start()
            return self._loop_at
        return hold_from

    @staticmethod
    def _phrase_again(words: list[re.Match[str]]) -> int | None:
        """Index of the first word of the newest NGRAM-word phrase when it is the phrase's
        NGRAM_TIMES-th occurrence (case and punctuation aside), else None."""
        if len(words) < NGRAM * NGRAM_TIMES:
            return None
        norm = [_PUNCT.sub("", w.group().lower()) for w in words]
        last = norm[-NGRAM:]
        if not all(last):
            return None
        starts = [i for i in range(len(norm) - NGRAM + 1) if norm[i : i + NGRAM] == last]
        return starts[-1] if len(starts) >= NGRAM_TIMES else None

    def kept(self, text: str) -> str:
        """The answer to keep after a loop: up to the last sentence end before the repetition
        (the text before it when no sentence ended there)."""
        head = text[: self._loop_at]
        ends = [m.end() for m in _SENTENCE_END.finditer(head)]
        return head[: ends[-1]].rstrip() if ends else head.rstrip()
