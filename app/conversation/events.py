"""Every event the agent sends its client, built in one place (docs/protocol.md documents each).

The names follow the OpenAI Realtime API where an event means the same; ``gen`` is the
generation id that also heads each binary audio message. Each builder returns a JSON-able dict.
Client values quoted in error messages go through ``brief``.
"""

from __future__ import annotations

import json
import reprlib
from typing import Any

from dllm_voice.app.observe.trace import TraceEvent

# A JSON object for the client, its values untyped: each builder below fixes their types, and
# readers (UIs, tests) index into them, as in event["response"]["gen"].
Event = dict[str, Any]

# Client values quoted in error messages: 3 levels and 40 characters of each, so a deep or
# 1 MiB value is neither echoed back whole nor recursed through.
_brief = reprlib.Repr()
_brief.maxlevel, _brief.maxstring, _brief.maxother = 3, 40, 40
brief = _brief.repr
# A config error quotes the client's whole value: cut, so a 1 MiB string does not come back.
MAX_ERROR_CHARS = 1000


def error(kind: str, message: str) -> Event:
    """``kind``: invalid_request_error, server_busy, ... (docs/protocol.md lists them)."""
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - 3] + "..."
    return {"type": "error", "error": {"type": kind, "message": message}}


def session_created(
    session_id: str,
    input_sample_rate_hz: int,
    output_sample_rate_hz: int,
    decoder: str,
    settings: list[dict[str, object]],
) -> Event:
    """The first message: the audio formats both ways, and what ``session.update`` may change."""
    session = {
        "id": session_id,
        "input_audio_format": "pcm16",
        "input_sample_rate_hz": input_sample_rate_hz,
        "output_audio_format": "pcm16",
        "output_sample_rate_hz": output_sample_rate_hz,
        "audio_header": "uint32le generation id",
        "decoder": decoder,
        "settings": settings,
    }
    return {"type": "session.created", "session": session}


def session_updated(settings: list[dict[str, object]], tools: list[str], tool_choice: str) -> Event:
    """The settings, and the tools the agent may call now (the server's and the client's)."""
    return {
        "type": "session.updated",
        "session": {"settings": settings, "tools": tools, "tool_choice": tool_choice},
    }


def pong() -> Event:
    return {"type": "pong"}


def agent_state(state: str) -> Event:
    """idle | listening | thinking | speaking."""
    return {"type": "agent.state", "state": state}


def trace(event: TraceEvent) -> Event:
    return {"type": "trace", "event": event}


def speech_started(audio_ms: float) -> Event:
    return {"type": "input_audio_buffer.speech_started", "audio_start_ms": audio_ms}


def speech_stopped(audio_ms: float) -> Event:
    return {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": audio_ms}


def transcription_delta(text: str, stable: str) -> Event:
    """A partial transcript of the utterance so far; ``stable``: the words two passes agree on."""
    return {
        "type": "conversation.item.input_audio_transcription.delta",
        "transcript": text,
        "stable": stable,
    }


def transcription_completed(text: str) -> Event:
    return {"type": "conversation.item.input_audio_transcription.completed", "transcript": text}


def transcription_revised(text: str, previous: str) -> Event:
    """A long turn heard again whole after its final: the history now holds ``text``."""
    return {
        "type": "conversation.item.input_audio_transcription.revised",
        "transcript": text,
        "previous_transcript": previous,
    }


def item_created(item_id: str, text: str) -> Event:
    """A typed user message taken into the conversation."""
    content = [{"type": "input_text", "text": text}]
    item = {"id": item_id, "type": "message", "role": "user", "content": content}
    return {"type": "conversation.item.created", "item": item}


def response_created(gen: int) -> Event:
    return {
        "type": "response.created",
        "response": {"id": f"resp_{gen}", "gen": gen, "status": "in_progress"},
    }


def transcript_delta(gen: int, piece: str) -> Event:
    """Answer text as it is decoded (what will be spoken)."""
    return {
        "type": "response.audio_transcript.delta",
        "response_id": f"resp_{gen}",
        "gen": gen,
        "delta": piece,
    }


def response_done(
    gen: int, status: str, text: str, heard: str, input_tokens: int = 0, output_tokens: int = 0
) -> Event:
    """``heard``: what the user heard of it (all of ``text`` unless cut by an interruption);
    ``usage``: the prompt's tokens and the answer's (0 for words not made by the LM)."""
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }
    return {
        "type": "response.done",
        "response": {
            "id": f"resp_{gen}",
            "gen": gen,
            "status": status,
            "output_text": text,
            "heard_text": heard,
            "usage": usage,
        },
    }


def tool_call(gen: int, call_id: str, name: str, arguments: dict[str, object]) -> Event:
    """The agent calls one of the server's tools."""
    args = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    return {"type": "tool.call", "gen": gen, "call_id": call_id, "name": name, "arguments": args}


def client_tool_call(gen: int, call_id: str, name: str, arguments: dict[str, object]) -> Event:
    """The agent calls one of the client's tools, as the Realtime API's arguments event (after
    one ``tool_call_delta``); the client answers with a ``function_call_output`` item and
    ``response.create``."""
    return {
        "type": "response.function_call_arguments.done",
        "response_id": f"resp_{gen}",
        "gen": gen,
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments, ensure_ascii=False, allow_nan=False),
    }


def tool_call_delta(gen: int, call_id: str, arguments: dict[str, object]) -> Event:
    args = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
    return {
        "type": "response.function_call_arguments.delta",
        "response_id": f"resp_{gen}",
        "gen": gen,
        "call_id": call_id,
        "delta": args,
    }


def tool_result(gen: int, call_id: str, name: str, output: object, error: str | None) -> Event:
    """A server tool's result (``output``: its sentence or value), or the error it ended in."""
    return {
        "type": "tool.result",
        "gen": gen,
        "call_id": call_id,
        "name": name,
        "output": output,
        "error": error,
    }


def speculation_delta(gen: int, piece: str, text: str) -> Event:
    """Text of an answer drafted during a pause, not yet spoken."""
    return {"type": "response.speculation.delta", "gen": gen, "delta": piece, "text": text}


def speculation_dropped(gen: int, reason: str) -> Event:
    return {"type": "response.speculation.dropped", "gen": gen, "reason": reason}


def audio_cleared(gen: int) -> Event:
    """Playback of ``gen`` stopped: the client drops the audio it still buffers."""
    return {"type": "output_audio_buffer.cleared", "gen": gen}


def latency(
    turn: int,
    gen: int,
    voice_to_voice_ms: float | None,
    speculation: str,
    typed: bool,
    realtime: bool | None,
    stages: dict[str, float],
    spans: list[dict[str, object]],
) -> Event:
    """After each answer: its stage breakdown (ms) and its waterfall (app/observe/trace_tools.py
    ``latency_event`` computes them)."""
    return {
        "type": "latency",
        "turn": turn,
        "gen": gen,
        "voice_to_voice_ms": voice_to_voice_ms,
        "speculation": speculation,
        "typed": typed,
        "realtime": realtime,
        "stages": stages,
        "spans": spans,
    }
