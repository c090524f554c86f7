"""Turn manager decisions: speculation hit/refine/miss, barge-in hold/confirm/reject, history."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dllm_voice.app.conversation.actions import (
    CancelAnswer,
    DropSpeculation,
    HoldPlayback,
    ReleaseSpeculation,
    ReopenTurn,
    RequestPartial,
    ResumePlayback,
    ScoreEnd,
    StartAnswer,
    StartSpeculation,
)
from dllm_voice.app.conversation.config import (
    BargeInConfig,
    ConversationConfig,
    EndOfTurnConfig,
    SpeculationConfig,
)
from dllm_voice.app.conversation.end_of_turn import (
    audible_after,
    end_decision,
    names_a_call,
    silence_ms,
    takes_floor,
)
from dllm_voice.app.conversation.history import History, new_subject, words_of_turn
from dllm_voice.app.conversation.text import normalize
from dllm_voice.app.conversation.turns import TurnManager

CFG = ConversationConfig(system_prompt="Be brief.")
END = EndOfTurnConfig()
FIXED = EndOfTurnConfig(mode="fixed")


def kinds(actions):
    return [type(a).__name__ for a in actions]


def user_turn(tm: TurnManager, text: str, onset: float = 0.0):
    """speech_start .. speech_end .. final, no pause; returns the final's actions."""
    tm.on_speech_start(onset)
    tm.on_speech_end()
    return tm.on_final(text)


def test_normalize():
    assert normalize("What is the capital of France?") == "what is the capital of france"
    assert normalize("  Mm-hmm. ") == "mm hmm"
    assert normalize("It's 3.5, OK!") == "it's 3 5 ok"


def test_plain_turn_starts_answer_with_system_and_user():
    tm = TurnManager(CFG)
    (act,) = user_turn(tm, "Hello there")
    assert isinstance(act, StartAnswer) and act.refine_of is None
    assert act.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
    ]
    assert tm.agent == "thinking" and tm.answer_gen == act.gen


def test_speculation_hit_releases_prepared_answer():
    tm = TurnManager(CFG)
    tm.on_speech_start(0)
    assert kinds(tm.on_pause()) == ["RequestPartial"]
    (spec,) = tm.on_partial("What is the capital of France")
    assert isinstance(spec, StartSpeculation)
    assert spec.messages[-1] == {"role": "user", "content": "What is the capital of France"}
    tm.on_speech_end()
    (rel,) = tm.on_final("What is the capital of France?")
    assert rel == ReleaseSpeculation(spec.gen)
    assert tm.answer_gen == spec.gen


def test_speculation_changed_final_refines_with_spec_gen():
    tm = TurnManager(CFG)
    tm.on_speech_start(0)
    tm.on_pause()
    (spec,) = tm.on_partial("What is the capital")
    tm.on_speech_end()
    (ans,) = tm.on_final("What is the capital of Spain?")
    assert isinstance(ans, StartAnswer) and ans.refine_of == spec.gen
    assert ans.gen != spec.gen
    assert ans.messages[-1]["content"] == "What is the capital of Spain?"


def test_resume_drops_speculation_as_miss_then_speculates_again():
    tm = TurnManager(CFG)
    tm.on_speech_start(0)
    tm.on_pause()
    (spec,) = tm.on_partial("Tell me about")
    assert tm.on_resume() == [DropSpeculation(spec.gen, "resume")]
    assert tm.on_partial("Tell me about the moon") == []  # not paused: no speculation
    # The pause guesses at once on the words heard before it; its pass agrees: no other guess.
    spec2, ask = tm.on_pause()
    assert spec2.user_text == "Tell me about the moon" and ask == RequestPartial(tm.gen)
    assert tm.on_partial("Tell me about the moon") == []
    assert spec2.gen > spec.gen
    tm.on_speech_end()
    assert tm.on_final("tell me about the moon") == [ReleaseSpeculation(spec2.gen)]


def test_speculation_needs_min_words_and_can_be_disabled():
    tm = TurnManager(CFG, speculation=SpeculationConfig(min_words=3))
    tm.on_speech_start(0)
    tm.on_pause()
    assert tm.on_partial("Hello there") == []
    tm = TurnManager(CFG, FIXED, SpeculationConfig(enabled=False))
    tm.on_speech_start(0)
    assert tm.on_pause() == []
    assert tm.on_partial("What is the capital of France") == []
    tm = TurnManager(
        CFG, speculation=SpeculationConfig(enabled=False)
    )  # the pass still feeds the score
    tm.on_speech_start(0)
    assert tm.on_pause() == [RequestPartial(tm.gen)]
    assert kinds(tm.on_partial("What is the capital of France", complete=True)) == ["ScoreEnd"]


def start_speaking(tm: TurnManager, text="Hi") -> int:
    (ans,) = user_turn(tm, text)
    tm.on_audio_started(ans.gen)
    return ans.gen


def speak_over(tm: TurnManager, onset: float, ms: float) -> None:
    """Speech over the answer from ``onset``, ``ms`` long so far (held, and long enough to need
    its words)."""
    tm.on_speech_start(onset)
    tm.on_speech_progress(onset + 100)
    tm.on_speech_progress(onset + ms)


def test_barge_in_holds_then_confirms_on_words():
    played = {}
    tm = TurnManager(CFG, heard=lambda gen: played.get(gen, ""))
    gen = start_speaking(tm)
    played[gen] = "Hello, how"
    tm.on_speech_start(1000)
    assert tm.on_speech_progress(1060) == []
    assert tm.on_speech_progress(1090) == [HoldPlayback(gen)]
    assert tm.on_speech_progress(1120) == []  # held once
    assert tm.on_partial("wait") == []  # too short yet to take the turn
    tm.on_speech_progress(1400)
    assert tm.on_partial("wait a second") == [CancelAnswer(gen)]
    assert tm.agent == "idle" and tm.gen > gen
    tm.on_speech_end()
    (ans,) = tm.on_final("Wait a second, tell me more.")
    assert isinstance(ans, StartAnswer)
    assert ans.messages[-2:] == [
        {"role": "assistant", "content": "Hello, how..."},
        {"role": "user", "content": "Wait a second, tell me more."},
    ]
    assert tm.history.messages[-2].interrupted


