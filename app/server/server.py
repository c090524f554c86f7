"""Websocket server: GET / serves the web client, /ws carries one voice session per connection.

Protocol (docs/protocol.md): the client streams binary PCM16LE mono 16 kHz; the server answers
with JSON events named after the OpenAI Realtime API and binary audio messages, each a 4-byte
little-endian generation id followed by PCM16LE mono at the rate announced in `session.created`.
What the user heard of an answer is what the client reports having played
(`output_audio_buffer.played`, `conversation.item.truncate`), or until it reports, a wall-clock
model of playback over the audio that reached the socket. Nothing a client sends can crash the
server or another session: bad messages become `error` events, a session's failure closes that
connection only, and every session's trace is flushed when it ends.

Exposure: /ws is refused with 403 at the handshake, before a session exists, for a browser page
of a foreign origin and, when the server has a token (always off loopback), for a client without
it. Limits: sessions in all and per client address (behind a trusted proxy, the client its
X-Forwarded-For names), an idle timeout, and a client that reads none of what it is sent is
closed (1008) instead of having events dropped. Recurring warnings
(refusals, slow clients) are logged at most once per LOG_EVERY_S each.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import ctypes.util
import dataclasses
import gc
import hmac
import http
import ipaddress
import json
import logging
import re
import reprlib
import secrets
import signal
import socket
import struct
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.protocol import State

from dllm_voice.app.config import Config, ConfigError, ServerConfig
from dllm_voice.app.observe.metrics import ServerMetrics
from dllm_voice.app.observe.otel import span_export
from dllm_voice.app.observe.trace import default_trace_dir

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
_STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
AUDIO_HEADER = struct.Struct("<I")  # generation id in front of every outgoing audio message
LOG_EVERY_S = 10.0
_LOOPBACK_NAMES = ("localhost", "localhost.", "ip6-localhost")
# Client values quoted in error messages: 3 levels and 40 characters of each, so a deep or
# 1 MiB value is neither echoed back whole nor recursed through.
_brief = reprlib.Repr()
_brief.maxlevel, _brief.maxstring, _brief.maxother = 3, 40, 40
_show = _brief.repr


def _text_response(
    status: http.HTTPStatus, text: str, extra: tuple[tuple[str, str], ...] = ()
) -> Response:
    body = text.encode()
    headers = Headers(
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
            *extra,
        ]
    )
    return Response(status.value, status.phrase, headers, body)


def _body_response(content_type: str, body: bytes) -> Response:
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-cache"),
        ]
    )
    return Response(http.HTTPStatus.OK.value, "OK", headers, body)


def _static_response(path: str) -> Response:
    """The file under static/ that `path` names, else 404. The client's path is only compared
    with the folder's file names, never opened, so no path reaches the filesystem."""
    name = path.lstrip("/") or "index.html"
    files = {f.name: f for f in STATIC_DIR.iterdir() if f.suffix in _STATIC_TYPES}
    if name not in files or not files[name].is_file():
        return _text_response(http.HTTPStatus.NOT_FOUND, "not found\n")
    file = files[name]
    return _body_response(_STATIC_TYPES[file.suffix], file.read_bytes())


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim (hands free heap pages back to the OS), or None without glibc."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()


def _peer(ws: ServerConnection) -> str:
    """The address the connection comes from."""
    address = ws.remote_address
    return str(address[0]) if address else ""


Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]


def trusted_networks(proxies: tuple[str, ...]) -> Networks:
    """`server.trusted_proxies` parsed, or a one-line ConfigError naming the bad entry."""
    try:
        return tuple(ipaddress.ip_network(p.strip(), strict=False) for p in proxies)
    except ValueError as exc:
        raise ConfigError(
            f"server.trusted_proxies: {exc} (give addresses or networks, e.g. 127.0.0.1, "
            "10.0.0.0/8)"
        ) from None


def client_address(peer: str, forwarded: str | None, proxies: Networks) -> str:
    """The client's address (what the per-client session cap counts): the peer's, or, when
    the peer is a trusted proxy, the nearest address in X-Forwarded-For that is not one. Each
    proxy appends the address it was reached from, so only the entries right of the first
    untrusted one are proxies' words; whatever a client wrote further left is not believed."""
    hops = [peer, *(h.strip() for h in reversed((forwarded or "").split(",")) if h.strip())]
    for hop in hops[:-1]:
        try:
            trusted = any(ipaddress.ip_address(hop) in net for net in proxies)
        except ValueError:
            trusted = False
        if not trusted:
            return hop
    return hops[-1]


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or name to listen on, or a URL's host) is this machine only."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def access_token(scfg: ServerConfig) -> str:
    """The token /ws requires: the configured one; none on loopback; else a fresh random one
    (printed in the URL at start, as Jupyter does)."""
    if scfg.token or is_loopback(scfg.host):
        return scfg.token
    return secrets.token_urlsafe(24)


