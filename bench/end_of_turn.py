"""End-of-turn scorer benchmark: the bundled LM's P(end of user turn) on a labeled set.

Scores every transcript of testkit/turn_end_set.py (complete turns, the same turns cut at a word
that cannot end a sentence, hesitations) as the pipeline does at a pause: the app's system
prompt and the transcript as the user message, through one ChatSession, so each call reuses
the cached system prompt as a live session would. Prints JSON: ROC AUC, accuracy of the
adaptive endpointer's three-way decision at the configured thresholds, the cost per call, the
time to an answer's first token with the score read apart and on the answer's first forward
(as the speculation reads it), and the misjudged transcripts.

    .venv/bin/python -m bench.end_of_turn [--set end_of_turn.likely=0.5] [--seed 0]

``--spoken`` scores speech instead, as a pause does: bench/voice.py's cut heads ("What is the
capital of") and whole questions in its five voices, short complete questions and requests
(the complete ones that wait over 1 s are counted) and lead-ins ("Actually, never mind that")
in turn in those voices, and with ``--clips`` the held-out clips of
lab/train_turn_audio.py (its clip cache: sentences and voices the speech's model did
not train on). Each clip goes through Whisper with 120 ms of the pause after it, the LM scores
the transcript and audio/prosody.py the speech; the decisions are counted with the LM alone,
with the speech's score as configured (``end_of_turn.audio_cut`` under ``audio_gate``), with it
ungated, and as configured but without Whisper's confidence (``asr_logprob``). A cut head
is projected premature when its decision's wait (``silence_ms``) is shorter than the
mid-sentence pauses of bench/voice.py (300-700 ms; the heads whose turn would end within a 1 s
pause are counted too), and a blurt when its answer would be heard before them too (the
configured rule, with each ``end_of_turn.hold_ms`` of ``HOLDS_MS``, beside the silence before
a complete turn's answer is heard):

    .venv/bin/python -m bench.end_of_turn --spoken [--clips /tmp/turn_audio_clips.npz]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from dllm_voice.app.config import load_config
from testkit.turn_end_set import labeled, roc_auc

HOLDS_MS = (0, 400, 550, 750)  # end_of_turn.hold_ms values the spoken run projects
# end_of_turn.audio_final values it projects with the configured hold (1.01: off)
AUDIO_FINALS = (1.01, 0.9, 0.8, 0.7, 0.6, 0.5)


def spoken(cfg, clips_path: str | None) -> dict:
    """Decisions on speech at a pause (see the module docstring)."""
    from dataclasses import replace

    import numpy as np

    from bench.voice import GAPS_MS, VOICES, Voices
    from dllm_voice.app.conversation.end_of_turn import audible_after, end_decision, silence_ms
    from dllm_voice.audio.asr import WhisperASR
    from dllm_voice.audio.prosody import TurnEndAudio
    from dllm_voice.model.engine import LM
    from testkit.questions import LEAD_INS, PAUSED, QUESTIONS, SHORT

    conv, eot = cfg.conversation, cfg.end_of_turn
    asr, heard = WhisperASR(cfg.asr), TurnEndAudio()
    session = LM.load(cfg.lm).session()
    system = [{"role": "system", "content": conv.system_prompt}]
    session.end_of_turn([*system, {"role": "user", "content": "Hello."}])  # warm-up
    sets: dict[str, list[tuple[str, np.ndarray]]] = {"bench_voice": []}  # (kind, 16 kHz pcm)
    voices = Voices(cfg)
    for text in [a for a, _ in PAUSED] + QUESTIONS:
        for voice in VOICES:
            kind = "complete" if text in QUESTIONS else "head"
            sets["bench_voice"].append((kind, voices.say(text, voice)))
    for i, text in enumerate(SHORT + LEAD_INS):
        kind = "complete" if text in SHORT else "lead_in"
        sets.setdefault("short_and_lead_ins", []).append(
            (kind, voices.say(text, VOICES[i % len(VOICES)]))
        )
    if clips_path:
        from lab.train_turn_audio import make_clips

        clips = make_clips(Path(clips_path))
        held = {"test": "held_out_sentences_and_voices", "test_voice": "held_out_voices"}
        for pcm, kind, split in zip(clips["pcm"], clips["kind"], clips["split"], strict=True):
            if split in held:
                kind = "head" if kind == "alone" else str(kind)
                sets.setdefault(held[split], []).append((kind, pcm.astype(np.int16)))
    rules = {
        "lm": replace(eot, audio_cut=0.0, asr_logprob=-100.0),
        "lm_and_speech": eot,
        "lm_and_speech_ungated": replace(eot, audio_gate=1.01),
        "lm_and_speech_without_asr_logprob": replace(eot, asr_logprob=-100.0),
    }
    kinds = ("complete", "unsure", "incomplete")
    lead, pause = np.zeros(4800, np.int16), np.zeros(1920, np.int16)  # 300 ms, 120 ms
    out: dict = {}
    for name, items in sets.items():
        counts = {rule: {} for rule in rules}
        premature = dict.fromkeys(rules, 0.0)
        long_waits = dict.fromkeys(rules, 0)  # complete turns that wait over 1 s
        within_1s = dict.fromkeys(rules, 0)  # heads whose turn ends before a 1 s pause does
        # The configured rule with each hold: heads whose answer is heard before the user goes
        # on (a blurt), and the silence before a complete turn's answer is heard.
        blurts = dict.fromkeys(HOLDS_MS, 0.0)
        silences: dict[int, list[int]] = {h: [] for h in HOLDS_MS}
        final_blurts = dict.fromkeys(AUDIO_FINALS, 0.0)
        final_silences: dict[float, list[int]] = {f: [] for f in AUDIO_FINALS}
        for kind, pcm in items:
            tr = asr.transcribe(np.concatenate([lead, pcm, pause]), final=True)
            text = tr.text
            msgs = [*system, {"role": "user", "content": text}]
            p = session.end_of_turn(msgs) if text else None
            p_audio = heard.score(np.concatenate([lead, pcm]))
            decided = {r: end_decision(p, c, text, p_audio, tr.logprob) for r, c in rules.items()}
            for rule, d in decided.items():
                by_kind = counts[rule].setdefault(kind, dict.fromkeys(kinds, 0))
                by_kind[d] += 1
                waited = silence_ms(d, text, rules[rule], cfg.vad.speech_end_ms)
                if kind == "head":
                    premature[rule] += sum(waited < g for g in GAPS_MS) / len(GAPS_MS)
                    within_1s[rule] += waited < 1000
                long_waits[rule] += kind == "complete" and waited > 1000
            d = decided["lm_and_speech"]  # the configured rule
            wait = silence_ms(d, text, eot, cfg.vad.speech_end_ms)
            for h in HOLDS_MS:
                audible = max(wait, audible_after(d, p, replace(eot, hold_ms=h)))
                if kind == "head":
                    blurts[h] += sum(audible < g for g in GAPS_MS) / len(GAPS_MS)
                elif kind == "complete":
                    silences[h].append(audible)
            for f in AUDIO_FINALS:
                audible = max(wait, audible_after(d, p, replace(eot, audio_final=f), p_audio))
                if kind == "head":
                    final_blurts[f] += sum(audible < g for g in GAPS_MS) / len(GAPS_MS)
                elif kind == "complete":
                    final_silences[f].append(audible)
        heads = sum(k == "head" for k, _ in items)
        out[name] = {
            "clips": len(items),
            "decisions": counts,
            "heads_projected_premature": {
                rule: round(v / max(1, heads), 3) for rule, v in premature.items()
            },
            "complete_waiting_over_1s": long_waits,
            "heads_ended_within_1s": within_1s,
            "hold_ms": {
                h: {
                    "heads_projected_blurts": round(blurts[h] / max(1, heads), 3),
                    "complete_silence_before_audio_ms": {
                        "p50": statistics.median(silences[h]) if silences[h] else None,
                        "mean": round(statistics.fmean(silences[h])) if silences[h] else None,
                    },
                }
                for h in HOLDS_MS
            },
            "audio_final": {
                f: {
                    "heads_projected_blurts": round(final_blurts[f] / max(1, heads), 3),
                    "complete_silence_before_audio_ms": _spread(final_silences[f]),
                }
                for f in AUDIO_FINALS
            },
        }
    return {"bench": "end_of_turn_spoken", **out, "loadavg_1m": round(os.getloadavg()[0], 2)}


def _spread(ms: list[int]) -> dict[str, float | None]:
    if not ms:
        return {"p50": None, "mean": None}
    return {"p50": statistics.median(ms), "mean": round(statistics.fmean(ms))}


def first_token_ms(lm, system: list[dict], texts: list[str]) -> dict[str, float]:
    """Median ms from the pause's transcript to the answer's first token, the score read apart
    (end_of_turn, then generate) and on the way (generate's end_score), each after the cache
    was warmed as while the user speaks: with all but the last word."""
    apart, fused = lm.session(), lm.session()
    times: dict[str, list[float]] = {"scored_apart": [], "scored_on_the_way": []}
    for i, text in enumerate(texts):
        msgs = [*system, {"role": "user", "content": text}]
        lead = [*system, {"role": "user", "content": text.rsplit(" ", 1)[0]}]
        for name in ("scored_apart", "scored_on_the_way")[:: 1 if i % 2 else -1]:
            s = apart if name == "scored_apart" else fused
            s.prefill(lead)
            t0 = time.perf_counter()
            if name == "scored_apart":
                s.end_of_turn(msgs)
                gen = s.generate(msgs, max_new_tokens=1)
            else:
                gen = s.generate(msgs, max_new_tokens=1, end_score=lambda p: None)
            next(iter(gen), None)
            times[name].append(1000.0 * (time.perf_counter() - t0))
    return {k: round(statistics.median(v), 2) for k, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--seed", type=int, default=0, help="seed of the labeled set's cuts")
    ap.add_argument("--spoken", action="store_true", help="score speech at a pause instead")
    ap.add_argument("--clips", default=None, help="with --spoken: train_turn_audio.py's clips")
    args = ap.parse_args()

    from dllm_voice.app.conversation.end_of_turn import end_decision
    from dllm_voice.model.engine import LM

    cfg = load_config(args.config, args.overrides)
    if args.spoken:
        print(json.dumps(spoken(cfg, args.clips), indent=1))
        return 0
    conv, eot = cfg.conversation, cfg.end_of_turn
    lm = LM.load(cfg.lm)
    session = lm.session()
    system = [{"role": "system", "content": conv.system_prompt}]
    session.end_of_turn([*system, {"role": "user", "content": "Hello."}])  # warm-up
    data = labeled(args.seed)
    scores, costs = [], []
    for text, _ in data:
        t0 = time.perf_counter()
        p = session.end_of_turn([*system, {"role": "user", "content": text}])
        costs.append(1000.0 * (time.perf_counter() - t0))
        scores.append(float(p) if p is not None else 0.5)
    labels = [y for _, y in data]
    pairs = list(zip(scores, labels, strict=True))
    decisions = [end_decision(p, eot, t) for p, (t, _) in zip(scores, data, strict=True)]
    complete = [d for d, y in zip(decisions, labels, strict=True) if y]
    incomplete = [d for d, y in zip(decisions, labels, strict=True) if not y]
    decided = [(d, y) for d, y in zip(decisions, labels, strict=True) if d != "unsure"]
    result = {
        "bench": "end_of_turn",
        "transcripts": len(data),
        "complete": len(complete),
        "incomplete": len(incomplete),
        "roc_auc": round(roc_auc(scores, labels), 4),
        "thresholds": {"likely": eot.likely, "unlikely": eot.unlikely},
        "complete_decided": {k: complete.count(k) for k in ("complete", "unsure", "incomplete")},
        "incomplete_decided": {
            k: incomplete.count(k) for k in ("complete", "unsure", "incomplete")
        },
        "accuracy_when_decided": round(
            sum((d == "complete") == y for d, y in decided) / max(1, len(decided)), 4
        ),
        "accuracy_at_0.5": round(
            sum((p >= 0.5) == y for p, y in zip(scores, labels, strict=True)) / len(data), 4
        ),
        "cost_ms": {
            "p50": round(statistics.median(costs), 2),
            "p95": round(sorted(costs)[int(0.95 * (len(costs) - 1))], 2),
        },
        "answer_first_token_ms": first_token_ms(lm, system, [t for t, _ in data]),
        "median_p": {
            "complete": round(statistics.median(s for s, y in pairs if y), 4),
            "incomplete": round(statistics.median(s for s, y in pairs if not y), 4),
        },
        "misjudged": [
            {"text": t, "complete": y, "p": round(p, 4)}
            for (t, y), p, d in zip(data, scores, decisions, strict=True)
            if d != "unsure" and (d == "complete") != y
        ],
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
