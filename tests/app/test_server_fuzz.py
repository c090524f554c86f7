"""Property-based fuzzing of the websocket protocol (fake models, one server for the module):
every message gets an answer or a documented close code, never 1011 or a traceback, and the
server goes on serving."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from dllm_voice.app.server.connection import Connection
from dllm_voice.app.server.server import VoiceServer
from testkit.protocol_fuzz import (
    DOCUMENTED_CLOSES,
    ErrorLog,
    Outcome,
    messages,
    run_case,
    surely_invalid,
    texts,
)
from tests.app.fakes import FakeComponents, buzz, silence
from tests.app.test_server import Running
from tests.app.test_server_playback import fake_cfg

FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)  # a live turn takes ~3 s per example


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    cfg = fake_cfg(tmp_path_factory.mktemp("fuzz"), max_sessions=64, max_sessions_per_client=0)
    # Short answers (4 words of 100 ms), one transcript per utterance the fuzz may start.
    comps = FakeComponents(["hi"] * 10_000, lm={"tail": "Fine."}, ms_per_word=100)
    run = Running(VoiceServer(cfg, comps))
    yield run
    run.close()
    comps.close()


def check(outcome: Outcome, case: list[str | bytes], errors: ErrorLog) -> None:
    assert not errors.records, errors.records
    assert "server_error" not in outcome.errors, outcome
    if outcome.close_code is not None:
        assert outcome.close_code in DOCUMENTED_CLOSES, outcome
        return
    assert outcome.answered, outcome
    invalid = sum(map(surely_invalid, case))
    assert outcome.errors.get("invalid_request_error", 0) >= invalid, (outcome, invalid)


async def still_serving(url: str) -> None:
    async with connect(url) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send('{"type": "ping"}')
        assert json.loads(await ws.recv())["type"] == "pong"


@FUZZ
@given(case=messages)
def test_any_messages_get_answers_and_the_session_goes_on(
    running: Running, case: list[str | bytes]
) -> None:
    with ErrorLog() as errors:
        outcome = asyncio.run(run_case(running.ws_url, case))
    check(outcome, case, errors)


@settings(FUZZ, max_examples=8, phases=NO_SHRINK)
@given(case=st.lists(texts, min_size=4, max_size=12), at=st.lists(st.floats(0, 1.6), min_size=12))
def test_messages_during_a_live_turn(
    running: Running, case: list[str | bytes], at: list[float]
) -> None:
    """The messages interleave with a spoken turn and its answer (sent at `at` seconds)."""
    pcm = np.concatenate([silence(200), buzz(600), silence(1000)])
    chunks = [pcm[i : i + 1600].tobytes() for i in range(0, len(pcm), 1600)]  # 100 ms each
    timeline = sorted(
        [(0.1 * i, c) for i, c in enumerate(chunks)] + list(zip(at, case, strict=False)),
        key=lambda item: item[0],
    )

    async def turn() -> tuple[Outcome, set[str], int | None]:
        kinds: set[str] = set()
        async with connect(running.ws_url, max_size=None) as ws:
            await ws.recv()
            reader = asyncio.create_task(read_all(ws, kinds))
            t = 0.0
            with contextlib.suppress(ConnectionClosed):
                for when, message in timeline:
                    await asyncio.sleep(max(0.0, when - t))
                    t = max(t, when)
                    await ws.send(message)
                await asyncio.sleep(1.0)  # the answer, or what is left of it
            reader.cancel()
        outcome = await run_case(running.ws_url, [])
        return outcome, kinds, ws.close_code

    with ErrorLog() as errors:
        outcome, kinds, code = asyncio.run(turn())
    assert "server_error" not in kinds
    assert code in DOCUMENTED_CLOSES, code  # 1000: the client closed it
    check(outcome, [], errors)


async def read_all(ws: Any, kinds: set[str]) -> None:
    async for reply in ws:
        if isinstance(reply, str):
            event = json.loads(reply)
            kinds.add(event["error"]["type"] if event["type"] == "error" else event["type"])


@pytest.mark.parametrize(
    ("send", "code"),
    [
        (lambda ws: ws.send(bytes(1 << 20 + 1)), 1009),  # over server.max_message_bytes
        (lambda ws: ws.send(b"\xff\xfe{", text=True), 1007),  # text that is not UTF-8
    ],
    ids=["too-big", "not-utf8"],
)
def test_messages_that_close_get_a_documented_code(running: Running, send: Any, code: int) -> None:
    async def case() -> int | None:
        async with connect(running.ws_url, max_size=None) as ws:
            await ws.recv()
            await send(ws)
            try:
                async for _ in ws:
                    pass
            except ConnectionClosed:
                pass
            return ws.close_code

    with ErrorLog() as errors:
        assert asyncio.run(case()) == code
        asyncio.run(still_serving(running.ws_url))
    assert not errors.records, errors.records


def test_a_ping_flood_is_answered_and_others_are_served(running: Running) -> None:
    """20 000 pings sent as fast as the socket takes them, their pongs read meanwhile."""
    n = 20_000

    async def flood() -> int:
        pongs = 0
        async with connect(running.ws_url) as ws:
            await ws.recv()

            async def read() -> None:
                nonlocal pongs
                async for reply in ws:
                    pongs += json.loads(reply)["type"] == "pong"
                    if pongs == n:
                        return

            reader = asyncio.create_task(read())
            for _ in range(n):
                await ws.send('{"type": "ping"}')
            await still_serving(running.ws_url)
            await asyncio.wait_for(reader, 30)
        return pongs

    with ErrorLog() as errors:
        assert asyncio.run(flood()) == n
    assert not errors.records


def test_trace_files_only_for_sessions_with_a_turn(running: Running) -> None:
    folder = Path(running.server.trace_folder())
    before = set(folder.glob("serve-*.jsonl"))
    asyncio.run(run_case(running.ws_url, ['{"type": "ping"}', bytes(3200)]))
    assert set(folder.glob("serve-*.jsonl")) == before

    async def turn() -> None:
        async with connect(running.ws_url) as ws:
            await ws.recv()
            await ws.send(np.concatenate([silence(200), buzz(600), silence(800)]).tobytes())
            async for reply in ws:
                if isinstance(reply, str) and json.loads(reply)["type"] == "response.done":
                    return

    asyncio.run(asyncio.wait_for(turn(), 30))
    assert len(set(folder.glob("serve-*.jsonl")) - before) == 1


def test_connect_disconnect_cycles_leave_nothing_behind(running: Running) -> None:
    from dllm_voice.app.conversation.session import VoiceSession

    proc = psutil.Process()

    def alive() -> list[Any]:
        return [o for o in gc.get_objects() if type(o) in (Connection, VoiceSession)]

    async def cycles(n: int) -> None:
        for _ in range(n):
            async with connect(running.ws_url) as ws:
                await ws.recv()
        for _ in range(100):  # the server frees each session a moment after its close
            if not alive():
                return
            await asyncio.sleep(0.02)

    def grown() -> bool:
        threads, fds = proc.num_threads(), proc.num_fds()
        return threads > before[0] or fds > before[1]

    asyncio.run(cycles(10))
    before = proc.num_threads(), proc.num_fds()
    # No collection here: the server collects each session's cycles as it closes.
    asyncio.run(cycles(100))
    assert not alive() and not running.server.active
    # A leak grows with the cycles; a thread an earlier test left may end meanwhile, or still
    # be ending: 2 s for it.
    for _ in range(100):
        if not grown():
            break
        time.sleep(0.02)
    assert not grown(), (before, proc.num_threads(), proc.num_fds())
