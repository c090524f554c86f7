"""The web page in headless Chromium: a WAV as its microphone, a spoken answer on the page."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.server import VoiceServer
from tests.app.test_server import Running, make_cfg
from tests.speech import write_speech_wav

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    mic = write_speech_wav(
        tmp_path / "mic.wav", "What is the capital of France?", lead_ms=800, tail_ms=4000
    )
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={mic}",
                "--autoplay-policy=no-user-gesture-required",
            ],
        )
        try:
            yield browser.new_page()
        finally:
            browser.close()


def test_browser_talks_and_hears_paris(
    components: Any,
    browser_page: Any,
    tmp_path: Path,
) -> None:
    run = Running(VoiceServer(make_cfg(tmp_path), components))
    page = browser_page
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(run.url)
        page.click("#go")
        page.wait_for_function(
            "document.querySelector('#state').textContent === 'listening'", timeout=20_000
        )
        page.wait_for_function(
            "document.querySelector('.turn .a')?.textContent.toLowerCase().includes('paris')",
            timeout=90_000,
        )
        user = page.text_content(".turn .u") or ""
        page.screenshot(path=str(tmp_path / "page.png"))
    finally:
        page.close()
        run.close()
    assert "capital of france" in user.lower()
    assert not errors, errors
