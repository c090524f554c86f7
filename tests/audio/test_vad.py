"""Endpointing: event timing on synthetic speech+silence, real speech, noise, bad input."""

from dataclasses import replace

import numpy as np
import pytest

from dllm_voice.audio.config import VADConfig
from dllm_voice.audio.errors import AudioFormatError
from dllm_voice.audio.vad import Endpointer
from testkit.speech import frames

RATE = 16000
# Synthetic vowels are voice to webrtcvad but not to Silero: state-machine tests use webrtcvad,
# with the 200 ms pause their timings are written for.
WEBRTC = VADConfig(silero=False, pause_ms=200)


def vowel(ms: int, f0: float = 140.0) -> np.ndarray:
    """A voiced, vowel-like signal: harmonics of f0 with a formant-ish spectral tilt."""
    t = np.arange(RATE * ms // 1000) / RATE
    x = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 25))
    return (0.3 * 32767 * x / np.abs(x).max()).astype(np.int16)


def silence(ms: int) -> np.ndarray:
    return np.zeros(RATE * ms // 1000, np.int16)


def run(ep: Endpointer, pcm: np.ndarray, block: int = 480) -> list[tuple[str, float, float]]:
    out = []
    for f in frames(pcm, block):
        out += [(e.kind, e.audio_ms, e.detected_ms) for e in ep.process(f)]
    return out


def test_events_land_on_frame_boundaries_of_synthetic_speech() -> None:
    # 0.51 s silence, 0.99 s voice, 0.3 s gap (pause, not end), 0.6 s voice, 1.2 s silence.
    pcm = np.concatenate([silence(510), vowel(990), silence(300), vowel(600), silence(1200)])
    ev = run(Endpointer(WEBRTC), pcm)
    kinds = [k for k, _, _ in ev]
    assert kinds == ["speech_start", "pause", "resume", "pause", "speech_end"]
    expected_audio = [510, 1500, 1800, 2400, 2400]
    for (_, audio_ms, _), want in zip(ev, expected_audio, strict=True):
        assert abs(audio_ms - want) <= 30, ev  # within one 30 ms frame
    # Detection delays: min_speech (90 ms), pause (200 -> 210 ms), speech_end (500 -> 510 ms).
    assert abs(ev[0][2] - (510 + 90)) <= 30
    assert abs(ev[1][2] - (1500 + 210)) <= 30
    assert abs(ev[4][2] - (2400 + 510)) <= 30


def test_voice_rising_between_turns_until_the_vad_calls_it_speech() -> None:
    script = iter([1, 0, 1, 1, 1, 0])
    ep = Endpointer(
        VADConfig(min_speech_ms=90, silero=False), classify=lambda f: bool(next(script))
    )
    rising = []
    for f in frames(np.full(480 * 6, 3000, np.int16), 480):
        ep.process(f)
        rising.append(ep.voice_rising)
    # A voiced frame rises, a silent one ends it; the third voiced frame in a row is speech.
    assert rising == [True, False, True, True, False, False]
    assert ep.in_speech


def test_exact_state_machine_with_scripted_frames() -> None:
    script = iter([0] * 5 + [1, 0, 1] + [1] * 10 + [0] * 20)
    ep = Endpointer(
        VADConfig(min_speech_ms=90, silero=False), classify=lambda f: bool(next(script))
    )
    ev = run(ep, np.full(480 * 38, 3000, np.int16))
    # The 1-0-1 blip is not 3 consecutive voiced frames; speech starts at frame 7.
    assert [(k, a) for k, a, _ in ev] == [
        ("speech_start", 210.0),
        ("pause", 540.0),
        ("speech_end", 540.0),
    ]


def test_end_after_sets_this_pause_s_end_of_turn() -> None:
    ep = Endpointer(WEBRTC)  # pause 200 ms, speech_end 500 ms
    ev = run(ep, np.concatenate([silence(300), vowel(600), silence(240)]))
    assert [k for k, _, _ in ev] == ["speech_start", "pause"]
    assert ep.end_after(1500) == []  # likely incomplete: wait longer
    assert run(ep, silence(900)) == []  # past speech_end_ms, still the same turn
    assert [k for k, _, _ in run(ep, silence(400))] == ["speech_end"]
    ep.reset()
    run(ep, np.concatenate([silence(300), vowel(600), silence(240)]))
    (end,) = ep.end_after(200)  # likely complete and 240 ms already silent: ends now
    assert end.kind == "speech_end" and abs(end.audio_ms - 900) <= 30
    ep.reset()
    run(ep, np.concatenate([silence(300), vowel(600), silence(240)]))
    ep.end_after(3000)
    ev = run(ep, np.concatenate([vowel(300), silence(540)]))  # a resume restores 500 ms
    assert [k for k, _, _ in ev] == ["resume", "pause", "speech_end"]
    assert ep.end_after(100) == []  # no pause to decide


def test_preroll_keeps_the_first_syllable(france_piper: np.ndarray) -> None:
    ep = Endpointer(VADConfig(preroll_ms=300))
    ev = run(ep, france_piper)
    assert ev[0][0] == "speech_start" and ev[-1][0] == "speech_end"
    utt = ep.speech_audio()
    onset = int(ev[0][1] * RATE / 1000)
    # The utterance starts 300 ms before the onset and runs to the speech_end detection.
    assert len(utt) == 4800 + int((ev[-1][2] - ev[0][1]) * RATE / 1000)
    assert np.array_equal(utt[:480], france_piper[onset - 4800 : onset - 4320])


@pytest.mark.parametrize("voice", ["france_piper", "france_espeak"])
def test_real_speech_one_turn(voice: str, request: pytest.FixtureRequest) -> None:
    pcm = request.getfixturevalue(voice)
    ev = run(Endpointer(VADConfig()), pcm, block=333)  # odd block sizes are re-framed
    assert ev[0][0] == "speech_start"
    assert [k for k, _, _ in ev].count("speech_end") == 1
    loud = np.flatnonzero(np.abs(pcm.astype(int)) > 0.02 * np.abs(pcm.astype(int)).max())
    assert abs(ev[0][1] - loud[0] / 16) <= 120
    assert abs(ev[-1][1] - loud[-1] / 16) <= 120


def test_silero_rejects_white_noise_that_webrtcvad_takes() -> None:
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(RATE * 5) * 0.1 * 32767).astype(np.int16)
    plain = run(Endpointer(WEBRTC), noise)
    confirmed = run(Endpointer(VADConfig(silero=True)), noise)
    assert plain and plain[0][0] == "speech_start"  # webrtcvad alone fires on white noise
    assert confirmed == []
    ep = Endpointer(VADConfig())
    ep.process(vowel(30))
    assert ep.last_voiced is False  # Silero: a synthetic vowel is not a voice
    plain_ep = Endpointer(WEBRTC)
    plain_ep.process(vowel(30))
    assert plain_ep.last_voiced is True


