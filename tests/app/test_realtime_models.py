"""/v1/realtime on the real models (SmolLM2, Whisper tiny.en, Piper) with stock clients: the
openai SDK's realtime client, and the OpenAI Agents SDK's RealtimeAgent with a function tool."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner

from dllm_voice.app.server.server import VoiceServer
from testkit.speech import speech_pcm
from tests.app.test_realtime import Reader, client, send_speech, user
from tests.app.test_server import Running
from tests.conftest import E2E_CONFIG

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def running(components: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    from dataclasses import replace

    folder: Path = tmp_path_factory.mktemp("traces")
    cfg = replace(E2E_CONFIG, trace=replace(E2E_CONFIG.trace, path=str(folder)))
    run = Running(VoiceServer(cfg, components))
    yield run
    run.close()


def test_spoken_and_typed_questions_through_the_openai_sdk(running: Running) -> None:
    speech = speech_pcm(
        "What is the capital of France?", "espeak", rate_hz=24000, lead_ms=300, tail_ms=1500
    )

    async def talk() -> tuple[Reader, Reader, Reader]:
        async with client(running).realtime.connect(model="gpt-realtime") as conn:
            spoken = Reader(conn)
            await spoken.until("session.created")
            await send_speech(conn, speech.tobytes(), 4800, lambda b: b)
            await spoken.until("response.done", timeout=60)
            typed = Reader(conn)
            await conn.conversation.item.create(item=user("Name a color of the sky."))
            await conn.response.create()
            await typed.until("response.done", timeout=60)
            cut = Reader(conn)
            await conn.conversation.item.create(item=user("Tell me a long story about a dragon."))
            await conn.response.create()
            await cut.until("response.output_audio.delta", timeout=60)
            await conn.response.cancel()
            await cut.until("response.done", timeout=30)
        return spoken, typed, cut

    spoken, typed, cut = asyncio.run(talk())
    heard = spoken.of("conversation.item.input_audio_transcription.completed")[0]["transcript"]
    assert "capital" in heard.lower() and "france" in heard.lower()
    for r in (spoken, typed):
        done = r.of("response.done")[0]["response"]
        assert done["status"] == "completed", done
        assert r.of("response.output_audio_transcript.done")[0]["transcript"].strip()
        assert len(r.audio()) > 2 * 24000 // 2  # at least half a second of 24 kHz speech
    # The capital comes from the built-in country tool (no LM tokens); the sky from the LM.
    assert "paris" in spoken.of("response.output_audio_transcript.done")[0]["transcript"].lower()
    assert typed.of("response.done")[0]["response"]["usage"]["output_tokens"] > 0
    assert cut.of("response.done")[0]["response"]["status"] == "cancelled"


def test_an_openai_agents_realtime_agent_calls_its_function_tool(running: Running) -> None:
    asked: list[str] = []

    @function_tool
    def get_order_status(order_number: str) -> str:
        """Look up the delivery status of an order by its order number."""
        asked.append(order_number)
        return f"Order {order_number} shipped on Monday and arrives on Thursday."

    agent = RealtimeAgent(
        name="Shop assistant",
        instructions="You help customers with their orders. Answer in one short sentence.",
        tools=[get_order_status],
    )
    url = running.ws_url.replace("/ws", "/v1/realtime") + "?model=gpt-realtime"

    async def converse() -> tuple[list[str], list[dict[str, Any]]]:
        runner = RealtimeRunner(agent)
        kinds: list[str] = []
        raw: list[dict[str, Any]] = []
        session = await runner.run(model_config={"url": url, "api_key": "unused"})
        async with session:
            await session.send_message("What is the delivery status of order 4521?")
            async with asyncio.timeout(90):
                async for event in session:
                    kinds.append(event.type)
                    if event.type == "error":
                        raise AssertionError(f"the agent got an error: {event.error}")
                    if event.type == "raw_model_event" and event.data.type == "raw_server_event":
                        raw.append(event.data.data)
                        if len([e for e in raw if e.get("type") == "response.done"]) == 2:
                            break
        return kinds, raw

    kinds, raw = asyncio.run(converse())
    assert asked and "4521" in asked[0], asked
    assert kinds.index("tool_start") < kinds.index("tool_end") < len(kinds)
    assert "audio" in kinds
    answer = [e for e in raw if e["type"] == "response.output_audio_transcript.done"][-1]
    assert answer["transcript"] == "Order 4521 shipped on Monday and arrives on Thursday."
