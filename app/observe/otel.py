"""OpenTelemetry spans of every answer's stages, made from the latency trace (``trace.otel``).

With the switch on, each session's `Tracer` gets one more listener, `AnswerSpans`. When an
answer ends (``turn_done``) it turns that answer's trace events into one OpenTelemetry trace: a
root span ``answer`` with a child span per stage — ``user speech``, ``end of turn`` (each
scored pause), ``endpoint``, ``asr final``, ``lm`` (its children ``lm first token`` and ``lm
first clause``), ``tts first audio``, ``voice to voice`` (``text to voice`` for a typed turn),
``playback`` and a ``barge-in`` for each time the user's speech held the answer — and span
events for barge-ins, reopened turns, speculation results and errors. Spans are made after the
fact from the trace's own times (monotonic ms, moved onto the wall clock once per session), so
their durations are exactly those `trace summary` and the web page's waterfall report, and
they cost the event loop ~0.2 ms once per answer, at its end (a spoken turn's 32 events, p95
0.4 ms on a busy 2-core CPU), nothing while it runs. They carry the session id, turn, generation,
status, stop reason and stage times, never the words said.

The exporter is set by the standard environment, as OpenTelemetry's SDKs read it:
``OTEL_SDK_DISABLED``, ``OTEL_TRACES_EXPORTER`` (``otlp`` by default, ``console``, ``none``),
``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` (``http/protobuf`` by default, the specification's
default; ``grpc``), ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`` (``http://localhost:4318``),
``OTEL_SERVICE_NAME`` (``dllm-voice`` here), ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER[_ARG]`` and ``OTEL_BSP_*``. The opentelemetry packages (the ``otel``
extra) are imported only when the switch is on; this module itself imports none.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from dllm_voice.app.config import ConfigError
from dllm_voice.app.conversation.config import TraceConfig
from dllm_voice.app.observe.trace import TraceEvent, Tracer
from dllm_voice.app.observe.trace_tools import _first, _time, _turn_end, answer_spans, turn_rows

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span
    from opentelemetry.trace import Tracer as SpanTracer

log = logging.getLogger(__name__)
# What OpenTelemetry takes as an attribute value (its lists are not used here).
AttributeValue = str | bool | int | float

SERVICE_NAME = "dllm-voice"
INSTALL = "pip install 'dllm-voice[otel]' (scripts/install.sh --dev installs it)"
# OTLP transports by OTEL_EXPORTER_OTLP_PROTOCOL: the exporter's entry point and its package.
OTLP = {
    "http/protobuf": ("otlp_proto_http", "opentelemetry-exporter-otlp-proto-http"),
    "grpc": ("otlp_proto_grpc", "opentelemetry-exporter-otlp-proto-grpc"),
}
# Point events put on the root span, and the attributes of theirs that carry no user words.
POINT_EVENTS = ("speculation", "lm_retry", "barge_in_resume", "barge_in", "reopen_cancel", "error")
POINT_ATTRS = ("result", "reason", "saved_ms", "stage", "message")
# Which trace event ended a barge-in's hold, as the span's outcome.
HOLD_ENDS = {"barge_in": "cancelled", "barge_in_resume": "resumed", "turn_done": "answer ended"}
KEEP_TURNS = 4  # a turn's events are kept this many turns back: a reopen answers the turn again


def span_export(cfg: TraceConfig) -> SpanExport | None:
    """The process's span export when ``trace.otel`` is on and the environment does not turn
    it off (``OTEL_SDK_DISABLED=true``, ``OTEL_TRACES_EXPORTER=none``); else None. A missing
    package or an exporter nothing provides is a one-line ConfigError, raised at start."""
    if not cfg.otel or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigError(f"trace.otel: opentelemetry-sdk is not installed; {INSTALL}") from None
    exporters = [_exporter(name) for name in _exporter_names()]
    if not exporters:
        return None
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    # The provider shuts down at exit (its own atexit hook), exporting what is still batched.
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return SpanExport(provider)


def _exporter_names() -> list[str]:
    """OTEL_TRACES_EXPORTER's exporters as entry point names, ``otlp`` by its protocol."""
    names = []
    for name in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(","):
        name = name.strip()
        if name in ("", "none"):
            continue
        if name == "otlp":
            protocol = (
                os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf"
            ).strip()
            if protocol not in OTLP:
                raise ConfigError(
                    f"trace.otel: OTLP protocol {protocol!r} is not one of {', '.join(OTLP)} "
                    "(OTEL_EXPORTER_OTLP_PROTOCOL)"
                )
            name = OTLP[protocol][0]
        names.append(name)
    return names


