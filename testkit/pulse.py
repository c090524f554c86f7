"""A private PulseAudio daemon with virtual devices, for running `python main.py` against a real
sound server (tests/audio/test_live_pulse.py, bench/live.py).

The daemon runs as a user daemon in a temporary XDG_RUNTIME_DIR, so nothing of the machine's own
sound setup is touched. Devices:

- `agent_out`: a null sink, the default speaker; its monitor is what the agent says (the ear).
- `mic_in`: a null sink the "user" plays into (`paplay --device=mic_in`); its monitor, remapped
  as the source `mic`, is the default microphone.
- optional echo: a `module-loopback` from `agent_out.monitor` into `mic_in` at a gain and delay,
  the agent's voice coming back into the microphone as from laptop speakers.

Time: a `Recorder` (parecord) maps every recorded sample onto time.monotonic() from the arrival
times of its blocks, so samples of two recorders can be compared; `locate()` finds where a known
clip was played in a recording (cross-correlation), which holds with echo mixed in.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import wave
from pathlib import Path

import numpy as np

RATE = 16000
SPEAKER, MIC_SINK, MIC = "agent_out", "mic_in", "mic"
_TOOLS = ("pulseaudio", "pactl", "paplay", "parecord")


class SoundServerError(RuntimeError):
    """No sound server could be started here (the reason is the message, one line)."""


def missing_tools() -> list[str]:
    return [t for t in _TOOLS if shutil.which(t) is None]


class SoundServer:
    """A PulseAudio user daemon with the virtual speaker and microphone; stop() ends it."""

    def __init__(self, root: str | Path) -> None:
        missing = missing_tools()
        if missing:
            raise SoundServerError(
                f"{', '.join(missing)} not installed (apt-get install pulseaudio pulseaudio-utils)"
            )
        self.root = Path(root)
        runtime = self.root / "runtime"
        runtime.mkdir(parents=True, exist_ok=True)
        runtime.chmod(0o700)
        self.env = {
            **os.environ,
            "XDG_RUNTIME_DIR": str(runtime),
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "PULSE_SERVER": f"unix:{runtime / 'pulse' / 'native'}",
        }
        script = self.root / "default.pa"
        script.write_text(
            "load-module module-native-protocol-unix\n"
            f"load-module module-null-sink sink_name={SPEAKER} "
            f"sink_properties=device.description={SPEAKER}\n"
            f"load-module module-null-sink sink_name={MIC_SINK} "
            f"sink_properties=device.description={MIC_SINK}\n"
            f"load-module module-remap-source source_name={MIC} master={MIC_SINK}.monitor "
            f"source_properties=device.description=virtual_mic\n"
            f"set-default-sink {SPEAKER}\n"
            f"set-default-source {MIC}\n"
        )
        self.log = self.root / "pulseaudio.log"
        self._proc = subprocess.Popen(
            ["pulseaudio", "-n", "-F", str(script), "--daemonize=no", "--exit-idle-time=-1",
             "--disallow-exit", f"--log-target=file:{self.log}"],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._echo: int | None = None
        deadline = time.monotonic() + 15
        while not self._ready():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-1:]
                self.stop()
                raise SoundServerError(
                    f"pulseaudio did not start ({tail[0] if tail else 'no log'})"
                )
            time.sleep(0.1)

    def _ready(self) -> bool:
        r = subprocess.run(["pactl", "info"], env=self.env, capture_output=True, text=True)
        return r.returncode == 0 and f"Default Source: {MIC}" in r.stdout

    def pactl(self, *args: str) -> str:
        r = subprocess.run(["pactl", *args], env=self.env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SoundServerError(f"pactl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout.strip()

    def set_echo(self, gain_db: float | None, delay_ms: int = 40) -> None:
        """Loop the speaker back into the microphone at gain_db after ~delay_ms (None: no echo).

        module-loopback keeps its latency near latency_msec by resampling; its sink input's
        volume sets the gain (a software volume, exact for a null sink)."""
        if self._echo is not None:
            self.pactl("unload-module", str(self._echo))
            self._echo = None
        if gain_db is None:
            return
        self._echo = int(
            self.pactl(
                "load-module", "module-loopback", f"source={SPEAKER}.monitor",
                f"sink={MIC_SINK}", f"latency_msec={delay_ms}", "source_dont_move=true",
                "sink_dont_move=true", "remix=true",
            )
        )  # fmt: skip
        inputs = self.pactl("list", "sink-inputs").split("Sink Input #")[1:]
        ours = [i.split()[0] for i in inputs if f"Owner Module: {self._echo}\n" in i]
        if not ours:
            raise SoundServerError("module-loopback made no sink input")
        self.pactl("set-sink-input-volume", ours[0], f"{gain_db:+.1f}dB")

    def play(self, wav: str | Path, device: str = MIC_SINK) -> subprocess.Popen:
        """paplay a WAV into `device` (the virtual microphone by default); returns at once."""
        return subprocess.Popen(
            ["paplay", f"--device={device}", "--latency-msec=20", str(wav)],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def record(self, device: str) -> Recorder:
        return Recorder(self.env, device)

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


class Recorder:
    """parecord of one source at 16 kHz mono, read live; samples mapped to monotonic seconds.

    Each block read at time t ends at sample n, so the recording's start is at most t - n/RATE;
    the smallest such value over all blocks is the start with the least transport delay in it
    (parecord is asked for 10 ms fragments).
    """

    def __init__(self, env: dict[str, str], device: str) -> None:
        self.device = device
        self._proc = subprocess.Popen(
            ["parecord", f"--device={device}", "--raw", "--format=s16le", f"--rate={RATE}",
             "--channels=1", "--latency-msec=10"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._chunks: list[bytes] = []
        self._n = 0
        self._odd = b""
        self.start_t = float("inf")
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while data := os.read(fd, 8192):
            t = time.monotonic()
            data = self._odd + data
            cut = len(data) - len(data) % 2
            self._odd = data[cut:]
            with self._lock:
                self._chunks.append(data[:cut])
                self._n += cut // 2
                self.start_t = min(self.start_t, t - self._n / RATE)

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Until samples flow (a fresh daemon's first recording starts after ~2 s)."""
        deadline = time.monotonic() + timeout_s
        while self._n == 0:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise SoundServerError(f"parecord of {self.device} delivers no samples")
            time.sleep(0.05)

    def pcm(self) -> np.ndarray:
        """Everything recorded so far, int16."""
        with self._lock:
            data = b"".join(self._chunks)
            self._chunks = [data]
        return np.frombuffer(data, dtype="<i2").copy()

    def time_of(self, sample: int) -> float:
        return self.start_t + sample / RATE

    def sample_at(self, t: float) -> int:
        return max(0, round((t - self.start_t) * RATE))

    def stop(self) -> np.ndarray:
        self._proc.terminate()
        self._proc.wait(5)
        self._thread.join(5)
        return self.pcm()


