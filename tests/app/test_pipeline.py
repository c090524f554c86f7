"""VoiceSession logic with fake models on a real-time timeline: speculation hit / refined /
miss, barge-in stop and history truncation, backchannel rejection, clean cancellation."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from dllm_voice.app.config import Config
from dllm_voice.app.conversation.scheduler import LATER
from dllm_voice.app.conversation.session import VoiceSession
from dllm_voice.app.observe.trace import Tracer, now_ms
from dllm_voice.app.terminal.runner import Segment, TimelineSource, run_session
from dllm_voice.audio.vad import rms_dbfs
from tests.app.fakes import ClockSink, FakeComponents, FakeTranscriber, buzz, silence

# The buzz is speech to webrtcvad but not to Silero: these tests are about pipeline logic.
CFG = replace(Config(), vad=replace(Config().vad, silero=False))


# Answers play in real time: 30 ms a word keeps an answer nobody barges into under 0.4 s.
SHORT = {"lm": {"tail": "Fine, thanks."}, "ms_per_word": 30}
# Long enough (~2.5 s of audio) to still be playing when the user barges in.
LONG = {
    "lm": {"tail": "That is a fine question, and here is the answer.", "later_tail": "Fine."},
    "ms_per_word": 180,
}


# The timeline's silence before the first words: the source's default 300 ms, waited in real
# time in each of ~40 runs, is not what these tests time.
LEAD_MS = 90


def run(script, segments, realtime=True, cfg=CFG, turn_audio=None, **kw):
    comps = FakeComponents(script, **{"ms_per_word": SHORT["ms_per_word"], **(kw or SHORT)})
    comps.turn_audio = turn_audio
    events: list[dict] = []
    tracer = Tracer(None, session="t")
    sink = ClockSink(comps.tts.sample_rate_hz)
    tail_ms = cfg.vad.speech_end_ms + 300
    source = TimelineSource(
        segments, frame_ms=cfg.audio.frame_ms, realtime=realtime, tail_ms=tail_ms, lead_ms=LEAD_MS
    )
    try:
        session = asyncio.run(
            asyncio.wait_for(run_session(comps, cfg, source, sink, tracer, events.append), 30)
        )
    finally:
        comps.close()
    return session, comps, tracer.events, [e for e in events if e["type"] != "trace"]


def names(trace, turn=None):
    return [e["event"] for e in trace if turn is None or e["turn"] == turn]


def done(events):
    return [e["response"] for e in events if e["type"] == "response.done"]


def test_plain_turn_fast_source_answers_and_traces_in_order():
    _, comps, trace, events = run(["What is the capital of France?"], [Segment(buzz(900))], False)
    (resp,) = done(events)
    assert resp["status"] == "completed"
    assert resp["output_text"].startswith("You said: What is the capital of France.")
    seq = [n for n in names(trace, 1) if n not in ("asr_partial", "pause", "speculation")]
    assert seq == [
        "speech_start", "speech_end", "asr_final", "lm_start", "lm_first_token",
        "lm_first_clause", "tts_first_audio", "audio_out_first", "lm_done", "turn_done",
    ]  # fmt: skip
    (lat,) = [e for e in events if e["type"] == "latency"]
    assert lat["voice_to_voice_ms"] > 0 and lat["speculation"] == "none"


def test_speculation_hit_releases_prepared_answer():
    _, comps, trace, events = run(["What is the capital of France"], [Segment(buzz(900))])
    spec = [e for e in trace if e["event"] == "speculation"]
    assert [e["result"] for e in spec] == ["hit"] and spec[0]["saved_ms"] > 0
    assert len(comps.lm.calls) == 1  # the speculative generation became the answer
    assert [e["type"] for e in events].count("response.speculation.delta") >= 1
    (resp,) = done(events)
    assert resp["status"] == "completed" and "capital of France" in resp["output_text"]
    assert names(trace).index("speculation_start") < names(trace).index("speech_end")


def test_speculation_refined_hands_drafts():
    script = [("What is the capital", "What is the capital of Spain?")]
    _, comps, trace, events = run(script, [Segment(buzz(900))])
    assert [e["result"] for e in trace if e["event"] == "speculation"] == ["refined"]
    spec_call, final_call = comps.lm.calls
    assert spec_call["messages"][-1]["content"] == "What is the capital"
    assert final_call["messages"][-1]["content"] == "What is the capital of Spain?"
    assert final_call["drafts"]  # the speculative answer's tokens
    (resp,) = done(events)
    assert "Spain" in resp["output_text"]


def test_resumed_speech_is_a_miss_then_a_hit():
    seg = Segment(np_concat(buzz(700), silence(320), buzz(600)))
    _, comps, trace, events = run(["Tell me about the moon"], [seg])
    assert names(trace).count("resume") == 1
    assert [e["result"] for e in trace if e["event"] == "speculation"] == ["miss", "hit"]
    assert done(events)[0]["status"] == "completed"


def np_concat(*parts):
    import numpy as np

    return np.concatenate(parts)


def test_barge_in_stops_audio_truncates_history_and_answers_next():
    script = ["Hi.", "Wait, what about Spain?"]
    segments = [Segment(buzz(700)), Segment(buzz(900), barge_in_at_ms=800)]
    session, comps, trace, events = run(script, segments, **LONG)
    first, second = done(events)
    assert first["status"] == "cancelled" and second["status"] == "completed"
    (stop,) = [e for e in trace if e["event"] == "playback_stopped"]
    assert stop["stop_ms"] <= 150
    assert 0 < len(first["heard_text"]) < len(first["output_text"])
    assert first["output_text"].startswith(first["heard_text"].rstrip(".,"))
    prompt = comps.lm.calls[-1]["messages"]
    assert prompt[-2] == {"role": "assistant", "content": first["heard_text"] + "..."}
    assert prompt[-1]["content"] == "Wait, what about Spain?"
    assert names(trace).count("barge_in") == 1
    # The interruption's turn was heard as one over the agent's answer (the listener's prompt).
    assert comps.over_answer[-2:] == [False, True]


class DoubleTalkSource(TimelineSource):
    """A timeline behind a stand-in echo canceller: with no echo, every loud frame is the user."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.canceller = SimpleNamespace(near_end=False, near_end_sure=True)

    async def frames(self):
        async for frame in super().frames():
            self.canceller.near_end = rms_dbfs(frame) > -40.0
            yield frame


