"""End of turn: whether the user is done, from the words heard, the LM's score and the speech.

``end_decision`` makes the call ("complete", "unsure", "incomplete") from the pause's transcript,
the LM's P(end of turn) and the speech's own P(end) (audio/prosody.py); the session turns it into
how much silence ends the pause's turn.
"""

from __future__ import annotations

import re

from dllm_voice.app.conversation.config import ConversationConfig
from dllm_voice.app.conversation.text import normalize

_SENTENCE_BREAK = re.compile(r"[.!?]\s+\S")
_TRAILING_OFF = re.compile(r"(\.\.\.|\u2026)\s*$")  # "So my question is..."
STORY_WORDS = 20  # a turn this long with several sentences is someone telling something
# How a sentence that asks or requests starts (after a lead such as "so" or "okay").
# fmt: off
_ASKING = frozenset((
    "what", "how", "why", "who", "whom", "whose", "where", "when", "which", "can", "could",
    "would", "will", "should", "shall", "is", "are", "am", "was", "were", "do", "does", "did",
    "have", "has", "may", "might", "isn't", "aren't", "don't", "doesn't", "didn't", "won't",
    "can't",
))
_IMPERATIVE = frozenset((
    "tell", "give", "explain", "describe", "list", "name", "say", "show", "recommend",
    "suggest", "help", "find", "play", "read", "write", "translate", "define", "compare",
    "summarize", "remind", "set", "call", "let", "let's", "make", "teach", "sing", "stop",
    "wait", "continue", "go", "repeat", "keep", "check", "look", "start", "turn", "open", "add",
    "calculate", "count", "spell", "guess", "imagine", "pick", "choose", "plan",
))
_LEADS = frozenset(("ok", "okay", "so", "and", "but", "now", "well", "oh", "hey", "um", "uh"))
_WANTS = (["i", "would", "like"], ["i'd", "like"], ["i", "want"], ["i", "need"])
# Words no sentence stops on, whatever mark Whisper puts after them: the speaker paused before
# what they lead to ("So my question is." scored 0.031, complete by a hair). A copula ends a
# question ("Can you tell me where it is?"), so it counts outside a question only.
_OPEN_ENDS = frozenset(("a", "an", "the", "my", "your", "our", "their", "and", "or", "because"))
_COPULAS = frozenset(("is", "are", "was", "were", "am"))
# fmt: on


def end_decision(
    p_end: float | None,
    cfg: ConversationConfig,
    text: str = "",
    p_audio: float | None = None,
    asr_logprob: float | None = None,
) -> str:
    """ "complete", "unsure" or "incomplete" from the LM's P(end of turn) (None: not scored),
    the speech's own P(end) (audio/prosody.py; None: not heard) and how clearly Whisper heard
    the words (``asr_logprob``, its mean log-probability per token; None: not measured).

    Speech that sounds cut (``p_audio`` below ``end_audio_cut``: no final lengthening or pitch
    movement on the last word) is "incomplete" unless the LM is sure of its end (``p_end`` at
    or above ``end_audio_gate``): Whisper completes a cut sentence on its own ("How far is the"
    -> "How far is that?"), which the LM reads as barely complete, while the speech's score
    alone would make a few complete questions wait too. Where the LM is sure and the speech
    still sounds cut, the two disagree: "unsure" (in real time "How far is that?" scored LM
    0.31-0.55 with the speech at 0.02-0.05, and its answer beat a 300 ms pause).
    A transcript that trails off ("So my question is...": Whisper's own mark for speech that
    stops mid-phrase) or stops on a word that leads to another (`stops_open`: "So my question
    is.") is "incomplete" under the same gate: the LM's score drops the marks, and read without
    them "So my question is" scored 0.031, complete by a hair.
    A long turn (20+ words, several sentences) that ends in a statement is at most "unsure":
    someone telling a story pauses ~300 ms between sentences, and each of them reads as a
    complete message (in bench/conversation.py's monologues every sentence ended the turn and
    was reopened); "Never mind that. Tell me about dragons." is not a story. So is a shorter
    turn whose last sentence tells something without asking or requesting (`tells_something`).
    An LM score between ``end_unlikely`` and ``end_likely`` on words Whisper barely heard
    (``asr_logprob`` below ``end_asr_logprob``) is "incomplete": the cut speech Whisper
    completes on its own ("How many legs does a" -> "How many lengths do I need?", -0.66) reads
    as barely complete, while a question heard clearly scores -0.05 to -0.3.
    """
    sure = p_end is not None and p_end >= cfg.end_audio_gate
    sounds_cut = p_audio is not None and p_audio < cfg.end_audio_cut
    if sounds_cut and not sure:
        return "incomplete"
    if (_TRAILING_OFF.search(text) or stops_open(text)) and not sure:
        return "incomplete"
    if p_end is None:
        return "unsure"
    if p_end < cfg.end_unlikely:
        return "incomplete"
    if p_end < cfg.end_likely:
        unclear = asr_logprob is not None and asr_logprob < cfg.end_asr_logprob
        return "incomplete" if unclear else "unsure"
    story = len(text.split()) >= STORY_WORDS and _SENTENCE_BREAK.search(text.strip())
    if story and not text.rstrip().endswith("?"):
        return "unsure"
    return "unsure" if sounds_cut or tells_something(text) else "complete"


def stops_open(text: str) -> bool:
    """Whether the transcript's last word leads to another: an article, a possessive, a
    conjunction, or outside a question a copula ("So my question is.")."""
    words = normalize(text).split()
    if not words:
        return False
    if words[-1] in _OPEN_ENDS:
        return True
    asked = text.rstrip().endswith("?") or _asks(_last_sentence(text))
    return words[-1] in _COPULAS and not asked


def tells_something(text: str) -> bool:
    """Whether the turn's last sentence is a statement that neither asks nor requests ("I am
    having six friends over for dinner on Saturday."): a speaker who sets the scene goes on
    after ~300 ms, and the LM reads the sentence as a whole message (in bench/conversation.py
    each monologue's first sentence ended its turn and the agent said "I'm")."""
    t = text.strip()
    if not t.endswith(".") or _TRAILING_OFF.search(t):
        return False
    return not _asks(_last_sentence(t))


def _last_sentence(text: str) -> list[str]:
    """The last sentence's words, lower case, without a lead such as "so" or "okay"."""
    words = [w.strip(",;:").lower() for w in re.split(r"(?<=[.!?])\s+", text.strip())[-1].split()]
    while words and words[0] in _LEADS:
        words = words[1:]
    return words


def _asks(words: list[str]) -> bool:
    """Whether a sentence's words ask or request (an empty one counts as asking: nothing told)."""
    if not words or "please" in words or any(words[: len(w)] == w for w in _WANTS):
        return True
    return words[0] in _ASKING or words[0] in _IMPERATIVE
