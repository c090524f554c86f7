"""The web page's playback reports in headless Chromium, with fake models: what it played of the
answer is what the server records as heard."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dllm_voice.app.server.server import Connection, VoiceServer
from testkit.speech import write_wav
from tests.app.fakes import FakeComponents, buzz, silence
from tests.app.test_server import Running
from tests.app.test_server_playback import ANSWER, QUESTION, fake_cfg
from tests.app.test_web_client import CHROMIUM, chromium_args


@pytest.mark.parametrize("stop", [False, True])
def test_page_reports_what_it_played(
    tmp_path: Path, stop: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    # Chromium loops the file: one question, then silence long enough for the whole answer.
    mic = write_wav(
        tmp_path / "mic.wav", np.concatenate([silence(500), buzz(900), silence(8000)]), 16000
    )
    comps = FakeComponents([QUESTION], lm={"tail": "Fine, thanks."}, ms_per_word=200)
    run = Running(VoiceServer(fake_cfg(tmp_path), comps))
    events: list[dict[str, Any]] = []
    stopped_ms = 0.0
    emit = Connection.emit

    def record(conn: Connection, event: dict[str, Any]) -> None:
        events.append(event)
        emit(conn, event)

    monkeypatch.setattr(Connection, "emit", record)
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=chromium_args(mic))
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(run.url)
            page.click("#go")
            for _ in range(200):
                if events:  # session.created: the connection has its sink
                    break
                time.sleep(0.05)
            (conn,) = run.server.active
            for _ in range(300):
                if any(e["type"] == "response.done" for e in events):
                    break
                if stop and not stopped_ms and conn.sink.played_samples > 22050:
                    # The user stops playback about 1 s into the answer: the page truncates.
                    stopped_ms = page.evaluate(STOP)
                time.sleep(0.1)
            reported = conn.sink.reported
            browser.close()
    finally:
        run.close()
        comps.close()
    assert not errors, errors
    done = next(e["response"] for e in events if e["type"] == "response.done")
    assert reported  # the page's reports, not the server's clock, decided this
    if not stop:
        assert done["status"] == "completed" and done["heard_text"] == ANSWER, done
    else:  # what the page had played when it stopped, to the ms its clock moved since
        assert done["status"] == "cancelled" and stopped_ms > 1000
        assert done["heard_text"] in (heard_at(stopped_ms), heard_at(stopped_ms + 5)), stopped_ms


STOP = """(() => {
  const at = playedAt(outputTime()).get(1);
  flushPlayback();
  send({type: "response.cancel"});
  return at * 1000 / outRate;
})()"""


def heard_at(ms: float) -> str:
    """The heard_text rule for ANSWER (200 ms a word): whole clauses, then the words under way."""
    words: list[str] = []
    start = 0.0
    for clause in ("You said:", "What is the capital of France.", "Fine, thanks."):
        n = len(clause.split())
        got = min(max(ms - start, 0.0), 200.0 * n)
        words += clause.split()[: int(np.ceil(n * got / (200.0 * n)))]
        if got < 200.0 * n:
            break
        start += 200.0 * n
    return " ".join(words)
