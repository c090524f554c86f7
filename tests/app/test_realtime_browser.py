"""The JavaScript Agents SDK (@openai/agents-realtime, from npm at test time) in headless Chromium:
a RealtimeSession over the websocket transport, its key as the browser subprotocol, and a
function tool, end to end on the real models."""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dllm_voice.app.server.server import VoiceServer
from tests.app.test_server import Running
from tests.app.test_web_client import CHROMIUM, chromium  # noqa: F401 - fixture
from tests.conftest import E2E_CONFIG

pytestmark = pytest.mark.slow

PAGE = """<!doctype html><meta charset="utf-8"><script type="module">
import { OpenAIRealtimeWebSocket, RealtimeAgent, RealtimeSession, tool }
  from './openai-realtime-agents.mjs';
const result = { calls: [], transcripts: [], errors: [] };
window.result = result;
const orderStatus = tool({
  name: 'get_order_status',
  description: 'Look up the delivery status of an order by its order number.',
  parameters: { type: 'object', properties: { order_number: { type: 'string' } },
                required: ['order_number'], additionalProperties: false },
  strict: true,
  execute: async ({ order_number }) => {
    result.calls.push(order_number);
    return `Order ${order_number} shipped on Monday and arrives on Thursday.`;
  },
});
const agent = new RealtimeAgent({ name: 'Shop assistant', tools: [orderStatus],
  instructions: 'You help customers with their orders. Answer in one short sentence.' });
const transport = new OpenAIRealtimeWebSocket({ useInsecureApiKey: true });
const session = new RealtimeSession(agent, { transport, model: 'gpt-realtime' });
session.on('error', (e) => result.errors.push(String(e.error?.message ?? JSON.stringify(e.error))));
transport.on('*', (ev) => {
  if (ev.type === 'response.output_audio_transcript.done') result.transcripts.push(ev.transcript);
});
await session.connect({ apiKey: 'KEY', url: 'URL' });
session.sendMessage('What is the delivery status of order 4521?');
</script>"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SDK's browser build, installed from npm into a fresh folder."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed")
    folder = tmp_path_factory.mktemp("npm")
    install = subprocess.run(
        [npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(folder),
         "@openai/agents-realtime"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if install.returncode != 0:
        pytest.skip(f"npm could not install @openai/agents-realtime: {install.stderr[-300:]}")
    return folder / "node_modules" / "@openai" / "agents-realtime" / "dist" / "bundle"


@pytest.fixture(scope="module")
def running(components: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    folder = tmp_path_factory.mktemp("traces")
    cfg = replace(E2E_CONFIG, server=replace(E2E_CONFIG.server, port=0, token="KEY"))
    cfg = replace(cfg, trace=replace(cfg.trace, path=str(folder)))
    run = Running(VoiceServer(cfg, components))
    yield run
    run.close()


def test_the_js_agents_sdk_in_chromium_calls_its_tool(
    bundle: Path,
    running: Running,
    chromium: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    shutil.copytree(bundle, site)
    url = running.ws_url.split("?")[0].replace("/ws", "/v1/realtime")
    (site / "index.html").write_text(PAGE.replace("URL", url))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    pages = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=pages.serve_forever, daemon=True).start()
    browser = chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
    try:
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{pages.server_address[1]}/index.html")
        page.wait_for_function(
            "window.result && window.result.transcripts.length > 0", timeout=90_000
        )
        result = page.evaluate("window.result")
    finally:
        browser.close()
        pages.shutdown()
    assert result["errors"] == [], result
    assert result["calls"] and "4521" in result["calls"][0], result
    assert result["transcripts"][-1] == "Order 4521 shipped on Monday and arrives on Thursday."
