"""The live display's terminal: what C libraries write to stderr goes to the log, not the screen."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def test_native_stderr_and_logging_go_to_the_log_file(tmp_path) -> None:
    # A child process, so fd 2 is a pipe this test reads (pytest's capture is not in the way).
    log = tmp_path / "chat.log"
    code = textwrap.dedent(
        f"""
        import ctypes, logging, os, sys
        from dllm_voice.app.terminal.console import terminal_log
        with terminal_log({str(log)!r}) as native:
            libc = ctypes.CDLL(None)
            msg = b"ALSA lib pcm.c:8570:(snd_pcm_recover) underrun occurred\\n"
            libc.write(2, msg, len(msg))  # from C, as ALSA does
            os.write(2, b"partial line without newline")
            logging.getLogger("dllm_voice.audio.sinks").warning("speaker: 3 underruns")
            print("error: shown on the terminal", file=sys.stderr)
        print("lines", native.lines)
        print("after: terminal again", file=sys.stderr)
        """
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == ["error: shown on the terminal", "after: terminal again"]
    assert "lines 2" in r.stdout
    text = log.read_text()
    assert "native: ALSA lib pcm.c:8570:(snd_pcm_recover) underrun occurred" in text
    assert "native: partial line without newline" in text
    assert "dllm_voice.audio.sinks: speaker: 3 underruns" in text
