"""Every event the agent sends its client, built in one place (docs/protocol.md documents each).

The names follow the OpenAI Realtime API where an event means the same; ``gen`` is the
generation id that also heads each binary audio message. Each builder returns a JSON-able dict.
"""

from __future__ import annotations

from typing import Any

Event = dict[str, Any]


def error(kind: str, message: str) -> Event:
    return {"type": "error", "error": {"type": kind, "message": message}}


def session_created(session: dict[str, Any]) -> Event:
    return {"type": "session.created", "session": session}


def session_updated(settings: list[dict[str, Any]]) -> Event:
    return {"type": "session.updated", "session": {"settings": settings}}


def pong() -> Event:
    return {"type": "pong"}


def agent_state(state: str) -> Event:
    """idle | listening | thinking | speaking."""
    return {"type": "agent.state", "state": state}


def trace(event: dict[str, Any]) -> Event:
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


def response_done(gen: int, status: str, text: str, heard: str) -> Event:
    """``heard``: what the user heard of it (all of ``text`` unless cut by an interruption)."""
    return {
        "type": "response.done",
        "response": {
            "id": f"resp_{gen}",
            "gen": gen,
            "status": status,
            "output_text": text,
            "heard_text": heard,
        },
    }


def speculation_delta(gen: int, piece: str, text: str) -> Event:
    """Text of an answer drafted during a pause, not yet spoken."""
    return {"type": "response.speculation.delta", "gen": gen, "delta": piece, "text": text}


def speculation_dropped(gen: int, reason: str) -> Event:
    return {"type": "response.speculation.dropped", "gen": gen, "reason": reason}


def audio_cleared(gen: int) -> Event:
    """Playback of ``gen`` stopped: the client drops the audio it still buffers."""
    return {"type": "output_audio_buffer.cleared", "gen": gen}
