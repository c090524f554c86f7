"""Spoken tool requests heard again slower (``Transcript.slower``): the right calls the chooser
makes with the hearings at each set of speeds that it makes without them, the calls it makes
on requests that need none, and what the hearings cost.

The tool benchmark's requests (testkit/tool_requests.py: the main set in bench.tools' 5 voices,
the held-out set in its 4) as clips, each heard by one final pass (``WhisperASR.transcribe``),
then at each speed alone (``slowed_passes``). The chooser's rule runs on the head's state for
the best hearing (the LM's first forward, as in a turn) with Whisper's alternatives, then with
each set's slower hearings, as if asked wherever the head's P(none) is under each of
THRESHOLDS; a call is right when its sentence is the expected call's (bench.tools' scoring).
The shipped speeds' two passes are also timed side by side (as the agent runs them) and one
after the other.

    .venv/bin/python -m bench.slower [--sets 0.9,0.8 0.85 ...] [--out f.json]

Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.tools import HELD_OUT_VOICES, VOICES, Got, answer_for, check
from bench.user_voices import RATE_HZ, UserVoices
from dllm_voice import cores
from dllm_voice.app.config import load_config
from dllm_voice.app.tools.chooser import NONE, Choice, ToolChooser
from dllm_voice.app.tools.toolset import Toolset
from dllm_voice.audio.asr import SLOWER, WhisperASR, slowed_passes
from dllm_voice.audio.resample import FloatPCM, to_float32
from dllm_voice.model.engine import LM
from testkit.tool_requests import HELD_OUT, REQUESTS, ToolRequest

Hear = Callable[[], tuple[str, ...]]


def chooser_for(
    lm: LM, tools: Toolset, system: str, text: str, alternatives: tuple[str, ...]
) -> tuple[Callable[[Hear | None], Choice | None], float]:
    """The chooser on the head's state for ``text`` (the first forward of the turn's prompt),
    given what hears the turn slower (None: nothing does); and the head's P(none) there."""
    states: list[Any] = []
    messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
    gen = lm.session().generate(messages, turn_state=states.append)
    next(iter(gen), None)
    gen.close("chosen")
    row = states[0].float().cpu().numpy() if states and states[0] is not None else None
    head = tools.chooser.head
    p_none = head.probs(row)[NONE] if head is not None and row is not None else 1.0
    return lambda hear: tools.chooser.choose(tools.box, row, text, alternatives, hear), p_none


def scored(req: ToolRequest, choice: Choice | None, at: float) -> dict[str, Any]:
    """bench.tools' row for ``choice`` made on ``req``."""
    if choice is None:
        return check(req, Got(req.text, "", at))
    call = {"tool": choice.tool.name, "arguments": choice.arguments}
    said = answer_for(choice.tool, dict(choice.arguments or {}), at, req)
    return check(req, Got(req.text, said, at, call))


class Slowed:
    """One clip's hearings at each speed, each heard once; ``asked``: whether a chooser asked."""

    def __init__(self, asr: WhisperASR, audio: FloatPCM) -> None:
        self.asr, self.audio = asr, audio
        self.by_speed: dict[float, tuple[str, ...]] = {}
        self.asked = False

    def at(self, speeds: tuple[float, ...]) -> Hear:
        def hear() -> tuple[str, ...]:
            self.asked = True
            return tuple(dict.fromkeys(h for s in speeds for h in self._one(s)))

        return hear

    def _one(self, speed: float) -> tuple[str, ...]:
        if speed not in self.by_speed:
            a = self.asr
            self.by_speed[speed] = slowed_passes(
                a.model, a.prompt, a.tok, self.audio, a.cfg.beam_size, (speed,)
            )
        return self.by_speed[speed]

    def shipped_ms(self) -> tuple[float, float]:
        """The shipped speeds' passes side by side (as the agent runs them), then one after
        the other, ms."""
        t0 = time.perf_counter()
        self.asr.hear_slower(self.audio)
        t1 = time.perf_counter()
        self.by_speed.clear()
        for s in SLOWER:
            self._one(s)
        return 1e3 * (t1 - t0), 1e3 * (time.perf_counter() - t1)


THRESHOLDS = (0.9, 0.7, 0.5, 0.3)  # the head's P(none) under which the turn is heard slower


def measure(
    asr: WhisperASR,
    lm: LM,
    tools: Toolset,
    system: str,
    clips: list[tuple[ToolRequest, np.ndarray]],
    sets: dict[str, tuple[float, ...]],
) -> dict[str, Any]:
    counts = {(k, t): dict.fromkeys(("right", "false_calls", "asked_tool", "asked_none"), 0)
              for k in sets for t in THRESHOLDS}  # fmt: skip
    without = {"right": 0, "false_calls": 0}
    times: list[tuple[float, float]] = []
    at = time.time()
    for req, pcm in clips:
        heard = asr.transcribe(pcm, final=True)
        choose, p_none = chooser_for(lm, tools, system, heard.text, heard.alternatives)
        base = scored(req, choose(None), at)
        without["right"] += bool(base["answer_correct"])
        without["false_calls"] += bool(base["false_call"])
        slowed = Slowed(asr, to_float32(pcm))
        for key, speeds in sets.items():
            slowed.asked = False
            row = scored(req, choose(slowed.at(speeds)), at)
            if slowed.asked and speeds == SLOWER:
                times.append(slowed.shipped_ms())
            for t in THRESHOLDS:  # heard slower only where P(none) is under t
                asked = slowed.asked and p_none < t
                c, use = counts[key, t], row if asked else base
                c["right"] += bool(use["answer_correct"])
                c["false_calls"] += bool(use["false_call"])
                c["asked_tool" if req.tool else "asked_none"] += asked
    p50 = [round(statistics.median(t), 1) if t else None for t in zip(*times, strict=True)]
    return {
        "tool_clips": sum(r.tool is not None for r, _ in clips),
        "none_clips": sum(r.tool is None for r, _ in clips),
        "without": without,
        "with": {f"{k} under {t}": c for (k, t), c in counts.items()},
        "shipped_ms_p50": dict(zip(("side_by_side", "one_after_the_other"), p50, strict=False)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sets", nargs="+", default=["0.9,0.8", "0.9", "0.8", "0.85"],
        help="sets of speeds, each comma-separated (the shipped one: 0.9,0.8)",
    )  # fmt: skip
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    sets = {s: tuple(float(x) for x in s.split(",")) for s in args.sets}
    cfg = load_config(None, [])
    cores.one_blas_thread()  # as Components.load does: the passes' times as the agent has them
    asr, voices = WhisperASR(cfg.asr), UserVoices()
    lm = LM.load(cfg.lm)
    tools = Toolset.load(cfg.tools, lm.parameter_count())
    # heard slower wherever the head leans to a tool at all: THRESHOLDS are tallied from it
    tools.chooser = ToolChooser(tools.chooser.head, tools.chooser.threshold, slower_below=1.0)
    pad = np.zeros(3 * RATE_HZ // 10, np.int16)
    result: dict[str, Any] = {"bench": "slower", "shipped": list(SLOWER)}
    for name, requests, set_voices in (
        ("main", REQUESTS, VOICES), ("held-out", HELD_OUT, HELD_OUT_VOICES)
    ):  # fmt: skip
        clips = [
            (r, np.concatenate([pad, voices.say(r.text, v), pad]))
            for r in requests
            for v in set_voices
        ]
        result[name] = measure(asr, lm, tools, cfg.conversation.system_prompt, clips, sets)
        print(f"{name}: {result[name]}", file=sys.stderr)
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