def _exporter(name: str) -> SpanExporter:
    found = entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        package = {ep: pkg for ep, pkg in OTLP.values()}.get(name)
        hint = f"install {package}" if package else "use otlp, console or none"
        raise ConfigError(
            f"trace.otel: no installed package exports spans as {name!r} "
            f"(OTEL_TRACES_EXPORTER); {hint}"
        )
    exporter: SpanExporter = next(iter(found)).load()()
    return exporter


class SpanExport:
    """A tracer provider's tracer; `observe` gives each session's trace its `AnswerSpans`."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("dllm_voice")

    def observe(self, tracer: Tracer) -> None:
        tracer.listeners.append(AnswerSpans(self.tracer).on_trace)


@dataclass
class Stage:
    name: str
    start_ms: float
    end_ms: float
    attrs: dict[str, object] = field(default_factory=dict)
    under_lm: bool = False


class AnswerSpans:
    """One session's trace events in, one OpenTelemetry trace per ended answer out."""

    def __init__(self, tracer: SpanTracer) -> None:
        self.tracer = tracer
        # Monotonic ms -> wall-clock ns, fixed for the session: a span lasts what its trace
        # events say even if the wall clock is stepped meanwhile.
        self.epoch_ns = time.time_ns() - time.monotonic_ns()
        self.turns: dict[int, list[TraceEvent]] = {}

    def on_trace(self, ev: TraceEvent) -> None:
        turn = int(ev["turn"])
        self.turns.setdefault(turn, []).append(ev)
        if ev["event"] != "turn_done":
            return
        try:
            self.emit(self.turns[turn], ev)
        except Exception:  # noqa: BLE001 - spans are optional: they must not end a conversation
            log.exception("OpenTelemetry spans of answer %s failed", ev.get("gen"))
        for old in [k for k in self.turns if k < turn - KEEP_TURNS]:
            del self.turns[old]

    def _ns(self, t_ms: float) -> int:
        return self.epoch_ns + round(t_ms * 1e6)

    def emit(self, evs: list[TraceEvent], done: TraceEvent) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        gen = int(done["gen"])
        row = [r for r in turn_rows(evs) if r["gen"] == gen][-1]
        stages = answer_stages(evs, gen)
        end = _turn_end(evs, gen)
        starts = [s.start_ms for s in stages] + ([end["end_ms"]] if end is not None else [])
        t0 = min([*starts, done["t_ms"]])
        t1 = max([s.end_ms for s in stages] + [done["t_ms"]])
        lm_done = _first(evs, "lm_done", gen) or {}
        attrs: dict[str, object] = {
            "session.id": str(done["session"]),
            "voice.turn": int(done["turn"]),
            "voice.gen": gen,
            "voice.status": row["status"],
            "voice.stop_reason": lm_done.get("stop_reason"),
            "voice.speculation": row["speculation"],
            "voice.typed": row["typed"],
            "voice.realtime": row["realtime"],
            **{f"voice.{name}_ms": round(ms, 3) for name, ms in row["stages"].items()},
        }
        root = self.tracer.start_span("answer", start_time=self._ns(t0), attributes=_clean(attrs))
        for ev in evs:
            if ev["event"] in POINT_EVENTS and ev.get("gen") == gen:
                point = _clean({f"voice.{k}": ev.get(k) for k in POINT_ATTRS})
                root.add_event(ev["event"], attributes=point, timestamp=self._ns(ev["t_ms"]))
                if ev["event"] == "error":
                    root.set_status(Status(StatusCode.ERROR, str(ev.get("message", ""))))
        context = trace.set_span_in_context(root)
        lm: Span | None = None
        children: list[tuple[Span, Stage]] = []
        for stage in sorted(stages, key=lambda s: (s.under_lm, s.start_ms)):
            parent = trace.set_span_in_context(lm) if stage.under_lm and lm else context
            span = self.tracer.start_span(
                stage.name,
                context=parent,
                start_time=self._ns(stage.start_ms),
                attributes=_clean(stage.attrs),
            )
            lm = span if stage.name == "lm" else lm
            children.append((span, stage))
        for span, stage in reversed(children):  # children end before their parents
            span.end(end_time=self._ns(stage.end_ms))
        root.end(end_time=self._ns(t1))