def test_double_talk_pauses_the_agent_before_the_vad_onset():
    cfg = replace(CFG, barge_in=replace(CFG.barge_in, echo_guard_ms=250))
    segments = [Segment(buzz(700)), Segment(buzz(900), barge_in_at_ms=800)]
    comps = FakeComponents(["Hi.", "Wait, what about Spain?"], **LONG)
    tracer = Tracer(None, session="t")
    source = DoubleTalkSource(segments, realtime=True, tail_ms=800, lead_ms=LEAD_MS)
    sink = ClockSink(comps.tts.sample_rate_hz)
    try:
        asyncio.run(asyncio.wait_for(run_session(comps, cfg, source, sink, tracer), 30))
    finally:
        comps.close()
    (hold,) = [e for e in tracer.events if e["event"] == "barge_in_hold"]
    (stop,) = [e for e in tracer.events if e["event"] == "playback_stopped"]
    assert hold["near_end"] and stop["stop_ms"] <= 60  # the VAD path: 90 + 250 ms of speech
    assert names(tracer.events).count("barge_in") == 1


@pytest.mark.parametrize(
    ("script2", "pcm_ms", "reason"), [("", 150, "short"), ("Mm-hmm.", 600, "backchannel")]
)
def test_cough_and_backchannel_do_not_cancel(script2, pcm_ms, reason):
    segments = [Segment(buzz(700)), Segment(buzz(pcm_ms), barge_in_at_ms=600)]
    _, comps, trace, events = run(["Hi.", script2], segments, **LONG)
    (resp,) = done(events)
    assert resp["status"] == "completed"
    assert [e["reason"] for e in trace if e["event"] == "barge_in_resume"] == [reason]
    assert "barge_in" not in names(trace)
    assert len(comps.lm.calls) == 1


@pytest.mark.parametrize(("logprob", "stops"), [(-0.3, True), (-1.3, False)])
def test_a_short_no_heard_clearly_stops_the_answer(logprob, stops):
    """ "No." over the answer, 250 ms (under confirm_ms): held until its final, which stops the
    answer when Whisper heard it clearly and lets it play on when not (a cough read as words)."""
    segments = [Segment(buzz(700)), Segment(buzz(250), barge_in_at_ms=600)]
    _, comps, trace, events = run(["Hi.", "No."], segments, **LONG, asr_logprob=logprob)
    statuses = [r["status"] for r in done(events)]
    assert statuses[0] == ("cancelled" if stops else "completed")
    assert names(trace).count("barge_in") == (1 if stops else 0)
    resumed = [e["reason"] for e in trace if e["event"] == "barge_in_resume"]
    assert resumed == ([] if stops else ["short"])


def test_a_short_interruption_whose_final_fails_lets_the_answer_play_on(monkeypatch):
    """The ASR fails on the final of a short burst held over the answer: the answer resumes."""
    final = FakeTranscriber.final

    def failing(self):
        if self.asr.used > 1:
            raise RuntimeError("ASR down")
        return final(self)

    monkeypatch.setattr(FakeTranscriber, "final", failing)
    segments = [Segment(buzz(700)), Segment(buzz(250), barge_in_at_ms=600)]
    _, _, trace, events = run(["Hi.", "No."], segments, **LONG, asr_logprob=-0.3)
    assert [r["status"] for r in done(events)] == ["completed"]
    assert [e["reason"] for e in trace if e["event"] == "barge_in_resume"] == ["short"]
    assert any(e["type"] == "error" for e in events)


