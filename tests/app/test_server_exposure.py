"""Who may open a session (origin, token), the HTTP side (methods, long paths, pipelining),
limits (sessions per client, idle timeout, a client that reads nothing), with fake models."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from dllm_voice.app.config import ServerConfig
from dllm_voice.app.observe.metrics import ServerMetrics
from dllm_voice.app.observe.trace import default_trace_dir
from dllm_voice.app.server.connection import Connection
from dllm_voice.app.server.exposure import access_token, is_loopback
from dllm_voice.app.server.server import Throttled
from testkit.protocol_fuzz import ErrorLog
from testkit.speech import write_wav
from tests.app.fakes import silence
from tests.app.test_server import Running
from tests.app.test_server_playback import fake_cfg
from tests.app.test_web_client import CHROMIUM, chromium_args


def raw(run: Running, request: bytes, wait_s: float = 2.0) -> bytes:
    """Send bytes as they are; everything the server answers until it closes."""
    page = urlsplit(run.url)
    with socket.create_connection((page.hostname, page.port), timeout=wait_s) as sock:
        sock.sendall(request)
        out = b""
        try:
            while chunk := sock.recv(1 << 16):
                out += chunk
        except TimeoutError:
            pass
    return out


def upgrade(path: str, host: str, origin: str | None) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        *([f"Origin: {origin}"] if origin else []),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


async def open_session(url: str, **kw: Any) -> dict[str, Any]:
    async with connect(url, **kw) as ws:
        return json.loads(await ws.recv())


def refused(url: str, **kw: Any) -> tuple[int, str]:
    with pytest.raises(InvalidStatus) as info:
        asyncio.run(open_session(url, **kw))
    return info.value.response.status_code, bytes(info.value.response.body).decode()


def test_http_methods_long_paths_and_pipelining(serve: Callable[..., Running]) -> None:
    run = serve()
    host = urlsplit(run.url).netloc
    get = raw(run, f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    head = raw(run, f"HEAD / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    head_lines, _, head_body = head.partition(b"\r\n\r\n")
    length = int(next(h for h in head_lines.split(b"\r\n") if h.startswith(b"Content-Length"))[16:])
    assert status(head) == 200 and head_body == b""
    assert length == len(get.partition(b"\r\n\r\n")[2]) > 1000  # GET's length, without the body
    for method in ("DELETE", "OPTIONS", "POST", "PUT", "TRACE"):
        answer = raw(run, f"{method} / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert status(answer) == 405 and b"Allow: GET, HEAD" in answer, answer
    assert status(raw(run, f"HEAD /ws HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())) == 405
    with ErrorLog() as errors:
        for n in (300, 8000):  # longer than a file name may be; under the 8 KiB request line
            assert status(raw(run, f"GET /{'a' * n} HTTP/1.1\r\nHost: x\r\n\r\n".encode())) == 404
        assert status(raw(run, f"GET /{'a' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n".encode())) == 414
        two = raw(run, f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode() * 2)
        assert status(two) == 200 and two.count(b"HTTP/1.1 ") == 1  # the first, then closed
        assert b"<title>Voice agent</title>" in two
        # A websocket client that sends a frame before the 101 still gets its session.
        early = upgrade("/ws", host, None) + b"\x81\x80" + os.urandom(4)  # empty masked text
        answer = raw(run, early)
        assert status(answer) == 101 and b"session.created" in answer
    assert not errors.records, errors.records


def test_foreign_origins_are_refused_at_the_handshake(serve: Callable[..., Running]) -> None:
    run = serve(allowed_origins=("https://voice.example.com",))
    for origin in ("http://evil.example", "null", "http://localhost.evil.example", "http://[::1"):
        code, body = refused(run.ws_url, origin=origin)
        assert code == 403 and "not allowed" in body, (origin, body)
    assert not run.server.active
    for origin in (
        None,
        "http://localhost:3000",
        "http://127.0.0.1:8765",
        "https://voice.example.com",
    ):
        assert asyncio.run(open_session(run.ws_url, origin=origin))["type"] == "session.created"
    # DNS rebinding: a page of another name that resolves to this loopback server.
    host = f"rebound.example:{urlsplit(run.url).port}"
    assert status(raw(run, upgrade("/ws", host, f"http://{host}"))) == 403


def test_token_is_required_when_set(serve: Callable[..., Running]) -> None:
    run = serve(token="s3cret")
    assert run.url.endswith("/?token=s3cret") and run.ws_url.endswith("/ws?token=s3cret")
    bare = run.ws_url.split("?")[0]
    assert refused(bare) == (
        403,
        "forbidden: missing token (?token=... or an Authorization: Bearer key)\n",
    )
    assert refused(bare + "?token=guess")[0] == 403
    assert asyncio.run(open_session(run.ws_url))["type"] == "session.created"
    bearer = {"Authorization": "Bearer s3cret"}
    assert asyncio.run(open_session(bare, additional_headers=bearer))["type"] == "session.created"
    # With a token, the page's own origin counts (a proxy's public name, say).
    host = f"voice.example:{urlsplit(run.url).port}"
    answer = raw(run, upgrade("/ws?token=s3cret", host, f"http://{host}"))
    assert status(answer) == 101 and b"session.created" in answer
    assert status(raw(run, upgrade("/ws", host, f"http://{host}"))) == 403


def test_access_token_off_loopback_is_generated() -> None:
    assert access_token(ServerConfig()) == ""
    assert access_token(ServerConfig(token="mine", host="0.0.0.0")) == "mine"
    first, second = (access_token(ServerConfig(host=h)) for h in ("0.0.0.0", "192.168.1.5"))
    assert len(first) >= 32 and len(second) >= 32 and first != second
    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "", "::", "example.com", "10.0.0.1"]))


def test_sessions_per_client_address(serve: Callable[..., Running]) -> None:
    run = serve(max_sessions=4, max_sessions_per_client=1)

    async def two() -> dict[str, Any]:
        async with connect(run.ws_url) as first:
            await first.recv()
            async with connect(run.ws_url) as second:
                busy = json.loads(await second.recv())
                with pytest.raises(ConnectionClosed):
                    await second.recv()
                assert second.close_code == 1013
        return busy

    busy = asyncio.run(two())
    assert busy["error"]["type"] == "server_busy"
    assert "server.max_sessions_per_client" in busy["error"]["message"]


def test_idle_session_is_closed_and_audio_keeps_it(serve: Callable[..., Running]) -> None:
    run = serve(idle_timeout_s=0.6)

    async def idle(keep_talking: bool) -> tuple[list[dict[str, Any]], int | None]:
        events = []
        async with connect(run.ws_url) as ws:
            await ws.recv()
            try:
                for _ in range(12):
                    if keep_talking:
                        await ws.send(bytes(3200))  # 100 ms of silence
                    await ws.send('{"type": "ping"}')  # not audio: does not count
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.1):
                            while True:
                                events.append(json.loads(await ws.recv()))
            except ConnectionClosed:
                pass
        return events, ws.close_code

    events, code = asyncio.run(idle(keep_talking=False))
    assert code == 1000
    (err,) = [e["error"] for e in events if e["type"] == "error"]
    assert err["type"] == "idle_timeout" and "server.idle_timeout_s" in err["message"]
    events, code = asyncio.run(idle(keep_talking=True))
    assert code == 1000 and not [e for e in events if e["type"] == "error"]  # closed by us
    assert not run.server.active


def test_client_that_reads_nothing_is_closed_not_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[tuple[int, str]] = []
    monkeypatch.setattr(Connection, "CLIENT_STALL_S", 0.3)

    class Socket:
        remote_address = ("127.0.0.1", 1)

        async def close(self, code: int, reason: str) -> None:
            closed.append((code, reason))

    def connection() -> Connection:
        server = SimpleNamespace(
            cfg=fake_cfg(tmp_path), log_slow=Throttled(), metrics=ServerMetrics()
        )
        return Connection(Socket(), server)  # type: ignore[arg-type]  # no writer: none read

    async def fill() -> None:
        conn = connection()
        for _ in range(Connection.OUT_QUEUE_MESSAGES + 100):  # events of a pipeline
            conn.emit({"type": "pong"})
        await asyncio.sleep(0)
        assert conn.out.qsize() == Connection.OUT_QUEUE_MESSAGES  # every queued one kept
        assert len(closed) == 1
        conn = connection()
        for _ in range(Connection.OUT_QUEUE_MESSAGES // 2 + 1):  # answers to a flood
            conn.emit({"type": "pong"})
        t0 = time.monotonic()
        await conn._out_drained()  # the reader stops reading until the client takes them
        assert 0.3 <= time.monotonic() - t0 < 1.0
        await asyncio.sleep(0)

    asyncio.run(fill())
    assert closed == [(1008, "client too slow: it reads none of its messages")] * 2


def test_throttled_log_says_what_it_held_back(caplog: pytest.LogCaptureFixture) -> None:
    log = Throttled(every_s=0.2)
    with caplog.at_level(logging.WARNING, logger="dllm_voice.app.server.server"):
        for i in range(1000):
            log("client %d refused", i)
        asyncio.run(asyncio.sleep(0.25))
        log("client %d refused", 1000)
    assert [r.getMessage() for r in caplog.records] == [
        "client 0 refused",
        "client 1000 refused (999 more like it in the last 0.2 s)",
    ]


def test_default_trace_folder_is_the_users_state_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_trace_dir() == tmp_path / "dllm-voice" / "traces"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    assert default_trace_dir() == Path.home() / ".local" / "state" / "dllm-voice" / "traces"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_trace_dir() == Path.home() / ".local" / "state" / "dllm-voice" / "traces"


def test_page_passes_the_token_of_its_url(serve: Callable[..., Running], tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    run = serve(token="page-s3cret")
    mic = write_wav(tmp_path / "mic.wav", silence(2000), 16000)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=chromium_args(mic))
        try:
            page = browser.new_page()
            page.goto(run.url)  # .../?token=page-s3cret, as `serve` prints it
            page.click("#go")
            page.wait_for_function(
                "document.querySelector('#conn').textContent === 'connected'", timeout=20_000
            )
        finally:
            browser.close()
