"""Sources, sinks and devices: WAV formats, pacing, push framing, played_samples, flush.

The machine has no sound card, so the mic and speaker shells run against a fake sounddevice
module that drives their callbacks from a thread like PortAudio does.
"""

import asyncio
import shutil
import struct
import subprocess
import sys
import threading
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from dllm_voice.audio import devices
from dllm_voice.audio.client_sink import ClientSink
from dllm_voice.audio.config import AudioConfig
from dllm_voice.audio.errors import AudioDeviceError, AudioFormatError
from dllm_voice.audio.sinks import CallbackSink, PlayClock, WavSink
from dllm_voice.audio.sources import MicSource, PushSource, WavSource
from dllm_voice.audio.speaker import SpeakerSink
from testkit.speech import read_wav_bytes, write_wav


async def collect(source) -> np.ndarray:
    frames = [f async for f in source]
    assert all(f.dtype == np.int16 and len(f) == 480 for f in frames)
    return np.concatenate(frames) if frames else np.zeros(0, np.int16)


def sine(rate: int, seconds: float, freq: float = 300.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return amp * np.sin(2 * np.pi * freq * t)


def test_wav_source_downmixes_and_resamples_stereo_48k(tmp_path: Path) -> None:
    left = sine(48000, 1.0)
    stereo = (np.stack([left, left], axis=1) * 32767).astype(np.int16)
    path = write_wav(tmp_path / "st.wav", stereo, 48000, channels=2)
    pcm = asyncio.run(collect(WavSource(path)))
    assert abs(len(pcm) - 16000) < 480
    ref = (sine(16000, len(pcm) / 16000) * 32767).astype(np.int16)
    assert np.abs(pcm[200:15800].astype(int) - ref[200:15800]).max() < 100


@pytest.mark.parametrize("width", [1, 3, 4])
def test_wav_source_other_sample_widths(tmp_path: Path, width: int) -> None:
    x = sine(16000, 0.3)
    path = tmp_path / f"w{width}.wav"
    if width == 1:
        data = ((x * 127) + 128).astype(np.uint8).tobytes()
    elif width == 3:
        v = (x * (2**23 - 1)).astype("<i4")
        data = b"".join(int(s).to_bytes(3, "little", signed=True) for s in v)
    else:
        data = (x * (2**31 - 1)).astype("<i4").tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(width)
        w.setframerate(16000)
        w.writeframes(data)
    pcm = asyncio.run(collect(WavSource(path)))
    ref = (x * 32767).astype(int)
    tolerance = 600 if width == 1 else 50  # 8-bit steps are 256 apart in int16
    assert np.abs(pcm[: len(ref)].astype(int) - ref).max() < tolerance


SOX = shutil.which("sox")


def sox_sine(path: Path, *args: str) -> Path:
    """A 0.5 s 440 Hz sine at 16 kHz written by sox (no dither) with the given encoding."""
    cmd = [SOX, "-D", "-n", *args, "-r", "16000", str(path), "synth", "0.5", "sine", "440"]
    subprocess.run(cmd, check=True, capture_output=True)
    return path


@pytest.mark.skipif(SOX is None, reason="sox is not installed")
@pytest.mark.parametrize(
    ("args", "tag"),
    [
        (("-b", "16", "-e", "signed", "-c", "1", "-t", "wavpcm"), 1),
        (("-b", "24", "-e", "signed", "-c", "1"), 0xFFFE),  # sox: extensible above 16 bits
        (("-b", "32", "-e", "signed", "-c", "2"), 0xFFFE),
        (("-b", "16", "-e", "signed", "-c", "3"), 0xFFFE),  # and above 2 channels
        (("-b", "8", "-e", "unsigned", "-c", "1"), 1),
        (("-b", "32", "-e", "float", "-c", "1"), 3),
        (("-b", "64", "-e", "float", "-c", "1"), 3),
        (("-b", "32", "-e", "float", "-c", "3"), 3),
    ],
)
def test_wav_source_reads_what_sox_writes(tmp_path: Path, args: tuple[str, ...], tag: int) -> None:
    path = sox_sine(tmp_path / "x.wav", *args)
    assert int.from_bytes(path.read_bytes()[20:22], "little") == tag
    pcm = asyncio.run(collect(WavSource(path)))
    ref_path = sox_sine(tmp_path / "ref.wav", "-b", "16", "-e", "signed", "-t", "wavpcm")
    ref = read_wav_bytes(ref_path.read_bytes())[0].astype(int)  # the stdlib reads tag 1
    assert len(ref) == 8000 and len(pcm) == 8160  # 17 frames of 480, the last zero-padded
    tolerance = 260 if args[1] == "8" else 2  # 8-bit steps are 256 apart in int16
    assert np.abs(pcm[:8000].astype(int) - ref).max() <= tolerance


def wav_bytes(fmt: bytes, data: bytes) -> bytes:
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data))
    return b"RIFF" + struct.pack("<I", 4 + len(chunks) + len(data)) + b"WAVE" + chunks + data