def test_short_noise_and_backchannel_resume_playback():
    tm = TurnManager(CFG)
    gen = start_speaking(tm)
    tm.on_speech_start(1000)
    assert tm.on_speech_progress(1150) == [HoldPlayback(gen)]
    assert tm.on_pause() == []  # held through the pause: speech may go on ("Wait, ...")
    assert tm.on_speech_end() == []  # 150 ms: its words decide
    assert tm.on_final("") == [ResumePlayback(gen, "short")]  # a cough
    # "mm-hmm", long enough to need a transcript
    tm.on_speech_start(3000)
    tm.on_speech_progress(3100)
    tm.on_speech_progress(3500)
    assert tm.on_partial("Mm-hmm.") == []
    assert tm.on_pause() == [RequestPartial(tm.gen)]
    tm.on_speech_end()
    assert tm.on_final("Mm-hmm.") == [ResumePlayback(gen, "backchannel")]
    assert tm.agent == "speaking" and tm.answer_gen == gen
    tm.on_answer_done(gen, "Hello there, nice to meet you.")
    assert tm.agent == "idle"
    assert [m.role for m in tm.history.messages] == ["user", "assistant"]


@pytest.mark.parametrize(
    ("heard", "logprob", "stops"),
    [
        ("No.", -0.33, True),
        ("Why?", -0.45, True),
        ("What?", -0.96, True),
        ("Time.", -1.27, False),  # "Hmm." heard unclearly
        ("That's it.", -1.37, False),  # a cough
        ("Mm.", -0.5, False),
        ("", None, False),
    ],
)
def test_a_short_interruption_stops_the_answer_when_heard_clearly(heard, logprob, stops):
    """Speech over the answer that ends before confirm_ms is held until its final: a short
    "No." said clearly stops the answer, a hum or a cough lets it play on."""
    tm = TurnManager(CFG)
    gen = start_speaking(tm)
    tm.on_speech_start(1000)
    assert tm.on_speech_progress(1150) == [HoldPlayback(gen)]
    assert tm.on_speech_end(1260) == []
    got = tm.on_final(heard, logprob=logprob)
    assert got[0] == (CancelAnswer(gen) if stops else ResumePlayback(gen, "short"))
    assert (tm.answer_gen != gen) if stops else (tm.answer_gen == gen and tm.agent == "speaking")


def test_speech_right_after_a_short_interruption_continues_it():
    """ "Wait," let go as short at its comma's pause, then "which ocean is the smallest?": one
    utterance (the transcriber hears both), counted from the first onset."""
    tm = TurnManager(CFG, heard=lambda gen: "The Pacific")
    gen = start_speaking(tm)
    turn = tm.turn
    tm.on_speech_start(1000)
    assert tm.on_speech_progress(1150) == [HoldPlayback(gen)]
    assert tm.on_speech_end(1250) == []  # held for its final, which the rest comes before
    assert tm.on_speech_start(1250 + END.reopen_ms) == [] and tm.rejoined
    assert tm.turn == turn + 1  # the interruption's turn, not a new one
    assert tm.on_speech_progress(2100) == []  # still held
    assert tm.on_partial("Wait, which ocean") == [CancelAnswer(gen)]
    tm.on_speech_end(3000)
    (ans,) = tm.on_final("Wait, which ocean is the smallest?")
    assert ans.messages[-1] == {"role": "user", "content": "Wait, which ocean is the smallest?"}
    # Later, or once the answer was heard whole, speech is a new utterance.
    tm.on_audio_started(ans.gen)
    for onset in (9000, 9250 + END.reopen_ms + 1):
        tm.on_speech_start(onset)
        assert not tm.rejoined
        assert tm.on_speech_progress(onset + 150) == [HoldPlayback(ans.gen)]
        assert tm.on_speech_end(onset + 250) == []
        assert tm.on_final("") == [ResumePlayback(ans.gen, "short")]
    assert tm.on_answer_done(ans.gen, "The Arctic.") == []
    tm.on_speech_start(10200)
    assert not tm.rejoined


def test_speech_right_after_an_interruption_taken_as_the_turn_reopens_it():
    """ "And the oceans." was transcribed, confirmed and is being answered when "which one is
    the smallest?" comes: that answer is taken back and the whole interruption gets one."""
    tm = TurnManager(CFG, heard=lambda gen: "The Pacific")
    gen = start_speaking(tm)
    tm.on_speech_start(1000)
    tm.on_speech_progress(1400)
    tm.on_speech_end(1900)
    (cancel, first) = tm.on_final("And the oceans.")
    assert cancel == CancelAnswer(gen) and isinstance(first, StartAnswer)
    (taken_back,) = tm.on_speech_start(2500)
    assert taken_back == ReopenTurn(first.gen) and tm.reopened and tm.agent == "idle"
    tm.on_speech_end(3500)
    (ans,) = tm.on_final("And the oceans, which one is the smallest?")
    assert [m.content for m in tm.history.messages][-2:] == [
        "The Pacific",
        "And the oceans, which one is the smallest?",
    ]


@pytest.mark.parametrize(
    "lead_in",
    ["Wait.", "Actually, never mind that.", "Hold on.", "No, no, please stop.", "Forget about it.",
     "Hmm, you know what?", "Alright, that's enough.", "Shh."],
)  # fmt: skip
def test_an_interruption_of_lead_ins_alone_stops_the_agent_and_answers_nothing(lead_in):
    """The user took the floor with "Wait.": the agent stops and listens; the request that
    follows is the turn it answers (answered at once, "Wait." got "The" and was cut)."""
    tm = TurnManager(CFG, heard=lambda gen: "The Pacific")
    gen = start_speaking(tm)
    tm.on_speech_start(1000)
    tm.on_speech_progress(1400)
    tm.on_speech_end(1900)
    assert tm.on_final(lead_in) == [CancelAnswer(gen)]
    assert tm.agent == "idle" and tm.answer_gen is None
    assert tm.on_speech_start(2500) == [] and not tm.reopened
    tm.on_speech_end(3500)
    (ans,) = tm.on_final("Which ocean is the smallest?")
    assert isinstance(ans, StartAnswer)
    assert [m.content for m in tm.history.messages][-2:] == [
        "The Pacific",
        "Which ocean is the smallest?",
    ]
    # Outside an interruption the same words are a turn like any other (the end of turn waits
    # for more: leads_in).
    tm = TurnManager(CFG, FIXED)
    tm.on_speech_start(0)
    tm.on_speech_end(700)
    assert isinstance(tm.on_final(lead_in)[0], StartAnswer)


