"""HTTP on the websocket port: the answers to plain requests (the web client's static files, a
405, a 403) and one request per connection.

A client's path is only compared with static/'s file names, never opened, so no path reaches
the filesystem; bytes pipelined after a request's head reach the websocket only after a 101.
"""

from __future__ import annotations

import dataclasses
import http
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.protocol import State

STATIC_DIR = Path(__file__).resolve().parent / "static"
_STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


def text_response(
    status: http.HTTPStatus, text: str, extra: tuple[tuple[str, str], ...] = ()
) -> Response:
    """A plain-text answer that closes the connection."""
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


def body_response(content_type: str, body: bytes) -> Response:
    """200 with `body`, never cached (the page changes with the server)."""
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-cache"),
        ]
    )
    return Response(http.HTTPStatus.OK.value, "OK", headers, body)


def static_response(path: str) -> Response:
    """The file under static/ that `path` names, else 404."""
    name = path.lstrip("/") or "index.html"
    files = {f.name: f for f in STATIC_DIR.iterdir() if f.suffix in _STATIC_TYPES}
    if name not in files or not files[name].is_file():
        return text_response(http.HTTPStatus.NOT_FOUND, "not found\n")
    file = files[name]
    return body_response(_STATIC_TYPES[file.suffix], file.read_bytes())


def method_refused(request: Request, path: str) -> Response | None:
    """405 for anything but GET and HEAD, and for HEAD on /ws; None for an allowed method."""
    if request.method in ("GET", "HEAD") and (path != "/ws" or request.method == "GET"):
        return None
    allow = "GET" if path == "/ws" else "GET, HEAD"
    return text_response(
        http.HTTPStatus.METHOD_NOT_ALLOWED, "method not allowed\n", (("Allow", allow),)
    )


def for_method(request: Request, response: Response) -> Response:
    """`response` as GET sends it; for HEAD the same headers (Content-Length included), no body."""
    if request.method == "HEAD":
        return dataclasses.replace(response, body=b"")
    return response


def forbidden(why: str) -> Response:
    return text_response(http.HTTPStatus.FORBIDDEN, f"forbidden: {why}\n")


class HttpConnection(ServerConnection):
    """One request per connection, as the library expects: bytes a client sends after its
    request's head and before the answer (HTTP pipelining; a websocket client waits for the
    101) are held back, and given to the websocket only if the answer was 101. Fed at once,
    the library parses a second request as a broken frame and fails the first one's answer."""

    HOLD_BYTES = 1 << 16
    _tail = b""  # the last 3 bytes of the head so far: its end may straddle two reads
    _held: bytearray | None = None  # None until the head's blank line

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

    # Its arguments pass on untouched (the library's 3 optional ones): this only adds a step after.
    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        await super().handshake(*args, **kwargs)
        if self.protocol.state is State.OPEN:
            self._release()
