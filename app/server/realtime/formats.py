"""The Realtime API's audio formats, and the streaming conversions to and from our models' rates.

``audio/pcm`` is PCM16LE mono at 24 kHz both ways; ``audio/pcmu`` and ``audio/pcma`` are G.711
μ-law and A-law at 8 kHz (telephony). Input goes to the pipeline's 16 kHz; output comes from the
voice's rate (22.05 kHz for Piper's medium voices). Each direction keeps one streaming
resampler, so chunk edges add no clicks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dllm_voice.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from dllm_voice.audio.resample import PCM16, Resampler, to_float32, to_int16

# GA type -> (beta name, rate): the Realtime API fixes each format's rate.
_FORMATS = {
    "audio/pcm": ("pcm16", 24000),
    "audio/pcmu": ("g711_ulaw", 8000),
    "audio/pcma": ("g711_alaw", 8000),
}
_BY_BETA = {beta: ga for ga, (beta, _) in _FORMATS.items()}


class FormatError(ValueError):
    """An audio format the API does not define."""


@dataclass(frozen=True)
class AudioFormat:
    type: str = "audio/pcm"  # a key of _FORMATS

    @property
    def rate_hz(self) -> int:
        return _FORMATS[self.type][1]

    @property
    def bytes_per_sample(self) -> int:
        return 2 if self.type == "audio/pcm" else 1

    @classmethod
    def parse(cls, value: object) -> AudioFormat:
        """A GA format object ({"type": "audio/pcm", "rate": 24000}) or a beta name ("pcm16")."""
        if isinstance(value, str) and value in _BY_BETA:
            return cls(_BY_BETA[value])
        if isinstance(value, dict) and value.get("type") in _FORMATS:
            fmt = cls(value["type"])
            if value.get("rate", fmt.rate_hz) != fmt.rate_hz:
                raise FormatError(f"{fmt.type} is {fmt.rate_hz} Hz; got rate {value['rate']!r}")
            return fmt
        raise FormatError(
            'an audio format is {"type": "audio/pcm", "rate": 24000}, '
            '{"type": "audio/pcmu"} or {"type": "audio/pcma"} (or pcm16, g711_ulaw, g711_alaw)'
        )

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"type": self.type}
        if self.type == "audio/pcm":
            out["rate"] = self.rate_hz
        return out

    def decode(self, data: bytes) -> PCM16:
        if self.type == "audio/pcmu":
            return ulaw_decode(data)
        if self.type == "audio/pcma":
            return alaw_decode(data)
        return np.frombuffer(data, dtype="<i2").astype(np.int16)

    def encode(self, pcm: PCM16) -> bytes:
        if self.type == "audio/pcmu":
            return ulaw_encode(pcm)
        if self.type == "audio/pcma":
            return alaw_encode(pcm)
        return pcm.astype("<i2").tobytes()


class Converter:
    """A stream of audio from one rate and format to another: ``feed`` chunks in order."""

    def __init__(self, src: AudioFormat | None, src_hz: int, dst: AudioFormat | None, dst_hz: int):
        self.src, self.dst = src, dst
        self._resampler = Resampler(src_hz, dst_hz) if src_hz != dst_hz else None
        self._odd = b""  # a PCM16 chunk may end mid-sample: its byte waits for the next

    def feed(self, data: bytes) -> bytes:
        if self.src is not None:
            if self.src.bytes_per_sample == 2:
                data, self._odd = self._odd + data, b""
                if len(data) % 2:
                    data, self._odd = data[:-1], data[-1:]
            pcm = self.src.decode(data)
        else:
            pcm = np.frombuffer(data, dtype="<i2").astype(np.int16)
        if self._resampler is not None:
            pcm = to_int16(self._resampler.process(to_float32(pcm)))
        return self.dst.encode(pcm) if self.dst is not None else pcm.astype("<i2").tobytes()


def to_pipeline(fmt: AudioFormat, pipeline_hz: int) -> Converter:
    """The client's microphone audio in ``fmt`` -> PCM16LE at the pipeline's rate."""
    return Converter(fmt, fmt.rate_hz, None, pipeline_hz)


def to_client(fmt: AudioFormat, voice_hz: int) -> Converter:
    """The voice's PCM16LE at ``voice_hz`` -> the client's ``fmt``."""
    return Converter(None, voice_hz, fmt, fmt.rate_hz)