def test_speech_before_the_last_final_continues_that_utterance():
    tm = TurnManager(CFG, FIXED)
    tm.on_speech_start(0)
    tm.on_speech_end(700)
    assert tm.on_speech_start(1300, unheard=True) == [] and tm.rejoined and tm.turn == 1
    tm.on_speech_end(2000)
    (ans,) = tm.on_final("What's the weather in Paris?")
    assert isinstance(ans, StartAnswer) and tm.history.messages[-1].content.endswith("Paris?")
    tm.on_audio_started(ans.gen)
    tm.on_answer_done(ans.gen, "Sunny.")
    # While the agent speaks: the interruption that awaits its words goes on from its onset.
    gen = start_speaking(tm)
    tm.on_speech_start(5000)
    assert tm.on_speech_progress(5350) == [HoldPlayback(gen)]
    tm.on_speech_end(5400)  # long enough to need its transcript: held
    assert tm.on_speech_start(6000, unheard=True) == [] and tm.barging.current.onset_ms == 5000
    assert tm.on_partial("Wait, which ocean") == [CancelAnswer(gen)]


def test_echo_guard_raises_hold_threshold_only_while_speaking():
    tm = TurnManager(CFG, barge_in=BargeInConfig(echo_guard_ms=200))
    gen = start_speaking(tm)
    tm.on_speech_start(0)
    assert tm.on_speech_progress(150) == []
    assert tm.on_speech_progress(290) == [HoldPlayback(gen)]


def test_talking_while_agent_thinks_merges_user_messages():
    tm = TurnManager(CFG)
    (ans,) = user_turn(tm, "What is")
    tm.on_speech_start(0)
    assert tm.on_speech_progress(100) == [HoldPlayback(ans.gen)]
    tm.on_speech_progress(600)
    tm.on_speech_end()
    acts = tm.on_final("the capital of France?")
    assert kinds(acts) == ["CancelAnswer", "StartAnswer"]
    assert acts[1].messages[-1] == {"role": "user", "content": "What is the capital of France?"}


def test_answer_done_records_history_and_explicit_cancel():
    tm = TurnManager(CFG, heard=lambda gen: "Paris is")
    gen = start_speaking(tm, "Capital of France?")
    assert tm.cancel_answer() == [CancelAnswer(gen)]
    assert tm.history.messages[-1].content == "Paris is"
    assert tm.on_answer_done(gen, "Paris is the capital.") == []  # already recorded
    assert len(tm.history.messages) == 2


def test_revised_user_words_replace_the_newest_message_holding_them():
    h = History(budget_tokens=100)
    h.add_user("my dog nob barks")
    h.add_assistant("Dogs do.", interrupted=False)
    h.add_user("Wait.")
    h.add_user("my dog nob barks")  # absorbed into the unanswered "Wait."
    assert h.revise_user("my dog nob barks", "my dog Bob barks")
    assert [m.content for m in h.messages] == [
        "my dog nob barks",
        "Dogs do.",
        "Wait. my dog Bob barks",
    ]
    assert not h.revise_user("not said", "anything") and not h.revise_user("", "x")


def test_the_words_of_a_turn_carry_an_earlier_message_no_answer_was_heard_to():
    h = History(budget_tokens=100)
    h.add_user("Two cups of milk.")  # its answer cut before a word played
    prompt = h.prompt("sys", "roughly how many milliliters?")
    said = words_of_turn("roughly how many milliliters?", prompt)
    assert said == "Two cups of milk. roughly how many milliliters?"
    h.note_tool("set_timer", "Timer set for 5 minutes.")  # a call of that message ran
    prompt = h.prompt("sys", "for the eggs")
    assert words_of_turn("for the eggs", prompt) == "for the eggs"
    assert words_of_turn("other words", prompt) == "other words"


def test_a_turn_the_user_cut_is_what_the_next_may_go_on_from():
    h = History(budget_tokens=100)
    h.add_user("Two cups of milk.")
    h.add_assistant("Milk is", interrupted=True)
    assert h.cut_short() == "Two cups of milk."
    h.add_user("roughly how many milliliters?")  # committed: still the turn before it
    assert h.cut_short() == "Two cups of milk."
    h.add_assistant("2 cups is 473.2 milliliters.", interrupted=False)
    assert h.cut_short() == ""  # heard whole
    h.add_user("Set a timer for five minutes.")
    h.note_tool("set_timer", "Timer set for 5 minutes.")
    h.add_assistant("Timer set", interrupted=True)
    assert h.cut_short() == ""  # its call ran: never read again
    assert new_subject("Never mind, tell me a joke.") and not new_subject("Roughly how much?")


def test_history_budget_drops_oldest_whole_turns():
    h = History(budget_tokens=12, count_tokens=lambda t: len(t.split()))
    for i in range(5):
        h.add_user(f"question number {i}")
        h.add_assistant(f"answer number {i}", interrupted=False)
    msgs = h.prompt("sys", "last question here")
    assert msgs[0]["role"] == "system" and msgs[-1]["content"] == "last question here"
    body = msgs[1:-1]
    assert body[0]["role"] == "user"  # never an orphan answer first
    assert sum(len(m["content"].split()) for m in msgs[1:]) <= 12
    assert body[-1]["content"] == "answer number 4"


def test_backchannel_alone_never_starts_a_turn():
    tm = TurnManager(CFG)
    assert user_turn(tm, "Mm-hmm.") == []
    assert tm.agent == "idle" and tm.history.messages == []


def test_echo_guard_rejects_the_agents_own_words():
    tm = TurnManager(
        CFG,
        barge_in=BargeInConfig(echo_guard_ms=100),
        heard=lambda gen: "The capital of France is Paris, a city",
    )
    gen = start_speaking(tm)
    tm.on_speech_start(0)
    assert tm.on_speech_progress(200) == [HoldPlayback(gen)]
    tm.on_speech_progress(700)
    assert tm.on_partial("France is Paris") == []  # the agent's voice through the speakers
    assert tm.on_partial("No, I meant Spain") == [CancelAnswer(gen)]


def test_pause_speculates_on_latest_partial_and_fresh_pass_replaces_it():
    tm = TurnManager(CFG, speculation=SpeculationConfig(on_last_partial=True))
    tm.on_speech_start(0)
    tm.on_partial("What is the capital of")
    spec, _ = tm.on_pause()
    assert spec.user_text == "What is the capital of"
    drop, spec2 = tm.on_partial("What is the capital of France?")
    assert drop == DropSpeculation(spec.gen, "changed") and isinstance(spec2, StartSpeculation)
    tm.on_speech_end()
    assert tm.on_final("What is the capital of France") == [ReleaseSpeculation(spec2.gen)]


