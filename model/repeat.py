"""Degeneration guard: stop an answer that has started repeating itself.

A small model under greedy decoding falls into loops ("A dragon, no. A dragon, no. ...") that
run to the token limit: 40 s of speech. The guard watches the answer's words as they stream. A
tail that repeats the words ``p`` before it (1 <= p <= MAX_PERIOD) is a loop once the repeated
part is at least one whole period and the periodic run covers LOOP_WORDS words; the answer then
ends at the last sentence end before the repetition began. Loops with variation ("The original
text is: X. The correct sentence is: X. The original text was: X.") are caught by their
phrases: a NGRAM-word phrase (case and punctuation aside) said a third time ends the answer at
the last sentence end before that third time. A list that goes round ("Africa, Antarctica,
Australia, Antarctica, Antarctica, Australia") is caught by its items: within one sentence, two
items in a row that were said before, or one said a third time, end the answer before the first
of them, the list closed with a full stop.

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
ITEM_WORDS = 4  # a list item: "North and South America"; longer parts are clauses
_ITEM_END = re.compile(r"[,;:](?=\s|$)")
_LEADING_JOIN = re.compile(r"^(?:and|or) ")


class RepeatGuard:
    """Feed it the whole text so far; it says how much may be emitted and when to stop."""

    def __init__(self) -> None:
        self.loop = False
        self._in_list = False  # the loop went round a list: kept() closes the list
        self._last: tuple[str, int] = ("", 0)  # the engine checks each new text twice
        # The text grows a token at a time: its words, and the complete words' NGRAM-word
        # phrases, are kept between calls (rescanning them cost ~5 % of ar's tokens/s).
        self._words: list[re.Match[str]] = []
        self._norm: list[str] = []  # complete words, lower case without punctuation
        self._phrases: dict[tuple[str, ...], int] = {}  # phrase -> times said

    def check(self, text: str, final: bool = False) -> int:
        """Chars of ``text`` that are safe to emit. Sets ``self.loop`` when a loop is confirmed;
        ``kept(text)`` then gives what the answer keeps."""
        if final:
            return len(text)
        if text != self._last[0]:
            prev = self._last[0]
            self._last = (text, self._safe(text, grown=bool(prev) and text.startswith(prev)))
        return self._last[1]

    def _safe(self, text: str, grown: bool) -> int:
        if grown and self._words:  # rescan from the last word, which may have grown
            self._words[-1:] = _WORD.finditer(text, self._words[-1].start())
        else:
            self._words, self._norm, self._phrases = list(_WORD.finditer(text)), [], {}
        words = self._words
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
        third = self._phrase_again(n - open_end)
        if third is not None:
            self.loop = True
            self._loop_at = words[third].start()
            return self._loop_at
        held, looped = _list_repeat(text)
        if looped is not None:
            self.loop, self._loop_at, self._in_list = True, looped, True
            return looped
        return hold_from if held is None else min(hold_from, held)

    def _phrase_again(self, complete: int) -> int | None:
        """Counts the NGRAM-word phrases the words up to ``complete`` end (case and punctuation
        aside); the index of the first word of one said for the NGRAM_TIMES-th time, else None.
        """
        third = None
        for i in range(len(self._norm), complete):
            self._norm.append(_PUNCT.sub("", self._words[i].group().lower()))
            phrase = tuple(self._norm[i - NGRAM + 1 :]) if i >= NGRAM - 1 else ()
            if phrase and all(phrase):
                self._phrases[phrase] = self._phrases.get(phrase, 0) + 1
                if self._phrases[phrase] >= NGRAM_TIMES and third is None:
                    third = i - NGRAM + 1
        return third

    def kept(self, text: str) -> str:
        """The answer to keep after a loop: up to the last sentence end before the repetition
        (the text before it when no sentence ended there)."""
        head = text[: self._loop_at]
        if self._in_list:
            return head.rstrip().rstrip(",;:") + "."
        ends = [m.end() for m in _SENTENCE_END.finditer(head)]
        return head[: ends[-1]].rstrip() if ends else head.rstrip()


def _list_repeat(text: str) -> tuple[int | None, int | None]:
    """Where the last sentence's list repeats its items: (where to hold back from: the item
    being said, or the last one, was said before, so the list may be going round; where the
    loop starts: two such items in a row, or an item said a third time), None for each where it
    does not. Both fall on the separator before the item, so that the answer kept ("…,
    Sunday." for "…, Sunday, Monday, Tuesday") goes on from what was let out."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    start = ends[-1] if ends else 0
    seen: dict[str, int] = {}
    held: int | None = None
    repeat_at: int | None = None  # where the item before begins, when it was a repeat
    cut = start  # the separator before the item being read
    for end in _ITEM_END.finditer(text, start):
        item = _item(text[start : end.start()])
        at, cut, start = cut, end.start(), end.end()
        if not re.search(r"[a-z]", item) or len(item.split()) > ITEM_WORDS:
            repeat_at = None
            continue
        seen[item] = seen.get(item, 0) + 1
        if seen[item] == 1:
            repeat_at = held = None
            continue
        if repeat_at is not None or seen[item] >= 3:
            return held, repeat_at if repeat_at is not None else at
        repeat_at = held = at
    # In a list, the item being said is held while it may be one said before ("…, Sunday,
    # Mon" may be "Monday" again), and so is a separator until the next item begins.
    said = _item(text[start:])
    if held is None and len(seen) >= 2 and (not said or any(i.startswith(said) for i in seen)):
        held = cut
    return held, None


def _item(raw: str) -> str:
    """A list item's words, lower case without punctuation or a leading "and" / "or"."""
    return _LEADING_JOIN.sub("", " ".join(_PUNCT.sub(" ", raw.lower()).split()))
