"""What a `serve` process reports to its operator: Prometheus metrics (GET /metrics) counted
from the sessions' trace events and error events, and its readiness (GET /healthz).

Every `VoiceServer` owns one `ServerMetrics` with its own registry, so two servers in one
process (the tests) count apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from dllm_voice.app.observe.trace import TraceEvent

if TYPE_CHECKING:
    from dllm_voice.app.conversation.events import Event

# Voice to voice: the adaptive end of turn answers in ~0.3 s, the fixed one in ~0.5 s, a slow
# or busy machine in seconds.
V2V_BUCKETS_S = (0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0)


class ServerMetrics:
    """Counters and a histogram for one server; feed it with `on_trace` and `on_event`."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.sessions = Gauge("dllm_voice_sessions", "voice sessions open now", registry=r)
        self.turns = Counter(
            "dllm_voice_answers", "answers that ended, by status", ["status"], registry=r
        )
        self.voice_to_voice = Histogram(
            "dllm_voice_voice_to_voice_seconds",
            "end of the user's speech to the agent's first audio",
            buckets=V2V_BUCKETS_S,
            registry=r,
        )
        self.barge_ins = Counter("dllm_voice_barge_ins", "answers the user interrupted", registry=r)
        self.errors = Counter(
            "dllm_voice_errors", "error events sent to clients, by type", ["type"], registry=r
        )
        self.dropped_audio = Counter(
            "dllm_voice_dropped_audio_seconds",
            "client audio dropped because its session fell behind",
            registry=r,
        )

    def on_trace(self, ev: TraceEvent) -> None:
        """A session's trace event (a `Tracer` listener)."""
        name = ev.get("event")
        if name == "turn_done":
            self.turns.labels(str(ev.get("status", ""))).inc()
        elif name == "audio_out_first" and isinstance(ev.get("v2v_ms"), int | float):
            self.voice_to_voice.observe(ev["v2v_ms"] / 1000.0)
        elif name == "barge_in":
            self.barge_ins.inc()

    def on_event(self, event: Event) -> None:
        """An event sent to a client: its `error` events are counted by type."""
        if event.get("type") == "error":
            error = event.get("error")
            kind = error.get("type", "") if isinstance(error, dict) else ""
            self.errors.labels(str(kind)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
