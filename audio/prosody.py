"""End of turn from the sound of the speech: does the last word end the way a finished sentence
ends (final lengthening, the pitch falling or rising at the end, energy fading) or the way a
word in mid-sentence does?

``features`` reads the last ``WINDOW_MS`` of speech (trailing silence trimmed) as energy and
pitch contours at a 10 ms hop and summarizes the end against the rest; ``TurnEndAudio`` is a
logistic regression on them (weights in ``turn_end_audio.npz``, trained by
lab/train_turn_audio.py on speech synthesized there). numpy only, ~4 ms a call on
2 Zen 1 cores. How much speech the window holds carries most of what separates held-out
sentences (a cut is short); pitch and energy alone reached ROC AUC 0.59-0.65 there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from dllm_voice.audio.resample import PCM, FloatPCM

RATE_HZ = 16000
PITCH_HZ = 8000  # pitch and spectrum at half the rate: a 4x cheaper FFT, voices are < 4 kHz
HOP = PITCH_HZ // 100  # 10 ms
WIN = PITCH_HZ * 32 // 1000  # 32 ms: two periods of a 62 Hz voice
WINDOW_MS = 1600  # the last word and the one or two before it, to compare the end against
F0_MIN_HZ, F0_MAX_HZ = 70.0, 400.0
VOICED_R = 0.45  # normalized autocorrelation peak above which a frame is voiced
SILENCE_DB = -40.0  # frames this far below the loudest are silence
_HANN = np.hanning(WIN).astype(np.float32)
WEIGHTS = Path(__file__).with_name("turn_end_audio.npz")

FEATURE_NAMES = (
    "f0_end_100",  # semitones vs the window's median, the last 100 ms voiced
    "f0_end_250",
    "f0_before",  # the 250-600 ms before the end
    "f0_slope_end",  # semitones/s over the last 300 ms voiced
    "f0_range",
    "f0_end_vs_max",  # the end below the window's highest pitch
    "e_end_100",  # dB vs the window's loudest frame
    "e_100_250",
    "e_250_600",
    "e_slope_end",  # dB/s over the last 200 ms
    "last_run_ms",  # the last voiced stretch (final lengthening)
    "mean_run_ms",
    "last_run_ratio",
    "voiced_end_200",  # voiced share of the last 200 ms
    "peak_to_end_ms",  # from the last energy peak to the end (how long it fades)
    "tail_cut",  # energy of the last 20 ms vs the 100 ms before it (an abrupt stop is ~0)
    "centroid_end",  # spectral centroid of the last 100 ms vs the window's, in octaves
    "hf_end",  # share of energy above 3 kHz, last 100 ms minus the window's
    "speech_ms",  # how much speech the window holds (a cut has less)
)


def _trim_tail(x: FloatPCM) -> FloatPCM:
    """Drop the trailing silence: 10 ms blocks SILENCE_DB below the loudest."""
    block = RATE_HZ // 100
    n = len(x) // block
    if n == 0:
        return x
    e = 10 * np.log10((x[: n * block].reshape(n, block) ** 2).mean(axis=1) + 1e-10)
    loud = np.flatnonzero(e > e.max() + SILENCE_DB)
    return x[: block * (loud[-1] + 1)] if len(loud) else x


def _mean(v: npt.NDArray[np.floating], default: float = 0.0) -> float:
    return float(v.mean()) if len(v) else default


def _slope(t: npt.NDArray[np.floating], v: npt.NDArray[np.floating]) -> float:
    if len(v) < 3 or np.ptp(t) == 0:
        return 0.0
    return float(np.polyfit(t, v, 1)[0])


def _runs(mask: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """(start, end) of each run of True in mask."""
    d = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1), strict=True))


def features(pcm: PCM) -> FloatPCM:
    """FEATURE_NAMES of 16 kHz mono speech that ends at (or up to ~a second before) its end."""
    x = np.asarray(pcm, np.float32) / 32768.0
    x = _trim_tail(x)[-RATE_HZ * WINDOW_MS // 1000 :]
    x = x[: len(x) // 2 * 2].reshape(-1, 2).mean(axis=1)  # 16 -> 8 kHz, (N,)
    if len(x) < 4 * WIN:
        x = np.concatenate([np.zeros(4 * WIN - len(x), np.float32), x])
    fr = np.lib.stride_tricks.sliding_window_view(x, WIN)[::HOP] * _HANN  # (T, WIN)
    t = np.arange(len(fr)) * HOP / PITCH_HZ
    t = t - t[-1]  # seconds before the end, <= 0
    power = (fr**2).mean(axis=1)
    e = 10 * np.log10(power + 1e-10)
    e = e - e.max()

    spec = np.fft.rfft(fr, 2 * WIN, axis=1)  # (T, WIN + 1)
    mag2 = spec.real**2 + spec.imag**2
    ac = np.fft.irfft(mag2, axis=1)[:, :WIN]  # autocorrelation, (T, WIN)
    lo, hi = int(PITCH_HZ / F0_MAX_HZ), int(PITCH_HZ / F0_MIN_HZ)
    # Normalized by the overlap so long lags are not favoured less; the peak's height is the
    # frame's periodicity.
    norm = ac[:, lo:hi] / (ac[:, :1] + 1e-9) * (WIN / (WIN - np.arange(lo, hi)))
    lag = lo + norm.argmax(axis=1)
    r = norm.max(axis=1)
    voiced = (r > VOICED_R) & (e > -30.0)
    f0 = PITCH_HZ / lag
    semi = 12 * np.log2(f0 / np.median(f0[voiced])) if voiced.any() else np.zeros_like(f0)

    def f0_in(t0: float, t1: float) -> float:
        m = voiced & (t > t0) & (t <= t1)
        return _mean(semi[m])

    vt, vs = t[voiced], semi[voiced]
    end300 = vt > (vt[-1] - 0.3) if len(vt) else vt.astype(bool)
    runs = [(a, b) for a, b in _runs(voiced) if b - a >= 3]
    last_run = (runs[-1][1] - runs[-1][0]) * 10.0 if runs else 0.0
    mean_run = _mean(np.array([(b - a) * 10.0 for a, b in runs]), last_run)
    freqs = np.fft.rfftfreq(2 * WIN, 1 / PITCH_HZ)
    cent = (mag2 * freqs).sum(axis=1) / (mag2.sum(axis=1) + 1e-12)
    hf = mag2[:, freqs > 3000].sum(axis=1) / (mag2.sum(axis=1) + 1e-12)
    loud = e > -30.0
    end100 = t > -0.1
    peaks = np.flatnonzero(e > -3.0)
    return np.array(
        [
            f0_in(-0.1, 0.01) if voiced[end100].any() else _mean(vs[-10:]),
            _mean(vs[vt > vt[-1] - 0.25]) if len(vt) else 0.0,
            f0_in(-0.6, -0.25),
            _slope(vt[end300], vs[end300]) if len(vt) else 0.0,
            float(np.ptp(vs)) if len(vs) else 0.0,
            float(vs[-5:].mean() - vs.max()) if len(vs) else 0.0,
            _mean(e[end100]),
            _mean(e[(t > -0.25) & (t <= -0.1)]),
            _mean(e[(t > -0.6) & (t <= -0.25)]),
            _slope(t[t > -0.2], e[t > -0.2]),
            last_run,
            mean_run,
            last_run / max(mean_run, 10.0),
            _mean(voiced[t > -0.2].astype(np.float32)),
            -float(t[peaks[-1]]) * 1000 if len(peaks) else 0.0,
            float(e[-2:].mean() - e[-12:-2].mean()),
            float(np.log2((_mean(cent[end100 & loud], 1.0) + 1) / (_mean(cent[loud], 1.0) + 1))),
            _mean(hf[end100 & loud]) - _mean(hf[loud]),
            float(loud.sum()) * 10.0,
        ],
        np.float32,
    )


class TurnEndAudio:
    """P(the speech ends a finished sentence) from ``features``: standardized, then logistic."""

    def __init__(self, path: Path = WEIGHTS) -> None:
        w = np.load(path)
        names = tuple(str(n) for n in w["names"])
        if names != FEATURE_NAMES:
            raise ValueError(
                f"{path} was trained on other features; retrain it: "
                ".venv/bin/python -m lab.train_turn_audio"
            )
        self.mean, self.std = w["mean"], w["std"]
        self.coef, self.bias = w["coef"], float(w["bias"])

    def score(self, pcm: PCM) -> float:
        z = (features(pcm) - self.mean) / self.std
        return float(1.0 / (1.0 + np.exp(-(z @ self.coef + self.bias))))