def test_ten_minute_monologue_is_cut_into_segments_and_stays_one_turn() -> None:
    ep = Endpointer(VADConfig(max_turn_s=60.0, silero=False))
    voice = vowel(3000)
    kinds, cuts = [], []
    longest = 0
    for _ in range(200):  # 10 minutes of continuous voice
        for f in frames(voice):
            for e in ep.process(f):
                kinds.append(e.kind)
                if e.kind == "segment":
                    cuts.append(e.audio_ms)
            longest = max(longest, len(ep.speech_audio()))
    assert kinds == ["speech_start"] + ["segment"] * 10 and ep.in_speech
    assert cuts == [60000.0 * k for k in range(1, 11)]  # a segment every 60 s of the turn
    assert longest <= RATE * 60.3  # the Endpointer's own audio is bounded by a segment


def test_segment_cuts_with_scripted_frames() -> None:
    # max_turn_s = 1 s = 33 frames: a pause cuts after 16 frames of a segment, voice after 33.
    script = iter([0] * 5 + [1] * 8 + [0] * 8 + [1] * 60 + [0] * 8 + [1] * 10 + [0] * 20)
    ep = Endpointer(replace(WEBRTC, max_turn_s=1.0), classify=lambda f: bool(next(script)))
    sizes = []
    ev = []
    for f in frames(np.full(480 * 119, 3000, np.int16)):
        for e in ep.process(f):
            ev.append((e.kind, e.audio_ms, e.detected_ms))
            sizes.append(len(ep.speech_audio()))
    assert ev == [
        ("speech_start", 150.0, 240.0),  # onset at frame 5, three voiced frames later
        ("pause", 390.0, 600.0),  # 15 frames into the segment: no cut
        ("resume", 630.0, 720.0),
        ("segment", 1140.0, 1140.0),  # 33 frames of voice after the onset
        ("segment", 2130.0, 2130.0),
        ("pause", 2430.0, 2640.0),
        ("segment", 2640.0, 2640.0),  # 17 frames into the segment: cut in the silence
        ("resume", 2670.0, 2760.0),  # the turn goes on
        ("pause", 2970.0, 3180.0),
        ("segment", 3180.0, 3180.0),
        ("speech_end", 2970.0, 3480.0),
    ]
    # Right after each cut the Endpointer holds nothing: the next segment starts there.
    assert [n for (k, _, _), n in zip(ev, sizes, strict=True) if k == "segment"] == [0] * 4


def test_bad_input_is_handled() -> None:
    ep = Endpointer(WEBRTC)
    assert ep.process(np.zeros(0, np.int16)) == []
    assert ep.process(np.full(480, np.nan, np.float32)) == []  # NaN -> silence
    clipped = np.clip(vowel(600).astype(np.int32) * 8, -32768, 32767).astype(np.int16)
    assert run(ep, clipped)[0][0] == "speech_start"
    with pytest.raises(AudioFormatError):
        ep.process(np.zeros((480, 2), np.int16))
    with pytest.raises(AudioFormatError):
        Endpointer(VADConfig(), sample_rate_hz=44100)
