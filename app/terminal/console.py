"""A clean terminal for the live display: library chatter goes to a log file, not the screen.

Sound libraries write straight to file descriptor 2 from C (ALSA prints `ALSA lib pcm.c:...
underrun occurred` on every recovered underrun, JACK and PortAudio print probe messages), and
Python's logging falls back to stderr when nothing is configured. Either scrolls a rich Live
display off the screen. `terminal_log()` sends both into the log for the display's lifetime:
Python logging to the file, and fd 2 through a pipe whose lines a thread logs as `native`.
`sys.stderr` keeps the terminal, so the app's own one-line errors and tracebacks still show.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

log = logging.getLogger("native")


class _NativeStderr:
    """fd 2 -> a pipe -> `native` log lines, until close(); counts the lines it routed."""

    def __init__(self) -> None:
        sys.stderr.flush()
        self._terminal = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self._saved_stderr = sys.stderr
        if _writes_fd2(sys.stderr):  # else a harness already captures it: leave it be
            sys.stderr = open(  # noqa: SIM115 - closed in close()
                self._terminal, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False
            )
        self.lines = 0
        self._thread = threading.Thread(target=self._pump, args=(read,), daemon=True)
        self._thread.start()

    def _pump(self, fd: int) -> None:
        with open(fd, "rb", buffering=0) as pipe:
            pending = b""
            while chunk := pipe.read(4096):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    self._log(line)
            if pending:
                self._log(pending)

    def _log(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            self.lines += 1
            log.warning("%s", text)

    def close(self) -> None:
        sys.stderr.flush()
        os.dup2(self._terminal, 2)  # the pipe's last writer is gone: the pump reads to EOF
        self._thread.join(timeout=2)
        if sys.stderr is not self._saved_stderr:
            sys.stderr.close()
            sys.stderr = self._saved_stderr
        os.close(self._terminal)


def _writes_fd2(stream: TextIO) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


@contextlib.contextmanager
def terminal_log(path: str | Path) -> Iterator[_NativeStderr]:
    """Python logging (INFO and up) and everything C code writes to stderr go to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    native = _NativeStderr()
    try:
        yield native
    finally:
        native.close()
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()