@pytest.mark.parametrize(("wait_ms", "how"), [(210, "rejoin"), (400, "")])
def test_an_interruption_and_the_rest_after_its_pause_are_one_turn(wait_ms, how):
    """ "Wait," held the agent, then a 600 ms pause: let go as short (210 ms of speech), and the
    rest continues it, one answer to all of it; or taken as the turn by its final (400 ms; no
    partial had confirmed it), which cuts the answer and, a lead-in alone, answers nothing: the
    request after it is the turn. "Wait," is never answered on its own."""
    said = np.concatenate([buzz(wait_ms), silence(600), buzz(900)])
    segments = [Segment(buzz(700)), Segment(said, barge_in_at_ms=600)]
    script = ["Hi.", ("", "Wait.", "Wait, which ocean", "Wait, which ocean is the smallest?"),
              "Which ocean is the smallest?"]  # fmt: skip
    _, comps, trace, events = run(script, segments, **LONG)
    assert names(trace).count("barge_in") == 1 and "reopen" not in names(trace)
    assert names(trace).count("rejoin") == (1 if how else 0)
    statuses = [r["status"] for r in done(events)]
    assert statuses.count("completed") == 1 and statuses[-1] == "completed"
    asked = [c["messages"][-1]["content"] for c in comps.lm.calls]
    assert "Wait." not in asked and asked[-1].lower().endswith("which ocean is the smallest?")


def test_speech_before_the_last_final_continues_that_utterance():
    """The final of "What's the weather" takes 1 s, and "in Paris?" starts 600 ms after it:
    one utterance and one answer to all of it, not a lost first part."""
    cfg = replace(CFG, end_of_turn=replace(CFG.end_of_turn, mode="fixed"))
    said = np.concatenate([buzz(700), silence(600), buzz(700)])
    first, rest = "What's the weather", "What's the weather in Paris?"
    script = [(first, first + ".", rest, rest)]
    _, comps, trace, events = run(script, [Segment(said)], cfg=cfg, asr_s=1.0, **SHORT)
    assert names(trace).count("speech_end") == 2 and names(trace).count("rejoin") == 1
    assert [e["text"] for e in trace if e["event"] == "asr_final"] == [rest]
    (resp,) = done(events)
    assert comps.lm.calls[-1]["messages"][-1]["content"] == rest


def test_cancel_mid_answer_leaves_no_tasks_or_threads():
    comps = FakeComponents(["Hi."])
    before = set(threading.enumerate())

    async def main():
        sink = ClockSink(comps.tts.sample_rate_hz)
        source = TimelineSource([Segment(buzz(700))], realtime=True, lead_ms=LEAD_MS)
        session = VoiceSession(comps, CFG, source, sink, Tracer(None), None)
        source.bind(session)
        task = asyncio.create_task(session.run())
        async with asyncio.timeout(20):
            while session.last_audio_out_t is None:
                await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not session.responses.answers and not session.responses.closing
        assert not session.ears._jobs
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())
    comps.close()
    # The session's LM thread is let go without a join (aclose never blocks the event loop on
    # it): it ends within moments.
    deadline = time.monotonic() + 2.0
    while not set(threading.enumerate()) <= before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(threading.enumerate()) <= before


def test_barge_in_disabled_ignores_user_speech():
    cfg = replace(CFG, barge_in=replace(CFG.barge_in, enabled=False))
    segments = [Segment(buzz(700)), Segment(buzz(900), barge_in_at_ms=300)]
    _, comps, trace, events = run(["Hi.", "Stop please"], segments, cfg=cfg, **LONG)
    (resp,) = done(events)
    assert resp["status"] == "completed" and len(comps.lm.calls) == 1


def test_the_lm_waits_for_the_first_clause_to_be_voiced_before_decoding_on():
    # TTS takes 150 ms a piece, the LM 10 ms a word: the 8 words after the first clause would
    # be decoded on the same cores while the user waits for the first audio.
    tail = "one two three four five six seven eight nine ten eleven twelve."
    kw = {"lm": {"template": "{tail}", "tail": tail}, "ms_per_word": 50, "compute_s": 0.15}
    _, comps, trace, events = run(["Count for me"], [Segment(buzz(700))], False, **kw)
    t = {e["event"]: e["t_ms"] for e in trace if e["turn"] == 1}
    assert t["lm_first_clause"] < t["tts_first_audio"] < t["lm_done"]
    assert done(events)[0]["output_text"] == tail


def test_a_parked_speculation_released_waits_for_its_first_clause_to_be_voiced():
    # The speculation parks on its first clause at the pause; the end of the turn releases it
    # while TTS (300 ms a piece) is still voicing that clause: the LM must wait for it too.
    tail = "one two three four five six seven eight nine ten eleven twelve."
    kw = {"lm": {"template": "{tail}", "tail": tail}, "ms_per_word": 50, "compute_s": 0.3}
    _, comps, trace, events = run(["Count for me."], [Segment(buzz(700))], **kw)
    t = {e["event"]: e["t_ms"] for e in reversed(trace) if e["turn"] == 1}
    assert [e["result"] for e in trace if e["event"] == "speculation"] == ["hit"]
    assert t["lm_first_clause"] < t["speculation"] < t["tts_first_audio"] < t["lm_done"]
    assert done(events)[0]["output_text"] == tail


@pytest.mark.parametrize("words_per_step", [1, 3])
def test_first_clause_cut_after_max_words_without_punctuation(words_per_step):
    # Three words a step: the cut falls inside the step " four five six".
    tail = "one two three four five six seven eight nine."
    lm = {"template": "{tail}", "tail": tail, "words_per_step": words_per_step}
    _, comps, trace, events = run(["Count for me"], [Segment(buzz(700))], False, lm=lm)
    clauses = [e["text"] for e in trace if e["event"] == "lm_first_clause"]
    assert clauses == ["one two three"]
    assert done(events)[0]["output_text"] == "one two three four five six seven eight nine."


