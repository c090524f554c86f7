"""bench/conversation.py: the text checks, the scripts' shape, and one short real run (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import conversation_metrics as m
from bench.conversation import analyze, chosen, summarize
from bench.conversation_scripts import SCRIPTS, Script, back, barge, q

ROOT = Path(__file__).resolve().parent.parent


def test_words_and_wer():
    assert m.words("Mm-hmm, OK. It's 8,848 m!") == ["mm", "hmm", "ok", "it's", "8", "848", "m"]
    assert m.wer("What is the capital of France?", "what is the capital of france") == 0.0
    assert m.wer("tell me a joke", "tell me that joe") == 0.5
    assert m.wer("a b", "") == 1.0 and m.wer("", "x") is None
    assert m.corpus_wer([("a b c d", "a b c d"), ("e f", "")]) == round(2 / 6, 4)
    # Contractions count as the words they stand for; "'s" (is, has or a possessive) stays.
    assert m.wer("I am sure we will not", "I'm sure we won't") == 0.0
    assert m.wer("it is", "it's") == 1.0


def test_repeats():
    a = "The capital of France is Paris, a city on the river Seine."
    assert m.repeats(a, "the capital of france is paris a city on the river seine")
    assert m.repeats("Sure!", "sure")
    assert not m.repeats("Sure!", "Sure, here it is.")
    assert m.repeats(a, a + " It has many museums and parks.")
    assert not m.repeats(a, "Berlin is the capital of Germany, on the river Spree.")
    assert not m.repeats("", a)


def test_loop():
    assert m.loop("Mars is red. Mars is a planet that has moons, a planet that has dust.") is None
    looping = "The rice is ready when the rice is soft and the rice is hot. So the rice is good."
    assert m.loop(looping) is None
    assert m.loop("You can add the rice to the pot. " * 3).startswith("'")
    assert m.loop("It is a cat here. Yes. It is a cat here.").startswith("sentence")
    assert m.loop("M.I.C.I.A.\n\nM.I.C.I.A. is a group.") is None


def test_continuation():
    heard = "The Roman Empire was a sprawling"
    rome = heard + " empire that spanned the Mediterranean. It began in Rome."
    assert m.continuation("The Roman Empire was a sprawling empire.", rome, heard)
    assert m.continuation("Sprawling empire that spanned the Mediterranean sea.", rome, heard)
    assert m.continuation("Well, the Roman Empire was a sprawling one.", rome, heard)
    assert m.continuation("Dragons are creatures of myth and legend.", rome, heard) is None
    assert m.continuation("The Roman Empire...", rome, "The Roman Empire")
    # An answer may echo the interrupting question: "ocean is the" was asked, not continued.
    cut, heard = "The biggest ocean is the Pacific Ocean.", "The biggest ocean is the"
    smallest = "The smallest ocean is the Antarctic Ocean."
    assert m.continuation(smallest, cut, heard)
    assert m.continuation(smallest, cut, heard, "Which ocean is the smallest?") is None


def test_keyword_hit():
    assert m.keyword_hit("Dragons are mythical.", ("dragon",))
    assert not m.keyword_hit("Snapdragons are flowers.", ("dragon",))
    assert m.keyword_hit("It is 8,848 metres high.", ("8",))


def test_scripts_cover_the_brief():
    assert len(SCRIPTS) >= 30
    assert len({s.name for s in SCRIPTS}) == len(SCRIPTS)
    kinds = [t.kind for s in SCRIPTS for t in s.turns]
    for kind in ("question", "follow_up", "barge_in", "backchannel", "monologue"):
        assert kind in kinds
    offsets = {t.at_ms for s in SCRIPTS for t in s.turns if t.kind == "barge_in"}
    assert {800, 1500, 3000} <= offsets
    assert any("max_turn_s" in o for s in SCRIPTS for o in s.overrides)
    assert any(v.endswith("/48k") for v in {s.voice for s in SCRIPTS})
    for s in SCRIPTS:
        assert s.turns[0].at_ms is None, s.name
        for prev, t in zip(s.turns, s.turns[1:], strict=False):
            if t.kind != "backchannel":
                assert t.keywords, (s.name, t.text)
            # A turn timed from the agent's latest answer needs an answer to the turn before.
            if t.at_ms is not None and not t.after_previous:
                assert prev.kind != "backchannel", (s.name, t.text)
            if t.after_previous:
                assert prev.at_ms is not None, (s.name, t.text)


def _ev(event, turn, playing, gen=0, **attrs):
    return {"event": event, "turn": turn, "gen": gen, "playing": playing, **attrs}


def test_analyze_ties_answers_to_turns():
    script = Script(
        "t",
        "piper",
        (
            q("Tell me about Rome.", "rom"),
            barge(800, "Never mind. Tell me about dragons.", "dragon"),
            back(1000, "Mm-hmm."),
        ),
    )
    heard = "The Roman Empire was"
    events = [
        _ev("speech_start", 1, 0),
        _ev("asr_final", 1, 0, text="Tell me about Rome."),
        _ev("speech_start", 2, 1),
        _ev("barge_in_hold", 1, 1, gen=1),
        _ev("barge_in", 1, 1, gen=1, heard=heard),
        _ev("turn_done", 1, 1, gen=1, status="cancelled", text=heard + " vast.", heard=heard),
        _ev("asr_final", 2, 1, gen=2, text="Never mind, tell me about dragons."),
        _ev(
            "turn_done",
            2,
            1,
            gen=3,
            status="completed",
            text=heard + " big.",
            heard=heard + " big.",
        ),
        _ev("speech_start", 3, 2, gen=3),
        _ev("barge_in_hold", 2, 2, gen=3),
        _ev("barge_in_resume", 2, 2, gen=3, reason="short"),
        _ev("asr_final", 3, 2, gen=3, text=""),
    ]
    conv = analyze(script, events, [1.0, 2.0, 0.5], forced=[])
    c = conv["counts"]
    assert (c["answers"], c["completed"], c["cancelled"], c["barge_ins"]) == (2, 1, 1, 1)
    assert (c["finals"], c["lost"], c["lost_questions"], c["holds"], c["resumes"]) == (
        2,
        1,
        0,
        2,
        1,
    )
    assert [t["answers"] for t in conv["turns"]] == [[1], [3], []]
    assert [t["keyword_hit"] for t in conv["turns"]] == [True, False, None]
    (b,) = conv["interruptions"]
    assert (b["by_turn"], b["by_kind"], b["answer_gen"]) == (1, "barge_in", 3)
    assert b["continues"] == "starts with the last heard words" and b["keyword_hit"] is False
    for t in conv["turns"]:
        t["whole_pass"] = t["transcript"]
    s = summarize([conv])
    assert s["continued_after_interruption"] == 1 and s["repeated_answers"] == 0
    assert s["topic_after_interruption"] == {"n": 1, "hits": 0, "rate": 0.0}
    assert s["heard_words_per_answer"] == {"median": 4.5, "max": 5}
    assert [d["defect"] for d in s["defects"]] == ["continues"]
    assert s["wer"]["pipeline"] == s["wer"]["whole_pass"]
    assert s["wer"]["by_kind"]["barge_in"]["pipeline"] == 0.0
    events = [e for e in events if e["event"] != "asr_final" or e["turn"] != 3]
    conv = analyze(script, events, [1.0, 2.0, 0.5], forced=[])
    assert conv["dropped_utterances"] == [{"turn": 2, "utterance": 3}]
    # A refinement after the final revises what the history kept, not the final.
    events.append(_ev("asr_refined", 1, 2, gen=3, text="Tell me about Rome"))
    turn = analyze(script, events, [1.0, 2.0, 0.5], forced=[])["turns"][0]
    assert (turn["transcript"], turn["kept"]) == ("Tell me about Rome.", "Tell me about Rome")


def test_an_answer_cut_by_a_reopened_turn_is_not_an_answer():
    script = Script("t", "piper", (q("Why is the sky blue? And why are sunsets red?", "blue"),))
    events = [
        _ev("speech_start", 1, 0),
        _ev("asr_final", 1, 0, gen=1, text="Why is the sky blue?"),
        _ev("reopen", 1, 0, gen=2),
        _ev("reopen_cancel", 1, 0, gen=1, heard=""),
        _ev("turn_done", 1, 0, gen=1, status="cancelled", text="The sky", heard=""),
        _ev("speech_start", 1, 0, gen=2),
        _ev("asr_final", 1, 0, gen=2, text="Why is the sky blue? And why are sunsets red?"),
        _ev("turn_done", 1, 0, gen=3, status="completed", text="Blue light.", heard="Blue light."),
    ]
    conv = analyze(script, events, [3.0], forced=[])
    c = conv["counts"]
    assert (c["answers"], c["reopened"], c["completed"], c["cancelled"]) == (1, 1, 1, 0)
    assert c["blurts"] == 0  # cut before its audio started
    assert conv["turns"][0]["transcript"] == "Why is the sky blue? And why are sunsets red?"
    assert conv["turns"][0]["answers"] == [3]
    # The same reopen after the answer's first word was heard: a blurt, listed as a defect.
    events[3] = _ev("reopen_cancel", 1, 0, gen=1, heard="The", audible=True)
    events[4] = _ev("turn_done", 1, 0, gen=1, status="cancelled", text="The sky", heard="The")
    blurted = analyze(script, events, [3.0], forced=[])
    assert blurted["counts"]["blurts"] == 1 and blurted["counts"]["answers"] == 1
    assert summarize([blurted])["defects"] == [
        {"conversation": "t", "defect": "blurt", "gen": 1, "turn": 0, "heard": "The"}
    ]


def test_lead_in_interruptions_pause_between_lead_in_and_request():
    leads = [s for s in SCRIPTS if chosen(s.name, ["lead-in-*"])]
    assert len(leads) >= 10
    for s in leads:
        turn = s.turns[-1]
        assert turn.kind == "barge_in" and len(turn.sentences) == 2
        assert turn.gap_ms is not None and 400 <= turn.gap_ms <= 800
    assert len({s.voice for s in leads}) >= 5


@pytest.mark.slow
def test_short_run_prints_the_fields(tmp_path):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "bench.conversation", "--only",
           "barge-800-dragons", "--set", "lm.max_new_tokens=24", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout)
    assert r == json.loads(out.read_text())
    assert r["conversations_run"] == 1 and len(r["per_conversation"]) == 1
    s = r["summary"]
    keys = ("repeated_answers", "looping_answers", "continued_after_interruption",
            "topic_after_interruption", "heard_words_per_answer", "wer", "defects")  # fmt: skip
    assert set(keys) <= set(s)
    c = s["counts"]
    assert c["user_turns"] == 2 and c["barge_ins_scripted"] == 1
    assert c["finals"] == 2 and c["answers"] >= 2
    assert c["completed"] + c["cancelled"] == c["answers"]
    assert s["wer"]["pipeline"] is not None and s["wer"]["whole_pass"] is not None
    turn = r["per_conversation"][0]["turns"][0]
    assert {"said", "transcript", "wer", "whole_pass", "whole_pass_wer"} <= set(turn)


def test_an_answer_to_a_lead_in_cut_by_the_rest_of_its_turn_is_a_blurt():
    """ "Wait." was answered aloud ("The") and the request after it cut that answer as a
    barge-in: the agent answered half a turn, a blurt (not the new request's interruption)."""
    turns = (q("Tell me about Rome.", "rom"), barge(800, "Wait. Tell me about dragons.", "dragon"))
    script = Script("t", "piper", turns)
    events = [
        _ev("speech_start", 1, 0),
        _ev("asr_final", 1, 0, text="Tell me about Rome."),
        _ev("speech_start", 2, 1),
        _ev("barge_in", 1, 1, gen=1, heard="Rome was"),
        _ev("turn_done", 1, 1, gen=1, status="cancelled", text="Rome was big.", heard="Rome was"),
        _ev("asr_final", 2, 1, gen=2, text="Wait."),
        _ev("speech_start", 3, 1, gen=3),
        _ev("barge_in", 2, 1, gen=3, heard="The"),
        _ev("turn_done", 2, 1, gen=3, status="cancelled", text="The empire.", heard="The"),
        _ev("asr_final", 3, 1, gen=4, text="Tell me about dragons."),
        _ev("turn_done", 3, 1, gen=5, status="completed", text="Dragons.", heard="Dragons."),
    ]
    conv = analyze(script, events, [1.0, 2.0], forced=[])
    assert conv["counts"]["blurts"] == 1
    assert [d["gen"] for d in summarize([conv])["defects"] if d["defect"] == "blurt"] == [3]
