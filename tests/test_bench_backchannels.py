"""bench/backchannels.py: the turn manager's decision over an answer that plays."""

from __future__ import annotations

from bench.backchannels import LISTENER, TAKERS, decide
from dllm_voice.app.conversation.config import ConversationConfig
from dllm_voice.app.conversation.turns import TurnManager
from dllm_voice.audio.asr import Transcript


def heard(text: str, *alternatives: str) -> Transcript:
    return Transcript(text, text, True, 600.0, 70.0, alternatives=alternatives)


def test_decide_follows_the_words_and_the_beam():
    cfg = ConversationConfig()
    assert decide(TurnManager(cfg), 560, heard("Mm-hmm.")) == "resume"
    assert decide(TurnManager(cfg), 560, heard("Momentum.")) == "cancel"
    assert decide(TurnManager(cfg), 560, heard("I may turn.", "Mm-hm.")) == "resume"
    assert decide(TurnManager(cfg), 900, heard("Wait, what about Spain?")) == "cancel"
    assert decide(TurnManager(cfg), 60, heard("")) == "plays"  # too short to hold the answer


def test_the_lists_do_not_overlap():
    assert not set(LISTENER) & set(TAKERS)
