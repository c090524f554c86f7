"""Websocket server: GET / serves the web client, /ws carries one voice session per connection.

Protocol (docs/protocol.md): the client streams binary PCM16LE mono 16 kHz; the server answers
with JSON events named after the OpenAI Realtime API and binary audio messages, each a 4-byte
little-endian generation id followed by PCM16LE mono at the rate announced in `session.created`.
What the user heard of an answer is what the client reports having played
(`output_audio_buffer.played`, `conversation.item.truncate`), or until it reports, a wall-clock
model of playback over the audio that reached the socket. Nothing a client sends can crash the
server or another session: bad messages become `error` events, a session's failure closes that
connection only, and every session's trace is flushed when it ends.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import http
import json
import logging
import re
import signal
import socket
import struct
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from app.config import Config, ConfigError

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
_STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
AUDIO_HEADER = struct.Struct("<I")  # generation id in front of every outgoing audio message


def _static_response(path: str) -> Response | None:
    """The file under static/ that `path` names, or None (the request then goes on to /ws)."""
    if path.split("?", 1)[0] == "/ws":
        return None
    name = path.split("?", 1)[0].lstrip("/") or "index.html"
    file = (STATIC_DIR / name).resolve()
    if STATIC_DIR not in file.parents or not file.is_file() or file.suffix not in _STATIC_TYPES:
        body = b"not found\n"
        headers = Headers([("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return Response(http.HTTPStatus.NOT_FOUND, "Not Found", headers, body)
    body = file.read_bytes()
    headers = Headers(
        [
            ("Content-Type", _STATIC_TYPES[file.suffix]),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-cache"),
        ]
    )
    return Response(http.HTTPStatus.OK, "OK", headers, body)


class ClientError(ValueError):
    """A message the client sent that the protocol does not allow; reported, never fatal."""


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _number(event: dict[str, Any], key: str) -> float:
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise ClientError(f"{event['type']}: {key} must be a number >= 0, got {value!r}")
    return float(value)


class Connection:
    """One websocket client: decodes its messages, drives its VoiceSession, sends events and audio.

    Outgoing messages go through one bounded queue drained by one writer task, so a slow client
    delays only itself. Audio is never dropped: the sink's pump waits for each message to reach
    the socket and stays lead_ms ahead of playback, and an answer the client stops playing is
    cancelled after server.playback_stall_ms. Incoming audio is taken whole: past half of the
    source's buffer the reader waits for the session to catch up (TCP backpressure on the client).
    """

    OUT_QUEUE_MESSAGES = 512
    CATCH_UP_S = 2.0  # a session that reads nothing for this long is stalled: go on reading
    WATCH_S = 0.1  # how often the playback stall is checked

    def __init__(self, ws: ServerConnection, server: VoiceServer) -> None:
        self.ws = ws
        self.server = server
        self.id = uuid.uuid4().hex[:12]
        self.out: asyncio.Queue[str | tuple[bytes, asyncio.Future[None]] | None] = asyncio.Queue(
            self.OUT_QUEUE_MESSAGES
        )
        self.session: Any = None
        self.source: Any = None
        self.sink: Any = None
        # Two messages of the largest size fit (1 MiB of PCM16 is 32.8 s at 16 kHz), so one
        # always fits past the high-water mark at half.
        cfg = server.cfg
        self.buffer_ms = 2 * cfg.server.max_message_bytes * 1000 // (2 * cfg.audio.sample_rate_hz)

    def emit(self, event: dict[str, Any]) -> None:
        """Queue a JSON event for the client (callable from the event loop only)."""
        try:
            self.out.put_nowait(json.dumps(event, default=str))
        except asyncio.QueueFull:
            log.warning("session %s: client too slow, dropped %s", self.id, event.get("type"))

    async def send_audio(self, gen: int, pcm: bytes) -> None:
        """One audio message; returns once it is written to the socket."""
        done = asyncio.get_running_loop().create_future()
        await self.out.put((AUDIO_HEADER.pack(gen) + pcm, done))
        await done

    async def _writer(self) -> None:
        while (item := await self.out.get()) is not None:
            if isinstance(item, str):
                await self.ws.send(item)
                continue
            message, done = item
            await self.ws.send(message)
            if not done.done():
                done.set_result(None)

    async def _watch_playback(self) -> None:
        """Cancel an answer whose audio the client has stopped playing (it must end)."""
        stall_s = self.server.cfg.server.playback_stall_ms / 1000
        while True:
            await asyncio.sleep(self.WATCH_S)
            stalled = self.sink.stalled_s()
            if stalled < stall_s:
                continue
            gen = self.session.gen
            how = "reported no progress" if self.sink.reported else "took no audio off the socket"
            log.warning("session %s: client %s for %.1f s; cancelling", self.id, how, stalled)
            self.emit(
                _error(
                    "playback_stalled",
                    f"resp_{gen}: the client {how} for {stalled:.1f} s "
                    f"(server.playback_stall_ms); the response is cancelled, heard_text is "
                    "what it played",
                )
            )
            self.session.cancel_response()
            await asyncio.sleep(stall_s)  # once per stall, even if nothing was left to cancel

    def _push(self, pcm: bytes) -> None:
        dropped = self.source.push(pcm)
        if dropped:
            ms = dropped * self.source.frame_ms
            self.emit(
                _error(
                    "input_audio_buffer_overflow",
                    f"the session fell {self.buffer_ms // 1000} s behind the audio it was sent "
                    f"and dropped the oldest {ms} ms of it",
                )
            )

    def handle_message(self, message: str | bytes) -> None:
        """One client message: audio bytes to the session's source, JSON to its control."""
        if isinstance(message, bytes):
            self._push(message)
            return
        try:
            event = json.loads(message)
        except json.JSONDecodeError:
            raise ClientError("message is neither binary audio nor JSON") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise ClientError('JSON messages must be objects with a string "type"')
        kind = event["type"]
        if kind == "input_audio_buffer.append":
            try:
                self._push(base64.b64decode(event.get("audio", ""), validate=True))
            except (binascii.Error, TypeError):
                raise ClientError("input_audio_buffer.append: audio must be base64") from None
        elif kind == "output_audio_buffer.played":
            gen = event.get("gen")
            if isinstance(gen, bool) or not isinstance(gen, int) or gen < 0:
                raise ClientError(f"{kind}: gen must be the audio's generation id, got {gen!r}")
            self.sink.report(gen, _number(event, "audio_end_ms"))
        elif kind == "conversation.item.truncate":
            item = event.get("item_id")
            match = re.fullmatch(r"resp_(\d+)", item) if isinstance(item, str) else None
            if match is None:
                raise ClientError(f"{kind}: item_id must be a response id resp_<gen>, got {item!r}")
            if event.get("content_index", 0) != 0:
                raise ClientError(f"{kind}: content_index must be 0 (one audio part per response)")
            self.sink.report(int(match[1]), _number(event, "audio_end_ms"), stopped=True)
        elif kind == "response.cancel":
            self.session.cancel_response()
        elif kind == "ping":
            self.emit({"type": "pong"})
        else:
            raise ClientError(f"unknown event type {kind!r}")

    async def run(self) -> None:
        from app.pipeline import VoiceSession
        from app.trace import Tracer
        from audio.sinks import ClientSink
        from audio.sources import PushSource

        cfg = self.server.cfg
        components = self.server.components
        tracer = Tracer(self.server.trace_path(self.id), session=self.id)
        self.source = PushSource(
            frame_ms=cfg.audio.frame_ms,
            max_buffer_ms=self.buffer_ms,
            gap_fill_ms=cfg.server.input_gap_fill_ms,
        )
        self.sink = ClientSink(
            self.send_audio, lambda: int(self.session.gen), components.tts.sample_rate_hz
        )
        self.session = VoiceSession(components, cfg, self.source, self.sink, tracer, self.emit)
        self.emit(
            {
                "type": "session.created",
                "session": {
                    "id": self.id,
                    "input_audio_format": "pcm16",
                    "input_sample_rate_hz": cfg.audio.sample_rate_hz,
                    "output_audio_format": "pcm16",
                    "output_sample_rate_hz": components.tts.sample_rate_hz,
                    "audio_header": "uint32le generation id",
                    "decoder": cfg.lm.decoder,
                },
            }
        )
        writer = asyncio.create_task(self._writer(), name=f"writer-{self.id}")
        pipeline = asyncio.create_task(self.session.run(), name=f"session-{self.id}")
        watcher = asyncio.create_task(self._watch_playback(), name=f"watch-{self.id}")
        try:
            async for message in self.ws:
                try:
                    self.handle_message(message)
                except ClientError as exc:
                    self.emit(_error("invalid_request_error", str(exc)))
                if self.source.buffered_ms > self.buffer_ms // 2:
                    await self.source.drained(self.CATCH_UP_S)
                if pipeline.done():
                    break
        except ConnectionClosed:
            pass
        finally:
            self.source.close()
            watcher.cancel()
            pipeline.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pipeline
            if pipeline.done() and not pipeline.cancelled() and pipeline.exception():
                log.error("session %s failed: %s", self.id, pipeline.exception())
            tracer.close()
            await self.sink.aclose()
            with contextlib.suppress(asyncio.QueueFull):
                self.out.put_nowait(None)
            writer.cancel()
            for task in (writer, watcher):
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                    await task