def test_barge_in_with_a_comma_pause_accumulates_speech():
    tm = TurnManager(CFG)
    gen = start_speaking(tm)
    tm.on_speech_start(0)
    assert tm.on_speech_progress(100) == [HoldPlayback(gen)]
    assert tm.on_pause(end_ms=240) == []  # "Wait," then a comma pause: still held
    tm.on_resume()
    tm.on_speech_progress(900)
    assert tm.on_partial("Wait, tell me about Spain") == [CancelAnswer(gen)]


def test_a_partial_confirms_an_interruption_on_its_stable_words_only():
    tm = TurnManager(CFG, heard=lambda gen: "The Great Wall")
    gen = start_speaking(tm)
    speak_over(tm, 0, 400)
    assert tm.on_partial("What the fuck?", stable="") == []  # one pass over an "uh-huh"
    assert tm.on_final("") == [ResumePlayback(gen, "backchannel")]
    speak_over(tm, 5000, 400)
    assert tm.on_partial("Wait, tell me about", stable="Wait, tell me") == [CancelAnswer(gen)]


def test_end_decision_thresholds():
    cfg = replace(END, likely=0.5, unlikely=0.05)
    assert end_decision(0.7, cfg) == "complete" and end_decision(0.5, cfg) == "complete"
    assert end_decision(0.2, cfg) == "unsure" and end_decision(None, cfg) == "unsure"
    assert end_decision(0.01, cfg) == "incomplete"
    assert end_decision(0.01, END) == "unsure"  # the defaults: 0.03 and 0.002
    story = "We moved into a house with a big garden last year. The kids have been asking "
    story += "for a dog for about two years now."
    assert end_decision(0.9, END, "Never mind that. Tell me about dragons.") == "complete"
    assert end_decision(0.9, END, story) == "unsure"  # a story goes on between sentences
    assert end_decision(0.9, END, story + " Which breed is best?") == "complete"
    assert end_decision(0.9, END, "Tell me a joke.") == "complete"


@pytest.mark.parametrize(
    ("text", "decision"),
    [
        ("I am having six friends over for dinner on Saturday.", "unsure"),  # sets the scene
        ("Work has been really stressful for the last few weeks.", "unsure"),
        ("Thanks.", "unsure"),
        ("Tell me a joke.", "complete"),  # a request
        ("So, give me a quick tip for sleeping better.", "complete"),
        ("I would like to learn to play the guitar.", "complete"),
        ("I need a name for my new puppy.", "complete"),
        ("Okay, please help me with my homework.", "complete"),
        ("What is the fastest land animal.", "complete"),  # a question Whisper ended with "."
        ("I have two kids. What dog should we get?", "complete"),
        ("Never mind that. Tell me about dragons.", "complete"),
    ],
)
def test_a_statement_that_neither_asks_nor_requests_is_at_most_unsure(text, decision):
    assert end_decision(0.9, END, text) == decision


@pytest.mark.parametrize(
    ("text", "p_end", "p_audio", "logprob", "decision"),
    [
        # The LM reads object-final requests as unfinished ("Can you recommend a book?" 0.0002)
        ("Can you recommend a book?", 0.0002, 0.7, -0.1, "unsure"),
        ("Name three fruits.", 0.0019, None, None, "unsure"),
        ("So, suggest a podcast.", 0.0004, 0.7, -0.2, "unsure"),
        ("Where's the nearest beach?", 0.01, 0.1, -0.3, "unsure"),  # sounds cut, heard clearly
        ("Name three fruits.", 0.0019, 0.7, -0.9, "unsure"),  # a request however heard
        ("Where's the nearest beach?", 0.01, 0.7, -0.9, "incomplete"),  # a question, unclear
        ("What is the tallest?", 0.0001, 0.5, -0.1, "incomplete"),  # a cut head, read so
        ("Which planet has this?", 0.0001, 0.5, -0.1, "incomplete"),  # ends on a function word
        ("Give me a quick tip for?", 0.0005, 0.7, -0.1, "incomplete"),
        ("Can you tell me how to?", 0.0005, 0.7, -0.1, "incomplete"),
        ("Tell me about the history of the Roman Empire and its fall.", 0.0001, 0.7, -0.1,
         "incomplete"),  # too long to be said in one breath
    ],
)  # fmt: skip
def test_a_short_ask_never_waits_the_long_wait(text, p_end, p_audio, logprob, decision):
    assert end_decision(p_end, END, text, p_audio, logprob) == decision


@pytest.mark.parametrize(
    "text",
    ["Actually, never mind that,", "Wait.", "So", "Hold on a second.", "Sorry, I meant",
     "Oh, and also", "Well, actually,", "Let me think."],
)  # fmt: skip
def test_a_lead_in_alone_expects_the_request_after_it(text):
    assert end_decision(0.9, END, text, 0.9, -0.1) == "incomplete"


@pytest.mark.parametrize(
    "text", ["No, hold on.", "Okay, so", "Hmm, you know what?", "Yeah, and one more thing,"]
)
def test_a_lead_in_after_an_acknowledgement_expects_the_request_too(text):
    assert end_decision(0.9, END, text, 0.9, -0.1) == "incomplete"


@pytest.mark.parametrize(
    "text",
    ["Wait, tell me about Rome.", "Okay.", "No.", "So what?", "Yes.", "No, no.", "Okay, stop.",
     "You know what I'd like?"],
)  # fmt: skip
def test_a_lead_in_with_more_after_it_is_judged_as_usual(text):
    assert end_decision(0.9, END, text, 0.9, -0.1) != "incomplete"


@pytest.mark.parametrize(
    ("text", "floor"),
    [
        ("Stop.", True), ("Okay, okay, stop.", True), ("Oh, forget it.", True),
        ("Cancel that, please.", True), ("Never mind.", True), ("No.", True),
        ("Stop the timer.", False), ("Cancel my alarm.", False), ("No, the Atlantic.", False),
        ("Okay.", False), ("Forget the pasta timer.", False), ("That's enough salt?", False),
    ],
)  # fmt: skip
def test_words_that_tell_the_agent_to_stop_take_the_floor_and_ask_nothing(text, floor):
    assert takes_floor(text) is floor


