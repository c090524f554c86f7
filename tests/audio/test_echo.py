"""Echo control in a simulated room: the agent's own voice must not barge in, the user must."""

import numpy as np
import pytest

from audio.config import BargeInConfig, EchoConfig
from audio.echo import BargeInDetector, EchoCanceller, aec_available
from tests.speech import loopback_run, speech_pcm

AGENT = (
    "Sure. The capital of France is Paris. It is a large city on the river Seine, "
    "famous for the Eiffel tower and its museums."
)


@pytest.fixture(scope="module")
def agent() -> np.ndarray:
    return speech_pcm(AGENT, "piper", lead_ms=200, tail_ms=300)


def user(gain: float) -> np.ndarray:
    return speech_pcm("Stop, wait a second please.", "espeak", gain=gain)


MODES = [
    "guard",
    pytest.param("aec", marks=pytest.mark.skipif(not aec_available(), reason="no AEC")),
]


def test_without_echo_handling_the_agent_interrupts_itself(agent: np.ndarray) -> None:
    assert len(loopback_run(agent, None, 0, "off")) >= 3


@pytest.mark.parametrize("mode", MODES)
def test_agent_echo_alone_never_barges_in(agent: np.ndarray, mode: str) -> None:
    assert loopback_run(agent, None, 0, mode) == []


@pytest.mark.parametrize("mode", MODES)
def test_user_over_the_agent_barges_in(agent: np.ndarray, mode: str) -> None:
    # The energy guard needs the user ~12 dB above the echo (user x2: median -23 vs -35 dBFS);
    # AEC3 removes 40-60 dB of echo, so it also works at equal levels (user x1, -29 dBFS).
    for at in (1000, 2000, 3000):
        hits = loopback_run(agent, user(2.0 if mode == "guard" else 1.0), at, mode)
        assert hits and at < hits[0] < at + 1000, (at, hits)


def test_canceller_reference_fifo_and_rates() -> None:
    ec = EchoCanceller(EchoConfig(mode="guard"))
    ec.push_far(np.full(1440, 8000, np.int16), 48000)  # 30 ms at 48 kHz -> 480 samples
    out = ec.process(np.full(480, 5, np.int16))
    assert np.array_equal(out, np.full(480, 5, np.int16))  # guard mode: unchanged
    assert ec.far_dbfs > -20
    ec.process(np.zeros(480, np.int16))
    assert ec.far_dbfs == -120.0  # FIFO empty -> silence reference
    ec.push_far(np.zeros(16000 * 3, np.int16), 16000)
    assert ec._far_n <= 16000  # capped at 1 s


def test_detector_needs_more_speech_while_agent_speaks() -> None:
    det = BargeInDetector(BargeInConfig(min_speech_ms=90, guard_min_speech_ms=300), EchoConfig())
    loud = np.full(480, 8000, np.int16)
    quiet_hits = [det.update(loud, True, -120.0, agent_speaking=False) for _ in range(3)]
    assert quiet_hits == [False, False, True]
    det.reset()
    # While the agent speaks at the same level, the mic is not louder than the echo: no barge-in.
    echo_hits = [det.update(loud, True, -12.3, agent_speaking=True) for _ in range(40)]
    assert not any(echo_hits)


def test_wrapped_source_removes_the_echo(agent: np.ndarray) -> None:
    import asyncio

    from audio.sources import PushSource
    from tests.speech import echo_path

    mic = echo_path(agent).astype(np.int16)

    async def run(mode: str) -> float:
        ec = EchoCanceller(EchoConfig(mode=mode))
        src = PushSource()
        out = []

        async def feed() -> None:
            for i in range(0, len(mic) - 479, 480):
                ec.push_far(agent[i : i + 480], 16000)  # what the speaker sink reports
                src.push(mic[i : i + 480])
                await asyncio.sleep(0)
            src.close()

        task = asyncio.create_task(feed())
        async for frame in ec.wrap(src):
            out.append(frame)
        await task
        tail = np.concatenate(out)[16000:]  # after 1 s of convergence
        return float(np.sqrt(np.mean(tail.astype(np.float64) ** 2)))

    passed = asyncio.run(run("guard"))  # guard mode leaves the audio as it is
    assert passed == pytest.approx(np.sqrt(np.mean(mic[16000:].astype(np.float64) ** 2)), rel=0.05)
    if aec_available():
        assert asyncio.run(run("aec")) < passed / 30  # > 30 dB of echo removed
