"""Whisper's prompt (``asr.prompt``) against none: word error rate and time a pass, on the tool
requests (testkit/tool_requests.py, the main set in bench.tools' 5 voices, the held-out set in
its 4) and on general questions (testkit/questions.py in test_asr_accuracy's 5 voices).

Each clip is one final pass (``WhisperASR.transcribe``) over the speech with 0.3 s of silence
either side; both settings pass over the same clips in one process.

    .venv/bin/python -m bench.asr_prompt [--out f.json]

Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace

import numpy as np

from bench.tools import HELD_OUT_VOICES, VOICES
from bench.user_voices import RATE_HZ, UserVoices
from dllm_voice.audio.asr import WhisperASR
from dllm_voice.audio.config import ASRConfig
from testkit.asr_accuracy import clip, wer
from testkit.questions import ASR_QUESTIONS
from testkit.tool_requests import HELD_OUT, REQUESTS

QUESTION_VOICES = ("espeak:en-us", "espeak:en", "espeak:en+f3", "piper", "espeak:en-us/48k")


def _sets() -> dict[str, list[tuple[str, np.ndarray]]]:
    voices = UserVoices()
    pad = np.zeros(3 * RATE_HZ // 10, np.int16)

    def spoken(text: str, voice: str) -> np.ndarray:
        return np.concatenate([pad, voices.say(text, voice), pad])

    tools = [r.text for r in REQUESTS if r.tool]
    held = [r.text for r in HELD_OUT if r.tool]
    return {
        "tool_requests": [(t, spoken(t, v)) for t in tools for v in VOICES],
        "held_out_tool_requests": [(t, spoken(t, v)) for t in held for v in HELD_OUT_VOICES],
        "questions": [(q, clip(q, v)) for v in QUESTION_VOICES for q in ASR_QUESTIONS],
    }


def measure(asr: WhisperASR, clips: list[tuple[str, np.ndarray]]) -> dict[str, float]:
    pairs, ms = [], []
    for text, pcm in clips:
        t = asr.transcribe(pcm, final=True)
        pairs.append((text, t.text))
        ms.append(t.compute_ms)
    return {"wer": round(wer(pairs), 4), "pass_ms_p50": round(statistics.median(ms), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    sets = _sets()
    settings = {"prompt": ASRConfig(), "none": replace(ASRConfig(), prompt="")}
    models = {name: WhisperASR(cfg) for name, cfg in settings.items()}
    result: dict[str, object] = {"bench": "asr_prompt", "prompt": ASRConfig().prompt}
    for set_name, clips in sets.items():
        row = {}
        for name, asr in models.items():
            row[name] = measure(asr, clips)
            print(f"{set_name} ({len(clips)} clips), {name}: {row[name]}", file=sys.stderr)
        result[set_name] = {"clips": len(clips), **row}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
