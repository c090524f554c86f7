"""`python main.py` (the live conversation) against a real sound server, end to end.

A PulseAudio user daemon started here (testkit/pulse.py) gives the agent a virtual speaker and a
virtual microphone through its default devices, as on a desktop. Questions generated now (Piper
and espeak-ng) are played into the microphone with paplay, the speaker is recorded with
parecord, and the answers are checked by transcribing that recording with the project's Whisper.
main.py runs in a terminal (tmux) whose screen is read back: the live display must be intact,
with no sound-library messages on it. Skips in one line where no sound server can be started.
"""

from __future__ import annotations

import re
import time

import pytest

from testkit.pulse import LiveSession, SoundServerError
from testkit.speech import speech_pcm

pytestmark = pytest.mark.slow

QUESTIONS = [
    ("How many days are there in a week?", "piper", ("7", "seven")),
    ("What is the capital of France?", "espeak", ()),  # tiny.en hears espeak's "France" as
    # "friends" now and then, and the answer follows: only the round trip is checked
]
NOISE = ("alsa", "underrun", "portaudio", "jack", "pulse", "traceback", "warning")


def _session(tmp_path, **kw) -> LiveSession:
    try:
        return LiveSession(tmp_path, ["--set", "conversation.max_spoken_sentences=2"], **kw)
    except SoundServerError as e:
        pytest.skip(f"no sound server: {e}")


def _answer_text(live: LiveSession, asr, start_t: float, end_t: float) -> str:
    rec = live.ear.pcm()
    pcm = rec[live.ear.sample_at(start_t) : live.ear.sample_at(end_t)]
    return asr.transcribe(pcm, final=True).text


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def _overlap(said: str, heard: str) -> float:
    """Share of the words of `said` found in `heard`."""
    words, got = _words(said), set(_words(heard))
    return sum(w in got for w in words) / max(1, len(words))


def _check_screen(screen: str, answers: int) -> list[str]:
    lines = [ln.rstrip() for ln in screen.splitlines() if ln.strip()]
    assert not [ln for ln in lines if any(w in ln.lower() for w in NOISE)], screen
    assert sum(ln.startswith("agent: ") for ln in lines) == answers, screen
    assert sum(ln.startswith("● ") for ln in lines) == 1, screen  # one live state line
    assert lines[-1] == "Ctrl+C to quit", screen
    return lines


def test_live_conversation_through_a_sound_server(tmp_path, asr) -> None:
    live = _session(tmp_path)
    try:
        results = []
        for i, (text, voice, expect) in enumerate(QUESTIONS):
            clip = speech_pcm(text, voice)
            started = live.say(clip)
            live.wait_idle(turns=i + 1)
            _, end = live.heard(clip, started)
            first = live.agent_sound(end)
            assert first is not None, f"no answer to {text!r}"
            last = live.agent_last_sound(first, first + 30)
            heard = _answer_text(live, asr, first - 0.1, last + 0.1)
            results.append((text, heard, 1000 * (first - end)))
            final = [e["text"] for e in live.chat.events("asr_final") if e.get("text")][-1]
            spoken = live.chat.events("turn_done")[-1]["text"]
            assert _overlap(text, final) >= 0.6, (text, final)  # the agent heard the question
            assert _overlap(spoken, heard) >= 0.6, (spoken, heard)  # the speaker played it
            assert not expect or any(w in heard.lower() for w in expect), (text, heard)
        screen = live.chat.screen()
        lines = _check_screen(screen, answers=len(QUESTIONS))
        assert any("week" in ln for ln in lines if ln.startswith("you: ")), screen
    finally:
        code = live.close()
    assert code == 0
    after = live.final_screen
    assert "trace: " in after and "log: " in after, after
    for text, heard, v2v in results:
        print(f"{text!r} -> {heard!r}: voice to voice {v2v:.0f} ms at the sound server")
        # 567 ms on an idle 2-core Zen 4; the bound leaves room for a shared CPU.
        assert 300 < v2v < 2500, (text, v2v)


def test_interruption_stops_the_agent_over_a_real_echo(tmp_path) -> None:
    """Laptop speakers: the agent's voice comes back into the microphone (-10 dB, 40 ms). The
    echo must not interrupt the agent; the user talking over it must."""
    live = _session(tmp_path, echo_gain_db=-10.0)
    try:
        clip = speech_pcm("Tell me a fun fact about the moon.", "piper")
        started = live.say(clip)
        first = live.wait_agent_sound(started, timeout_s=30)
        stop = speech_pcm("Stop, I have another question.", "espeak")
        time.sleep(max(0.0, first + 1.0 - time.monotonic()))
        said = live.say(stop)
        live.wait_idle(turns=2)
        onset, stop_end = live.heard(stop, said)
        events = live.chat.events()
        last = live.agent_last_sound(first, stop_end)
        assert last is not None
        stop_ms = 1000 * (last - onset)
        first_answer = [e for e in events if e["event"] == "turn_done"][0]
        screen = live.chat.screen()
    finally:
        live.close()
    assert first_answer["status"] == "cancelled", first_answer
    # The echo paused nothing before the user spoke: no hold before paplay began playing the
    # interruption. Not its measured onset: where paplay stalls inside the clip on a busy CPU,
    # the clip's best match (the onset) lands after the stall, 80 ms after the "s" of "Stop"
    # the agent rightly paused on.
    held = [e["t_ms"] / 1000 for e in events if e["event"] == "barge_in_hold"]
    assert held and min(held) >= said, (held, said, onset)
    print(f"agent silent {stop_ms:.0f} ms after the interruption's onset (sound server)")
    # p50 89 ms, p95 187 at -10 dB with the double-talk detector (BENCHMARKS.md); the VAD and
    # the echo guard alone took 750-1067 ms at p95 (the first answer of a session, whose echo
    # path is not measured yet, may still go that way; the bound catches an agent that talks on).
    assert stop_ms < 1000, stop_ms
    assert not any(w in screen.lower() for w in NOISE), screen