def active_blocks(pcm: np.ndarray, block: int = RATE // 100, floor_dbfs: float = -50.0):
    """Per 10 ms block: is there sound above floor_dbfs? (a bool array)."""
    n = len(pcm) // block
    x = pcm[: n * block].astype(np.float64).reshape(n, block) / 32768.0
    rms = np.sqrt(np.mean(x * x, axis=1)) + 1e-12
    return 20 * np.log10(rms) > floor_dbfs


def first_sound(pcm: np.ndarray, start: int = 0, floor_dbfs: float = -50.0) -> int | None:
    """First sample (10 ms resolution) at or after `start` in a block above floor_dbfs."""
    act = active_blocks(pcm[start:], floor_dbfs=floor_dbfs)
    hits = np.flatnonzero(act)
    return start + int(hits[0]) * (RATE // 100) if len(hits) else None


def last_sound(pcm: np.ndarray, start: int, end: int, floor_dbfs: float = -50.0) -> int | None:
    """End (10 ms resolution) of the last block above floor_dbfs in pcm[start:end]."""
    act = active_blocks(pcm[start:end], floor_dbfs=floor_dbfs)
    hits = np.flatnonzero(act)
    return start + (int(hits[-1]) + 1) * (RATE // 100) if len(hits) else None


def locate(recording: np.ndarray, clip: np.ndarray, start: int, end: int) -> int:
    """Sample of `recording` where `clip` begins, searched in [start, end) (cross-correlation)."""
    seg = recording[max(0, start) : min(len(recording), end + len(clip))].astype(np.float64)
    ref = clip.astype(np.float64)
    n = 1 << int(np.ceil(np.log2(len(seg) + len(ref))))
    corr = np.fft.irfft(np.fft.rfft(seg, n) * np.conj(np.fft.rfft(ref, n)), n)
    lags = corr[: max(1, len(seg) - len(ref) + 1)]
    return max(0, start) + int(np.argmax(lags))


class ChatProcess:
    """`python main.py` (the live conversation) in a private tmux server, as a user would run it
    in a terminal: `screen()` is what the terminal shows, `events()` the session's trace."""

    def __init__(
        self, server: SoundServer, args: list[str], cols: int = 110, rows: int = 40
    ) -> None:
        if shutil.which("tmux") is None:
            raise SoundServerError("tmux not installed (apt-get install tmux)")
        root = server.root
        self.trace = root / "trace.jsonl"
        self.trace.unlink(missing_ok=True)
        self.exit_file = root / "chat.exit"
        self.exit_file.unlink(missing_ok=True)
        self._sock = str(root / "tmux.sock")
        self._env = {**server.env, "XDG_STATE_HOME": str(root / "state")}
        repo = Path(__file__).resolve().parent.parent
        cmd = [sys.executable, str(repo / "main.py"), "--set", f"trace.path={self.trace}", *args]
        quoted = " ".join(shlex.quote(c) for c in cmd)
        # The shell ignores Ctrl+C (main.py gets it) and keeps the pane for reading after exit.
        shell = f"trap : INT; {quoted}; echo $? > {shlex.quote(str(self.exit_file))}; sleep 3600"
        env_args = [
            f"{k}={self._env[k]}"
            for k in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "PULSE_SERVER", "XDG_STATE_HOME")
        ]
        subprocess.run(
            ["tmux", "-S", self._sock, "-f", "/dev/null", "new-session", "-d", "-s", "chat",
             "-x", str(cols), "-y", str(rows), "env", *env_args, "TERM=xterm-256color",
             "sh", "-c", shell],
            env=self._env, check=True,
        )  # fmt: skip

    def screen(self) -> str:
        r = subprocess.run(
            ["tmux", "-S", self._sock, "capture-pane", "-p", "-J", "-t", "chat"],
            capture_output=True,
            text=True,
        )
        return r.stdout

    def events(self, name: str | None = None) -> list[dict]:
        if not self.trace.exists():
            return []
        out = []
        for line in self.trace.read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if name is None or ev.get("event") == name:
                out.append(ev)
        return out

    def wait_for(self, predicate, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if self.exit_file.exists():
                raise AssertionError(f"main.py exited while waiting for {what}:\n{self.screen()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.screen()}")
            time.sleep(0.1)

    def interrupt(self, timeout_s: float = 30) -> int:
        """Ctrl+C, as the user ends the conversation; returns main.py's exit code."""
        subprocess.run(["tmux", "-S", self._sock, "send-keys", "-t", "chat", "C-c"], check=False)
        self.wait_exit(timeout_s)
        return int(self.exit_file.read_text().strip() or -1)

    def wait_exit(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.exit_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self._sock, "kill-server"], capture_output=True, check=False)


class LiveSession:
    """`python main.py` on a fresh sound server: play utterances into the virtual microphone,
    record the speaker, and read times off the sound server's samples.

    echo_gain_db: the speaker's monitor looped into the microphone at this gain (None: no echo).
    """

    def __init__(
        self,
        root: str | Path,
        args: list[str],
        echo_gain_db: float | None = None,
        echo_delay_ms: int = 40,
        ready_timeout_s: float = 180,
    ) -> None:
        self.root = Path(root)
        self.server = SoundServer(self.root)
        self.chat: ChatProcess | None = None
        self.ear = self.mic = None
        self.final_screen = ""  # the terminal after main.py exited
        self._n = 0
        try:
            self.server.set_echo(echo_gain_db, echo_delay_ms)
            self.ear = self.server.record(f"{SPEAKER}.monitor")
            self.mic = self.server.record(f"{MIC_SINK}.monitor")
            self.ear.wait_ready()
            self.mic.wait_ready()
            self.chat = ChatProcess(self.server, args)
            self.chat.wait_for(
                lambda: "listening" in self.chat.screen(), ready_timeout_s, "the agent to listen"
            )
        except BaseException:
            self.close()
            raise

    def say(self, pcm: np.ndarray) -> float:
        """Play 16 kHz int16 speech into the microphone; returns when paplay was started."""
        self._n += 1
        wav = self.root / f"utterance-{self._n}.wav"
        write_wav(wav, pcm)
        t = time.monotonic()
        self.server.play(wav)
        return t

    def heard(
        self, clip: np.ndarray, after_t: float, within_s: float = 10.0
    ) -> tuple[float, float]:
        """(onset, end) in monotonic seconds of the speech in `clip` as the microphone got it,
        the clip having been started after `after_t` (found by cross-correlation)."""
        assert self.mic is not None
        rec = self.mic.pcm()
        start = self.mic.sample_at(after_t)
        at = locate(rec, clip, start, start + int(within_s * RATE))
        onset = first_sound(clip) or 0
        end = last_sound(clip, 0, len(clip)) or len(clip)
        return self.mic.time_of(at + onset), self.mic.time_of(at + end)

    def agent_sound(self, after_t: float, until_t: float | None = None) -> float | None:
        """Monotonic time of the first agent sample after `after_t` (before `until_t`)."""
        assert self.ear is not None
        rec = self.ear.pcm()
        hit = first_sound(rec, self.ear.sample_at(after_t))
        if hit is None:
            return None
        t = self.ear.time_of(hit)
        return t if until_t is None or t < until_t else None

    def agent_last_sound(self, from_t: float, to_t: float) -> float | None:
        """Monotonic time where the agent's last sound between the two times ends."""
        assert self.ear is not None
        rec = self.ear.pcm()
        end = last_sound(rec, self.ear.sample_at(from_t), self.ear.sample_at(to_t))
        return None if end is None else self.ear.time_of(end)

    def wait_agent_sound(self, after_t: float, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while (t := self.agent_sound(after_t)) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"the agent said nothing within {timeout_s} s")
            time.sleep(0.02)
        return t

    def turns(self) -> int:
        """User turns dealt with: answers ended, and finals that came back empty (no answer)."""
        assert self.chat is not None
        events = self.chat.events()
        done = sum(e["event"] == "turn_done" for e in events)
        return done + sum(e["event"] == "asr_final" and not e.get("text") for e in events)

    def wait_idle(self, turns: int, quiet_s: float = 1.0, timeout_s: float = 60) -> None:
        """Until `turns` user turns were dealt with (`turns()`) and the speaker has been quiet
        for quiet_s."""
        assert self.chat is not None and self.ear is not None

        def idle() -> bool:
            now = time.monotonic()
            return (
                self.turns() >= turns
                and self.agent_sound(now - quiet_s) is None
                and self.ear.start_t + len(self.ear.pcm()) / RATE > now - 0.1
            )

        self.chat.wait_for(idle, timeout_s, f"{turns} answers and quiet")

    def close(self) -> int | None:
        """Ctrl+C in the terminal, then everything stopped; main.py's exit code. The two
        recordings stay in the root folder (speaker.wav, microphone.wav; *.start: the
        monotonic time of their first sample)."""
        code = None
        try:
            if self.chat is not None:
                code = self.chat.interrupt()
                self.final_screen = self.chat.screen()
        finally:
            if self.chat is not None:
                self.chat.close()
            for name, rec in (("speaker", self.ear), ("microphone", self.mic)):
                if rec is not None:
                    write_wav(self.root / f"{name}.wav", rec.stop())
                    (self.root / f"{name}.start").write_text(f"{rec.start_t:.6f}\n")
            self.server.stop()
        return code


def write_wav(path: Path, pcm: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.asarray(pcm, dtype="<i2").tobytes())