def test_a_transcript_that_trails_off_waits_unless_the_lm_is_sure():
    # Whisper's "..." on "So my question is, um": the LM, reading no marks, scored it 0.031.
    assert end_decision(0.031, END, "So my question is...") == "incomplete"
    assert end_decision(0.031, END, "So my question is\u2026 ") == "incomplete"
    assert end_decision(END.audio_gate, END, "Well, I guess that is it...") == "complete"


@pytest.mark.parametrize(
    ("text", "decision"),
    [
        ("So my question is.", "incomplete"),  # Whisper's period on a 600 ms pause: 0.031
        ("The thing is", "incomplete"),
        ("What is the difference between a frog and a?", "incomplete"),
        ("I want to visit Paris and.", "incomplete"),
        ("Tell me about your", "incomplete"),
        ("Can you tell me where it is?", "complete"),  # a copula ends a question
        ("Do you know what a black hole is?", "complete"),
        ("Tell me what the weather is like.", "complete"),
    ],
)
def test_a_transcript_that_stops_on_a_word_leading_to_another_waits(text, decision):
    assert end_decision(0.031, END, text) == decision
    assert end_decision(END.audio_gate, END, text) != "incomplete"  # unless the LM is sure


def test_speech_that_sounds_cut_is_incomplete_whatever_its_transcript():
    cfg = replace(END, audio_cut=0.2, audio_gate=0.1)
    # Whisper completed "How far is the" on its own; the LM reads it as barely complete.
    text = "How far is that?"
    assert end_decision(0.05, cfg, text, p_audio=0.05) == "incomplete"
    assert end_decision(0.05, cfg, text, p_audio=0.2) == "complete"  # at the threshold: heard
    assert end_decision(0.05, cfg, text, p_audio=None) == "complete"  # not heard: the LM alone
    assert end_decision(0.1, cfg, text, p_audio=0.05) == "unsure"  # the LM is sure: they disagree
    assert end_decision(0.9, cfg, text, p_audio=0.05) == "unsure"
    assert end_decision(0.01, cfg, text, p_audio=0.1) == "incomplete"
    assert end_decision(None, cfg, text, p_audio=0.1) == "incomplete"
    assert end_decision(None, cfg, text, p_audio=0.9) == "unsure"  # sounding final is not enough
    tm = TurnManager(CFG, cfg)
    tm.on_speech_start(0)
    tm.on_pause()
    tm.on_partial(text, complete=True)
    assert tm.on_end_score(text, 0.05, p_audio=0.05) == "incomplete"
    assert tm.ending.decision == "incomplete"


def test_an_unsure_lm_score_on_words_whisper_barely_heard_is_incomplete():
    # "How many legs does a" heard as "How many lengths do I need?": LM 0.003, Whisper -0.66.
    text, low = "How many lengths do I need?", END.asr_logprob - 0.16
    assert end_decision(0.003, END, text) == "unsure"
    assert end_decision(0.003, END, text, asr_logprob=low) == "incomplete"
    assert end_decision(0.003, END, text, asr_logprob=END.asr_logprob) == "unsure"
    # Only the LM's unsure band: a score it reads as complete stays complete.
    assert end_decision(END.likely, END, text, asr_logprob=low) == "complete"
    off = replace(END, asr_logprob=-100.0)
    assert end_decision(0.003, off, text, asr_logprob=low) == "unsure"
    tm = TurnManager(CFG)
    tm.on_speech_start(0)
    tm.on_pause()
    tm.on_partial(text, complete=True)
    assert tm.on_end_score(text, 0.003, asr_logprob=low) == "incomplete"


def test_adaptive_scores_each_new_pause_transcript_with_its_speculation():
    tm = TurnManager(CFG)  # end_of_turn.mode: adaptive
    tm.on_speech_start(0)
    assert tm.on_pause() == [RequestPartial(tm.gen)]
    (spec,) = tm.on_partial("What is the capital of France?", complete=True)
    assert isinstance(spec, StartSpeculation) and spec.score  # its first forward scores it
    assert tm.on_partial("What is the capital of France?", complete=True) == []  # once a text
    assert tm.on_end_score("What is the capital of France?", 0.8) == "complete"
    tm.on_resume()
    assert tm.on_end_score("What is the capital of France?", 0.8) is None  # pause over
    tm = TurnManager(CFG, FIXED)
    tm.on_speech_start(0)
    tm.on_pause()
    (spec,) = tm.on_partial("What is it?", complete=True)
    assert isinstance(spec, StartSpeculation) and not spec.score
    tm = TurnManager(CFG)  # too few words to speculate on: the LM scores them alone
    tm.on_speech_start(0)
    tm.on_pause()
    (score,) = tm.on_partial("Thanks.", complete=True)
    assert isinstance(score, ScoreEnd) and score.messages[-1]["content"] == "Thanks."


def early_end(
    tm: TurnManager,
    text: str,
    end_ms: float = 1000.0,
    p_end: float = 0.9,
    p_audio: float | None = None,
) -> int:
    """A turn the LM judged complete at its pause, ended early; returns the answer's gen."""
    tm.on_speech_start(0)
    tm.on_pause()
    (spec,) = tm.on_partial(text, complete=True)
    tm.on_end_score(text, p_end, p_audio)
    tm.on_speech_end(end_ms)
    assert tm.on_final(text) == [ReleaseSpeculation(spec.gen)]
    return spec.gen


def test_speech_right_after_an_early_end_reopens_the_turn():
    tm = TurnManager(CFG, heard=lambda gen: "The capital")
    gen = early_end(tm, "What is the capital?")
    tm.on_audio_started(gen)
    turn = tm.turn
    onset = 1000 + END.reopen_ms - 10
    # The answer is heard: held at once, taken back once the speech lasts like words.
    assert tm.on_speech_start(onset) == [HoldPlayback(gen)]
    assert tm.on_speech_progress(onset + BargeInConfig().confirm_ms - 10) == []
    assert tm.on_speech_progress(onset + BargeInConfig().confirm_ms) == [ReopenTurn(gen)]
    assert tm.reopened and tm.turn == turn and tm.agent == "idle" and tm.barging.current is None
    assert tm.history.messages == []  # taken back; nothing of the answer counts as said
    tm.on_pause()
    tm.on_partial("What is the capital of France?", complete=True)
    tm.on_speech_end(3000)
    (ans,) = tm.on_final("What is the capital of France?")
    assert isinstance(ans, ReleaseSpeculation)
    assert [m.content for m in tm.history.messages] == ["What is the capital of France?"]