class Throttled:
    """One logger call per LOG_EVERY_S at most; the next says how many were held back."""

    def __init__(
        self, level: int = logging.WARNING, every_s: float = LOG_EVERY_S, exc_info: bool = False
    ) -> None:
        self.level, self.every_s, self.exc_info = level, every_s, exc_info
        self.next_t = 0.0
        self.held = 0

    def __call__(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now < self.next_t:
            self.held += 1
            return
        if self.held:
            message += " (%d more like it in the last %g s)"
            args = (*args, self.held, self.every_s)
        self.next_t, self.held = now + self.every_s, 0
        log.log(self.level, message, *args, exc_info=self.exc_info)


class HttpConnection(ServerConnection):
    """One request per connection, as the library expects: bytes a client sends after its
    request's head and before the answer (HTTP pipelining; a websocket client waits for the
    101) are held back, and given to the websocket only if the answer was 101. Fed at once,
    the library parses a second request as a broken frame and fails the first one's answer."""

    HOLD_BYTES = 1 << 16

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tail = b""  # the last 3 bytes of the head so far: its end may straddle two reads
        self._held: bytearray | None = None  # None until the head's blank line

    def data_received(self, data: bytes) -> None:
        if self._held is None:
            window = self._tail + data
            end = window.find(b"\r\n\r\n")
            if end < 0:
                self._tail = window[-3:]
                super().data_received(data)
                return
            cut = end + 4 - len(self._tail)
            self._held = bytearray(data[cut:])
            super().data_received(data[:cut])
            return
        if self.protocol.state is State.CONNECTING:
            self._held += data
            if len(self._held) > self.HOLD_BYTES:
                self.transport.abort()
            return
        self._release(data)

    def _release(self, data: bytes = b"") -> None:
        held, self._held = bytes(self._held or b""), bytearray()
        if held + data:
            super().data_received(held + data)

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        await super().handshake(*args, **kwargs)
        if self.protocol.state is State.OPEN:
            self._release()


class ClientError(ValueError):
    """A message the client sent that the protocol does not allow; reported, never fatal."""


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _number(event: dict[str, Any], key: str) -> float:
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise ClientError(f"{event['type']}: {key} must be a number >= 0, got {_show(value)}")
    return float(value)


class Connection:
    """One websocket client: decodes its messages, drives its VoiceSession, sends events and audio.

    Outgoing messages go through one bounded queue drained by one writer task, so a slow client
    delays only itself. Nothing in it is dropped: audio waits for room (the sink's pump waits for
    each message to reach the socket and stays lead_ms ahead of playback, and an answer the
    client stops playing is cancelled after server.playback_stall_ms); past half full the reader
    stops reading until the client has taken its answers (a flood of pings is answered at the
    pace the client reads), and a client that takes nothing for CLIENT_STALL_S then, or an
    event that finds the queue full, closes the connection with 1008. Incoming audio is taken
    whole: past half of the source's buffer the reader waits for the session to catch up (TCP
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
        self.peer = peer  # the client's address (`VoiceServer.client`)
        self.out: asyncio.Queue[str | tuple[bytes, asyncio.Future[None]] | None] = asyncio.Queue(
            self.OUT_QUEUE_MESSAGES
        )
        self.closing: asyncio.Task[None] | None = None
        self.last_audio = time.monotonic()  # in or out: what the idle timeout counts from
        self.session: Any = None
        self.control: Any = None
        self.source: Any = None
        self.sink: Any = None
        # Two messages of the largest size fit (1 MiB of PCM16 is 32.8 s at 16 kHz), so one
        # always fits past the high-water mark at half.
        cfg = server.cfg
        self.buffer_ms = 2 * cfg.server.max_message_bytes * 1000 // (2 * cfg.audio.sample_rate_hz)

    def emit(self, event: dict[str, Any]) -> None:
        """Queue a JSON event for the client (callable from the event loop only)."""
        if self.closing is not None:
            return  # the connection is ending: nothing more will reach the client
        self.server.metrics.on_event(event)
        try:
            self.out.put_nowait(json.dumps(event, default=str))
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
        done = asyncio.get_running_loop().create_future()
        await self.out.put((AUDIO_HEADER.pack(gen) + pcm, done))
        await done

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

    async def _watch_idle(self, idle_s: float) -> None:
        """Close a session with no audio either way for `idle_s` (it holds one of few slots)."""
        while (left := self.last_audio + idle_s - time.monotonic()) > 0:
            await asyncio.sleep(left)
        log.info("session %s: no audio for %.0f s; closing", self.id, idle_s)
        self.emit(
            _error(
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
        self.last_audio = time.monotonic()
        dropped = self.source.push(pcm)
        if dropped:
            ms = dropped * self.source.frame_ms
            self.server.metrics.dropped_audio.inc(ms / 1000.0)
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
        except (ValueError, RecursionError):  # also a 5000-digit integer, 100 000 nested [
            raise ClientError("message is neither binary audio nor JSON (or nests too deep, or "
                              "has an integer of over 4300 digits)") from None  # fmt: skip
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise ClientError('JSON messages must be objects with a string "type"')
        kind = event["type"]
        if kind == "input_audio_buffer.append":
            try:
                self._push(base64.b64decode(event.get("audio", ""), validate=True))
            except (ValueError, TypeError):  # binascii.Error, and non-ASCII text
                raise ClientError("input_audio_buffer.append: audio must be base64") from None
        elif kind == "output_audio_buffer.played":
            gen = event.get("gen")
            if isinstance(gen, bool) or not isinstance(gen, int) or gen < 0:
                raise ClientError(
                    f"{kind}: gen must be the audio's generation id, got {_show(gen)}"
                )
            self.sink.report(gen, _number(event, "audio_end_ms"))
        elif kind == "conversation.item.truncate":
            item = event.get("item_id")
            match = re.fullmatch(r"resp_(\d{1,9})", item) if isinstance(item, str) else None
            if match is None:
                raise ClientError(
                    f"{kind}: item_id must be a response id resp_<gen>, got {_show(item)}"
                )
            if event.get("content_index", 0) != 0:
                raise ClientError(f"{kind}: content_index must be 0 (one audio part per response)")
            self.sink.report(int(match[1]), _number(event, "audio_end_ms"), stopped=True)
        elif kind == "response.cancel":
            self.session.cancel_response()
        elif kind in ("conversation.item.create", "response.create", "session.update"):
            try:
                self.control.handle(kind, event)
            except ValueError as exc:
                raise ClientError(str(exc)) from None
        elif kind == "ping":
            self.emit({"type": "pong"})
        else:
            raise ClientError(f"unknown event type {_show(kind)}")

    async def run(self) -> None:
        from dllm_voice.app.conversation.control import SessionControl, describe
        from dllm_voice.app.conversation.session import VoiceSession
        from dllm_voice.app.observe.trace import Tracer
        from dllm_voice.audio.sinks import ClientSink
        from dllm_voice.audio.sources import PushSource

        cfg = self.server.cfg
        components = self.server.components
        tracer = Tracer(self.server.trace_path(self.id), session=self.id)
        tracer.listeners.append(self.server.metrics.on_trace)
        if self.server.spans is not None:
            self.server.spans.observe(tracer)
        self.source = PushSource(
            frame_ms=cfg.audio.frame_ms,
            max_buffer_ms=self.buffer_ms,
            gap_fill_ms=cfg.server.input_gap_fill_ms,
        )
        self.sink = ClientSink(
            self.send_audio, lambda: int(self.session.gen), components.tts.sample_rate_hz
        )
        self.session = VoiceSession(components, cfg, self.source, self.sink, tracer, self.emit)
        self.control = SessionControl(cfg, self.session, self.emit)
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
                    "settings": describe(cfg),
                },
            }
        )
        writer = asyncio.create_task(self._writer(), name=f"writer-{self.id}")
        pipeline = asyncio.create_task(self.session.run(), name=f"session-{self.id}")
        watchers = [asyncio.create_task(self._watch_playback(), name=f"watch-{self.id}")]
        if idle_s := cfg.server.idle_timeout_s:
            watchers.append(asyncio.create_task(self._watch_idle(idle_s), name=f"idle-{self.id}"))
        try:
            async for message in self.ws:
                try:
                    self.handle_message(message)
                except ClientError as exc:
                    self.emit(_error("invalid_request_error", str(exc)))
                except Exception:  # a server bug: logged whole, the session goes on
                    self.server.log_bug("session %s: a client message raised", self.id)
                    self.emit(_error("server_error", "the server failed on this message"))
                if self.source.buffered_ms > self.buffer_ms // 2:
                    await self.source.drained(self.CATCH_UP_S)
                if self.out.qsize() > self.OUT_QUEUE_MESSAGES // 2:
                    await self._out_drained()
                if pipeline.done():
                    break
        except ConnectionClosed:
            pass
        finally:
            self.source.close()
            for task in watchers:
                task.cancel()
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
            for task in (writer, *watchers):
                with contextlib.suppress(*self.TEARDOWN):
                    await task
            if self.closing is not None:
                with contextlib.suppress(*self.TEARDOWN):
                    await self.closing


class VoiceServer:
    """Shares the loaded models between connections, checks who may open one, caps how many run
    at once."""

    def __init__(self, cfg: Config, components: Any) -> None:
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

    def refusal(self, request: Request) -> str | None:
        """Why a /ws handshake is refused, or None: a wrong or missing token, a foreign origin."""
        for name in ("Authorization", "Origin", "Host"):  # no browser or proxy sends two
            if len(request.headers.get_all(name)) > 1:
                return f"more than one {name} header"
        if self.token:
            query = parse_qs(urlsplit(request.path).query).get("token", [""])[0]
            bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
            given = query or bearer
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                return "wrong token" if given else "missing token (/ws?token=...)"
        origin = request.headers.get("Origin")
        # A client that sends no Origin is not a browser, which is what Origin guards against.
        if origin is None or origin in self.cfg.server.allowed_origins:
            return None
        try:
            parts = urlsplit(origin)
            host = parts.hostname or ""
        except ValueError:
            host = ""
        if host and is_loopback(host):
            return None
        # The page's own origin only with a token: without one, the server listens on loopback
        # and a page under another name that reaches it is DNS rebinding.
        if host and self.token and parts.netloc == request.headers.get("Host"):
            return None
        return f"origin {_show(origin)} not allowed (server.allowed_origins)"

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if request.method not in ("GET", "HEAD") or (path == "/ws" and request.method != "GET"):
            allow = "GET" if path == "/ws" else "GET, HEAD"
            return _text_response(
                http.HTTPStatus.METHOD_NOT_ALLOWED, "method not allowed\n", (("Allow", allow),)
            )
        if path != "/ws":
            response = self._operator_response(path) or _static_response(path)
            if request.method == "HEAD":  # the headers GET would send, Content-Length included
                response = dataclasses.replace(response, body=b"")
            return response
        why = self.refusal(request)
        if why is None:
            return None
        self.log_refused("refused /ws from %s: %s", self.client(connection, request), why)
        return _text_response(http.HTTPStatus.FORBIDDEN, f"forbidden: {why}\n")

    def _operator_response(self, path: str) -> Response | None:
        """GET /healthz: the models are loaded (the server listens only then) and how many
        sessions run; GET /metrics: Prometheus's text format (app/observe/metrics.py). Neither needs
        the token: they carry counts, not conversations."""
        if path == "/healthz":
            body = json.dumps({"status": "ok", "sessions": len(self.active)}) + "\n"
            return _body_response("application/json", body.encode())
        if path == "/metrics":
            return _body_response(self.metrics.content_type, self.metrics.render())
        return None

    def client(self, connection: ServerConnection, request: Request | None) -> str:
        """Who the connection is for: its peer, or the client a trusted proxy names."""
        # Several header lines are one list, in order (RFC 9110, 5.3).
        forwarded = ", ".join(request.headers.get_all("X-Forwarded-For")) if request else None
        return client_address(_peer(connection), forwarded, self.proxies)

    async def _refuse(self, ws: ServerConnection, peer: str, message: str) -> None:
        """A session is not started: `server_busy`, then close code 1013 (try again later)."""
        self.log_refused("refused a session from %s: %s", peer, message)
        await ws.send(json.dumps(_error("server_busy", message)))
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
        conn = Connection(ws, self, peer)
        self.active.add(conn)
        self.metrics.sessions.set(len(self.active))
        log.info("session %s: connected from %s (%d active)", conn.id, peer, len(self.active))
        try:
            await conn.run()
        finally:
            self.active.discard(conn)
            self.metrics.sessions.set(len(self.active))
            log.info("session %s: closed", conn.id)
            del conn
            await self._give_back_memory()

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

    from dllm_voice.app.conversation.session import Components

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
        server.components = Components.load(cfg)

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
        server.components.close()
    return 0