def extensible_fmt(sub_tag: int, bits: int, channels: int = 1, rate: int = 16000) -> bytes:
    block = channels * bits // 8
    guid = struct.pack("<H", sub_tag) + bytes.fromhex("000000001000800000aa00389b71")
    return (
        struct.pack("<HHIIHHHHI", 0xFFFE, channels, rate, rate * block, block, bits, 22, bits, 4)
        + guid
    )


def test_wav_source_extensible_pcm16_and_float_and_errors(tmp_path: Path) -> None:
    x = sine(16000, 0.3)
    path = tmp_path / "ext16.wav"
    path.write_bytes(wav_bytes(extensible_fmt(1, 16), (x * 32767).astype("<i2").tobytes()))
    assert np.array_equal(asyncio.run(collect(WavSource(path)))[: len(x)], (x * 32767).astype(int))
    path = tmp_path / "extf32.wav"
    stereo = np.repeat(x[:, None], 2, axis=1).astype("<f4")  # (n, 2)
    path.write_bytes(wav_bytes(extensible_fmt(3, 32, channels=2), stereo.tobytes()))
    pcm = asyncio.run(collect(WavSource(path)))
    assert np.abs(pcm[: len(x)] - (x * 32767).astype(int)).max() <= 1

    alaw = tmp_path / "alaw.wav"
    alaw.write_bytes(wav_bytes(struct.pack("<HHIIHH", 6, 1, 8000, 8000, 1, 8), b"\0" * 800))
    with pytest.raises(AudioFormatError, match=r"unsupported WAV encoding A-law.*sox"):
        WavSource(alaw)
    ext_alaw = tmp_path / "ext_alaw.wav"
    ext_alaw.write_bytes(wav_bytes(extensible_fmt(6, 8), b"\0" * 800))
    with pytest.raises(AudioFormatError, match="A-law"):
        WavSource(ext_alaw)
    half = tmp_path / "f16.wav"
    half.write_bytes(wav_bytes(struct.pack("<HHIIHH", 3, 1, 16000, 32000, 2, 16), b"\0" * 800))
    with pytest.raises(AudioFormatError, match="16-bit float"):
        WavSource(half)
    guid = tmp_path / "guid.wav"
    guid.write_bytes(wav_bytes(extensible_fmt(1, 16)[:-1] + b"\x01", b"\0" * 800))
    with pytest.raises(AudioFormatError, match="unknown subformat"):
        WavSource(guid)
    no_data = tmp_path / "nodata.wav"
    no_data.write_bytes(wav_bytes(extensible_fmt(1, 16), b"")[:-8])
    with pytest.raises(AudioFormatError, match="without a data chunk"):
        WavSource(no_data)


def test_wav_source_realtime_pacing(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "a.wav", np.zeros(16000, np.int16), 16000)

    async def first_ten() -> float:
        t0 = time.monotonic()
        n = 0
        async for _ in WavSource(path, realtime=True):
            n += 1
            if n == 11:
                break
        return time.monotonic() - t0

    assert 0.27 <= asyncio.run(first_ten()) < 0.6  # 10 frames of 30 ms