def test_a_first_clause_shorter_than_the_copy_check_goes_out_at_once_without_history():
    # 100 ms a word. Only a prompt with an earlier answer in it waits for the copy check's 4
    # words; the first turn's 2-word clause goes to TTS as soon as its words are there.
    conv = replace(CFG.conversation, first_clause_max_words=2, history="full")
    lm = {"template": "{user} {tail}", "tail": "two three four five six seven.", "step_s": 0.1}
    segments = [Segment(buzz(700)), Segment(buzz(700))]
    cfg = replace(CFG, conversation=conv)
    _, _, trace, events = run(["Count.", "Again."], segments, False, cfg=cfg, lm=lm)
    assert [r["status"] for r in done(events)] == ["completed", "completed"]
    for turn, words_waited in ((1, 2), (2, 3)):  # a word is whole once the next one starts
        t = {e["event"]: e["t_ms"] for e in trace if e["turn"] == turn}
        clause = [e["text"] for e in trace if e["event"] == "lm_first_clause" and e["turn"] == turn]
        assert clause == [f"{('Count', 'Again')[turn - 1]} two"]
        waited = t["lm_first_clause"] - t["lm_first_token"]
        assert 100 * words_waited - 30 < waited < 100 * words_waited + 60, (turn, waited)


def test_a_parked_speculation_whose_cache_was_taken_generates_again_on_release():
    # The end-of-turn score of a later pass over the same words runs on the session's cache
    # while the speculation is parked: released, it must still say the whole answer, once.
    tail = "one two three four five six seven."
    lm = {"template": "{tail}", "tail": tail, "superseded_after": 4}
    _, comps, trace, events = run(["Count for me."], [Segment(buzz(700))], lm=lm)
    assert [e["result"] for e in trace if e["event"] == "speculation"] == ["hit"]
    (resp,) = done(events)
    assert resp["output_text"] == tail == resp["heard_text"]
    assert comps.lm.calls[1]["drafts"] == [1000, 1001, 1002, 1003]


def test_speculation_hit_released_before_its_first_clause_continues():
    """The final lands while the speculative LM is still on its first clause (slow LM)."""
    lm = {"template": "{tail}", "tail": "one two three four five six seven.", "step_s": 0.12}
    _, comps, trace, events = run(["What is the capital of France?"], [Segment(buzz(900))], lm=lm)
    assert [e["result"] for e in trace if e["event"] == "speculation"] == ["hit"]
    names_ = names(trace)
    assert names_.index("speculation") < names_.index("lm_first_clause")
    (resp,) = done(events)
    assert resp["status"] == "completed"
    assert resp["output_text"] == "one two three four five six seven."


def test_adaptive_end_plays_before_the_fixed_wait():
    _, comps, trace, events = run(["What is the capital of France?"], [Segment(buzz(900))])
    (score,) = [e for e in trace if e["event"] == "end_of_turn"]
    assert score["decision"] == "complete" and score["wait_ms"] == CFG.end_of_turn.complete_ms
    assert [e["result"] for e in trace if e["event"] == "speculation"] == ["hit"]
    assert len(comps.lm.calls) == 1
    # The speculation's first forward scored the end of the turn: no forward of its own.
    assert comps.lm.calls[0]["scored"] and comps.lm.scored_alone == 0
    (resp,) = done(events)
    assert resp["status"] == "completed"
    (lat,) = [e for e in events if e["type"] == "latency"]
    # The wait, within a block's pacing jitter; ~500 ms with end_of_turn: fixed.
    assert CFG.end_of_turn.complete_ms - 10 <= lat["stages"]["endpoint"] < 400
    fixed = replace(CFG, end_of_turn=replace(CFG.end_of_turn, mode="fixed"))
    _, _, trace, events = run(["What is the capital of France?"], [Segment(buzz(900))], cfg=fixed)
    assert "end_of_turn" not in names(trace)
    (lat,) = [e for e in events if e["type"] == "latency"]
    assert lat["stages"]["endpoint"] >= 480


class SoundsCut:
    """The end heard in the speech (audio.prosody.TurnEndAudio): always cut."""

    def __init__(self) -> None:
        self.heard: list[int] = []
        self.at: list[float] = []

    def score(self, pcm: np.ndarray) -> float:
        self.heard.append(len(pcm))
        self.at.append(now_ms())
        return 0.05


