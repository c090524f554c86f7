"""The chat front end: a missing microphone is a one-line error; the live view follows events."""

from __future__ import annotations

import pytest
from rich.console import Console

from dllm_voice.app.config import Config
from dllm_voice.app.terminal.chat import ChatDisplay, chat
from tests.audio.test_io import fake_sd  # noqa: F401 - fixture


def test_missing_microphone_is_one_line_error(capsys):
    import sounddevice

    if sounddevice.query_devices():
        pytest.skip("this machine has sound devices")
    assert chat(Config()) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err


def render(display: ChatDisplay) -> str:
    console = Console(record=True, width=100)
    console.print(display.render())
    return console.export_text()


def test_display_shows_partial_tentative_committed_and_latency():
    d = ChatDisplay()
    d.on_event({"type": "input_audio_buffer.speech_started"})
    d.on_event(
        {"type": "conversation.item.input_audio_transcription.delta", "transcript": "What is"}
    )
    assert "you are speaking" in render(d) and "What is" in render(d)
    d.on_event({"type": "response.speculation.delta", "gen": 1, "delta": "Paris", "text": "Paris"})
    d.on_event({"type": "agent.state", "state": "thinking"})
    assert "Paris" in render(d)
    d.on_event({"type": "response.speculation.dropped", "gen": 1, "reason": "resume"})
    assert "Paris" not in render(d)
    d.on_event({"type": "input_audio_buffer.speech_stopped"})
    d.on_event({"type": "response.created", "response": {"id": "resp_2", "gen": 2}})
    d.on_event({"type": "response.audio_transcript.delta", "gen": 2, "delta": "The capital"})
    d.on_event({"type": "agent.state", "state": "speaking"})
    assert "● speaking" in render(d) and "The capital" in render(d)
    d.on_event(
        {
            "type": "response.done",
            "response": {"gen": 2, "status": "cancelled", "output_text": "The capital is Paris.",
                         "heard_text": "The capital"},
        }
    )  # fmt: skip
    d.on_event(
        {"type": "latency", "turn": 1, "gen": 2, "voice_to_voice_ms": 512.0,
         "speculation": "hit", "stages": {"asr_final": 80.0}}
    )  # fmt: skip
    out = render(d)
    assert "(interrupted)" in out and "voice-to-voice 512 ms" in out and "speculation hit" in out


@pytest.mark.usefixtures("fake_sd")
def test_open_audio_feeds_the_speaker_signal_to_the_echo_canceller():
    import asyncio
    import dataclasses

    import numpy as np

    from dllm_voice.app.terminal.chat import ECHO_GUARD_MS, open_audio
    from dllm_voice.audio.echo import EchoCancelledSource, aec_available
    from dllm_voice.audio.sources import MicSource

    if not aec_available():
        pytest.skip("pywebrtc-audio is not installed")
    source, sink, cfg = open_audio(Config())
    assert isinstance(source, EchoCancelledSource)
    assert cfg.barge_in.echo_guard_ms == ECHO_GUARD_MS

    async def speak_then_listen() -> float:
        await sink.write(np.full(sink.sample_rate_hz // 2, 8000, np.int16))  # 0.5 s of "agent"
        await asyncio.sleep(0.2)
        levels = []
        async for _ in source:
            levels.append(source.canceller.far_dbfs)
            if len(levels) == 5:
                break
        await source.aclose()
        await sink.aclose()
        return max(levels)

    assert asyncio.run(speak_then_listen()) > -30.0  # the mic frames saw the speaker's audio

    off = dataclasses.replace(Config(), echo=dataclasses.replace(Config().echo, mode="off"))
    source, sink, cfg = open_audio(off)
    assert isinstance(source, MicSource) and cfg.barge_in.echo_guard_ms == 0
    asyncio.run(sink.aclose())
    asyncio.run(source.aclose())


def test_finished_turns_print_once_unwrapped_for_a_log():
    """Not a terminal: each finished turn is taken once, and a line longer than the console
    (80 columns for a pipe) stays one line."""
    import io

    d = ChatDisplay()
    question = "What is the capital of France and what else is there to know?"
    d.on_event(
        {"type": "conversation.item.input_audio_transcription.completed", "transcript": question}
    )
    assert d.take_finished() == []
    d.on_event(
        {"type": "response.done", "response": {"gen": 1, "status": "completed",
         "output_text": "The capital of France is Paris, a city on the Seine.", "heard_text": ""}}
    )  # fmt: skip
    d.on_event(
        {"type": "latency", "turn": 1, "gen": 1, "voice_to_voice_ms": 612.0, "speculation": "hit",
         "stages": {"asr_final": 80.0, "lm_clause": 150.0, "tts_first": 210.0}}
    )  # fmt: skip
    out = io.StringIO()
    console = Console(file=out, width=40)
    assert not console.is_terminal
    for line in d.take_finished():
        console.print(line, soft_wrap=True)
    assert d.take_finished() == []
    assert out.getvalue().splitlines() == [
        f"you:   {question}",
        "agent: The capital of France is Paris, a city on the Seine.",
        "voice-to-voice 612 ms (asr_final 80, lm_clause 150, tts_first 210 ms), speculation hit",
    ]


def test_a_revised_long_turn_replaces_its_final_in_the_display():
    d = ChatDisplay()
    final, better = "What can I cook that is vegetarian? I need it.", "What can I cook? Easy."
    d.on_event({"type": "conversation.item.input_audio_transcription.completed",
                "transcript": final})  # fmt: skip
    d.on_event(
        {"type": "response.done",
         "response": {"gen": 2, "status": "completed", "output_text": "Pasta.", "heard_text": ""}}
    )  # fmt: skip
    d.on_event(
        {"type": "conversation.item.input_audio_transcription.revised", "transcript": better,
         "previous_transcript": final}
    )  # fmt: skip
    out = render(d)
    assert better in out and "I need it" not in out