def test_wav_source_errors(tmp_path: Path) -> None:
    with pytest.raises(AudioFormatError, match="no such WAV"):
        WavSource(tmp_path / "missing.wav")
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not a wav at all")
    with pytest.raises(AudioFormatError, match="sox"):
        WavSource(bad)
    with pytest.raises(AudioFormatError):
        WavSource(bad, frame_ms=25)
    empty = write_wav(tmp_path / "empty.wav", np.zeros(0, np.int16), 16000)
    assert len(asyncio.run(collect(WavSource(empty)))) == 0


def test_push_source_odd_bytes_floats_and_overflow() -> None:
    async def run() -> None:
        src = PushSource()
        data = (np.arange(1000) % 100).astype("<i2").tobytes()
        for a, b in [(0, 333), (333, 1001), (1001, 2000)]:  # odd byte counts
            src.push(data[a:b])
        src.push(np.array([np.nan, np.inf, 0.5], np.float32))
        src.close()
        pcm = await collect(src)
        assert np.array_equal(pcm[:1000], np.arange(1000) % 100)
        assert pcm[1000:1003].tolist() == [0, 32767, 16383]
        small = PushSource(max_buffer_ms=300)
        assert small.push(np.zeros(16000, np.int16)) == 23  # 1 s pushed, 10 frames kept
        assert small.dropped_frames == 23 and small.buffered_ms == 300
        small.close()  # the zero-padded tail frame pushes one more old frame out
        assert len(await collect(small)) == 480 * 10 and small.dropped_frames == 24

        resampling = PushSource(src_rate_hz=48000)
        resampling.push((sine(48000, 0.5) * 32767).astype(np.int16))
        resampling.close()
        assert abs(len(await collect(resampling)) - 8000) <= 480

    asyncio.run(run())


def test_push_source_takes_a_max_size_message_whole_and_reports_drain() -> None:
    async def run() -> None:
        src = PushSource(max_buffer_ms=70000)
        assert src.push(np.ones(1 << 19, np.int16)) == 0  # 1 MiB of PCM16: 32.8 s
        assert src.buffered_ms == 1092 * 30
        assert not await src.drained(0.05)  # nobody reads yet
        reader = asyncio.create_task(collect_n(src, 1092))
        assert await src.drained(5.0)
        assert len(await reader) == 1092 and src.dropped_frames == 0

    asyncio.run(run())


async def collect_n(source, n: int) -> list[np.ndarray]:
    frames = []
    async for frame in source:
        frames.append(frame)
        if len(frames) == n:
            break
    return frames


async def feed_realtime(src: PushSource, pcm: np.ndarray, block: int = 320) -> None:
    """Push `pcm` in blocks at the real-time pace a microphone client keeps (20 ms blocks)."""
    t0 = time.monotonic()
    for i in range(0, len(pcm), block):
        await asyncio.sleep(max(0.0, t0 + i / 16000 - time.monotonic()))
        src.push(pcm[i : i + block])


def test_push_source_fills_the_gap_when_the_client_stops_and_the_vad_ends_the_turn() -> None:
    from dllm_voice.audio.config import VADConfig
    from dllm_voice.audio.vad import Endpointer
    from tests.app.fakes import buzz

    async def run() -> tuple[list, float, int]:
        src = PushSource(gap_fill_ms=400)
        ep = Endpointer(VADConfig(silero=False))
        events, audio_ms = [], 0.0
        feeder = asyncio.create_task(feed_realtime(src, buzz(1200)))  # then it goes quiet
        t0 = time.monotonic()
        async for frame in src:
            audio_ms += 30
            events += ep.process(frame)
            if any(e.kind == "speech_end" for e in events):
                break
        await feeder
        return events, time.monotonic() - t0, src.filled_frames

    events, wall_s, filled = asyncio.run(run())
    end = next(e for e in events if e.kind == "speech_end")
    # The turn ends 500 ms (vad.speech_end_ms) after the real end of speech, as if the client
    # had sent silence: the fill covers the whole gap, not only what came after the 400 ms.
    assert 1150 <= end.audio_ms <= 1300, end.audio_ms
    assert 1.55 <= wall_s <= 3.0 and filled >= 15