def test_speech_that_sounds_cut_waits_although_its_text_reads_complete():
    sounds_cut = SoundsCut()
    # The fake LM is sure of any text ending in "?" (0.9): the speech decides only under the gate.
    eot = replace(CFG.end_of_turn, audio=True, audio_gate=1.0)
    cfg = replace(CFG, end_of_turn=eot)
    segs, asked = [Segment(buzz(900))], "What is the capital city of France?"
    _, _, trace, _ = run([asked], segs, cfg=cfg, turn_audio=sounds_cut)
    (score,) = [e for e in trace if e["event"] == "end_of_turn"]
    assert score["decision"] == "incomplete" and score["p_audio"] == 0.05
    assert score["wait_ms"] == CFG.end_of_turn.doubt_ms  # its words say nothing more is coming
    assert 0 < sounds_cut.heard[0] <= 16000 * 3  # the speech up to the pause, RECENT_MS at most
    # A short ask (6 words at most) waits as unsure, not the long wait.
    _, _, trace, _ = run(["Where do koalas live?"], segs, cfg=cfg, turn_audio=SoundsCut())
    (score,) = [e for e in trace if e["event"] == "end_of_turn"]
    assert score["decision"] == "unsure" and score["wait_ms"] == CFG.vad.speech_end_ms
    # Scored at the pause, while its ASR pass runs: the LM's score does not wait on it.
    slow, sounds_cut = {**SHORT, "asr_s": 0.15}, SoundsCut()
    _, _, trace, _ = run(["What is it?"], segs, cfg=cfg, turn_audio=sounds_cut, **slow)
    (pause,) = [i for i, e in enumerate(trace) if e["event"] == "pause"]
    pause_pass = next(e for e in trace[pause:] if e["event"] == "asr_partial")
    assert pause_pass["compute_ms"] > 100 and sounds_cut.at[0] < pause_pass["t_ms"] - 50
    off = replace(CFG, end_of_turn=replace(eot, audio=False))
    _, _, trace, _ = run([asked], segs, cfg=off, turn_audio=SoundsCut())
    (score,) = [e for e in trace if e["event"] == "end_of_turn"]  # end_of_turn.audio off: not asked
    assert score["decision"] == "complete" and score["p_audio"] is None


def test_a_guess_on_the_latest_partial_is_scored_on_its_way_when_the_pause_pass_agrees():
    # The pause speculates at once on the words a pass heard before it; the pause's own pass,
    # 150 ms later, hears the same words: the end of turn is decided on the score the guess's
    # first forward read, not on a forward of its own (which would also stop the guess).
    spec = replace(CFG.speculation, on_last_partial=True)
    cfg = replace(CFG, speculation=spec, end_of_turn=replace(CFG.end_of_turn, audio=False))
    slow = {**SHORT, "asr_s": 0.15}
    _, comps, trace, events = run(
        ["What is the capital of France?"], [Segment(buzz(900))], cfg=cfg, **slow
    )
    (pause,) = [i for i, e in enumerate(trace) if e["event"] == "pause"]
    (start,) = [i for i, e in enumerate(trace) if e["event"] == "speculation_start"]
    pause_pass = next(i for i, e in enumerate(trace[pause:], pause) if e["event"] == "asr_partial")
    assert pause < start < pause_pass  # the guess did not wait for the pause's pass
    (score,) = [e for e in trace if e["event"] == "end_of_turn"]
    assert score["decision"] == "complete" and score["wait_ms"] == CFG.end_of_turn.complete_ms
    assert len(comps.lm.calls) == 1 and comps.lm.scored_alone == 0
    assert [e["result"] for e in trace if e["event"] == "speculation"] == ["hit"]
    assert done(events)[0]["status"] == "completed"


def test_an_unsure_score_on_words_whisper_barely_heard_waits_as_incomplete():
    # The fake LM scores text without an end mark 0.001: unsure between these thresholds.
    eot = replace(CFG.end_of_turn, likely=0.5, unlikely=0.0005, audio=False)
    cfg, segs, text = replace(CFG, end_of_turn=eot), [Segment(buzz(900))], "How many lengths"
    _, _, trace, _ = run([text], segs, cfg=cfg, **SHORT, asr_logprob=-0.8)
    (score,) = [e for e in trace if e["event"] == "end_of_turn"]
    assert score["asr_logprob"] == -0.8 and score["decision"] == "incomplete"
    assert score["wait_ms"] == eot.doubt_ms
    _, _, trace, _ = run([text], segs, cfg=cfg, **SHORT, asr_logprob=-0.2)  # heard clearly
    (score,) = [e for e in trace if e["event"] == "end_of_turn"]
    assert score["decision"] == "unsure" and score["wait_ms"] == CFG.vad.speech_end_ms


def test_the_pause_pass_hears_the_last_word_to_its_unvoiced_end():
    # 120 ms of a fricative-like hiss after the voice (a final "s"): not voice to the VAD,
    # but a pass cut inside it reads "France" as "friend". The pass the end of the turn is
    # decided on starts after the hiss, not at the first unvoiced frame.
    x = np.diff(np.random.default_rng(0).standard_normal(16 * 120 + 2), 2)
    hiss = (x / np.abs(x).max() * 1600).astype(np.int16)  # -37 dBFS
    cfg = replace(CFG, vad=replace(CFG.vad, energy_floor_dbfs=-30.0))  # the hiss is no voice
    pcm = np.concatenate([buzz(900), hiss])
    _, comps, trace, _ = run(["What is the capital of France?"], [Segment(pcm)], cfg=cfg)
    (end,) = [e["audio_ms"] for e in trace if e["event"] == "speech_end"]
    (score,) = [e for e in trace if e["event"] == "end_of_turn"]
    assert score["decision"] == "complete"
    heard = comps.asr.heard_ms
    assert not [h for h in heard if end < h < end + 90], heard  # none before the pause's
    assert [h for h in heard if h >= end + 120], heard  # the pause's, once the hiss ended