class VoiceServer:
    """Shares the loaded models between connections and caps how many run at once."""

    def __init__(self, cfg: Config, components: Any) -> None:
        self.cfg = cfg
        self.components = components
        self.active: set[Connection] = set()

    def trace_path(self, session_id: str) -> str | None:
        if not self.cfg.trace.enabled:
            return None
        base = self.cfg.trace.path or "runs"
        folder = Path(base).parent if base.endswith(".jsonl") else Path(base)
        return str(folder / f"serve-{session_id}.jsonl")

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        return _static_response(request.path)

    async def handler(self, ws: ServerConnection) -> None:
        limit = self.cfg.server.max_sessions
        if len(self.active) >= limit:
            await ws.send(
                json.dumps(
                    {
                        "type": "error",
                        "error": {
                            "type": "server_busy",
                            "message": f"the server is at its limit of {limit} sessions "
                            "(server.max_sessions); try again later",
                        },
                    }
                )
            )
            await ws.close(1013, "server busy")
            return
        conn = Connection(ws, self)
        self.active.add(conn)
        log.info("session %s: connected (%d active)", conn.id, len(self.active))
        try:
            await conn.run()
        finally:
            self.active.discard(conn)
            log.info("session %s: closed", conn.id)

    async def serve_forever(
        self,
        ready: Callable[[str], Awaitable[None] | None] | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        scfg = self.cfg.server
        stop = stop or asyncio.Event()
        async with ws_serve(
            self.handler,
            scfg.host,
            scfg.port,
            process_request=self.process_request,
            max_size=scfg.max_message_bytes,
        ) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            host = "localhost" if scfg.host in ("127.0.0.1", "0.0.0.0") else scfg.host
            url = f"http://{host}:{port}/"
            if ready is not None:
                result = ready(url)
                if result is not None:
                    await result
            await stop.wait()


def _check_port(host: str, port: int) -> None:
    """Fail in one line, before minutes of model loading, when the address is taken."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"serve: cannot listen on {host}:{port} ({exc.strerror}); "
                "pick another with --set server.port=N"
            ) from None


def serve(cfg: Config) -> int:
    """`python main.py serve`: load the models once, then serve until Ctrl+C."""
    from rich.console import Console

    from app.pipeline import Components

    console = Console()
    _check_port(cfg.server.host, cfg.server.port)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    with console.status("loading models (LM, Whisper, Piper)..."):
        components = Components.load(cfg)
    server = VoiceServer(cfg, components)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def ready(url: str) -> None:
            console.print(
                f"[bold green]Open {url} in a browser[/] and allow the microphone. Ctrl+C stops."
            )

        await server.serve_forever(ready, stop)

    try:
        asyncio.run(main())
    finally:
        components.close()
    return 0