def test_push_source_gap_fill_leaves_fast_bursty_and_jittery_clients_alone() -> None:
    async def run() -> None:
        # Bursts: 500 ms of audio all at once every 450 ms, a wait longer than the 300 ms
        # threshold. Its audio never runs out.
        src = PushSource(gap_fill_ms=300)
        reader = asyncio.create_task(collect_n(src, 49))
        for _ in range(3):
            src.push(np.full(8000, 5, np.int16))
            await asyncio.sleep(0.45)
        frames = await reader
        assert src.filled_frames == 0 and all((f == 5).all() for f in frames)

        # Real time with 250 ms network hiccups: under the 300 ms threshold, nothing inserted.
        src = PushSource(gap_fill_ms=300)
        reader = asyncio.create_task(collect_n(src, 33))  # 1 s of audio: 33 whole frames
        await feed_realtime(src, np.full(8000, 5, np.int16))
        await asyncio.sleep(0.25)
        await feed_realtime(src, np.full(8000, 5, np.int16))
        assert all((f == 5).all() for f in await reader) and src.filled_frames == 0

        # A stop: silence comes, then stops as soon as the client resumes.
        src = PushSource(gap_fill_ms=300)
        src.push(np.full(1000, 5, np.int16))  # 2 frames and a 40-sample partial one
        got = await collect_n(src, 2)
        t0 = time.monotonic()
        got += await collect_n(src, 14)  # the partial frame padded + 13 frames of the gap
        assert 0.28 <= time.monotonic() - t0 <= 1.0
        assert (got[2][:40] == 5).all() and not got[2][40:].any() and not got[3].any()
        filled = src.filled_frames
        await asyncio.sleep(0.2)
        src.push(np.full(480 * 3, 7, np.int16))
        assert all((f == 7).all() for f in await collect_n(src, 3))
        t0 = time.monotonic()
        assert not (await collect_n(src, 1))[0].any()  # the client stopped again: a new gap
        assert time.monotonic() - t0 >= 0.25 and src.filled_frames > filled

    asyncio.run(run())


def test_play_clock() -> None:
    now = [0.0]
    c = PlayClock(1000, clock=lambda: now[0])
    c.add(500)
    now[0] = 0.2
    assert c.played() == 200
    assert c.flush() == 300 and c.played() == 200
    now[0] = 1.0
    c.add(100)  # idle gap: a new run starts now
    now[0] = 1.05
    assert c.played() == 250
    now[0] = 5.0
    assert c.played() == 300 and c.remaining_s() == 0


def test_wav_sink_keeps_only_played_audio(tmp_path: Path) -> None:
    async def run() -> None:
        sink = WavSink(tmp_path / "out.wav", 16000)
        await sink.write(np.full(16000, 1, np.int16))
        await asyncio.sleep(0.2)
        sink.flush()
        played = sink.played_samples
        assert 2800 <= played <= 5000
        await sink.write(np.full(1600, 2, np.int16))
        await sink.aclose()
        pcm, rate = read_wav_bytes((tmp_path / "out.wav").read_bytes())
        assert rate == 16000 and len(pcm) == played + 1600 and (pcm == 2).sum() == 1600

    asyncio.run(run())


