"""Replicas behind a proxy (docs/deploy.md): the client address a trusted proxy names, and the
recipe itself — two `serve` replicas behind nginx with deploy/nginx.conf, on loopback (slow)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from websockets.asyncio.client import connect

from dllm_voice.app.config import ConfigError
from dllm_voice.app.server.exposure import client_address, trusted_networks
from dllm_voice.app.server.protocol import AUDIO_HEADER
from tests.app.test_server import Running
from tests.app.test_server_exposure import raw, status, upgrade

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What is the capital of France?"


def test_the_client_is_the_nearest_address_no_trusted_proxy_wrote() -> None:
    proxies = trusted_networks(("127.0.0.1", "10.0.0.0/8"))
    assert client_address("198.51.100.7", "203.0.113.1", proxies) == "198.51.100.7"  # no proxy
    assert client_address("127.0.0.1", "203.0.113.1", proxies) == "203.0.113.1"
    assert client_address("127.0.0.1", None, proxies) == "127.0.0.1"  # the proxy's own request
    # The client wrote "1.2.3.4" itself; the proxies appended what they saw after it.
    chain = "1.2.3.4, 203.0.113.1, 10.1.2.3"
    assert client_address("127.0.0.1", chain, proxies) == "203.0.113.1"
    assert client_address("127.0.0.1", "garbage, 10.1.2.3", proxies) == "garbage"
    assert client_address("127.0.0.1", "10.1.2.3", proxies) == "10.1.2.3"  # all trusted
    assert client_address("127.0.0.1", "203.0.113.1", ()) == "127.0.0.1"  # none trusted
    with pytest.raises(ConfigError, match=r"server.trusted_proxies: 'proxy.lan' does not"):
        trusted_networks(("proxy.lan",))


async def opened(url: str, client: str) -> tuple[Any, dict[str, Any]]:
    ws = await connect(url, additional_headers={"X-Forwarded-For": client})
    return ws, json.loads(await ws.recv())


def test_per_client_cap_counts_the_client_a_trusted_proxy_names(
    serve: Callable[..., Running],
) -> None:
    async def three(run: Running) -> list[str]:
        kinds = []
        sockets = []
        for client in ("203.0.113.1", "203.0.113.2", "203.0.113.1"):
            ws, first = await opened(run.ws_url, client)
            sockets.append(ws)
            kinds.append(first["type"])
        for ws in sockets:
            await ws.close()
        return kinds

    behind = serve(max_sessions_per_client=1, trusted_proxies=("127.0.0.1",))
    assert asyncio.run(three(behind)) == ["session.created", "session.created", "error"]
    # Not from a trusted proxy: the header is anyone's to write, so the peer counts.
    direct = serve(max_sessions_per_client=1)
    assert asyncio.run(three(direct)) == ["session.created", "error", "error"]


def test_a_client_that_reconnects_at_once_keeps_its_place(
    serve: Callable[..., Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A closed session counts out of the per-client cap when its socket closes, not when its
    # teardown (trace, sink, pipeline; here made 0.5 s long) ends: a page reloaded at once is
    # not refused.
    from dllm_voice.audio.client_sink import ClientSink

    closing = ClientSink.aclose

    async def slow_close(self: ClientSink) -> None:
        await asyncio.sleep(0.5)
        await closing(self)

    monkeypatch.setattr(ClientSink, "aclose", slow_close)

    async def reconnects(run: Running, n: int) -> list[str]:
        kinds = []
        for _ in range(n):
            ws, first = await opened(run.ws_url, "203.0.113.1")
            kinds.append(first["type"])
            await ws.close()
        return kinds

    run = serve(max_sessions_per_client=1, trusted_proxies=("127.0.0.1",))
    assert asyncio.run(reconnects(run, 5)) == ["session.created"] * 5


def test_repeated_headers_are_refused_or_joined(
    serve: Callable[..., Running], caplog: pytest.LogCaptureFixture
) -> None:
    run = serve(trusted_proxies=("127.0.0.1",))
    host = urlsplit(run.url).netloc

    def with_lines(origin: str | None, *lines: str) -> bytes:
        head = upgrade("/ws", host, origin).removesuffix(b"\r\n\r\n").decode()
        return "\r\n".join([head, *lines, "", ""]).encode()

    answer = raw(run, with_lines("http://a.example", "Origin: http://b.example"))
    assert status(answer) == 403 and answer.endswith(b"more than one Origin header\n")
    forwarded = ("X-Forwarded-For: 203.0.113.9", "X-Forwarded-For: 127.0.0.1")
    with caplog.at_level(logging.INFO, logger="dllm_voice.app.server.server"):
        assert status(raw(run, with_lines(None, *forwarded), wait_s=0.5)) == 101
    assert "connected from 203.0.113.9 " in caplog.text  # the two lines read as one list


# ---- the recipe: two `serve` replicas behind nginx ---------------------------------------------

NGINX = shutil.which("nginx", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
OPENSSL = shutil.which("openssl")
TOKEN = "replica-s3cret"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen[bytes], timeout_s: float, context: Any = None):
    """The body of the first 200 from `url` (polled), failing if `proc` exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args[:3]} exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                return json.loads(resp.read())
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer in {timeout_s} s")


