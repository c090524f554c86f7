"""Fixtures shared by the server tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dllm_voice.app.server.server import VoiceServer
from tests.app.fakes import FakeComponents
from tests.app.test_server import Running
from tests.app.test_server_playback import fake_cfg


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    """Starts servers (`serve(**server settings)`, on `comps` or fake models that hear "hi"),
    all closed after the test."""
    started: list[tuple[Running, FakeComponents]] = []

    def start(comps: FakeComponents | None = None, **server: Any) -> Running:
        comps = comps or FakeComponents(["hi"])
        run = Running(VoiceServer(fake_cfg(tmp_path, **server), comps))
        started.append((run, comps))
        return run

    yield start
    for run, comps in started:
        run.close()
        comps.close()
