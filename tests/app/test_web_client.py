"""The web page in headless Chromium: a WAV as its microphone, a spoken answer on the page."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dllm_voice.app.server.server import VoiceServer
from testkit.speech import speech_pcm, write_speech_wav, write_wav
from tests.app.test_server import Running, make_cfg

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


# (voice, WAV rate): espeak-ng at 48 kHz, whose energy above 8 kHz the page's resampler must
# filter out ("the capital and friends" otherwise); Piper at 16 kHz speaks in
# test_two_spoken_turns_and_a_typed_one.
MICS = [("espeak:en-us", 48000)]


def chromium_args(mic: Path) -> list[str]:
    """Headless Chromium with ``mic`` (a WAV, looped) as its granted microphone."""
    return [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={mic}",
        "--autoplay-policy=no-user-gesture-required",
    ]


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Playwright's Chromium, its driver started once for the module's browsers."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        yield p.chromium


@pytest.fixture(params=MICS, ids=[f"{v}@{r}" for v, r in MICS])
def browser_page(chromium: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    voice, rate = request.param
    mic = write_speech_wav(
        tmp_path / "mic.wav", "What is the capital of France?", voice, rate, 800, 4000
    )
    browser = chromium.launch(executable_path=CHROMIUM, args=chromium_args(mic))
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
    failed: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    try:
        page.goto(run.url)
        page.click("#go")
        page.wait_for_function(
            "document.querySelector('#state').textContent === 'listening'", timeout=20_000
        )
        page.wait_for_function(
            "document.querySelector('.msg.agent .text')?.textContent.toLowerCase()"
            ".includes('paris')",
            timeout=90_000,
        )
        user = page.text_content(".msg.user .text") or ""
        page.wait_for_selector(".msg.agent .wf .row", timeout=30_000)
        stages = page.eval_on_selector_all(
            ".msg.agent .wf .lbl", "els => els.map(e => e.textContent)"
        )
        page.click("#go")  # Stop: the session ends, without errors, and its id goes
        page.wait_for_timeout(300)
        info = page.text_content("#info")
    finally:
        page.close()
        run.close()
    assert "capital of france" in user.lower()
    assert stages[:4] == ["user speech", "endpoint", "asr final", "lm first clause"], stages
    assert info == ""
    assert not errors, errors
    assert not failed, failed  # the favicon too


def test_two_spoken_turns_and_a_typed_one(components: Any, chromium: Any, tmp_path: Path) -> None:
    """A conversation as a person has it, with screenshots at desktop and phone width."""
    first = speech_pcm("What is the capital of France?", "piper", 16000, 800, 8000)
    second = speech_pcm("And what about Germany?", "piper", 16000, 0, 60000)
    mic = write_wav(tmp_path / "mic.wav", np.concatenate([first, second]), 16000)
    run = Running(VoiceServer(make_cfg(tmp_path), components))
    errors: list[str] = []
    try:
        mic_browser = chromium.launch(executable_path=CHROMIUM, args=chromium_args(mic))
        with closing(mic_browser) as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.add_init_script(DRAFT_WATCH)
            page.goto(run.url)
            page.evaluate(COUNT_DRAFTED)
            page.click("#go")
            answers = "document.querySelectorAll('.msg.agent .wf').length"
            page.wait_for_function(f"{answers} >= 2", timeout=120_000)
            page.fill("#text", "What is the capital of Italy?")
            page.press("#text", "Enter")
            page.wait_for_function(f"{answers} >= 3", timeout=60_000)
            users = page.eval_on_selector_all(
                ".msg.user .text", "els => els.map(e => e.textContent)"
            )
            agents = page.eval_on_selector_all(
                ".msg.agent .text", "els => els.map(e => e.textContent)"
            )
            summary = page.text_content("#summary") or ""
            drafted = page.evaluate("window.drafted.size")
            drafts = page.evaluate("window.draftsSeen")
            page.locator("main").screenshot(path=str(tmp_path / "page-1280.png"))
            page.set_viewport_size({"width": 420, "height": 900})
            page.screenshot(path=str(tmp_path / "page-420.png"), full_page=True)
            overflow = page.evaluate("document.documentElement.scrollWidth")
    finally:
        run.close()
    assert not errors, errors
    assert "capital of france" in users[0].lower() and "germany" in users[1].lower(), users
    assert users[2] == "What is the capital of Italy?" and len(agents) == 3, agents
    assert "paris" in agents[0].lower(), agents
    assert "3 answers" in summary and "voice to voice" in summary and "typed to voice" in summary
    assert overflow <= 420
    assert drafts == drafted, (drafts, drafted)  # every drafted guess showed as a draft


# Counts answers shown as tentative drafts (a speculation, before it is released or dropped),
# and the generations the server drafted text for.
COUNT_DRAFTED = """(() => {
  window.drafted = new Set();
  const handle = onEvent;
  onEvent = (ev) => {
    if (ev.type === "response.speculation.delta") window.drafted.add(ev.gen);
    handle(ev);
  };
})()"""
DRAFT_WATCH = """window.draftsSeen = 0;
new MutationObserver((records) => {
  for (const r of records) for (const n of r.addedNodes)
    if (n.classList?.contains("tentative")) window.draftsSeen++;
}).observe(document, {childList: true, subtree: true});"""


@pytest.fixture(scope="module")
def file_browser(chromium: Any) -> Iterator[Any]:
    """One browser, without a microphone, for the scripts run on the page opened as a file."""
    browser = chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    yield browser
    browser.close()


def evaluate_on_page(browser: Any, script: str, *args: Any) -> list[Any]:
    """``script`` run on a fresh page (opened as a file, no server) once for each of ``args``."""
    page_file = Path(__file__).resolve().parents[2] / "app" / "server" / "static" / "index.html"
    page = browser.new_page()
    try:
        page.goto(page_file.as_uri())
        return [page.evaluate(script, arg) for arg in args]
    finally:
        page.close()


def test_page_resampler_filters_what_16_khz_cannot_carry(file_browser: Any) -> None:
    """The page's 48 -> 16 kHz resampler: 1 kHz passes, 12 kHz (which averaging each 3 samples
    folded to 4 kHz at a third of its level) is removed, across 20 ms chunks."""
    script = """(f) => {
      const res = makeResampler(48000), out = [];
      for (let k = 0; k < 50; k++) {                      // 1 s in 20 ms chunks
        const x = new Float32Array(960);
        const w = 2 * Math.PI * f / 48000;
        for (let i = 0; i < 960; i++) x[i] = 0.5 * Math.sin(w * (k * 960 + i));
        out.push(...res(x));
      }
      const tail = out.slice(1600);                         // past the filter's start-up
      return [out.length, Math.sqrt(tail.reduce((s, v) => s + v * v, 0) / tail.length) / 32768];
    }"""
    (n, rms_1k), (_, rms_12k) = evaluate_on_page(file_browser, script, 1000, 12000)
    assert abs(n - 16000) <= 20
    assert abs(rms_1k - 0.5 / 2**0.5) < 0.02  # the speech band passes at its level
    assert rms_12k < 0.005  # >= 40 dB down; box averaging left 0.118 (-9.5 dB)


def test_page_shows_a_long_turn_revised_after_its_final(file_browser: Any) -> None:
    final, better = "What can I cook that is vegetarian? I need it.", "What can I cook? Easy."
    script = """([final, better]) => {
      const heard = (text) => ({type: "conversation.item.input_audio_transcription.completed",
                                transcript: text});
      onEvent({type: "input_audio_buffer.speech_started"});
      onEvent(heard(final));
      onEvent({type: "input_audio_buffer.speech_started"});
      onEvent(heard("And for dessert?"));
      onEvent({type: "conversation.item.input_audio_transcription.revised",
               transcript: better, previous_transcript: final});
      return [...document.querySelectorAll("#chat .msg.user")].map(
        (m) => [m.querySelector(".text").textContent, m.querySelector(".tags").textContent]);
    }"""
    (rows,) = evaluate_on_page(file_browser, script, [final, better])
    assert rows == [[better, "re-heard"], ["And for dessert?", ""]]