def get(url: str, context: Any = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10, context=context) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def nginx_prefix(folder: Path, listen: int, replicas: list[int]) -> Path:
    """deploy/'s two files in `folder` with the test's ports, and a certificate for localhost."""
    folder.mkdir()
    shutil.copy(ROOT / "deploy" / "nginx.conf", folder / "nginx.conf")
    conf = (ROOT / "deploy" / "voice.conf").read_text()
    servers = re.findall(r"server (127\.0\.0\.1:\d+) ", conf)
    assert len(servers) == len(replicas)
    for address, port in zip(servers, replicas, strict=True):
        conf = conf.replace(f"server {address} ", f"server 127.0.0.1:{port} ")
    conf = conf.replace("listen 8443 ssl;", f"listen 127.0.0.1:{listen} ssl;")
    (folder / "voice.conf").write_text(conf)
    subprocess.run(
        [OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem"),
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    return folder


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def spoken_and_typed_turns(url: str, tls: ssl.SSLContext) -> list[dict[str, Any]]:
    """Two clients at once: one says the question, one types it. Returns, per client, its
    session id, its answer's text and status, and the audio bytes it received."""
    from testkit.speech import speech_pcm

    clients = [await connect(url, ssl=tls, max_size=None) for _ in range(2)]
    ids = [json.loads(await ws.recv())["session"]["id"] for ws in clients]
    pcm = speech_pcm(QUESTION, lead_ms=300, tail_ms=1000)
    typed = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": QUESTION}],
    }

    async def talk(ws: Any, spoken: bool) -> dict[str, Any]:
        if spoken:
            for i in range(0, len(pcm), 320):  # 20 ms messages, as the web client sends
                await ws.send(pcm[i : i + 320].tobytes())
        else:
            await ws.send(json.dumps({"type": "conversation.item.create", "item": typed}))
            await ws.send(json.dumps({"type": "response.create"}))
        audio = 0
        async with asyncio.timeout(120):
            async for message in ws:
                if isinstance(message, bytes):
                    audio += len(message) - AUDIO_HEADER.size
                elif (event := json.loads(message))["type"] == "response.done":
                    return {**event["response"], "audio_bytes": audio}
        raise AssertionError("the session closed before its answer")

    try:
        answers = await asyncio.gather(*(talk(ws, i == 0) for i, ws in enumerate(clients)))
    finally:
        for ws in clients:
            await ws.close()
    return [{**a, "session": i} for i, a in zip(ids, answers, strict=True)]


async def session_created(url: str, tls: ssl.SSLContext) -> str:
    async with connect(url, ssl=tls) as ws:
        return json.loads(await ws.recv())["type"]


@pytest.mark.slow
@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx)")
@pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed (apt-get install openssl)")
def test_two_replicas_behind_nginx(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    listen = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, port in enumerate(ports):
            args = [
                "--set", f"server.port={port}", "--set", f"server.token={TOKEN}",
                "--set", "server.trusted_proxies=[127.0.0.1]",
                "--set", f"trace.path={tmp_path / f'traces{i}'}", "--set", "lm.max_new_tokens=40",
            ]  # fmt: skip
            with open(tmp_path / f"replica{i}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "main.py", *args, "serve"],
                        cwd=ROOT,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )  # fmt: skip
                )
        prefix = nginx_prefix(tmp_path / "nginx", listen, ports)
        # Appending: nginx writes its access log to stdout and its errors to stderr.
        with open(tmp_path / "nginx.log", "ab") as log:
            nginx = subprocess.Popen(
                [NGINX, "-e", "stderr", "-p", str(prefix), "-c", str(prefix / "nginx.conf")],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        procs.append(nginx)
        for port, proc in zip(ports, procs, strict=False):  # loading the models: ~10 s each
            assert wait_for(f"http://127.0.0.1:{port}/healthz", proc, 180)["status"] == "ok"

        tls = ssl.create_default_context(cafile=str(prefix / "cert.pem"))
        proxy = f"https://localhost:{listen}"
        assert wait_for(f"{proxy}/healthz", nginx, 10, tls) == {"status": "ok", "sessions": 0}
        page_status, page = get(f"{proxy}/?token={TOKEN}", tls)
        assert page_status == 200 and b"<title>Voice agent</title>" in page
        assert get(f"{proxy}/metrics", tls)[0] == 404  # scraped per replica, not through here

        # Each session lands on its own replica (least_conn), and both are answered in voice.
        answers = asyncio.run(
            spoken_and_typed_turns(f"wss://localhost:{listen}/ws?token={TOKEN}", tls)
        )
        for answer in answers:
            assert answer["status"] == "completed", answer
            assert "paris" in answer["output_text"].lower(), answer
            assert answer["audio_bytes"] > 22050, answer  # over half a second of speech
        traces = [sorted(p.name for p in (tmp_path / f"traces{i}").glob("*.jsonl")) for i in (0, 1)]
        assert sorted(traces) == sorted([[f"serve-{a['session']}.jsonl"] for a in answers]), traces
        for port in ports:
            _, metrics = get(f"http://127.0.0.1:{port}/metrics")
            assert b'dllm_voice_answers_total{status="completed"} 1.0' in metrics

        # Origin and token behind the proxy: the page's own origin (its Host, which nginx
        # passes on) is allowed with the token; a foreign one and a missing token are not.
        host = f"voice.test:{listen}"
        for path, origin, expected in (
            (f"/ws?token={TOKEN}", f"https://{host}", 101),
            (f"/ws?token={TOKEN}", "https://evil.test", 403),
            ("/ws", f"https://{host}", 403),
        ):
            assert status(tls_raw(listen, upgrade(path, host, origin), tls)) == expected, origin

        # A replica goes down: nginx finds out on the connection it refuses and sends that
        # session, and the ones after it, to the other.
        stop(procs[1])
        for _ in range(3):
            assert asyncio.run(
                session_created(f"wss://localhost:{listen}/ws?token={TOKEN}", tls)
            ) == ("session.created")
        assert get(f"{proxy}/healthz", tls)[0] == 200
        assert "upstream server temporarily disabled" in (tmp_path / "nginx.log").read_text()
    finally:
        for proc in reversed(procs):
            stop(proc, signal.SIGQUIT if proc.args[0] == NGINX else signal.SIGTERM)
    for i in (0, 1):
        log = (tmp_path / f"replica{i}.log").read_text()
        assert "Traceback" not in log, log
    access = [
        line for line in (tmp_path / "nginx.log").read_text().splitlines() if "upstream=" in line
    ]
    assert any('"GET /ws" 101' in line for line in access), access
    assert not any(TOKEN in line for line in access)  # the access log leaves out the query


def tls_raw(port: int, request: bytes, tls: ssl.SSLContext) -> bytes:
    """`request` sent through the proxy's TLS as it is; what comes back within 2 s."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=2) as plain,
        tls.wrap_socket(plain, server_hostname="localhost") as sock,
    ):
        sock.sendall(request)
        out = b""
        with contextlib.suppress(TimeoutError, ssl.SSLError):
            while chunk := sock.recv(1 << 16):
                out += chunk
                if b"\r\n\r\n" in out:
                    break
    return out