def test_a_pass_done_before_the_pause_is_the_pauses_pass():
    # With a 200 ms pause the pass started at the last word's end is back before the pause
    # is detected: it heard all the speech, so the pause speculates on it and runs no other.
    vad = replace(CFG.vad, pause_ms=200)
    cfg = replace(CFG, vad=vad, end_of_turn=replace(CFG.end_of_turn, mode="fixed"))
    _, comps, trace, events = run(["What is the capital of France?"], [Segment(buzz(900))], cfg=cfg)
    (end,) = [e["audio_ms"] for e in trace if e["event"] == "speech_end"]
    heard = comps.asr.heard_ms
    assert [h for h in heard if end <= h < end + 150], heard  # the pass at the word's end
    assert not [h for h in heard if end + 150 <= h < end + 350], heard  # none at the pause
    (reused,) = [e for e in trace if e["event"] == "asr_partial" and e.get("reused")]
    assert reused["text"] == "What is the capital of France?"
    assert names(trace).index("speculation_start") > names(trace).index("pause")
    assert [e["result"] for e in trace if e["event"] == "speculation"] == ["hit"]
    assert done(events)[0]["status"] == "completed"


def test_in_10_ms_blocks_the_pause_pass_starts_10_ms_after_the_words():
    # The words end 10 ms into a 30 ms VAD frame: in 10 ms blocks the pass the end of the turn
    # waits on starts at the next block, before the VAD has even decided that frame, and the
    # pause takes it (no other pass).
    cfg = replace(CFG, audio=replace(CFG.audio, frame_ms=10))
    _, comps, trace, _ = run(["What is the capital of France?"], [Segment(buzz(910))], cfg=cfg)
    words_end, heard = LEAD_MS + 910, comps.asr.heard_ms
    assert [h for h in heard if words_end < h <= words_end + 10], heard
    assert not [h for h in heard if words_end + 10 < h < words_end + 300], heard
    (reused,) = [e for e in trace if e["event"] == "asr_partial" and e.get("reused")]
    assert reused["text"] == "What is the capital of France?"
    assert [e["result"] for e in trace if e["event"] == "speculation"] == ["hit"]


@pytest.mark.parametrize("after_gap_ms", [20, 30])
def test_a_pass_started_in_the_last_word_does_not_hold_back_the_pause_pass(after_gap_ms):
    # A 20 ms quiet inside the last word starts a pass; the words end 40-50 ms later. The
    # pass the end of the turn waits on starts once the quiet has ended the words (30 ms),
    # not 100 ms after the one before it.
    cfg = replace(CFG, audio=replace(CFG.audio, frame_ms=10))
    pcm = np.concatenate([buzz(700), silence(20), buzz(after_gap_ms)])
    _, comps, _, _ = run(["What is the capital of France?"], [Segment(pcm)], cfg=cfg)
    words_end = LEAD_MS + 720 + after_gap_ms
    heard = [h - words_end for h in comps.asr.heard_ms]
    assert [h for h in heard if -60 <= h < 0], heard  # the pass in the word
    assert [h for h in heard if 0 < h <= 40], heard


def test_a_refinement_done_after_the_final_revises_the_history_not_the_answer():
    final, better = "My dog nob likes the park.", "My dog Bob likes the park."
    script = [final, "What is my dog's name?"]
    pcm = np.concatenate([buzz(900), silence(1500), buzz(900)])
    session, _, trace, events = run(script, [Segment(pcm)], refine={final: better})
    users = [m.content for m in session.tm.history.messages if m.role == "user"]
    assert users == [better, "What is my dog's name?"]
    (refined,) = [e for e in trace if e["event"] == "asr_refined"]
    assert refined["text"] == better and refined["turn"] == 1
    first, _ = done(events)
    assert "nob" in first["output_text"]  # the answer was made from the final
    # The client's transcript follows the history's.
    (revised,) = [e for e in events if e["type"].endswith("input_audio_transcription.revised")]
    assert revised == {
        "type": "conversation.item.input_audio_transcription.revised",
        "transcript": better,
        "previous_transcript": final,
    }
    kinds = [e["type"] for e in events]
    assert kinds.index(revised["type"]) > kinds.index(
        "conversation.item.input_audio_transcription.completed"
    )


def test_a_refinement_not_started_when_the_session_closes_never_runs():
    final = "My dog nob likes the park."
    comps = FakeComponents([final], **SHORT)
    comps.asr.refine = {final: "My dog Bob likes the park."}
    comps.asr.refine_s = 30.0  # still waiting for the CPU at the close
    tracer = Tracer(None, session="t")
    source = TimelineSource([Segment(buzz(900))], realtime=False, tail_ms=800)
    sink = ClockSink(comps.tts.sample_rate_hz)
    try:
        session = asyncio.run(run_session(comps, CFG, source, sink, tracer, lambda e: None))
    finally:
        comps.close()
    assert "asr_refined" not in names(tracer.events)
    assert (
        session.ears.transcriber.refining is not None
        and session.ears.transcriber.refining.cancelled()
    )


