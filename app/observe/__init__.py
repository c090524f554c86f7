"""Observability: per-turn latency traces, their reports, Prometheus metrics, OpenTelemetry."""
