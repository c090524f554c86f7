"""A Realtime session's settings: what ``session.update`` may set (GA names, and the beta ones
where they differ), what they change in our config, and the ``session`` object reported back.

Turn detection maps onto our endpointing: ``server_vad`` ends the turn after a fixed silence
(``silence_duration_ms`` is ``vad.speech_end_ms``); ``semantic_vad`` is our adaptive end of turn,
the LM's P(complete) choosing the silence, ``eagerness`` scaling it; ``null`` is push-to-talk:
the client commits the buffer and asks for the response. ``interrupt_response`` is barge-in.
Keys the API defines that we have no use for (tracing, noise_reduction, temperature, ...) are
taken and ignored, so stock clients need no changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from dllm_voice.app.config import Config
from dllm_voice.app.conversation.control import Refused
from dllm_voice.app.conversation.events import brief
from dllm_voice.app.server.realtime.formats import AudioFormat, FormatError

# What our own events a client may ask for besides the API's (docs/protocol.md).
EXTRA_EVENTS = ("latency", "trace", "speculation", "agent_state", "tool")
MODALITIES = (("audio",), ("text",), ("audio", "text"), ("text", "audio"))
# semantic_vad eagerness -> (end_of_turn.complete_ms, .doubt_ms, .incomplete_ms); None: the
# server's own. "low" lets a hesitant speaker think twice as long, "high" answers sooner.
EAGERNESS: dict[str, tuple[int, int, int] | None] = {
    "low": (400, 1800, 3000),
    "medium": None,
    "auto": None,
    "high": (120, 500, 800),
}
TURN_DETECTION_TYPES = ("server_vad", "semantic_vad")
TRANSCRIBER = "whisper-tiny.en"  # what input transcription runs on, reported as its model


def _object(value: object, where: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise Refused(f"session.update: {where} must be an object, got {brief(value)}")
    return value


def _format(value: object, where: str) -> AudioFormat:
    try:
        return AudioFormat.parse(value)
    except FormatError as exc:
        raise Refused(f"session.update: {where}: {exc}") from None


def _modalities(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or tuple(value) not in MODALITIES:
        raise Refused(
            f'session.update: {where} must be ["audio"] or ["text"] (or both), got {brief(value)}'
        )
    return ("text",) if value == ["text"] else ("audio",)


def turn_detection(value: object) -> dict[str, object] | None:
    """A checked ``turn_detection`` (None: push-to-talk), with the API's defaults filled in."""
    if value is None:
        return None
    td = _object(value, "turn_detection")
    kind = td.get("type", "server_vad")
    if kind not in TURN_DETECTION_TYPES:
        raise Refused(
            f"session.update: turn_detection.type must be server_vad or semantic_vad (or "
            f"turn_detection null for push-to-talk), got {brief(kind)}"
        )
    out: dict[str, object] = {"type": kind}
    for key in ("create_response", "interrupt_response"):
        flag = td.get(key, True)
        if not isinstance(flag, bool):
            raise Refused(f"session.update: turn_detection.{key} must be true or false")
        out[key] = flag
    if kind == "semantic_vad":
        eagerness = td.get("eagerness", "auto")
        if eagerness not in EAGERNESS:
            raise Refused(
                "session.update: turn_detection.eagerness must be low, medium, high or auto, "
                f"got {brief(eagerness)}"
            )
        out["eagerness"] = eagerness
        return out
    silence = td.get("silence_duration_ms", 500)
    if isinstance(silence, bool) or not isinstance(silence, int) or not 60 <= silence <= 10000:
        raise Refused(
            "session.update: turn_detection.silence_duration_ms must be an integer from 60 to "
            f"10000, got {brief(silence)}"
        )
    out["silence_duration_ms"] = silence
    for key in ("threshold", "prefix_padding_ms", "idle_timeout_ms"):
        if key in td:  # taken, reported back, not used: our VAD has its own
            out[key] = td[key]
    return out