def test_likely_incomplete_turn_waits_through_a_long_pause():
    script = [("What is the capital of", "What is the capital of France?")]
    pcm = np.concatenate([buzz(900), silence(900), buzz(500)])  # 900 ms > speech_end_ms
    _, comps, trace, events = run(script, [Segment(pcm)])
    decisions = [e["decision"] for e in trace if e["event"] == "end_of_turn"]
    assert decisions[0] == "incomplete"
    assert names(trace).count("speech_end") == 1  # one turn, not two
    (resp,) = done(events)
    assert resp["status"] == "completed" and "capital of France" in resp["output_text"]


def test_speech_right_after_an_early_end_reopens_the_same_turn():
    script = [("What is the capital.", "What is the capital.",
               "What is the capital of France?", "What is the capital of France?")]  # fmt: skip
    pcm = np.concatenate([buzz(900), silence(600), buzz(600)])
    # 100 ms a word: the answer still plays when the user goes on 600 ms later (a finished one
    # is not reopened).
    session, comps, trace, events = run(script, [Segment(pcm)], **{**SHORT, "ms_per_word": 100})
    seq = names(trace)
    assert seq.count("reopen") == 1 and seq.index("reopen") > seq.index("speech_end")
    assert len({e["turn"] for e in trace if e["event"] == "speech_start"}) == 1  # one turn
    completed = [r for r in done(events) if r["status"] == "completed"]
    assert [r["output_text"].split(".")[0] for r in completed] == [
        "You said: What is the capital of France"
    ]
    users = [m.content for m in session.tm.history.messages if m.role == "user"]
    assert users == ["What is the capital of France?"]


def test_a_cough_right_after_an_early_end_does_not_reopen_the_turn():
    """The answer plays (the LM was sure of the end); a 150 ms cough 600 ms after the question
    holds it, then lets it play on: nothing is cut or answered again."""
    text = "What is the capital of France?"
    script = [(text, text, text, text)]
    pcm = np.concatenate([buzz(900), silence(600), buzz(150)])
    _, comps, trace, events = run(script, [Segment(pcm)], **{**SHORT, "ms_per_word": 100})
    seq = names(trace)
    assert seq.count("reopen") == 1  # within the reopen window, over the audible answer
    assert seq.index("audio_out_first") < seq.index("reopen")
    assert "reopen_cancel" not in seq and "barge_in" not in seq
    assert [e["reason"] for e in trace if e["event"] == "barge_in_resume"] == ["short"]
    (resp,) = done(events)
    assert resp["status"] == "completed" and len(comps.lm.calls) == 1


@pytest.mark.parametrize("hold_ms", [0, CFG.end_of_turn.hold_ms])
def test_an_early_end_the_lm_was_not_sure_of_reopens_before_its_answer_is_heard(hold_ms):
    # The same early end and reopen; the LM is never sure (audio_gate 1.0): with the hold, no
    # sample of the abandoned answer reaches the sink; without it the user heard its start.
    script = [("What is the capital.", "What is the capital.",
               "What is the capital of France?", "What is the capital of France?")]  # fmt: skip
    pcm = np.concatenate([buzz(900), silence(600), buzz(600)])
    eot = replace(CFG.end_of_turn, audio_gate=1.0, hold_ms=hold_ms)
    _, _, trace, events = run(
        script, [Segment(pcm)], cfg=replace(CFG, end_of_turn=eot), **{**SHORT, "ms_per_word": 100}
    )
    (cut,) = [e for e in trace if e["event"] == "reopen_cancel"]
    audible = [e["gen"] for e in trace if e["event"] == "audio_out_first"]
    (completed,) = [r for r in done(events) if r["status"] == "completed"]
    assert completed["output_text"].startswith("You said: What is the capital of France")
    if hold_ms:
        assert cut["heard"] == "" and cut["gen"] not in audible and not cut["audible"]
    else:
        assert cut["heard"] and cut["gen"] in audible and cut["audible"]  # a blurt


def test_a_held_answer_waits_for_voice_that_starts_as_its_hold_ends():
    # The user goes on 720 ms after an early end held 750 ms: when the hold ends they have
    # spoken 30 ms, which the VAD calls speech only after 90. The answer waits for that
    # speech_start, which reopens the turn, instead of starting under the user's words.
    script = [("What is the capital.", "What is the capital.",
               "What is the capital of France?", "What is the capital of France?")]  # fmt: skip
    pcm = np.concatenate([buzz(900), silence(720), buzz(600)])
    eot = replace(CFG.end_of_turn, audio_gate=1.0)
    _, _, trace, events = run(
        script, [Segment(pcm)], cfg=replace(CFG, end_of_turn=eot), **{**SHORT, "ms_per_word": 100}
    )
    (cut,) = [e for e in trace if e["event"] == "reopen_cancel"]
    audible = [e["gen"] for e in trace if e["event"] == "audio_out_first"]
    assert cut["gen"] not in audible and not cut["audible"] and cut["heard"] == ""
    (completed,) = [r for r in done(events) if r["status"] == "completed"]
    assert completed["output_text"].startswith("You said: What is the capital of France")


