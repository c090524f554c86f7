"""OpenTelemetry spans (trace.otel): a served session with fake models gives one trace per
answer whose stage spans match the latency trace; the OTEL_* environment picks the exporter."""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dllm_voice.app.config import Config, ConfigError
from dllm_voice.app.observe.otel import SpanExport, span_export
from dllm_voice.app.observe.trace import Tracer, read_trace
from dllm_voice.app.observe.trace_tools import turn_rows
from dllm_voice.app.server.server import VoiceServer
from tests.app.fakes import FakeComponents, buzz
from tests.app.test_server import Running
from tests.app.test_server_playback import (
    QUESTION,
    Player,
    chunks,
    converse,
    fake_cfg,
    turn_audio,
)

ROOT_CHILDREN = {
    "user speech",
    "endpoint",
    "asr final",
    "lm",
    "tts first audio",
    "voice to voice",
    "playback",
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Running, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    comps = FakeComponents([QUESTION, QUESTION], lm={"tail": "Fine, thanks."}, ms_per_word=100)
    server = VoiceServer(fake_cfg(tmp_path), comps)
    server.spans = SpanExport(provider)
    run = Running(server)
    yield run, exporter
    run.close()
    comps.close()
    provider.shutdown()


def ms(ns: int) -> float:
    return ns / 1e6


def session_id(events: list[dict[str, Any]]) -> str:
    return next(e for e in events if e["type"] == "trace")["event"]["session"]


def answer_trace(spans: list[ReadableSpan], session: str) -> tuple[ReadableSpan, list[Any]]:
    (root,) = [s for s in spans if s.name == "answer" and s.attributes["session.id"] == session]
    tree = [s for s in spans if s.context.trace_id == root.context.trace_id and s is not root]
    return root, tree


def test_a_served_answer_is_one_trace_of_its_stages(
    served: tuple[Running, InMemorySpanExporter], tmp_path: Path
) -> None:
    run, exporter = served
    # A whole answer played (speech in real time: its pause is scored), then a cough over the
    # next one: held, then resumed.
    cough = buzz(150).tobytes()
    first, _ = asyncio.run(converse(run.ws_url, chunks(turn_audio()), Player(), realtime=True))
    coughed, _ = asyncio.run(
        converse(run.ws_url, [turn_audio().tobytes()], Player(), [(600, lambda p: [cough])])
    )
    spans = exporter.get_finished_spans()

    session = session_id(first)
    root, tree = answer_trace(spans, session)
    assert root.parent is None
    by_name = {s.name: s for s in tree}
    assert set(by_name) >= ROOT_CHILDREN, sorted(by_name)
    for span in tree:
        parent = by_name["lm"] if span.name in ("lm first token", "lm first clause") else root
        assert span.parent is not None and span.parent.span_id == parent.context.span_id, span.name
        assert root.start_time <= span.start_time <= span.end_time <= root.end_time, span.name
    attrs = root.attributes
    assert attrs["voice.status"] == "completed" and attrs["voice.stop_reason"]
    assert (attrs["voice.turn"], attrs["voice.typed"]) == (1, False)
    assert not any(isinstance(v, str) and "France" in v for v in attrs.values())  # no words

    # The durations are the trace's own, as `trace summary` computes them.
    events = read_trace(str(tmp_path / "traces" / f"serve-{session}.jsonl"))
    (row,) = turn_rows(events)
    assert root.attributes["voice.gen"] == row["gen"]
    duration = {s.name: ms(s.end_time - s.start_time) for s in tree}
    for stage, name in (
        ("voice_to_voice", "voice to voice"),
        ("asr_final", "asr final"),
        ("lm_ttft", "lm first token"),
        ("lm_clause", "lm first clause"),
        ("tts_first", "tts first audio"),
        ("endpoint", "endpoint"),
    ):
        assert duration[name] == pytest.approx(row["stages"][stage], abs=1e-3), name
        assert attrs[f"voice.{stage}_ms"] == pytest.approx(row["stages"][stage], abs=1e-3)
    scored = [e for e in events if e["event"] == "end_of_turn"]
    assert len([s for s in tree if s.name == "end of turn"]) == len(scored) > 0
    lm_done = next(e for e in events if e["event"] == "lm_done")
    assert by_name["lm"].attributes["voice.new_tokens"] == lm_done["new_tokens"]

    root, tree = answer_trace(spans, session_id(coughed))
    (held,) = [s for s in tree if s.name == "barge-in"]
    assert held.attributes["voice.outcome"] == "resumed" and held.attributes["voice.stop_ms"] > 0
    assert [e.name for e in root.events] == ["speculation", "barge_in_resume"]
    assert root.attributes["voice.status"] == "completed"


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    for name in ("OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    for name in ("PROTOCOL", "TRACES_PROTOCOL", "ENDPOINT", "TRACES_ENDPOINT"):
        monkeypatch.delenv(f"OTEL_EXPORTER_OTLP_{name}", raising=False)

    def setenv(**env: str) -> None:
        for key, value in env.items():
            monkeypatch.setenv(key, value)

    return setenv


def otel_cfg(on: bool = True) -> Any:
    return dataclasses.replace(Config().trace, otel=on)


def test_the_switch_and_the_environment_turn_spans_on_and_off(
    otel_env: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    otel_env(OTEL_TRACES_EXPORTER="console")
    assert span_export(otel_cfg(False)) is None
    export = span_export(otel_cfg())
    assert export is not None
    assert export.provider.resource.attributes["service.name"] == "dllm-voice"
    export.provider.shutdown()
    otel_env(OTEL_SERVICE_NAME="voice-eu")
    export = span_export(otel_cfg())
    assert export is not None and export.provider.resource.attributes["service.name"] == "voice-eu"
    export.provider.shutdown()
    otel_env(OTEL_TRACES_EXPORTER="none")
    assert span_export(otel_cfg()) is None
    otel_env(OTEL_TRACES_EXPORTER="console", OTEL_SDK_DISABLED="true")
    assert span_export(otel_cfg()) is None

    monkeypatch.delenv("OTEL_SDK_DISABLED")
    otel_env(OTEL_TRACES_EXPORTER="zipkin_json")
    with pytest.raises(ConfigError, match="no installed package exports spans as 'zipkin_json'"):
        span_export(otel_cfg())
    otel_env(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    with pytest.raises(ConfigError, match="opentelemetry-exporter-otlp-proto-grpc"):
        span_export(otel_cfg())
    otel_env(OTEL_EXPORTER_OTLP_PROTOCOL="http/json")
    with pytest.raises(ConfigError, match="'http/json' is not one of"):
        span_export(otel_cfg())
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # not installed
    with pytest.raises(ConfigError, match=r"opentelemetry-sdk is not installed; pip install"):
        span_export(otel_cfg())


def test_off_imports_nothing_of_opentelemetry() -> None:
    code = (
        "import sys, dllm_voice.app.server.server, dllm_voice.app.terminal.runner; "
        "import dllm_voice.app.terminal.chat; from dllm_voice.app.config import Config; "
        "from dllm_voice.app.observe.otel import span_export; "
        "assert span_export(Config().trace) is None; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver in miniature: keeps the bodies POSTed to /v1/traces."""

    received: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            Collector.received.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


def test_the_default_exporter_sends_otlp_over_http(otel_env: Callable[..., None]) -> None:
    Collector.received = []
    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
        otel_env(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
        export = span_export(otel_cfg())
        assert export is not None
        tracer = Tracer(None, session="typed")
        export.observe(tracer)
        tracer.event("text_input", turn=1, gen=1, end_ms=1000.0, t_ms=1000.0, text="Hi")
        tracer.event("lm_start", turn=1, gen=1, t_ms=1001.0)
        tracer.event("lm_first_token", turn=1, gen=1, t_ms=1020.0)
        tracer.event("turn_done", turn=1, gen=1, t_ms=1500.0, status="completed")
        export.provider.shutdown()  # exports what is batched
    finally:
        collector.shutdown()
        collector.server_close()
    (body,) = Collector.received
    request = ExportTraceServiceRequest.FromString(body)
    (resource,) = request.resource_spans
    service = {a.key: a.value.string_value for a in resource.resource.attributes}
    assert service["service.name"] == "dllm-voice"
    spans = {s.name: s for scope in resource.scope_spans for s in scope.spans}
    assert set(spans) == {"answer", "lm", "lm first token"}
    answer = spans["answer"]
    assert (answer.end_time_unix_nano - answer.start_time_unix_nano) / 1e6 == pytest.approx(500)
    attrs = {a.key: a.value for a in answer.attributes}
    assert attrs["session.id"].string_value == "typed" and attrs["voice.typed"].bool_value
