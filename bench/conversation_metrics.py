"""Text checks of bench/conversation.py: WER, repeated answers, loops, continued interruptions.

Pure functions over strings, so each definition is testable without the models. Text is
compared as normalized words: lower case, hyphens as spaces, punctuation dropped
("Mm-hmm." -> ["mm", "hmm"]).

* WER: word-level Levenshtein distance (substitutions + deletions + insertions) over the
  reference's word count.
* repeat: answer B repeats an earlier answer A when their normalized words are equal, or when
  the shorter of the two has >= 5 words and >= 80 % of its distinct word 5-grams occur in the
  other.
* loop: some word 4-gram occurs >= 3 times in the answer, or a sentence of >= 4 words (of
  two letters or more: "M.I.C.I.A." is not one) occurs twice.
* continuation: an answer given after an interruption continues the interrupted answer when
  the last 3 words the user heard of it occur among the new answer's first 12 words, when the
  interrupted answer's first sentence (>= 4 words) occurs in the new answer, or when the new
  answer's first 5 words occur in the interrupted answer's text (it resumes where it stopped).
* keyword hit: a topic keyword occurs at the start of a word of the answer ("dragon" hits
  "dragons").
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence

_NON_WORD = re.compile(r"[^\w' ]+")
_SENTENCE_END = re.compile(r"[.!?]+(?:\s+|$)")

REPEAT_NGRAM = 5
REPEAT_SHARE = 0.8
LOOP_NGRAM = 4
LOOP_COUNT = 3
LOOP_SENTENCE_WORDS = 4
CONTINUE_TAIL_WORDS = 3
CONTINUE_HEAD_WORDS = 12


def words(text: str) -> list[str]:
    """Normalized words: 'Mm-hmm, OK.' -> ['mm', 'hmm', 'ok']."""
    text = _NON_WORD.sub(" ", text.lower().replace("-", " "))
    return [w.strip("'") for w in text.split() if w.strip("'")]


# Contractions spelled out before WER, as Whisper's English normalizer does: "I'm" and "I am"
# are the same words, and the recognizer writes either for the same audio. ("'s" stays: is,
# has or a possessive.)
_CONTRACTIONS = (
    (re.compile(r"\bwon't\b"), "will not"),
    (re.compile(r"\bcan't\b"), "can not"),
    (re.compile(r"\blet's\b"), "let us"),
    (re.compile(r"n't\b"), " not"),
    (re.compile(r"'m\b"), " am"),
    (re.compile(r"'re\b"), " are"),
    (re.compile(r"'ve\b"), " have"),
    (re.compile(r"'ll\b"), " will"),
    (re.compile(r"'d\b"), " would"),
)


def wer_words(text: str) -> list[str]:
    """``words`` with contractions spelled out: "I'm" -> ['i', 'am']."""
    text = text.lower().replace("\u2019", "'")
    for pattern, full in _CONTRACTIONS:
        text = pattern.sub(full, text)
    return words(text)


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Word-level Levenshtein distance."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def wer(ref: str, hyp: str) -> float | None:
    """Word error rate of ``hyp`` against ``ref``; None for an empty reference."""
    r = wer_words(ref)
    return edit_distance(r, wer_words(hyp)) / len(r) if r else None


def corpus_wer(pairs: Sequence[tuple[str, str]]) -> float | None:
    """Total word errors over total reference words of (reference, hypothesis) pairs."""
    errors = total = 0
    for ref, hyp in pairs:
        r = wer_words(ref)
        errors += edit_distance(r, wer_words(hyp))
        total += len(r)
    return round(errors / total, 4) if total else None


def ngrams(ws: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(ws[i : i + n]) for i in range(len(ws) - n + 1)]


def _contains(ws: Sequence[str], part: Sequence[str]) -> bool:
    n = len(part)
    return n > 0 and any(tuple(ws[i : i + n]) == tuple(part) for i in range(len(ws) - n + 1))


def repeats(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are the same answer (see the module docstring)."""
    wa, wb = words(a), words(b)
    if not wa or not wb:
        return False
    if wa == wb:
        return True
    short, long = (wa, wb) if len(wa) <= len(wb) else (wb, wa)
    if len(short) < REPEAT_NGRAM:
        return False
    grams = set(ngrams(short, REPEAT_NGRAM))
    shared = grams & set(ngrams(long, REPEAT_NGRAM))
    return len(shared) >= REPEAT_SHARE * len(grams)


def sentences(text: str) -> list[list[str]]:
    """The normalized words of each sentence (split at . ! ?)."""
    return [ws for part in _SENTENCE_END.split(text) if (ws := words(part))]


def loop(text: str) -> str | None:
    """What repeats in a looping answer, or None (see the module docstring)."""
    counts = Counter(ngrams(words(text), LOOP_NGRAM))
    if counts:
        gram, n = counts.most_common(1)[0]
        if n >= LOOP_COUNT:
            return f"{' '.join(gram)!r} x{n}"
    seen: Counter[tuple[str, ...]] = Counter(
        tuple(s) for s in sentences(text) if sum(len(w) > 1 for w in s) >= LOOP_SENTENCE_WORDS
    )
    for sentence, n in seen.items():
        if n >= 2:
            return f"sentence {' '.join(sentence)!r} x{n}"
    return None


def continuation(new: str, interrupted: str, heard: str, asked: str = "") -> str | None:
    """How ``new`` continues the ``interrupted`` answer (of which the user heard ``heard``);
    ``asked``: the interrupting question, whose words an answer may echo ("The biggest ocean
    is the" cut, "Which ocean is the smallest?" asked, "The smallest ocean is the ..." is an
    answer)."""
    wn = words(new)
    if not wn:
        return None
    tail = words(heard)[-CONTINUE_TAIL_WORDS:]
    echo = _contains(words(asked), tail)
    if len(tail) == CONTINUE_TAIL_WORDS and not echo and _contains(wn[:CONTINUE_HEAD_WORDS], tail):
        return "starts with the last heard words"
    first = sentences(interrupted)[:1]
    if first and len(first[0]) >= LOOP_SENTENCE_WORDS and _contains(wn, first[0]):
        return "repeats its first sentence"
    head = wn[:REPEAT_NGRAM]
    if len(head) == REPEAT_NGRAM and _contains(words(interrupted), head):
        return "resumes its text"
    return None


def keyword_hit(text: str, keywords: Sequence[str]) -> bool:
    joined = " " + " ".join(words(text))
    return any(f" {k.lower()}" in joined for k in keywords)


def median_max(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "max": None}
    return {"median": statistics.median(values), "max": max(values)}