def test_answer_ends_after_max_spoken_sentences_and_lm_stops_there():
    tail = "One. Two two. Three three three. Four four four four. Five."
    cfg = replace(CFG, conversation=replace(CFG.conversation, max_spoken_sentences=2))
    _, comps, trace, events = run(["Hi"], [Segment(buzz(700))], False, cfg=cfg,
                                  lm={"tail": tail}, ms_per_word=20)  # fmt: skip
    (resp,) = done(events)
    assert resp["output_text"] == "You said: Hi. One." == resp["heard_text"]
    (lm_done,) = [e for e in trace if e["event"] == "lm_done"]
    assert lm_done["stop_reason"] == "sentences"
    assert lm_done["new_tokens"] <= 6  # "You said: Hi. One. Two": one word past the end


def test_first_clause_copying_an_earlier_answer_restarts_without_history():
    # FakeLM answers "You said: <question>. ..." so a repeated question's first clause copies
    # the previous answer: the second try runs on the system prompt and the question alone.
    cfg = replace(CFG, conversation=replace(CFG.conversation, history="full"))
    q = "What is the capital of France?"
    segments = [Segment(buzz(700)), Segment(buzz(700))]
    _, comps, _, events = run([q, q], segments, False, cfg=cfg)
    assert [r["status"] for r in done(events)] == ["completed", "completed"]
    second = [c["messages"] for c in comps.lm.calls if c["messages"][-1]["content"] == q][1:]
    assert [len(m) for m in second][-2:] == [4, 2]  # with history, then without


def test_the_lm_cache_is_warmed_with_the_next_prompts_start_between_turns():
    segments = [Segment(buzz(700)), Segment(buzz(700))]
    _, comps, _, events = run(["Why is the sky blue?", "And at sunset?"], segments, False)
    system = {"role": "system", "content": CFG.conversation.system_prompt}
    first, second = (r["output_text"] for r in done(events))
    assert comps.lm.prefills[0] == [system]  # at the start, before a word is heard
    assert comps.lm.prefills[1] == [
        system,
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": first},
    ]
    follow_up = comps.lm.calls[-1]["messages"]
    assert follow_up[:3] == comps.lm.prefills[1] and follow_up[-1]["content"] == "And at sunset?"


def test_the_lm_cache_is_warmed_with_the_words_heard_while_the_user_speaks():
    script = [("What is the capital", "What is the capital of France?")]
    _, comps, trace, events = run(script, [Segment(buzz(1500))])
    assert done(events)[0]["status"] == "completed"
    heard = [p for p in comps.lm.prefills if p[-1]["role"] == "user"]
    assert heard and heard[0][-1]["content"] == "What is the capital"
    first_partial = next(e["t_ms"] for e in trace if e["event"] == "asr_partial")
    assert first_partial < next(e["t_ms"] for e in trace if e["event"] == "speech_end")


def test_finals_go_before_the_other_sessions_queued_partial_passes():
    # Two sessions on an ASR worker busy with a long job: each session's final runs before the
    # other's partial pass queued ahead of it (first come, first served put it behind).
    comps = FakeComponents(["One two three.", "Four five six.", "Seven eight."])
    ran: list[tuple[str, object]] = []  # (pass, transcriber) in the order the worker ran them

    class Transcriber(FakeTranscriber):
        def partial(self, at_pause=False):
            ran.append(("partial", self))
            return super().partial(at_pause)

        def final(self):
            ran.append(("final", self))
            return super().final()

    comps.new_transcriber = lambda cfg, over_answer=False: Transcriber(
        comps.asr, cfg.partial_interval_ms
    )
    gate, busy = threading.Event(), threading.Event()

    def long_job():
        busy.set()
        gate.wait(5)

    def say(session, pcm):
        for i in range(0, len(pcm), 480):
            session._on_frame(pcm[i : i + 480])

    async def main():
        sink = ClockSink(comps.tts.sample_rate_hz)
        a, b = (VoiceSession(comps, CFG, None, sink, Tracer(None), None) for _ in range(2))
        held = comps.asr_worker.submit(long_job, priority=LATER, key="another session")
        await asyncio.to_thread(busy.wait, 5)
        for s in (a, b):  # each asks for a pass in the silence after its speech
            say(s, np.concatenate([buzz(600), silence(30)]))
            assert s.ears._partial_job is not None
        a_turn1 = a.ears.transcriber
        say(a, silence(600))  # a's turn ends: its queued pass, promoted at the pause, is dropped
        say(a, np.concatenate([buzz(600), silence(30)]))  # a's next turn: a pass is queued
        a_turn2 = a.ears.transcriber
        say(b, silence(600))  # b's turn ends behind a's queued pass
        gate.set()
        await held
        async with asyncio.timeout(5):
            while len(ran) < 3:
                await asyncio.sleep(0.01)
        await a.aclose()
        await b.aclose()
        return a_turn1, a_turn2, b.ears.transcriber

    try:
        a_turn1, a_turn2, b_turn = asyncio.run(main())
    finally:
        comps.close()
    assert ran == [("final", a_turn1), ("final", b_turn), ("partial", a_turn2)]
