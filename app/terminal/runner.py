"""``python main.py run``: the live pipeline driven from WAV files, answers to a WAV file.

Inputs play as consecutive user turns on one timeline. ``PATH`` starts once the agent has
finished answering the previous input; ``PATH@MS`` starts MS milliseconds after the agent began
speaking its previous answer: a barge-in. Between inputs the timeline carries silence, so VAD,
endpointing and barge-in behave as with a microphone. ``realtime`` paces every frame by the
clock (what benchmarks and barge-ins need); otherwise speech is fed as fast as the pipeline
takes it, and only the waits for the agent take wall time.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console

from dllm_voice.app.observe.otel import span_export
from dllm_voice.app.observe.trace import Tracer, default_trace_path, now_ms

if TYPE_CHECKING:
    from dllm_voice.app.config import Config
    from dllm_voice.app.conversation.components import Components
    from dllm_voice.app.conversation.events import Event
    from dllm_voice.app.conversation.session import EventFn, VoiceSession
    from dllm_voice.audio.config import AudioConfig
    from dllm_voice.audio.resample import PCM16
    from dllm_voice.audio.sinks import Sink

_BARGE = re.compile(r"^(?P<path>.+)@(?P<ms>\d+)$")


@dataclass(frozen=True)
class Segment:
    """One user utterance on the timeline (int16 mono at the pipeline rate)."""

    pcm: PCM16
    label: str = ""
    barge_in_at_ms: int | None = None  # None: after the agent's answer; else: into it


def parse_input(spec: str) -> tuple[str, int | None]:
    """``q.wav`` -> (q.wav, None); ``q.wav@1200`` -> (q.wav, 1200)."""
    m = _BARGE.match(spec)
    return (m["path"], int(m["ms"])) if m else (spec, None)


class TimelineSource:
    """An async frame source that plays segments on a timeline shaped by the agent's state."""

    def __init__(
        self,
        segments: list[Segment],
        *,
        sample_rate_hz: int = 16000,
        frame_ms: int = 30,
        realtime: bool = False,
        tail_ms: int = 1000,
        lead_ms: int = 300,
    ) -> None:
        self.segments = segments
        self.rate, self.frame_ms, self.realtime = sample_rate_hz, frame_ms, realtime
        self.frame_len = sample_rate_hz * frame_ms // 1000
        self.tail_ms, self.lead_ms = tail_ms, lead_ms
        self.session: VoiceSession | None = None
        self.starts: list[float] = []  # monotonic ms at which each segment's audio began
        self._next_t = 0.0
        self._closed = False

    def bind(self, session: VoiceSession) -> None:
        """The session whose state decides when the next segment starts."""
        self.session = session

    def _silence(self) -> PCM16:
        return np.zeros(self.frame_len, dtype=np.int16)

    async def _pace(self) -> None:
        if not self.realtime:
            await asyncio.sleep(0)
            return
        if self._next_t == 0.0:
            self._next_t = now_ms()
        self._next_t += self.frame_ms
        delay = (self._next_t - now_ms()) / 1000.0
        if delay > 0:
            await asyncio.sleep(delay)

    async def _silence_for(self, ms: float) -> AsyncIterator[PCM16]:
        for _ in range(int(ms // self.frame_ms)):
            yield self._silence()
            await self._pace()

    async def _wait(self, ready: Callable[[], bool]) -> AsyncIterator[PCM16]:
        """Silence (realtime) or a plain wait (fast) until ``ready()``."""
        while not ready():
            if self.realtime:
                yield self._silence()
                await self._pace()
            else:
                await asyncio.sleep(0.005)

    def _ready_for(self, seg: Segment) -> Callable[[], bool]:
        s = self.session
        if seg.barge_in_at_ms is None:
            return lambda: s is None or s.idle()
        start = len(self.starts)

        at = seg.barge_in_at_ms

        def audio_started() -> bool:
            t = s.last_audio_out_t if s is not None else None
            return t is not None and t > self.starts[start - 1] and now_ms() >= t + at

        return audio_started

    async def frames(self) -> AsyncIterator[PCM16]:
        async for f in self._silence_for(self.lead_ms):
            yield f
        for i, seg in enumerate(self.segments):
            if i > 0:
                async for f in self._wait(self._ready_for(seg)):
                    yield f
            self.starts.append(now_ms())
            pcm = np.asarray(seg.pcm, dtype=np.int16)
            for k in range(0, len(pcm) - self.frame_len + 1, self.frame_len):
                yield pcm[k : k + self.frame_len]
                await self._pace()
            async for f in self._silence_for(self.tail_ms):
                yield f
            if self._closed:
                return

    def __aiter__(self) -> AsyncIterator[PCM16]:
        return self.frames()

    async def aclose(self) -> None:
        self._closed = True


class TurnPrinter:
    """Prints each turn's transcript, answer and latency as the events arrive."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False, soft_wrap=True)
        self.turns: list[dict[str, object]] = []  # each response.done's, with its latency
        self._user = ""

    def __call__(self, ev: Event) -> None:
        kind = ev["type"]
        if kind == "conversation.item.input_audio_transcription.completed":
            self._user = ev["transcript"]
        elif kind == "conversation.item.input_audio_transcription.revised":
            old, new = ev["previous_transcript"], ev["transcript"]
            self._user = new if self._user == old else self._user
            for turn in self.turns:
                turn["user"] = new if turn["user"] == old else turn["user"]
        elif kind == "response.done":
            r = ev["response"]
            self.turns.append({"user": self._user, "gen": r["gen"], **r})
            self.console.print(f"[bold]you:[/bold]   {self._user}")
            if r["status"] == "cancelled":
                self.console.print(
                    f"[bold]agent:[/bold] {r['heard_text']} [red](interrupted)[/red]"
                )
            else:
                self.console.print(f"[bold]agent:[/bold] {r['output_text']}")
        elif kind == "latency" and self.turns:
            self.turns[-1]["latency"] = ev
            st = ev["stages"]
            parts = [
                f"{name} {st[name]:.0f}"
                for name in ("asr_final", "lm_clause", "tts_first")
                if name in st
            ]
            v2v = ev.get("voice_to_voice_ms")
            head = f"voice-to-voice {v2v:.0f} ms" if v2v is not None else "no audio"
            self.console.print(
                f"[dim]       {head} ({', '.join(parts)} ms), speculation {ev['speculation']}[/dim]"
            )


async def run_session(
    components: Components,
    cfg: Config,
    source: TimelineSource,
    sink: Sink,
    tracer: Tracer,
    on_event: EventFn | None = None,
) -> VoiceSession:
    """Run one session over a timeline source; returns the finished VoiceSession."""
    from dllm_voice.app.conversation.session import VoiceSession

    session = VoiceSession(components, cfg, source, sink, tracer, on_event)
    source.bind(session)
    await session.run()
    await sink.drain()
    return session


async def load_segments(inputs: list[str], audio: AudioConfig) -> list[Segment]:
    """Read each input WAV (any rate/channels; WavSource converts) into 16 kHz mono PCM."""
    from dllm_voice.audio.sources import WavSource

    segments = []
    for spec in inputs:
        path, at_ms = parse_input(spec)
        source = WavSource(path, frame_ms=audio.frame_ms, realtime=False)
        frames = [np.asarray(f, dtype=np.int16) async for f in source]
        await source.aclose()
        pcm = np.concatenate(frames) if frames else np.zeros(0, dtype=np.int16)
        segments.append(Segment(pcm, path, at_ms))
    return segments


def run_wavs(
    cfg: Config,
    inputs: list[str],
    output: str | None = None,
    trace: str | None = None,
    realtime: bool = False,
    components: Components | None = None,
) -> int:
    """``python main.py run --input q.wav [--input q2.wav@1500 ...]``; returns the exit code."""
    from dllm_voice.app.conversation.components import Components
    from dllm_voice.audio.sinks import CallbackSink, WavSink

    # Lines are never cut to the console's width: a pipe's 80 columns broke the latency line.
    console = Console(highlight=False, soft_wrap=True)
    segments = asyncio.run(load_segments(inputs, cfg.audio))
    if any(s.barge_in_at_ms is not None for s in segments) and not realtime:
        console.print("[dim]barge-in input given: pacing in real time[/dim]")
        realtime = True
    path = trace or (cfg.trace.path or default_trace_path()) if cfg.trace.enabled or trace else None
    spans = span_export(cfg.trace)
    owned = components is None
    comps = components or Components.load(cfg)
    printer = TurnPrinter(console)
    try:
        with Tracer(path, session="run", keep=False) as tracer:
            if spans is not None:
                spans.observe(tracer)
            rate = comps.tts.sample_rate_hz

            async def discard(_: bytes) -> None:
                return None

            # The sink paces "playback" by the clock whenever the source does, so what counts
            # as heard (and so barge-in truncation) matches a speaker.
            sink = (
                WavSink(output, rate, realtime=realtime)
                if output
                else CallbackSink(discard, rate, realtime=realtime)
            )
            source = TimelineSource(
                segments,
                sample_rate_hz=cfg.audio.sample_rate_hz,
                frame_ms=cfg.audio.frame_ms,
                realtime=realtime,
                tail_ms=cfg.vad.speech_end_ms + 500,
            )

            async def main() -> None:
                try:
                    await run_session(comps, cfg, source, sink, tracer, printer)
                finally:
                    await sink.aclose()

            asyncio.run(main())
    finally:
        if owned:
            comps.close()
    if path:
        console.print(f"[dim]trace: {path}  (python main.py trace summary {path})[/dim]")
    if output:
        console.print(f"[dim]reply audio: {output}[/dim]")
    return 0
