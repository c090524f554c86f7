"""``python main.py`` (chat): a live microphone conversation with a rich terminal display.

The display shows what the agent is doing (listening / thinking / speaking), the user's partial
transcript, the answer drafted during a pause (dim: speculative, may be dropped) and the answer
being spoken (bright), and each turn's latency line. When the output is not a terminal (a pipe,
a log file) there is no live view: each finished turn is printed once, one line per speaker and
one for its latency, never wrapped. Ctrl+C ends the session cleanly: answers cancelled, workers
idle, the trace flushed and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from dllm_voice.app.observe.otel import SpanExport, span_export
from dllm_voice.app.observe.trace import Tracer, default_trace_dir, default_trace_path
from dllm_voice.app.terminal.console import terminal_log

if TYPE_CHECKING:
    from dllm_voice.app.config import Config
    from dllm_voice.app.conversation.components import Components
    from dllm_voice.app.conversation.events import Event
    from dllm_voice.audio.echo import FrameSource
    from dllm_voice.audio.speaker import SpeakerSink

# Extra speech needed to pause the agent while it plays through speakers (chat mode): the echo
# reaches the mic ~20-60 ms after playback at a level webrtcvad calls speech.
ECHO_GUARD_MS = 250
_STATE_STYLE = {"listening": "green", "thinking": "yellow", "speaking": "cyan"}


class ChatDisplay:
    """Turns session events into a small live view; ``render()`` is called by rich.Live."""

    def __init__(self, keep_turns: int = 4) -> None:
        self.state = "listening"
        self.user_speaking = False
        self.partial = ""
        self.tentative = ""
        self.answer = ""
        self.latency = ""
        self.log: list[tuple[str, str, str]] = []  # (user, agent, note)
        self.keep_turns = keep_turns
        self.finished: list[Text] = []  # lines of finished turns not yet taken (take_finished)
        self._user = ""

    def on_event(self, ev: Event) -> None:
        kind = ev["type"]
        if kind == "agent.state":
            self.state = ev["state"]
        elif kind == "input_audio_buffer.speech_started":
            self.user_speaking, self.partial = True, ""
        elif kind == "input_audio_buffer.speech_stopped":
            self.user_speaking = False
        elif kind == "conversation.item.input_audio_transcription.delta":
            self.partial = ev["transcript"]
        elif kind == "conversation.item.input_audio_transcription.completed":
            self._user, self.partial = ev["transcript"], ev["transcript"]
        elif kind == "conversation.item.input_audio_transcription.revised":
            old, new = ev["previous_transcript"], ev["transcript"]
            self._user = new if self._user == old else self._user
            self.log = [(new if user == old else user, a, n) for user, a, n in self.log]
        elif kind == "response.speculation.delta":
            self.tentative = ev["text"]
        elif kind == "response.speculation.dropped":
            self.tentative = ""
        elif kind == "response.created":
            self.answer = ""
        elif kind == "response.audio_transcript.delta":
            self.tentative, self.answer = "", self.answer + ev["delta"]
        elif kind == "response.done":
            r = ev["response"]
            cut = r["status"] == "cancelled"
            agent = r["heard_text"] if cut else r["output_text"]
            self.log.append((self._user, agent, "interrupted" if cut else ""))
            self.log = self.log[-self.keep_turns :]
            self.finished += self._turn_lines(*self.log[-1])
            self.answer, self.partial = "", ""
        elif kind == "latency":
            v2v = ev.get("voice_to_voice_ms")
            st = ev["stages"]
            parts = [f"{k} {st[k]:.0f}" for k in ("asr_final", "lm_clause", "tts_first") if k in st]
            head = f"voice-to-voice {v2v:.0f} ms" if v2v is not None else "no audio"
            self.latency = f"{head} ({', '.join(parts)} ms), speculation {ev['speculation']}"
            self.finished.append(Text(self.latency, style="dim"))

    @staticmethod
    def _turn_lines(user: str, agent: str, note: str) -> list[Text]:
        return [
            Text.assemble(("you:   ", "bold"), user),
            Text.assemble(("agent: ", "bold"), agent, (f"  ({note})" if note else "", "red")),
        ]

    def take_finished(self) -> list[Text]:
        """The lines of turns finished since the last call (for output that is not a terminal)."""
        lines, self.finished = self.finished, []
        return lines

    def render(self) -> Group:
        lines: list[Text] = []
        for turn in self.log:
            lines += self._turn_lines(*turn)
        state = "you are speaking" if self.user_speaking else self.state
        lines.append(Text(f"● {state}", style=_STATE_STYLE.get(self.state, "white") + " bold"))
        if self.partial:
            lines.append(Text.assemble(("you:   ", "bold"), (self.partial, "italic")))
        if self.tentative or self.answer:
            lines.append(
                Text.assemble(
                    ("agent: ", "bold"), (self.answer, "bright_white"), (self.tentative, "dim")
                )
            )
        if self.latency:
            lines.append(Text(self.latency, style="dim"))
        lines.append(Text("Ctrl+C to quit", style="dim"))
        return Group(*lines)


def open_audio(cfg: Config) -> tuple[FrameSource, SpeakerSink, Config]:
    """Microphone and speaker for a local conversation, with the agent's echo handled.

    WebRTC AEC3 subtracts what the speaker plays from the mic (its reference is every block the
    speaker sink hands to the device), and the canceller's double-talk detector pauses the agent
    as soon as the mic holds more than that reference's echo. On top of them, or alone when AEC3
    is not installed, the guard requires more speech before the VAD pauses the agent and ignores
    "interruptions" that transcribe as its own words. Returns (source, sink, cfg with the guard
    set).
    """
    from dllm_voice.audio.echo import EchoCanceller
    from dllm_voice.audio.sources import MicSource
    from dllm_voice.audio.speaker import SpeakerSink

    echo = EchoCanceller(cfg.echo, cfg.audio.sample_rate_hz) if cfg.echo.mode != "off" else None
    sink = SpeakerSink(
        cfg.audio,
        on_played=echo.push_far if echo else None,
        on_restart=echo.reset if echo else None,
        on_underrun=echo.slipped if echo else None,
    )
    mic = MicSource(cfg.audio)
    source: FrameSource = echo.wrap(mic) if echo is not None else mic
    if echo is not None and not cfg.barge_in.echo_guard_ms:
        barge_in = dataclasses.replace(cfg.barge_in, echo_guard_ms=ECHO_GUARD_MS)
        cfg = dataclasses.replace(cfg, barge_in=barge_in)
    return source, sink, cfg


def chat(cfg: Config, components: Components | None = None) -> int:
    """Live conversation through the default (or configured) microphone and speaker."""
    path = (cfg.trace.path or default_trace_path()) if cfg.trace.enabled else None
    log_path = Path(path).with_suffix(".log") if path else default_trace_dir().parent / "chat.log"
    console = Console(highlight=False)
    spans = span_export(cfg.trace)  # before the log takes stderr: its errors are one line
    with terminal_log(log_path) as native:
        code = _chat(cfg, components, console, path, spans)
    if code == 0:
        notes = [f"trace: {path}  (python main.py trace summary {path})"] if path else []
        routed = f", {native.lines} library messages" if native.lines else ""
        notes.append(f"log: {log_path}{routed}")
        for note in notes:
            console.print(f"[dim]{note}[/dim]")
    return code


def _chat(
    cfg: Config,
    components: Components | None,
    console: Console,
    path: str | None,
    spans: SpanExport | None,
) -> int:
    from dllm_voice.app.conversation.components import Components
    from dllm_voice.app.conversation.session import VoiceSession
    from dllm_voice.audio.errors import AudioDeviceError, AudioFormatError

    try:
        source, sink, cfg = open_audio(cfg)
    except (AudioDeviceError, AudioFormatError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    comps = components or Components.load(cfg, tts_rate_hz=sink.sample_rate_hz)
    tracer = Tracer(path, session="chat", keep=False)
    if spans is not None:
        spans.observe(tracer)
    display = ChatDisplay()

    def print_finished(ev: Event) -> None:
        display.on_event(ev)
        for line in display.take_finished():
            console.print(line, soft_wrap=True)

    async def main() -> None:
        # A pipe or a log gets each finished turn once, unwrapped; a terminal the live view.
        plain = not console.is_terminal
        on_event = print_finished if plain else display.on_event
        session = VoiceSession(comps, cfg, source, sink, tracer, on_event)
        view = (
            contextlib.nullcontext()
            if plain
            else Live(display.render(), console=console, refresh_per_second=15)
        )
        with view as live:
            ticker = asyncio.create_task(_refresh(live, display)) if live else None
            try:
                sink.start()
                await session.run()
            finally:
                if ticker is not None:
                    ticker.cancel()
                await sink.aclose()
                await source.aclose()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass  # asyncio.run cancelled the session, which cancelled its answers
    except AudioDeviceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        tracer.close()
        if components is None:
            comps.close()
    return 0


async def _refresh(live: Live, display: ChatDisplay) -> None:
    while True:
        live.update(display.render())
        await asyncio.sleep(1 / 15)
