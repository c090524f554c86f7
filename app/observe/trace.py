"""Latency trace: JSONL events ``{"session","turn","gen","event","t_ms", ...attrs}``.

``t_ms`` is monotonic milliseconds (``time.monotonic() * 1000``), the same clock the pipeline
uses, so trace times and in-pipeline times compare directly. Every line is written and flushed
under a lock, so a crash loses at most the event being written; ``close()`` runs explicitly and
from ``atexit``. The file is created with the first event, so a session in which nothing happened
leaves none behind. A Tracer without a path keeps events only in memory (tests, disabled trace)
and ``listeners`` see every event (the websocket server forwards them to the client). Traces go
by default to the user's state folder (XDG), not the working directory.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

# The events the pipeline writes, in the order they happen within a turn.
EVENTS = (
    "speech_start",
    "asr_partial",
    "pause",
    "resume",
    "speculation_start",
    "end_of_turn",
    "speech_end",
    "reopen",
    "rejoin",
    "reopen_cancel",
    "text_input",
    "asr_final",
    "speculation",
    "lm_start",
    "lm_first_token",
    "asr_slower",
    "tool_call",
    "tool_filler",
    "tool_result",
    "lm_first_clause",
    "tts_first_audio",
    "audio_out_first",
    "lm_done",
    "barge_in_hold",
    "barge_in_resume",
    "barge_in",
    "playback_stopped",
    "turn_done",
    "error",
)

# One JSON line of the trace: the head above and each event's own attributes, read back from a
# file as they were written, so a value's type is its event's to know.
TraceEvent = dict[str, Any]


def now_ms() -> float:
    """The pipeline clock: monotonic milliseconds."""
    return time.monotonic() * 1000.0


def default_trace_dir() -> Path:
    """``$XDG_STATE_HOME/dllm-voice/traces`` (``~/.local/state/dllm-voice/traces`` when unset
    or relative, as the XDG spec says)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "dllm-voice" / "traces"


def default_trace_path(directory: str | Path | None = None) -> str:
    """``<directory>/trace-<UTC time>.jsonl``, by default in ``default_trace_dir()`` (what
    ``TraceConfig.path = ""`` means)."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    folder = default_trace_dir() if directory is None else Path(directory)
    return str(folder / f"trace-{stamp}.jsonl")


class Tracer:
    """Thread-safe JSONL event writer; ``path=None`` keeps events in memory only."""

    def __init__(self, path: str | None, session: str = "s0", keep: bool | None = None) -> None:
        """``keep``: also hold events in ``.events`` (default: only when there is no file;
        long-running front ends with the trace disabled pass False)."""
        self.path = path
        self.session = session
        self.events: list[TraceEvent] = []
        self._keep = path is None if keep is None else keep
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        self._closed = False
        self.listeners: list[Callable[[TraceEvent], None]] = []

    def _open(self) -> TextIO | None:
        """The file, created on the first event (under the lock); None once closed."""
        if self._file is None and self.path and not self._closed:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (see close())
            atexit.register(self.close)
        return self._file

    def event(
        self, name: str, *, turn: int, gen: int, t_ms: float | None = None, **attrs: object
    ) -> TraceEvent:
        """Record one event now (or at ``t_ms``); returns the event dict."""
        ev: TraceEvent = {
            "session": self.session,
            "turn": turn,
            "gen": gen,
            "event": name,
            "t_ms": round(now_ms() if t_ms is None else t_ms, 3),
        }
        ev.update(attrs)
        line = json.dumps(ev, ensure_ascii=False, default=str)
        with self._lock:
            if self._keep:
                self.events.append(ev)
            file = self._open()
            if file is not None:
                file.write(line + "\n")
                file.flush()
        for listener in list(self.listeners):
            listener(ev)
        return ev

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        """Flush and close the file; safe to call twice and from atexit."""
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.flush()
                self._file.close()
                self._file = None
        atexit.unregister(self.close)

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_trace(path: str) -> list[TraceEvent]:
    """All events of a JSONL trace; a torn last line (crash mid-write) is skipped."""
    events: list[TraceEvent] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events
