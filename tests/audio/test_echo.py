"""Echo control in a simulated room: the agent's own voice must not pause it, the user must.

The agent is Piper, the user espeak-ng and Piper, generated at test time; the echo is the agent's
audio delayed 150 ms (the speaker's buffer, the room, the mic's capture), attenuated to 0 or
-10 dB (the agent as loud in the mic as the user, or 10 dB softer) through a 100 ms reverb tail.
"""

import numpy as np
import pytest

from dllm_voice.audio.config import EchoConfig
from dllm_voice.audio.echo import EchoCanceller, aec_available
from testkit.pulse import first_sound
from testkit.speech import echo_path, loopback_run, speech_pcm

AGENT = (
    "Sure. The capital of France is Paris. It is a large city on the river Seine, famous for "
    "the Eiffel tower and its museums. Many people visit it every year, and the food there is "
    "excellent."
)
DELAY_MS = 150
needs_aec = pytest.mark.skipif(not aec_available(), reason="pywebrtc-audio is not installed")


@pytest.fixture(scope="module")
def agent() -> np.ndarray:
    return speech_pcm(AGENT, "piper", lead_ms=200, tail_ms=300)  # 10.8 s


def user(voice: str = "espeak") -> np.ndarray:
    return speech_pcm("Stop, wait a second please.", voice)  # -19 dBFS, the echo at 0 dB -18


def near_end_times(
    agent: np.ndarray,
    mic: np.ndarray,
    mode: str = "guard",
    at_ms: float | None = None,
    then: str = "",
    before: np.ndarray | None = None,
) -> list[float]:
    """The frames (their end, audio ms) the canceller's double-talk detector calls the user's;
    `then` ("reset" or "slipped") is told to the canceller at `at_ms`; the speaker reported
    `before` ahead of the mic's first frame."""
    ec = EchoCanceller(EchoConfig(mode=mode))
    if before is not None:
        ec.push_far(before, 16000)
    times = []
    for i in range(0, len(mic) - 479, 480):
        if at_ms is not None and i == 16 * at_ms:
            getattr(ec, then)()
        ec.push_far(agent[i : i + 480], 16000)
        ec.process(mic[i : i + 480])
        if ec.near_end:
            times.append((i + 480) / 16)
    return times


def room(agent: np.ndarray, gain_db: float, shift_at_ms: int = 0, shift_ms: int = 0):
    """The mic: the echo (its delay grown by shift_ms from shift_at_ms on) and -60 dBFS noise."""
    mic = echo_path(agent, DELAY_MS, gain_db)
    if shift_ms:
        cut = 16 * shift_at_ms
        later = echo_path(agent, DELAY_MS + shift_ms, gain_db)
        mic = np.concatenate([mic[:cut], later[cut:]])
    mic += np.random.default_rng(1).standard_normal(len(agent)) * 32.8
    return np.clip(mic, -32768, 32767).astype(np.int16)


def test_without_echo_handling_the_agent_pauses_itself(agent: np.ndarray) -> None:
    assert loopback_run(agent, None, 0, "off", delay_ms=DELAY_MS)


@needs_aec
@pytest.mark.parametrize("gain_db", [0.0, -10.0])
def test_agent_echo_alone_never_pauses_the_agent(agent: np.ndarray, gain_db: float) -> None:
    assert loopback_run(agent, None, 0, "aec", delay_ms=DELAY_MS, gain_db=gain_db) == []


@pytest.mark.parametrize("gain_db", [0.0, -10.0])
def test_double_talk_detector_ignores_the_echo_on_the_raw_mic(agent, gain_db) -> None:
    assert near_end_times(agent, room(agent, gain_db)) == []


@needs_aec
@pytest.mark.parametrize("gain_db", [0.0, -10.0])
def test_user_over_the_agent_pauses_it_at_once(agent: np.ndarray, gain_db: float) -> None:
    # Behind AEC3 the VAD path alone took 545 ms on a real sound server (its suppressor lets
    # the user out in pieces); the double-talk hold comes 20-50 ms after an onset, up to 180
    # where a soft "s" (-30 dBFS) starts under the agent's loudest syllables (-11 dBFS).
    waits = []
    for voice in ("espeak", "piper"):
        clip = user(voice)
        onset = first_sound(clip) / 16
        for at in (3000, 4500, 6000):
            holds = loopback_run(agent, clip, at, "aec", delay_ms=DELAY_MS, gain_db=gain_db)
            assert holds, (voice, at)
            waits.append(holds[0] - at - onset)
    assert min(waits) >= 0 and max(waits) <= 200, waits
    assert np.median(waits) <= 60, waits


