"""Websocket server: GET / serves the web client, /ws carries one voice session per connection.

Protocol (docs/protocol.md): the client streams binary PCM16LE mono 16 kHz; the server answers
with JSON events named after the OpenAI Realtime API and binary audio messages, each a 4-byte
little-endian generation id followed by PCM16LE mono at the rate announced in `session.created`.
Nothing a client sends can crash the server or another session: bad messages become `error`
events, a session's failure closes that connection only, and every session's trace is flushed
when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import logging
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


class Connection:
    """One websocket client: decodes its messages, drives its VoiceSession, sends events and audio.

    Outgoing messages go through one bounded queue drained by one writer task, so a slow client
    delays only itself; when the queue is full, audio is dropped rather than memory grown.
    """

    OUT_QUEUE_MESSAGES = 512

    def __init__(self, ws: ServerConnection, server: VoiceServer) -> None:
        self.ws = ws
        self.server = server
        self.id = uuid.uuid4().hex[:12]
        self.out: asyncio.Queue[str | bytes | None] = asyncio.Queue(self.OUT_QUEUE_MESSAGES)
        self.session: Any = None
        self.source: Any = None

    def emit(self, event: dict[str, Any]) -> None:
        """Queue a JSON event for the client (callable from the event loop only)."""
        try:
            self.out.put_nowait(json.dumps(event, default=str))
        except asyncio.QueueFull:
            log.warning("session %s: client too slow, dropped %s", self.id, event.get("type"))

    async def send_audio(self, pcm: bytes) -> None:
        gen = int(getattr(self.session, "gen", 0))
        try:
            self.out.put_nowait(AUDIO_HEADER.pack(gen) + pcm)
        except asyncio.QueueFull:
            log.warning("session %s: client too slow, dropped %d audio bytes", self.id, len(pcm))

    async def _writer(self) -> None:
        while (message := await self.out.get()) is not None:
            await self.ws.send(message)

    def handle_message(self, message: str | bytes) -> None:
        """One client message: audio bytes to the session's source, JSON to its control."""
        if isinstance(message, bytes):
            self.source.push(message)
            return
        try:
            event = json.loads(message)
        except json.JSONDecodeError:
            raise ClientError("message is neither binary audio nor JSON") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise ClientError('JSON messages must be objects with a string "type"')
        kind = event["type"]
        if kind == "input_audio_buffer.append":
            import base64
            import binascii

            try:
                self.source.push(base64.b64decode(event.get("audio", ""), validate=True))
            except (binascii.Error, TypeError):
                raise ClientError("input_audio_buffer.append: audio must be base64") from None
        elif kind == "response.cancel":
            self.session.cancel_response()
        elif kind == "ping":
            self.emit({"type": "pong"})
        else:
            raise ClientError(f"unknown event type {kind!r}")

    async def run(self) -> None:
        from app.pipeline import VoiceSession
        from app.trace import Tracer
        from audio.sinks import CallbackSink
        from audio.sources import PushSource

        cfg = self.server.cfg
        components = self.server.components
        tracer = Tracer(self.server.trace_path(self.id), session=self.id)
        self.source = PushSource(frame_ms=cfg.audio.frame_ms)
        sink = CallbackSink(self.send_audio, components.tts.sample_rate_hz, realtime=True)
        self.session = VoiceSession(components, cfg, self.source, sink, tracer, self.emit)
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
        try:
            async for message in self.ws:
                try:
                    self.handle_message(message)
                except ClientError as exc:
                    self.emit(
                        {
                            "type": "error",
                            "error": {"type": "invalid_request_error", "message": str(exc)},
                        }
                    )
                if pipeline.done():
                    break
        except ConnectionClosed:
            pass
        finally:
            self.source.close()
            pipeline.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pipeline
            if pipeline.done() and not pipeline.cancelled() and pipeline.exception():
                log.error("session %s failed: %s", self.id, pipeline.exception())
            tracer.close()
            with contextlib.suppress(asyncio.QueueFull):
                self.out.put_nowait(None)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await writer


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