@dataclass
class RealtimeSettings:
    """One Realtime session's settings; ``update`` applies a ``session.update``'s ``session``."""

    base: Config  # the server's config: what the session's own config starts from
    model: str = "dllm-voice"
    instructions: str = ""
    modalities: tuple[str, ...] = ("audio",)
    input_format: AudioFormat = field(default_factory=AudioFormat)
    output_format: AudioFormat = field(default_factory=AudioFormat)
    turn_detection: dict[str, object] | None = field(
        default_factory=lambda: {
            "type": "semantic_vad",
            "eagerness": "auto",
            "create_response": True,
            "interrupt_response": True,
        }
    )
    speed: float = 1.0
    voice: str = ""
    max_output_tokens: int | str = "inf"
    extras: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.instructions:
            self.instructions = self.base.conversation.system_prompt
        if not self.voice:
            self.voice = self.base.tts.voice

    @property
    def push_to_talk(self) -> bool:
        return self.turn_detection is None

    @property
    def speaks(self) -> bool:
        return "audio" in self.modalities

    def update(self, session: Mapping[str, object]) -> RealtimeSettings:
        """These settings with ``session`` applied; Refused names the first bad value."""
        kind = session.get("type", "realtime")
        if kind != "realtime":
            raise Refused(
                f"session.update: only realtime sessions are served here, not {brief(kind)}"
            )
        new = dataclasses.replace(self)
        audio = _object(session.get("audio", {}), "audio")
        inp = _object(audio.get("input", {}), "audio.input")
        out = _object(audio.get("output", {}), "audio.output")
        if "instructions" in session:
            text = session["instructions"]
            if not isinstance(text, str) or len(text) > 4000:
                raise Refused(
                    "session.update: instructions must be a string of at most 4000 characters"
                )
            new.instructions = text or self.base.conversation.system_prompt
        for key in ("output_modalities", "modalities"):
            if key in session:
                new.modalities = _modalities(session[key], key)
        if "format" in inp or "input_audio_format" in session:
            value = inp["format"] if "format" in inp else session["input_audio_format"]
            new.input_format = _format(value, "audio.input.format")
        if "format" in out or "output_audio_format" in session:
            value = out["format"] if "format" in out else session["output_audio_format"]
            new.output_format = _format(value, "audio.output.format")
        if "turn_detection" in inp or "turn_detection" in session:
            value = inp["turn_detection"] if "turn_detection" in inp else session["turn_detection"]
            new.turn_detection = turn_detection(value)
        if "speed" in out or "speed" in session:
            speed = out["speed"] if "speed" in out else session["speed"]
            if (
                isinstance(speed, bool)
                or not isinstance(speed, int | float)
                or not 0.25 <= speed <= 1.5
            ):
                raise Refused(f"session.update: speed must be from 0.25 to 1.5, got {brief(speed)}")
            new.speed = float(speed)
        voice = out.get("voice", session.get("voice"))
        if isinstance(voice, str) and voice:
            new.voice = voice  # one voice is served; the name is reported back as given
        for key in ("max_output_tokens", "max_response_output_tokens"):
            if key in session:
                new.max_output_tokens = max_tokens(session[key], key)
        if "dllm_voice" in session:
            new.extras = extras(session["dllm_voice"])
        return new

    def changes(self) -> dict[str, dict[str, object]]:
        """What these settings change in the server's config, by section."""
        base = self.base
        out: dict[str, dict[str, object]] = {
            "conversation": {"system_prompt": self.instructions},
            "tts": {"length_scale": round(base.tts.length_scale / self.speed, 3)},
            "lm": {
                "max_new_tokens": base.lm.max_new_tokens
                if self.max_output_tokens == "inf"
                else min(int(self.max_output_tokens), base.lm.max_new_tokens)
            },
        }
        td = self.turn_detection
        if td is None:
            return out
        out["barge_in"] = {"enabled": bool(td["interrupt_response"])}
        # With create_response off no answer starts before response.create: none to draft.
        out["speculation"] = {"enabled": base.speculation.enabled and bool(td["create_response"])}
        if td["type"] == "server_vad":
            out["end_of_turn"] = {"mode": "fixed"}
            out["vad"] = {"speech_end_ms": td["silence_duration_ms"]}
            return out
        eot = base.end_of_turn
        waits = EAGERNESS[str(td["eagerness"])] or (
            eot.complete_ms,
            eot.doubt_ms,
            eot.incomplete_ms,
        )
        out["end_of_turn"] = {
            "mode": "adaptive",
            "complete_ms": waits[0],
            "doubt_ms": waits[1],
            "incomplete_ms": waits[2],
        }
        out["vad"] = {"speech_end_ms": base.vad.speech_end_ms}
        return out

    def as_beta_json(
        self, session_id: str, tools: list[dict[str, object]], tool_choice: str
    ) -> dict[str, object]:
        """The ``session`` object as the beta API said it."""
        beta = {"audio/pcm": "pcm16", "audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}
        td = self.turn_detection
        return {
            "object": "realtime.session",
            "id": session_id,
            "model": self.model,
            "instructions": self.instructions,
            "modalities": ["text", "audio"] if self.speaks else ["text"],
            "input_audio_format": beta[self.input_format.type],
            "output_audio_format": beta[self.output_format.type],
            "input_audio_transcription": {"model": TRANSCRIBER, "language": "en"},
            "turn_detection": dict(td) if td is not None else None,
            "voice": self.voice,
            "speed": self.speed,
            "tools": tools,
            "tool_choice": tool_choice,
            "max_response_output_tokens": self.max_output_tokens,
        }

    def as_json(
        self, session_id: str, tools: list[dict[str, object]], tool_choice: str
    ) -> dict[str, object]:
        """The ``session`` object of ``session.created`` and ``session.updated``."""
        td = self.turn_detection
        ours = {"dllm_voice": {"events": sorted(self.extras)}} if self.extras else {}
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": session_id,
            "model": self.model,
            "instructions": self.instructions,
            "output_modalities": list(self.modalities),
            "audio": {
                "input": {
                    "format": self.input_format.as_json(),
                    "transcription": {"model": TRANSCRIBER, "language": "en"},
                    "turn_detection": dict(td) if td is not None else None,
                    "noise_reduction": None,
                },
                "output": {
                    "format": self.output_format.as_json(),
                    "voice": self.voice,
                    "speed": self.speed,
                },
            },
            "tools": tools,
            "tool_choice": tool_choice,
            "max_output_tokens": self.max_output_tokens,
            "tracing": None,
            **ours,
        }


def max_tokens(value: object, key: str) -> int | str:
    if value == "inf":
        return "inf"
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise Refused(f'session.update: {key} must be an integer from 1 to 4096 or "inf"')
    return value


def extras(value: object) -> frozenset[str]:
    """``{"events": [...]}``: which of our own events the client wants besides the API's."""
    asked = _object(value, "dllm_voice").get("events", [])
    if not isinstance(asked, list) or not all(e in EXTRA_EVENTS for e in asked):
        raise Refused(
            "session.update: dllm_voice.events must list some of " + ", ".join(EXTRA_EVENTS)
        )
    return frozenset(asked)