def test_a_cough_right_after_an_early_end_lets_the_answer_play_on():
    tm = TurnManager(CFG, heard=lambda gen: "Paris is")
    gen = early_end(tm, "What is the capital of France?")
    tm.on_audio_started(gen)
    assert tm.on_speech_start(1200) == [HoldPlayback(gen)]
    assert tm.on_speech_progress(1300) == []
    assert tm.on_speech_end(1350) == [ResumePlayback(gen, "short")]
    assert tm.agent == "speaking" and tm.answer_gen == gen
    assert tm.on_final("What is the capital of France? Ahem.") == []  # its final changes nothing
    assert [m.content for m in tm.history.messages] == ["What is the capital of France?"]
    assert tm.on_answer_done(gen, "Paris is the capital.") == []


@pytest.mark.parametrize(
    ("p_end", "text", "silent_until"),
    [
        (0.9, "What is the capital of France?", None),  # the LM is sure: heard at once
        (0.05, "What is the capital?", 1000 + END.hold_ms),  # complete, not sure: held
        (0.01, "What is the capital?", 1000 + END.hold_ms),  # unsure: held as long
    ],
)
def test_an_end_the_lm_is_not_sure_of_is_answered_silently_for_a_while(p_end, text, silent_until):
    tm = TurnManager(CFG)
    gen = early_end(tm, text, 1000.0, p_end, p_audio=END.audio_final - 0.2)
    assert tm.ending.audible_from == silent_until
    if silent_until is None:
        assert tm.ending.may_play(1000)
        return
    assert not tm.ending.may_play(1000) and not tm.ending.may_play(silent_until - 1)
    assert tm.ending.may_play(silent_until)
    # The user goes on within the hold: the turn reopens, its answer never heard.
    assert tm.on_speech_start(silent_until - 100) == [ReopenTurn(gen)]
    assert tm.ending.audible_from is None and tm.ending.may_play(silent_until - 100)


@pytest.mark.parametrize(
    ("text", "wait"),
    [
        ("So my question is...", END.incomplete_ms),  # trails off
        ("What is the difference between a frog and a", END.incomplete_ms),  # stops open
        ("Actually, never mind that,", END.incomplete_ms),  # a lead-in alone
        ("What is the capital of?", END.incomplete_ms),  # stops on a function word
        ("How far is that?", END.incomplete_ms),  # "How far is the" completed by Whisper
        ("What makes rain both?", END.doubt_ms),  # "What makes rainbows?" misheard
        ("Summ advice for news.", END.doubt_ms),  # "Summarize the news."
    ],
)
def test_an_incomplete_turn_waits_long_only_where_its_words_go_on(text: str, wait: int) -> None:
    assert silence_ms("incomplete", text, END, 500) == wait
    assert END.doubt_ms < 1000 < END.incomplete_ms  # past a mid-sentence pause, under a second
    assert silence_ms("incomplete", "Bell necessary.", replace(END, incomplete_ms=600), 500) == 600
    assert silence_ms("complete", text, END, 500) == END.complete_ms
    assert silence_ms("unsure", text, END, 500) == 500


def test_no_hold_where_the_turn_waited_long_or_the_hold_is_off():
    assert audible_after("incomplete", 0.001, END) == 0  # it waited 0.9 s or 1.5 s already
    assert audible_after("complete", END.audio_gate, END) == 0
    assert audible_after("unsure", None, END) == END.hold_ms  # no LM score: not sure
    assert audible_after(None, None, END) == 0  # the fixed rule
    assert audible_after("complete", 0.05, replace(END, hold_ms=0)) == 0
    assert audible_after("complete", 0.05, END, p_audio=END.audio_final - 0.01) == END.hold_ms
    assert audible_after("unsure", 0.01, END, p_audio=END.audio_final) == 0  # sounds final
    assert audible_after("complete", 0.05, replace(END, audio_final=1.01), p_audio=1.0) > 0
    tm = TurnManager(CFG, FIXED)
    tm.on_speech_start(0)
    tm.on_pause()
    tm.on_partial("What is it?", complete=True)
    tm.on_speech_end(1000)
    assert tm.ending.audible_from is None


def test_speech_that_sounds_final_is_answered_aloud_at_once_even_when_the_lm_is_not_sure():
    tm = TurnManager(CFG)
    gen = early_end(tm, "Who wrote Romeo and Juliet?", 1000.0, p_end=0.05, p_audio=0.9)
    assert tm.ending.audible_from is None and tm.ending.may_play(1000)
    tm.on_answer_done(gen, "Shakespeare.")
    tm.on_speech_start(2000)  # the next turn forgets how the last one sounded
    tm.on_pause()
    tm.on_partial("What is the capital?", complete=True)
    tm.on_end_score("What is the capital?", 0.05)
    tm.on_speech_end(3000)
    assert tm.ending.audible_from == 3000 + END.hold_ms


def test_reopen_before_the_final_drops_the_speculation_only():
    tm = TurnManager(CFG)
    tm.on_speech_start(0)
    tm.on_pause()
    (spec,) = tm.on_partial("Tell me a fun fact.", complete=True)
    tm.on_end_score("Tell me a fun fact.", 0.9)
    tm.on_speech_end(1000)
    assert tm.on_speech_start(1400) == [DropSpeculation(spec.gen, "reopen")]
    assert tm.reopened and tm.history.messages == []


def test_no_reopen_late_or_after_the_answer_or_with_the_fixed_rule():
    tm = TurnManager(CFG, heard=lambda gen: "Paris")
    gen = early_end(tm, "What is the capital?")
    tm.on_audio_started(gen)
    assert tm.on_speech_start(1000 + END.reopen_ms + 10) == []  # a barge-in, as usual
    assert not tm.reopened and tm.barging.current is not None
    tm = TurnManager(CFG)
    gen = early_end(tm, "What is the capital?")
    tm.on_answer_done(gen, "Paris.")
    assert tm.on_speech_start(1100) == [] and not tm.reopened
    fixed = TurnManager(CFG, FIXED)
    fixed.on_speech_start(0)
    fixed.on_speech_end(1000)
    fixed.on_final("What is the capital?")
    assert not any(isinstance(a, ReopenTurn) for a in fixed.on_speech_start(1100))