def test_callback_sink_paces_and_flushes() -> None:
    sent: list[int] = []

    async def send(b: bytes) -> None:
        sent.append(len(b) // 2)

    async def run() -> None:
        sink = CallbackSink(send, 16000, lead_ms=100)
        await sink.write(np.zeros(16000, np.int16))
        await asyncio.sleep(0.3)
        ahead = sum(sent) - sink.played_samples
        assert 0 < ahead <= 1600 + 320  # never more than lead + one piece ahead
        sink.flush()
        total = sum(sent)
        await asyncio.sleep(0.1)
        assert sum(sent) == total  # nothing sent after a flush
        await sink.write(np.zeros(800, np.int16))
        await sink.drain()
        assert sum(sent) == total + 800
        await sink.aclose()

        async def broken(b: bytes) -> None:
            raise ConnectionError("socket closed")

        dead = CallbackSink(broken, 16000, realtime=False)
        await dead.write(np.zeros(10, np.int16))  # logged, not raised
        await dead.write(np.zeros(10, np.int16))

    asyncio.run(run())


def test_client_sink_maps_reports_through_flushes_and_never_counts_unsent_audio() -> None:
    sent: list[tuple[int, int]] = []
    gen = [1]
    gate = asyncio.Event()

    async def send(g: int, b: bytes) -> None:
        await gate.wait()  # the socket: blocked until the test opens it
        sent.append((g, len(b) // 2))

    async def run() -> None:
        sink = ClientSink(send, lambda: gen[0], 1000, lead_ms=100, piece_ms=20)
        await sink.write(np.zeros(1000, np.int16))
        await asyncio.sleep(0.3)
        assert sent == [] and sink.played_samples == 0  # nothing reached the socket
        assert sink.stalled_s() >= 0.25  # audio waits, nothing plays
        gate.set()
        await asyncio.sleep(0.35)
        assert 0 < sink.played_samples <= sum(n for _, n in sent)  # the wall-clock estimate

        sink.report(1, 150.0)  # from the first report on, the client's word counts
        assert sink.reported and sink.played_samples == 150
        sink.report(1, 120.0)  # late, out of order: played never goes back
        assert sink.played_samples == 150
        sink.flush()  # a hold: the unplayed rest goes, the next write lands at 150
        assert sink.played_samples == 150
        got = sum(n for _, n in sent)
        await sink.write(np.zeros(200, np.int16))  # the resumed answer, same generation
        await asyncio.sleep(0.15)
        assert sum(n for _, n in sent) == got + 200
        sink.report(1, got - 10)  # inside audio sent before the flush: ignored
        assert sink.played_samples == 150
        sink.report(1, got + 50)  # 50 ms into the resumed audio
        assert sink.played_samples == 200
        sink.report(1, got + 199.4)  # whole ms, a fraction short of the end: the end
        assert sink.played_samples == 350 and sink.stalled_s() == 0.0
        sink.report(1, 1e6)  # more than was ever sent: capped
        assert sink.played_samples == 350

        gen[0] = 2
        await sink.write(np.zeros(100, np.int16))
        await asyncio.sleep(0.15)
        sink.report(1, 1e6)
        sink.report(2, 0.0)  # the client has the new answer's audio and played none of it
        assert sink.played_samples == 350
        sink.report(2, 40.0, stopped=True)
        assert sink.played_samples == 390
        await sink.aclose()

    asyncio.run(run())


class FakeStream:
    """Calls the callback every 10 ms from a thread, like a PortAudio stream (blocksize 0:
    blocks of the size the host has, here 10 ms)."""

    def __init__(self, *, samplerate, channels, blocksize, callback, **kw) -> None:
        self.rate, self.channels, self.block, self.callback = (
            samplerate,
            channels,
            blocksize or samplerate // 100,
            callback,
        )
        self.kind = "input" if "InputStream" in type(self).__name__ else "output"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t = 0
        self.active = False
        latency = kw.get("latency", "low")
        self.latency = 0.02 if isinstance(latency, str) else float(latency)

    def start(self) -> None:
        self.active = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            time.sleep(self.block / self.rate)

    def stop(self) -> None:
        self.active = False
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    abort = stop

    def close(self) -> None:
        self.active = False
        self._stop.set()


class FakeInputStream(FakeStream):
    def tick(self) -> None:
        n = np.arange(self.t, self.t + self.block)
        self.t += self.block
        mono = 0.5 * np.sin(2 * np.pi * 300 * n / self.rate)
        block = np.repeat(mono[:, None], self.channels, axis=1).astype(np.float32)
        self.callback(block, self.block, None, None)


class FakeOutputStream(FakeStream):
    def tick(self) -> None:
        out = np.full((self.block, 1), 999, np.int16)
        self.callback(out, self.block, None, None)


class FakeSoundDevice:
    InputStream = FakeInputStream
    OutputStream = FakeOutputStream

    class default:  # noqa: N801 (mirrors sounddevice.default)
        device = (0, 1)

    DEVICES = [
        {
            "name": "USB Mic",
            "max_input_channels": 2,
            "max_output_channels": 0,
            "default_samplerate": 48000.0,
        },
        {
            "name": "Speakers",
            "max_input_channels": 0,
            "max_output_channels": 2,
            "default_samplerate": 44100.0,
        },
    ]

    def query_devices(self, kind=None):
        if kind is None:
            return self.DEVICES
        return self.DEVICES[0 if kind == "input" else 1]


@pytest.fixture
def fake_sd(monkeypatch: pytest.MonkeyPatch) -> FakeSoundDevice:
    sd = FakeSoundDevice()
    monkeypatch.setattr(devices, "sounddevice", lambda: sd)
    import dllm_voice.audio.sources
    import dllm_voice.audio.speaker

    monkeypatch.setattr(dllm_voice.audio.sources, "sounddevice", lambda: sd)
    monkeypatch.setattr(dllm_voice.audio.speaker, "sounddevice", lambda: sd)
    return sd


def test_list_and_resolve_devices(fake_sd: FakeSoundDevice) -> None:
    table = devices.list_devices()
    assert "USB Mic" in table and "Speakers" in table and ">" in table
    assert devices.resolve_device("usb", "input")[0] == 0
    assert devices.resolve_device("1", "output")[0] == 1
    assert devices.resolve_device("", "output")[1]["name"] == "Speakers"
    with pytest.raises(AudioDeviceError, match="available: 'USB Mic'"):
        devices.resolve_device("webcam", "input")
    with pytest.raises(AudioDeviceError, match="does not exist"):
        devices.resolve_device("7", "input")


def test_mic_source_48k_stereo_to_16k_mono(fake_sd: FakeSoundDevice) -> None:
    async def run() -> np.ndarray:
        mic = MicSource(AudioConfig(input_device="mic"))
        got = []
        async for f in mic:
            got.append(f)
            if len(got) == 20:
                break
        await mic.aclose()
        return np.concatenate(got)

    pcm = asyncio.run(run())
    ref = (0.5 * 32767 * np.sin(2 * np.pi * 300 * np.arange(len(pcm)) / 16000)).astype(int)
    assert np.abs(pcm[400:].astype(int) - ref[400:]).max() < 200


def test_speaker_sink_plays_and_flushes_within_a_buffer(fake_sd: FakeSoundDevice) -> None:
    async def run() -> None:
        heard: list[np.ndarray] = []
        sink = SpeakerSink(AudioConfig(), on_played=lambda b, r: heard.append(b))
        assert sink.sample_rate_hz == 44100
        await sink.write(np.full(44100, 7, np.int16))
        await asyncio.sleep(0.2)
        sink.flush()
        at_flush = sink.played_samples
        await asyncio.sleep(0.1)
        assert 0 < at_flush < 44100
        assert sink.played_samples - at_flush <= 441 * 5  # stops within 50 ms
        assert heard and heard[-1].max() == 0  # silence after the flush
        await sink.write(np.full(441, 7, np.int16))
        await sink.drain()
        await sink.aclose()

    asyncio.run(run())


def test_speaker_flush_drops_the_device_buffer(fake_sd: FakeSoundDevice) -> None:
    """A 200 ms buffer for late callbacks, yet a flush is silent at once: the stream is aborted
    (its buffer dropped) and restarted, and what was dropped is not counted as played."""

    async def run() -> None:
        restarts: list[int] = []
        sink = SpeakerSink(AudioConfig(output_buffer_ms=200), on_restart=lambda: restarts.append(1))
        stream = sink._stream
        sink.start()
        await sink.write(np.full(44100, 7, np.int16))
        await asyncio.sleep(0.4)
        handed = sink._handed
        assert 0 < sink.played_samples <= handed - 441 * 15  # ~200 ms still in the device
        sink.flush()
        assert restarts == [1]
        assert sink.played_samples == sink._handed < handed and stream.active
        await sink.aclose()

    asyncio.run(run())


def test_portaudio_missing_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # import fails like a missing lib
    with pytest.raises(AudioDeviceError, match="apt-get install libportaudio2.*serve"):
        devices.list_devices()
    with pytest.raises(AudioDeviceError, match="libportaudio2"):
        MicSource(AudioConfig())
