"""The page's controls in headless Chromium, with fake models: a typed turn, the Interrupt
button, a settings change and a refused value, a reconnect after the server restarts, Stop."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dllm_voice.app.observe.trace import read_trace
from dllm_voice.app.observe.trace_tools import summarize
from dllm_voice.app.server.server import VoiceServer
from testkit.speech import write_wav
from tests.app.fakes import FakeComponents, silence
from tests.app.test_server import Running
from tests.app.test_server_playback import fake_cfg
from tests.app.test_web_client import CHROMIUM, chromium_args

LONG = "Here is a long answer that goes on for a while so that there is time to stop it."


def last_agent(page: Any) -> str:
    return page.evaluate(
        "[...document.querySelectorAll('.msg.agent .text')].at(-1)?.textContent ?? ''"
    )


def test_typed_turn_interrupt_settings_and_reconnect(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    mic = write_wav(tmp_path / "mic.wav", np.concatenate([silence(2000)]), 16000)
    comps = FakeComponents([], lm={"tail": LONG}, ms_per_word=150)
    cfg = fake_cfg(tmp_path)
    run = Running(VoiceServer(cfg, comps))
    port = int(run.url.rsplit(":", 1)[1].strip("/"))
    bad: list[str] = []
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=chromium_args(mic))
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("response", lambda r: bad.append(r.url) if r.status >= 400 else None)
            page.goto(run.url)
            # A typed turn, without the microphone: it connects and is answered in text + voice.
            page.fill("#text", "How are you")
            page.press("#text", "Enter")
            page.wait_for_selector(".msg.user .tag:text('typed')", timeout=10_000)
            page.wait_for_selector(".msg.agent .wf .row", timeout=20_000)
            assert last_agent(page).startswith("You said: How are you.")
            assert page.text_content("#conn") == "connected"
            labels = page.eval_on_selector_all(
                ".msg.agent .wf .lbl", "els => els.map(e => e.textContent)"
            )
            assert labels[:3] == ["lm first clause", "tts first audio", "playback"]
            assert "typed to voice" in page.text_content("#summary")

            # The Interrupt button stops the answer under way: the unspoken rest is struck out.
            page.fill("#text", "Tell me more")
            page.press("#text", "Enter")
            page.wait_for_function("document.querySelector('#state').textContent === 'speaking'")
            page.wait_for_timeout(1200)
            page.click("#interrupt")
            page.wait_for_selector(".msg.agent .tag.cut", timeout=10_000)
            heard = page.evaluate(
                "[...document.querySelectorAll('.msg.agent .heard')].at(-1).textContent"
            )
            unheard = page.evaluate(
                "[...document.querySelectorAll('.msg.agent .unheard')].at(-1).textContent"
            )
            assert (
                heard.startswith("You said:")
                and unheard.strip()
                and LONG.endswith(unheard.strip()[-20:])
            )

            # The session's trace downloads as JSONL that `trace summary` reads.
            with page.expect_download() as download:
                page.click("#download")
            trace = tmp_path / "downloaded.jsonl"
            download.value.save_as(trace)
            summary = summarize(read_trace(str(trace)))
            assert summary["turns"] == 2 and summary["cancelled"] == 1

            # Settings: a refused value names the key and its range; a good one is applied.
            page.click("#settings summary")
            page.fill("[id='set-lm.threshold']", "2")
            page.click("#apply")
            page.wait_for_selector("#settings-msg.err", timeout=5_000)
            assert "lm.threshold = 2.0 is out of range (allowed: 0.0 .. 1.0)" in page.text_content(
                "#settings-msg"
            )
            page.fill("[id='set-lm.threshold']", "0.8")
            page.select_option("[id='set-lm.decoder']", "ar")
            page.click("#apply")
            page.wait_for_selector("#settings-msg.ok", timeout=5_000)
            (conn,) = run.server.active
            assert conn.session.cfg.lm.decoder == "ar" and conn.session.cfg.lm.threshold == 0.8
            page.screenshot(path=str(tmp_path / "controls-1280.png"), full_page=True)
            page.set_viewport_size({"width": 420, "height": 900})
            page.screenshot(path=str(tmp_path / "controls-420.png"), full_page=True)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 420, width

            # The server restarts: the page reconnects by itself, and re-applies its settings.
            first = page.text_content("#info")
            run.close()
            page.wait_for_selector("#conn.down", timeout=10_000)
            run = Running(
                VoiceServer(
                    dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, port=port)),
                    comps,
                )
            )
            page.wait_for_function(
                "document.querySelector('#conn').textContent === 'connected'", timeout=20_000
            )
            assert page.text_content("#info") != first and page.locator(".divider").count() == 1
            page.wait_for_function(
                "[...(new Set([...document.querySelectorAll('#settings-msg.ok')]))].length === 1"
            )
            (conn,) = run.server.active
            page.wait_for_timeout(300)
            assert conn.session.cfg.lm.decoder == "ar"

            # Stop ends the session: no errors, no old session id.
            page.click("#go")  # start the microphone on top
            page.wait_for_function("document.querySelector('#go').textContent === 'Stop'")
            page.wait_for_timeout(500)
            page.click("#go")
            page.wait_for_timeout(500)
            assert (
                page.text_content("#info") == "" and page.text_content("#conn") == "not connected"
            )
            browser.close()
    finally:
        run.close()
        comps.close()
    assert not errors, errors
    assert not bad, bad


def test_an_idle_session_closed_by_the_server_stays_closed(tmp_path: Path) -> None:
    """The server ends an idle session (close code 1000): the page says so and does not come
    straight back (it reconnects only when the server went away)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    mic = write_wav(tmp_path / "mic.wav", silence(1000), 16000)
    comps = FakeComponents([])
    cfg = fake_cfg(tmp_path)
    cfg = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, idle_timeout_s=1.0))
    run = Running(VoiceServer(cfg, comps))
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=chromium_args(mic))
            page = browser.new_page()
            page.goto(run.url)
            page.evaluate("audioOn(); connect()")  # what Send does, without a message
            page.wait_for_selector("#conn.on", timeout=10_000)
            page.wait_for_function(
                "document.querySelector('#log').textContent.includes('ended the session')",
                timeout=10_000,
            )
            page.wait_for_timeout(2500)  # past the first retry a server that went away gets
            conn, log = page.text_content("#conn"), page.text_content("#log")
            browser.close()
    finally:
        run.close()
        comps.close()
    assert conn == "not connected" and "idle timeout" in (log or ""), (conn, log)