def test_an_unsure_end_reopens_too():
    tm = TurnManager(CFG)
    tm.on_speech_start(0)
    tm.on_pause()
    tm.on_partial("So my question is", complete=True)
    tm.on_end_score("So my question is", 0.01)  # unsure: vad.speech_end_ms ends it
    tm.on_speech_end(1000)
    (answer,) = tm.on_final("So my question is")
    assert tm.on_speech_start(1600) == [ReopenTurn(answer.gen)]


def test_refers_back_follow_ups_and_not_new_subjects():
    from dllm_voice.app.conversation.history import refers_back

    for text in ("And what about Germany?", "How big is it?", "When was he born?", "Why?",
                 "Multiply that by three.", "Tell me more."):  # fmt: skip
        assert refers_back(text), text
    for text in ("What should I cook for dinner tonight?", "Tell me a joke.",
                 "Actually, never mind that. Tell me a long story about a dragon and a knight.",
                 "What is the capital of France?"):  # fmt: skip
        assert not refers_back(text), text


def test_follow_up_history_carries_the_last_exchange_only_when_referred_to():
    h = History(budget_tokens=1000, mode="follow_up")
    for q, a in [("What is the capital of France?", "Paris."), ("Why is the sky blue?", "The")]:
        h.add_user(q)
        h.add_assistant(a, interrupted=a == "The")
    h.add_user("Actually, never mind that. Tell me a story.")
    assert [m["role"] for m in h.prompt("sys")] == ["system", "user"]  # the cut answer: gone
    h.messages.pop()
    h.add_user("And what about it?")
    assert [m["content"] for m in h.prompt("sys")] == [
        "sys", "Why is the sky blue?", "The...", "And what about it?",
    ]  # fmt: skip
    full = History(budget_tokens=1000, mode="full")
    full.messages = list(h.messages)
    assert len(full.prompt("sys")) == 6
    none = History(budget_tokens=1000, mode="none")
    none.messages = list(h.messages)
    assert len(none.prompt("sys")) == 2


def test_follow_ups_may_carry_more_exchanges_than_there_are():
    # follow_up_turns above the exchanges so far: all of them (it had raised an IndexError in
    # the warm-up after the first answer).
    h = History(budget_tokens=1000, mode="follow_up", follow_up_turns=3)
    assert h.lead("sys") == [{"role": "system", "content": "sys"}]
    h.add_user("What is the capital of France?")
    h.add_assistant("Paris.", interrupted=False)
    assert len(h.lead("sys")) == 3
    assert [m["content"] for m in h.prompt("sys", "And what about it?")] == [
        "sys", "What is the capital of France?", "Paris.", "And what about it?",
    ]  # fmt: skip
    for q in ("Why is the sky blue?", "Who wrote Hamlet?", "How far is the moon?"):
        h.add_user(q)
        h.add_assistant("An answer.", interrupted=False)
    said = [m["content"] for m in h.prompt("sys", "And what about it?")]
    assert said[1] == "Why is the sky blue?" and len(said) == 8  # the last three exchanges


def test_the_lead_is_what_a_follow_up_prompt_starts_with():
    # The LM cache is warmed with it while the user speaks: a follow-up's prompt must extend it,
    # and a turn that carries no history shares its system message.
    for mode in ("follow_up", "full", "none"):
        h = History(budget_tokens=1000, mode=mode)
        assert h.lead("sys") == [{"role": "system", "content": "sys"}]
        h.add_user("Why is the sky blue?")
        h.add_assistant("Light scatters.", interrupted=False)
        lead = h.lead("sys")
        assert h.prompt("sys", "And why is it red at sunset?")[: len(lead)] == lead, mode
        assert h.prompt("sys", "Tell me a joke.")[:1] == lead[:1]
        assert len(lead) == (1 if mode == "none" else 3)
        h.add_user("What about")  # its answer was cut unheard: the next turn goes on from it
        assert h.lead("sys") == lead


def test_turn_manager_resolves_the_history_mode():
    assert TurnManager(CFG).history.mode == "follow_up"  # "auto" unresolved: the bundled LM's
    assert TurnManager(CFG, history_mode="full").history.mode == "full"
    assert TurnManager(replace(CFG, history="none")).history.mode == "none"


def test_short_empty_words_are_backchannels_but_commands_and_questions_are_not():
    tm = TurnManager(CFG)
    for text in ("and then them.", "MMM.", "Uh-oh.", "mm mm mm", "Okay.", "Oh, nice.", "Wow!"):
        assert tm.barging.is_backchannel(text), text
    for text in ("Really?", "Oh, really?", "Makes sense.", "Ah, I see."):
        assert tm.barging.is_backchannel(text), text
    # A hum Whisper spells out in letters, asked or not.
    for text in ("M.H.N.", "M-H-M?", "M-A-M.", "O.", "M."):
        assert tm.barging.is_backchannel(text), text
    for text in ("Stop.", "Wait.", "No.", "And then?", "So what?", "Tell me about castles."):
        assert not tm.barging.is_backchannel(text), text
    for text in ("U.S.A.", "Y.", "Why?", "Really, tell me more.", "Oh, and then?"):
        assert not tm.barging.is_backchannel(text), text


def test_stable_words_that_start_a_backchannel_confirm_nothing_yet():
    tm = TurnManager(CFG)
    gen = start_speaking(tm)
    speak_over(tm, 3000, 400)
    assert tm.on_partial("I see", stable="I") == []  # "I" of "I see"
    tm.on_speech_end(3400)
    assert tm.on_final("I see.") == [ResumePlayback(gen, "backchannel")]
    speak_over(tm, 6000, 400)
    assert tm.on_partial("I want", stable="I want") == [CancelAnswer(gen)]


def test_a_hum_misheard_as_words_resumes_when_the_beam_also_heard_it():
    tm = TurnManager(CFG)
    gen = start_speaking(tm)
    speak_over(tm, 3000, 560)
    tm.on_speech_end(3560)
    assert tm.on_final("I may turn.", ("Mm-mm.", "Mm-hm.")) == [ResumePlayback(gen, "backchannel")]
    # A request is one whatever else the beam held.
    speak_over(tm, 6000, 1500)
    tm.on_speech_end(7500)
    (cancel, _) = tm.on_final("Tell me about the moon instead.", ("Okay.",))
    assert cancel == CancelAnswer(gen)


