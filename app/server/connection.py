"""One websocket client's session: reads its messages, runs its VoiceSession, sends its events
and audio.

Each message is parsed (protocol.py) into a command and dispatched; a bad one becomes an
`error` event and the session goes on. Outgoing messages go through one bounded queue drained
by one writer task, and every event is encoded here, as strict JSON: an event that cannot be
(a NaN, say) is replaced by a `server_error`, never sent half-valid.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from typing import TYPE_CHECKING

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from dllm_voice.app.conversation import events
from dllm_voice.app.conversation.control import Refused, SessionControl, describe
from dllm_voice.app.server.protocol import (
    AUDIO_HEADER,
    Audio,
    CancelResponse,
    ClientError,
    Command,
    CreateItem,
    CreateResponse,
    Ping,
    PlaybackReport,
    ToolOutput,
    UpdateSession,
    parse,
)

if TYPE_CHECKING:
    from dllm_voice.app.conversation.session import VoiceSession
    from dllm_voice.app.server.server import VoiceServer
    from dllm_voice.audio.client_sink import ClientSink
    from dllm_voice.audio.sources import PushSource

log = logging.getLogger(__name__)


class Connection:
    """One websocket client: decodes its messages, drives its VoiceSession, sends events and audio.

    Nothing outgoing is dropped: audio waits for room (the sink's pump waits for each message
    to reach the socket and stays lead_ms ahead of playback, and an answer the client stops
    playing is cancelled after server.playback_stall_ms); past half full the reader stops
    reading until the client has taken its answers (a flood of pings is answered at the pace
    the client reads), and a client that takes nothing for CLIENT_STALL_S then, or an event
    that finds the queue full, closes the connection with 1008. Incoming audio is taken whole:
    past half of the source's buffer the reader waits for the session to catch up (TCP
    backpressure on the client).
    """

    # A turn sends ~150 events, and an answer nobody plays is cancelled after 3 s: a client
    # that leaves this many unread is not reading at all (a ping flood that ignores its pongs).
    OUT_QUEUE_MESSAGES = 2048
    CATCH_UP_S = 2.0  # a session that reads nothing for this long is stalled: go on reading
    WATCH_S = 0.1  # how often the playback stall is checked
    CLIENT_STALL_S = 10.0  # a client that takes none of a full queue for this long is gone
    TEARDOWN = (asyncio.CancelledError, ConnectionClosed)

    def __init__(self, ws: ServerConnection, server: VoiceServer, peer: str = "") -> None:
        self.ws = ws
        self.server = server
        self.id = uuid.uuid4().hex[:12]
        self.peer = peer  # the client's address (`exposure.connection_client`)
        self.out: asyncio.Queue[str | tuple[str | bytes, asyncio.Future[None]] | None] = (
            asyncio.Queue(self.OUT_QUEUE_MESSAGES)
        )
        self.closing: asyncio.Task[None] | None = None
        self.last_audio = time.monotonic()  # in or out: what the idle timeout counts from
        # Set by run(), before the first message is read.
        self.session: VoiceSession | None = None
        self.control: SessionControl | None = None
        self.source: PushSource | None = None
        self.sink: ClientSink | None = None
        # Two messages of the largest size fit (1 MiB of PCM16 is 32.8 s at 16 kHz), so one
        # always fits past the high-water mark at half.
        cfg = server.cfg
        self.buffer_ms = 2 * cfg.server.max_message_bytes * 1000 // (2 * cfg.audio.sample_rate_hz)

    # ---- out ------------------------------------------------------------------------------------

    def emit(self, event: events.Event) -> None:
        """Queue a JSON event for the client (callable from the event loop only)."""
        self.send_event(event)

    def send_event(self, event: events.Event) -> None:
        """Queue ``event`` as strict JSON; one that cannot be becomes a ``server_error``."""
        if self.closing is not None:
            return  # the connection is ending: nothing more will reach the client
        try:
            text = json.dumps(event, default=str, allow_nan=False)
        except (ValueError, TypeError, RecursionError):  # NaN or Infinity; a cycle; bad keys
            self.server.log_bug("session %s: a %r event is not JSON", self.id, event.get("type"))
            event = events.error(
                "server_error", f"the server could not encode a {event.get('type')} event"
            )
            text = json.dumps(event)
        self.server.metrics.on_event(event)
        try:
            self.out.put_nowait(text)
        except asyncio.QueueFull:
            self._too_slow(f"left the last {self.OUT_QUEUE_MESSAGES} messages unread")

    def _too_slow(self, why: str) -> None:
        self.server.log_slow("session %s: the client %s; closing (1008)", self.id, why)
        self.close(1008, "client too slow: it reads none of its messages")

    async def _out_drained(self) -> None:
        """Wait until the client has taken most of what is queued for it; close it if it takes
        nothing for CLIENT_STALL_S."""
        size, since = self.out.qsize(), time.monotonic()
        while size > self.OUT_QUEUE_MESSAGES // 4 and self.closing is None:
            await asyncio.sleep(0.01)
            if self.out.qsize() < size:
                size, since = self.out.qsize(), time.monotonic()
            elif time.monotonic() - since > self.CLIENT_STALL_S:
                self._too_slow(f"took none of {size} messages for {self.CLIENT_STALL_S:g} s")

    def close(self, code: int, reason: str) -> None:
        """End the connection with `code`; the session ends with it (run's reader returns)."""
        if self.closing is None:
            self.closing = asyncio.ensure_future(self.ws.close(code, reason))

    async def send_audio(self, gen: int, pcm: bytes) -> None:
        """One audio message; returns once it is written to the socket."""
        self.last_audio = time.monotonic()
        message = self.audio_message(gen, pcm)
        if message is None:
            return
        done = asyncio.get_running_loop().create_future()
        await self.out.put((message, done))
        await done

    def audio_message(self, gen: int, pcm: bytes) -> str | bytes | None:
        """The message that carries ``pcm`` (at the voice's rate) of generation ``gen``; None:
        none is sent."""
        return AUDIO_HEADER.pack(gen) + pcm

    async def _writer(self) -> None:
        while (item := await self.out.get()) is not None:
            if isinstance(item, str):
                await self.ws.send(item)
            else:
                message, done = item
                await self.ws.send(message)
                if not done.done():
                    done.set_result(None)
            self.out.task_done()

    # ---- watchers -------------------------------------------------------------------------------

    async def _watch_idle(self, idle_s: float) -> None:
        """Close a session with no audio either way for `idle_s` (it holds one of few slots)."""
        while (left := self.last_audio + idle_s - time.monotonic()) > 0:  # noqa: ASYNC110 - a deadline
            await asyncio.sleep(left)
        log.info("session %s: no audio for %.0f s; closing", self.id, idle_s)
        self.emit(
            events.error(
                "idle_timeout",
                f"no audio either way for {idle_s:g} s (server.idle_timeout_s); closing",
            )
        )
        with contextlib.suppress(TimeoutError):  # the event goes out before the close frame
            await asyncio.wait_for(self.out.join(), self.CATCH_UP_S)
        self.close(1000, "idle timeout")

    async def _watch_playback(self) -> None:
        """Cancel an answer whose audio the client has stopped playing (it must end)."""
        stall_s = self.server.cfg.server.playback_stall_ms / 1000
        sink, session = self.sink, self.session
        assert sink is not None and session is not None  # run() starts this after setting them
        while True:
            await asyncio.sleep(self.WATCH_S)
            stalled = sink.stalled_s()
            if stalled < stall_s:
                continue
            gen = session.gen
            how = "reported no progress" if sink.reported else "took no audio off the socket"
            log.warning("session %s: client %s for %.1f s; cancelling", self.id, how, stalled)
            self.emit(
                events.error(
                    "playback_stalled",
                    f"resp_{gen}: the client {how} for {stalled:.1f} s "
                    f"(server.playback_stall_ms); the response is cancelled, heard_text is "
                    "what it played",
                )
            )
            session.cancel_response()
            await asyncio.sleep(stall_s)  # once per stall, even if nothing was left to cancel

    # ---- in -------------------------------------------------------------------------------------

    def _push(self, pcm: bytes) -> None:
        self.last_audio = time.monotonic()
        assert self.source is not None
        dropped = self.source.push(pcm)
        if dropped:
            ms = dropped * self.source.frame_ms
            self.server.metrics.dropped_audio.inc(ms / 1000.0)
            self.emit(
                events.error(
                    "input_audio_buffer_overflow",
                    f"the session fell {self.buffer_ms // 1000} s behind the audio it was sent "
                    f"and dropped the oldest {ms} ms of it",
                )
            )

    def dispatch(self, command: Command) -> None:
        """What a parsed client message does; Refused for one the session does not take."""
        match command:
            case Audio(pcm):
                self._push(pcm)
            case PlaybackReport(gen, audio_end_ms, stopped):
                assert self.sink is not None
                self.sink.report(gen, audio_end_ms, stopped=stopped)
            case CancelResponse():
                assert self.session is not None
                self.session.cancel_response()
            case CreateItem(text):
                assert self.control is not None
                self.control.create_item(text)
            case ToolOutput(call_id, output):
                assert self.control is not None
                self.control.tool_output(call_id, output)
            case CreateResponse():
                assert self.control is not None
                self.control.create_response()
            case UpdateSession(settings, tools, tool_choice):
                assert self.control is not None
                self.control.update(settings, tools, tool_choice)
            case Ping():
                self.emit(events.pong())

    def handle_message(self, message: str | bytes) -> None:
        """One client message: audio bytes to the session's source, JSON to its control;
        ClientError or Refused for one the protocol or the session does not allow."""
        self.dispatch(parse(message))

    def refuse(self, exc: ClientError | Refused) -> None:
        """Tell the client why its message was not taken."""
        self.emit(events.error("invalid_request_error", str(exc)))

    def greet(self) -> None:
        """The first event: the session's formats and settings."""
        cfg, components = self.server.cfg, self.server.components
        assert components is not None
        self.emit(
            events.session_created(
                self.id,
                input_sample_rate_hz=cfg.audio.sample_rate_hz,
                output_sample_rate_hz=components.tts.sample_rate_hz,
                decoder=cfg.lm.decoder,
                settings=describe(cfg),
            )
        )

    def start(self, session: VoiceSession) -> None:
        """Set up what the session needs before its first message (its control)."""
        self.control = SessionControl(self.server.cfg, session, self.emit)

    async def run(self) -> None:
        from dllm_voice.app.conversation.session import VoiceSession
        from dllm_voice.app.observe.trace import Tracer
        from dllm_voice.audio.client_sink import ClientSink
        from dllm_voice.audio.sources import PushSource

        cfg = self.server.cfg
        components = self.server.components
        assert components is not None  # serve() loads the models before it listens
        tracer = Tracer(self.server.trace_path(self.id), session=self.id)
        tracer.listeners.append(self.server.metrics.on_trace)
        if self.server.spans is not None:
            self.server.spans.observe(tracer)
        self.source = source = PushSource(
            frame_ms=cfg.audio.frame_ms,
            max_buffer_ms=self.buffer_ms,
            gap_fill_ms=cfg.server.input_gap_fill_ms,
        )
        self.sink = sink = ClientSink(
            self.send_audio, lambda: int(session.gen), components.tts.sample_rate_hz
        )
        self.session = session = VoiceSession(components, cfg, source, sink, tracer, self.emit)
        self.start(session)
        self.greet()
        writer = asyncio.create_task(self._writer(), name=f"writer-{self.id}")
        pipeline = asyncio.create_task(session.run(), name=f"session-{self.id}")
        watchers = [asyncio.create_task(self._watch_playback(), name=f"watch-{self.id}")]
        if idle_s := cfg.server.idle_timeout_s:
            watchers.append(asyncio.create_task(self._watch_idle(idle_s), name=f"idle-{self.id}"))
        try:
            async for message in self.ws:
                try:
                    self.handle_message(message)
                except (ClientError, Refused) as exc:
                    self.refuse(exc)
                except Exception:  # a server bug: logged whole, the session goes on
                    self.server.log_bug("session %s: a client message raised", self.id)
                    self.emit(events.error("server_error", "the server failed on this message"))
                if source.buffered_ms > self.buffer_ms // 2:
                    await source.drained(self.CATCH_UP_S)
                if self.out.qsize() > self.OUT_QUEUE_MESSAGES // 2:
                    await self._out_drained()
                if pipeline.done():
                    break
        except ConnectionClosed:
            pass
        finally:
            self.server.release(self)
            source.close()
            for task in watchers:
                task.cancel()
            pipeline.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pipeline
            if pipeline.done() and not pipeline.cancelled() and pipeline.exception():
                log.error("session %s failed: %s", self.id, pipeline.exception())
            tracer.close()
            await sink.aclose()
            with contextlib.suppress(asyncio.QueueFull):
                self.out.put_nowait(None)
            writer.cancel()
            for task in (writer, *watchers):
                with contextlib.suppress(*self.TEARDOWN):
                    await task
            if self.closing is not None:
                with contextlib.suppress(*self.TEARDOWN):
                    await self.closing
