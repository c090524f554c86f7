"""Websocket server: GET / serves the web client, /ws carries one voice session per connection,
and /v1/realtime one in the OpenAI Realtime API's events (app/server/realtime/).

Protocol (docs/protocol.md): the client streams binary PCM16LE mono 16 kHz; the server answers
with JSON events named after the OpenAI Realtime API and binary audio messages, each a 4-byte
little-endian generation id followed by PCM16LE mono at the rate announced in `session.created`.
Nothing a client sends can crash the server or another session: bad messages become `error`
events (protocol.py, connection.py), a session's failure closes that connection only, and every
session's trace is flushed when it ends.

Here: who may connect (exposure.py) and how many at once (sessions in all and per client
address), the operator's endpoints, and serve(). Recurring warnings (refusals, slow clients)
are logged at most once per LOG_EVERY_S each.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import json
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from dllm_voice.app.config import Config, ConfigError
from dllm_voice.app.conversation import events
from dllm_voice.app.observe.metrics import ServerMetrics
from dllm_voice.app.observe.otel import span_export
from dllm_voice.app.observe.trace import default_trace_dir
from dllm_voice.app.server.connection import Connection
from dllm_voice.app.server.exposure import (
    access_token,
    connection_client,
    is_loopback,
    refusal,
    trusted_networks,
)
from dllm_voice.app.server.http import (
    HttpConnection,
    body_response,
    for_method,
    forbidden,
    method_refused,
    static_response,
)
from dllm_voice.app.server.realtime.connection import RealtimeConnection

if TYPE_CHECKING:
    from dllm_voice.app.conversation.components import Components

log = logging.getLogger(__name__)

LOG_EVERY_S = 10.0
REALTIME_PATH = "/v1/realtime"
SESSION_PATHS = ("/ws", REALTIME_PATH)


def connection_for(ws: ServerConnection, server: VoiceServer, peer: str) -> Connection:
    """Our protocol's connection on /ws, the Realtime API's on /v1/realtime."""
    parts = urlsplit(ws.request.path if ws.request is not None else "/ws")
    if parts.path != REALTIME_PATH:
        return Connection(ws, server, peer)
    model = parse_qs(parts.query).get("model", [""])[0][:64]
    headers = ws.request.headers if ws.request is not None else None
    beta = headers is not None and (
        "realtime=v1" in headers.get("OpenAI-Beta", "")
        or "openai-beta.realtime-v1" in headers.get("Sec-WebSocket-Protocol", "")
    )
    return RealtimeConnection(ws, server, peer, model, beta)


def select_subprotocol(ws: ServerConnection, offered: Sequence[Subprotocol]) -> Subprotocol | None:
    """ "realtime" when a browser's Realtime client offers it (with its key as another
    subprotocol): a browser drops a connection whose server picks none of those it offered."""
    return Subprotocol("realtime") if "realtime" in offered else None


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim (hands free heap pages back to the OS), or None without glibc."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()


class Throttled:
    """One logger call per LOG_EVERY_S at most; the next says how many were held back."""

    def __init__(
        self, level: int = logging.WARNING, every_s: float = LOG_EVERY_S, exc_info: bool = False
    ) -> None:
        self.level, self.every_s, self.exc_info = level, every_s, exc_info
        self.next_t = 0.0
        self.held = 0

    def __call__(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now < self.next_t:
            self.held += 1
            return
        if self.held:
            message += " (%d more like it in the last %g s)"
            args = (*args, self.held, self.every_s)
        self.next_t, self.held = now + self.every_s, 0
        log.log(self.level, message, *args, exc_info=self.exc_info)


class VoiceServer:
    """Shares the loaded models between connections, checks who may open one, caps how many run
    at once."""

    def __init__(self, cfg: Config, components: Components | None) -> None:
        self.cfg = cfg
        self.components = components
        self.active: set[Connection] = set()
        self.token = access_token(cfg.server)
        self.proxies = trusted_networks(cfg.server.trusted_proxies)
        self.log_refused = Throttled(logging.INFO)
        self.log_slow = Throttled()
        self.log_bug = Throttled(logging.ERROR, exc_info=True)
        self.metrics = ServerMetrics()
        self.spans = span_export(cfg.trace)  # OpenTelemetry, trace.otel (app/observe/otel.py)

    def trace_folder(self) -> Path:
        base = self.cfg.trace.path
        if not base:
            return default_trace_dir()
        return Path(base).parent if base.endswith(".jsonl") else Path(base)

    def trace_path(self, session_id: str) -> str | None:
        if not self.cfg.trace.enabled:
            return None
        return str(self.trace_folder() / f"serve-{session_id}.jsonl")

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """The answer to a plain HTTP request, a 403 for a refused session, or None: upgrade."""
        path = urlsplit(request.path).path
        if (refused := method_refused(request, path)) is not None:
            return refused
        if path not in SESSION_PATHS:
            return for_method(request, self._operator_response(path) or static_response(path))
        why = refusal(request, self.token, self.cfg.server.allowed_origins)
        if why is None:
            return None
        self.log_refused("refused %s from %s: %s", path, self.client(connection, request), why)
        return forbidden(why)

    def _operator_response(self, path: str) -> Response | None:
        """GET /healthz: the models are loaded (the server listens only then) and how many
        sessions run; GET /metrics: Prometheus's text format (app/observe/metrics.py). Neither needs
        the token: they carry counts, not conversations."""
        if path == "/healthz":
            body = json.dumps({"status": "ok", "sessions": len(self.active)}) + "\n"
            return body_response("application/json", body.encode())
        if path == "/metrics":
            return body_response(self.metrics.content_type, self.metrics.render())
        return None

    def client(self, connection: ServerConnection, request: Request | None) -> str:
        """Who the connection is for: its peer, or the client a trusted proxy names."""
        return connection_client(connection, request, self.proxies)

    async def _refuse(self, ws: ServerConnection, peer: str, message: str) -> None:
        """A session is not started: `server_busy`, then close code 1013 (try again later)."""
        self.log_refused("refused a session from %s: %s", peer, message)
        await ws.send(json.dumps(events.error("server_busy", message)))
        await ws.close(1013, "server busy")

    async def handler(self, ws: ServerConnection) -> None:
        scfg = self.cfg.server
        peer = self.client(ws, ws.request)
        if len(self.active) >= scfg.max_sessions:
            await self._refuse(
                ws,
                peer,
                f"the server is at its limit of {scfg.max_sessions} sessions "
                "(server.max_sessions); try again later",
            )
            return
        mine = sum(1 for c in self.active if c.peer == peer)
        if scfg.max_sessions_per_client and mine >= scfg.max_sessions_per_client:
            await self._refuse(
                ws,
                peer,
                f"this address already has {mine} sessions (server.max_sessions_per_client); "
                "close one or try again later",
            )
            return
        conn = connection_for(ws, self, peer)
        self.active.add(conn)
        self.metrics.sessions.set(len(self.active))
        log.info("session %s: connected from %s (%d active)", conn.id, peer, len(self.active))
        try:
            await conn.run()
        finally:
            self.release(conn)
            log.info("session %s: closed", conn.id)
            del conn
            await self._give_back_memory()

    def release(self, conn: Connection) -> None:
        """Count a session out of the limits. Its connection does so as soon as its socket
        closes, before its teardown: a page that reconnects at once must not find its own
        closed session still holding its place."""
        self.active.discard(conn)
        self.metrics.sessions.set(len(self.active))

    @staticmethod
    async def _give_back_memory() -> None:
        """Free a closed session's memory now. The session lives in reference cycles (its
        callbacks to the connection and to itself), so its 94 MB KV cache and ASR/VAD state
        waited for a full collection, which a heap of 300 000 long-lived objects makes rare:
        RSS rose 106 MB over 300 connect/disconnect cycles, and with this collection stays
        within 1 MB. It scans only what is newer than the models (serve_forever freezes those).
        malloc_trim then hands glibc's free pages back to the OS (40 MB lower RSS; 1.5 ms,
        at most 6, on the loop: no worker thread)."""
        await asyncio.sleep(0)  # the session's finished tasks let go of it first
        gc.collect()
        if _MALLOC_TRIM is not None:
            _MALLOC_TRIM(0)

    async def serve_forever(
        self,
        ready: Callable[[str], Awaitable[None] | None] | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        scfg = self.cfg.server
        stop = stop or asyncio.Event()
        # The models' ~300 000 objects live as long as the process: out of the collector's
        # scans (a full collection took 196 ms with them, ~0 without).
        gc.collect()
        gc.freeze()
        async with ws_serve(
            self.handler,
            scfg.host,
            scfg.port,
            process_request=self.process_request,
            select_subprotocol=select_subprotocol,
            max_size=scfg.max_message_bytes,
            create_connection=HttpConnection,
        ) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            local = is_loopback(scfg.host) or scfg.host in ("", "0.0.0.0", "::")
            host = "localhost" if local else scfg.host
            url = f"http://{host}:{port}/" + (f"?token={self.token}" if self.token else "")
            if ready is not None:
                result = ready(url)
                if result is not None:
                    await result
            await stop.wait()
        gc.unfreeze()  # frozen objects outlive the exit's collection: triton's nanobind report


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

    from dllm_voice.app.conversation.components import Components

    console = Console()
    scfg = cfg.server
    _check_port(scfg.host, scfg.port)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    server = VoiceServer(cfg, None)
    traces = server.trace_folder()
    if cfg.trace.enabled:
        try:
            traces.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"serve: cannot create the trace folder {traces} ({exc.strerror}); "
                "set trace.path=FOLDER or trace.enabled=false"
            ) from None
    with console.status("loading models (LM, Whisper, Piper)..."):
        components = Components.load(cfg)
    server.components = components

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        def ready(url: str) -> None:
            console.print(
                f"[bold green]Open {url} in a browser[/] and allow the microphone. Ctrl+C stops."
            )
            if not is_loopback(scfg.host):
                port = urlsplit(url).port
                console.print(
                    f"Listening on {scfg.host or 'every address'}:{port}: from another machine "
                    f"open http://{socket.gethostname()}:{port}/?token={server.token} (browsers "
                    "allow the microphone only on https or localhost pages: put a TLS proxy in "
                    "front, see README)"
                )
            console.print(f"[dim]traces: {traces if cfg.trace.enabled else 'off'}[/dim]")

        await server.serve_forever(ready, stop)

    try:
        asyncio.run(main())
    finally:
        components.close()
    return 0