def test_double_talk_holds_at_once_and_resumes_without_speech():
    tm = TurnManager(CFG, barge_in=BargeInConfig(echo_guard_ms=250))
    gen = start_speaking(tm)
    assert tm.on_near_end(5000, False, True) == []
    assert tm.on_near_end(5030, True, True) == [HoldPlayback(gen, near_end=True, onset_ms=5030)]
    assert tm.on_near_end(5060, True, True) == []  # held already
    assert tm.on_near_end(5300, False, True) == []
    # No speech_start from the VAD: a knock, a cough, the echo taken for the user.
    assert tm.on_near_end(5330, False, True) == [ResumePlayback(gen, "no speech")]
    assert tm.barging.current is None and tm.answer_gen == gen


def test_double_talk_hold_stays_when_the_vad_hears_the_speech():
    tm = TurnManager(CFG, barge_in=BargeInConfig(echo_guard_ms=250), heard=lambda gen: "Paris is")
    gen = start_speaking(tm)
    assert tm.on_near_end(5000, True, True) == [HoldPlayback(gen, near_end=True, onset_ms=5000)]
    tm.on_near_end(5030, True, True)
    assert tm.on_speech_start(4990) == []
    assert tm.on_near_end(5400, False, True) == []  # the VAD's speech: no time limit
    assert tm.on_speech_progress(5400) == []  # held already: no second hold
    tm.on_speech_progress(5600)
    assert tm.on_partial("Wait, tell me about Spain") == [CancelAnswer(gen)]


def test_double_talk_holds_a_barge_the_echo_guard_still_waits_on():
    tm = TurnManager(CFG, barge_in=BargeInConfig(echo_guard_ms=250))
    gen = start_speaking(tm)
    tm.on_speech_start(5000)
    assert tm.on_speech_progress(5150) == []  # 90 + 250 ms not reached
    assert tm.on_near_end(5150, True, True) == [HoldPlayback(gen, near_end=True)]
    assert tm.on_speech_progress(5400) == []
    assert tm.on_speech_end(5420) == []
    assert tm.on_final("Hmm.") == [ResumePlayback(gen, "short")]


def test_double_talk_only_while_the_agent_plays():
    tm = TurnManager(CFG)
    (ans,) = user_turn(tm, "Hello")  # thinking: nothing plays yet
    assert tm.on_near_end(100, True, True) == []
    tm.on_audio_started(ans.gen)
    assert tm.on_near_end(130, True, True) == [HoldPlayback(ans.gen, near_end=True, onset_ms=130)]
    off = TurnManager(CFG, barge_in=BargeInConfig(enabled=False))
    start_speaking(off)
    assert off.on_near_end(100, True, True) == []


def test_speech_the_sure_detector_never_called_the_users_is_echo():
    tm = TurnManager(CFG, barge_in=BargeInConfig(echo_guard_ms=250), heard=lambda gen: "Paris is")
    gen = start_speaking(tm)
    tm.on_near_end(5000, False, True)
    tm.on_speech_start(5000)  # AEC3 let the agent's voice through
    assert tm.on_speech_progress(5600) == []  # no hold on the VAD and the echo guard
    assert tm.on_pause(5600) == []  # nor a transcript
    assert tm.on_partial("before you complete") == []
    assert tm.on_speech_end(5700) == []
    assert tm.on_final("before you complete.") == []
    assert tm.agent == "speaking" and tm.answer_gen == gen and tm.barging.current is None


def test_until_the_detector_has_measured_the_echo_the_vad_and_echo_guard_decide():
    tm = TurnManager(CFG, barge_in=BargeInConfig(echo_guard_ms=250))
    gen = start_speaking(tm)
    tm.on_near_end(5000, False, False)
    tm.on_speech_start(5000)
    assert tm.on_speech_progress(5340) == [HoldPlayback(gen)]


@pytest.mark.parametrize(
    ("text", "p_end", "p_audio", "decision"),
    [
        ("Which day of the week are we on?", 0.016, 0.6, "complete"),  # the LM: unsure
        ("Forget about the pasta timer, it's done.", 0.34, 0.75, "complete"),  # tells, yet asks
        ("Set a timer for ten minutes", 0.001, 0.5, "complete"),  # no mark, the LM: incomplete
        ("What time is it in Tokyo?", 0.02, 0.05, "unsure"),  # sounds cut: the usual rules
        ("What time is it in...", 0.02, 0.6, "incomplete"),  # trails off
    ],
)
def test_words_that_read_as_a_whole_call_end_the_turn(text, p_end, p_audio, decision):
    assert end_decision(p_end, END, text, p_audio, -0.2, called=True) == decision
    assert end_decision(p_end, END, text, p_audio, -0.2) != "complete"


def test_a_whole_call_is_heard_at_once():
    assert audible_after("complete", 0.016, END, p_audio=0.5, called=True) == 0
    tm = TurnManager(CFG)
    tm.on_speech_start(0)
    tm.on_pause()
    tm.on_partial("Which day of the week are we on?", complete=True)
    assert tm.on_end_score("Which day of the week are we on?", 0.016, 0.5, -0.2, True) == (
        "complete"
    )
    tm.on_speech_end(1000)
    assert tm.ending.audible_from is None and tm.ending.may_play(1000)


@pytest.mark.parametrize(
    ("text", "how", "whole"),
    [
        ("What's seven times eight?", "head+words", True),
        ("Set a timer for ten minutes.", "head+words", True),
        ("What's twelve plus twenty", "head+words", False),  # "... nine" may follow
        ("What's 12 plus 20?", "head+words", False),
        ("Two hundred", "head+words", False),
        ("Half of 90, please.", "head+words", True),
        ("What's 12 plus 25?", "head+words", True),
        ("What's seven times eight?", "head+alternative", False),  # read in other words
        ("What's seven times eight?", "head", False),  # arguments left to the LM
        # someone telling a story: a sentence that names a country is no request
        (
            "I have always wanted to learn a second language, and in school I took a little "
            "French, but I forgot almost all of it.",
            "head+words",
            False,
        ),
        (
            "I'm cooking for friends, the pasta needs ten minutes, so set a timer for ten minutes.",
            "head+words",
            True,
        ),
    ],
)
def test_names_a_call_wants_every_argument_read_in_these_words(text, how, whole):
    from dllm_voice.app.tools.builtin.calculator import calculate
    from dllm_voice.app.tools.chooser import Choice

    choice = Choice(calculate.__tool__, 0.9, how, {"expression": "7*8"} if how != "head" else None)
    assert names_a_call(choice, text) is whole
    assert not names_a_call(None, text)