def test_a_voiced_onset_under_the_echo_is_heard_by_the_bins_it_holds(agent: np.ndarray) -> None:
    # "Wait" (espeak-ng) starts 3.1 s in, under the agent's loudest syllables at 0 dB: few of
    # its bins beat the echo by the full 10 dB, but the same ones beat it by 4 dB block after
    # block. With the full margin alone the agent paused 360 ms after the onset.
    clip = speech_pcm("Wait, tell me about Spain instead.", "espeak:en-us")
    mic = echo_path(agent, 40, 0.0) + np.random.default_rng(1).standard_normal(len(agent)) * 32.8
    mic[16 * 3120 : 16 * 3120 + len(clip)] += clip
    mic = np.clip(mic, -32768, 32767).astype(np.int16)
    onset = 3120 + first_sound(clip) / 16
    heard = near_end_times(agent, mic)
    assert heard and onset <= heard[0] <= onset + 200, (onset, heard[:3])


@pytest.mark.parametrize("rt60_s, drr_db", [(0.4, 0.0), (0.6, -5.0)])
def test_echo_in_a_reverberant_room_is_not_the_user(agent, rt60_s: float, drr_db: float) -> None:
    # A reverb tail holds the agent's bins for a while too: as loud as the direct sound (or 5 dB
    # louder) and 0.4-0.6 s long, it must not pass for the user's held harmonics.
    rng = np.random.default_rng(0)
    n = int(rt60_s * 16000)
    taps = rng.standard_normal(n) * np.exp(-np.arange(n) * 6.9 / n)  # -60 dB at the end
    taps *= 10 ** (-drr_db / 20) / np.sqrt(np.sum(taps**2))
    taps[0] = 1.0
    taps /= np.sqrt(np.sum(taps**2))  # the echo as loud as the agent (0 dB)
    wet = np.convolve(agent.astype(np.float64), taps)[: len(agent)]
    mic = np.concatenate([np.zeros(16 * 40), wet[: len(agent) - 16 * 40]])
    mic += np.random.default_rng(1).standard_normal(len(agent)) * 32.8
    assert near_end_times(agent, np.clip(mic, -32768, 32767).astype(np.int16)) == []


@pytest.mark.parametrize("shift_ms", [-60, 60])
def test_after_a_flush_the_detector_is_deaf_rather_than_wrong(agent, shift_ms: int) -> None:
    # A flush restarts the speaker and empties the reference FIFO: the echo's delay against
    # the reference changes. Until it has been measured again the detector must not take the
    # echo for the user, and afterwards it hears the user again.
    mic = room(agent, 0.0, shift_at_ms=4500, shift_ms=shift_ms)
    assert near_end_times(agent, mic, at_ms=4500, then="reset") == []
    clip = user()
    onset = 8000 + first_sound(clip) / 16
    mic[16 * 8000 : 16 * 8000 + len(clip)] += clip[: len(mic) - 16 * 8000]
    heard = near_end_times(agent, mic, at_ms=4500, then="reset")
    assert heard and onset <= heard[0] <= onset + 200, (onset, heard)


def test_an_underrun_makes_the_detector_measure_the_delay_again(agent: np.ndarray) -> None:
    # The speaker ran dry for 200 ms: the echo now comes 200 ms later than the reference says.
    mic = room(agent, 0.0, shift_at_ms=4500, shift_ms=200)
    assert near_end_times(agent, mic, at_ms=4500, then="slipped") == []


def test_reference_reported_before_the_mic_opened_is_no_reference(agent: np.ndarray) -> None:
    # The speaker's stream starts before the mic's and reports its first 300 ms: paired with the
    # mic's first frames, every frame would get reference 300 ms older than its own, and the
    # echo (150 ms late) would reach the mic before its paired reference.
    mic = room(agent, 0.0)
    assert near_end_times(agent, mic, before=agent[:4800]) == []
    clip = user()
    onset = 8000 + first_sound(clip) / 16
    mic[16 * 8000 : 16 * 8000 + len(clip)] += clip[: len(mic) - 16 * 8000]
    heard = near_end_times(agent, mic, before=agent[:4800])
    assert heard and onset <= heard[0] <= onset + 200, (onset, heard)


def test_canceller_reference_fifo_and_rates() -> None:
    ec = EchoCanceller(EchoConfig(mode="guard"))
    ec.push_far(np.full(480, 8000, np.int16), 16000)
    ec.process(np.zeros(480, np.int16))
    assert ec.far_dbfs == -120.0  # reported before the mic's first frame: no reference for it
    ec.push_far(np.full(1440, 8000, np.int16), 48000)  # 30 ms at 48 kHz -> 480 samples
    out = ec.process(np.full(480, 5, np.int16))
    assert np.array_equal(out, np.full(480, 5, np.int16))  # guard mode: unchanged
    assert ec.far_dbfs > -20
    ec.process(np.zeros(480, np.int16))
    assert ec.far_dbfs == -120.0  # FIFO empty -> silence reference
    ec.push_far(np.zeros(16000 * 3, np.int16), 16000)
    assert ec._far_n <= 16000  # capped at 1 s


def test_wrapped_source_removes_the_echo(agent: np.ndarray) -> None:
    import asyncio

    from dllm_voice.audio.sources import PushSource

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