def answer_stages(evs: list[TraceEvent], gen: int | None) -> list[Stage]:
    """The stages of answer ``gen`` in one turn's trace events: the waterfall's
    (`answer_spans`) plus the end-of-turn scores, the LM's whole run and first token, the
    voice-to-voice interval and the barge-ins."""
    stages = [
        Stage(label, start, stop, under_lm=label == "lm first clause")
        for label, start, stop, _ in answer_spans(evs, gen)
    ]
    final = _first(evs, "asr_final")
    for stage in stages:
        if stage.name == "asr final" and final is not None:
            stage.attrs["voice.compute_ms"] = final.get("compute_ms")
    end = _turn_end(evs, gen)
    for ev in evs:
        if ev["event"] == "end_of_turn" and (end is None or ev["t_ms"] <= end["t_ms"]):
            attrs: dict[str, object] = {
                f"voice.{k}": ev.get(k) for k in ("p_end", "decision", "wait_ms")
            }
            start = ev["t_ms"] - float(ev.get("compute_ms") or 0.0)
            stages.append(Stage("end of turn", start, ev["t_ms"], attrs))
    done = _first(evs, "turn_done", gen)
    lm_start = _first(evs, "lm_start", gen)
    if lm_start is not None:
        lm_end = _first(evs, "lm_done", gen) or done
        if lm_end is not None:
            keys = ("prompt_tokens", "cached_tokens", "new_tokens", "forwards", "tokens_per_s")
            attrs = {f"voice.{k}": lm_end.get(k) for k in keys}
            attrs["voice.speculative"] = lm_start.get("speculative")
            stages.append(Stage("lm", lm_start["t_ms"], lm_end["t_ms"], attrs))
        first = _first(evs, "lm_first_token", gen)
        if first is not None:
            stages.append(Stage("lm first token", lm_start["t_ms"], first["t_ms"], under_lm=True))
    audio = _first(evs, "audio_out_first", gen)
    if audio is not None and end is not None:
        name = "text to voice" if end["event"] == "text_input" else "voice to voice"
        stages.append(Stage(name, end["end_ms"], audio["t_ms"]))
    for i, hold in enumerate(evs):
        if hold["event"] != "barge_in_hold" or hold.get("gen") != gen:
            continue
        later = [e for e in evs[i + 1 :] if e.get("gen") == gen]
        stop = next((e for e in later if e["event"] in HOLD_ENDS), None)
        if stop is None:
            continue
        attrs = {"voice.outcome": HOLD_ENDS[stop["event"]]}
        stopped = next((e for e in later if e["event"] == "playback_stopped"), None)
        if stopped is not None and stopped["t_ms"] <= stop["t_ms"]:
            attrs["voice.stop_ms"] = stopped.get("stop_ms")
        stages.append(Stage("barge-in", _time(hold, "onset_ms"), stop["t_ms"], attrs))
    return stages


def _clean(attrs: dict[str, object]) -> dict[str, AttributeValue]:
    """OpenTelemetry attribute values: no None, strings, numbers and booleans as they are."""
    return {
        k: v if isinstance(v, str | bool | int | float) else str(v)
        for k, v in attrs.items()
        if v is not None
    }
