"""Conversation benchmark: scripted multi-turn voice conversations through the live pipeline.

Each script (bench/conversation_scripts.py: Q&A on several topics, follow-ups that refer back,
barge-ins at 800-3000 ms with a new question, backchannels that must not interrupt, 15-45 s
monologues, one past vad.max_turn_s) is spoken at run time by Piper or espeak-ng, some voices
sent through the web page's 48 kHz -> 16 kHz path (bench/user_voices.py). A conversation is one
VoiceSession over the real models, fed by a TimelineSource paced in real time, its answers
played into a sink that paces playback by the clock and discards the audio: ``main.py run
--realtime``. The session's events give, per conversation and in total (definitions in
bench/conversation_metrics.py):

* answers repeating an earlier answer of the conversation (both answers' whole text; earlier
  answers the user heard nothing of are skipped), answers with a loop, answers after an
  interruption that continue the interrupted answer (targets: 0), and how often those mention
  the new topic;
* spoken words per answer (what the user heard: the ``heard`` text of ``turn_done``);
* final-transcript WER against the script (and of the text the history kept: a long turn's
  refinement that finished after the final revises it), next to one whole-utterance
  faster-whisper pass over the same audio (``audio.asr.whole_pass``: the app's Whisper model,
  ``transcribe`` defaults);
* counts: user turns, final transcripts (a turn without one is lost), VAD utterances whose
  final never came (dropped) or came empty, answers completed or cancelled, barge-ins (and the
  scripted ones that did interrupt: an answer shorter than ``at_ms`` was already over),
  backchannels that interrupted or were answered, interruptions followed by no answer;
* blurts: answers whose audio had started when the user went on with the same turn, reopening
  it or interrupting the answer to its first part (the ``lead-in-*`` conversations interrupt
  with a lead-in, a 400-800 ms pause, then the request).

    .venv/bin/python -m bench.conversation [--conversations N] [--only NAME,...]
        [--decoder ar|hybrid] [--out results.json] [--trace t.jsonl] [--set section.key=value]

Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import conversation_metrics as m
from bench.conversation_scripts import SCRIPTS, VOICES, Script
from bench.user_voices import RATE_HZ, UserVoices
from dllm_voice.app.config import load_config
from dllm_voice.app.observe.trace import Tracer, now_ms
from dllm_voice.app.terminal.runner import Segment, TimelineSource, run_session
from dllm_voice.audio.asr import whole_pass

SENTENCE_GAP_MS = 300  # between a monologue's sentences: > vad.pause_ms, < vad.speech_end_ms
WAIT_LIMIT_S = 90.0  # a turn waiting longer for the agent plays anyway (counted as forced)
NEW_TOPIC = ("question", "follow_up", "barge_in", "monologue")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class ScriptedTimeline(TimelineSource):
    """A TimelineSource whose waits for the agent give up after ``wait_limit_s`` (recorded in
    ``forced``) and whose ``after_previous`` turns start ``at_ms`` after the previous turn began
    (backchannels in a row: the agent's audio started before the previous one)."""

    def __init__(
        self, segments: list[Segment], after_previous: list[bool], wait_limit_s: float, **kw: Any
    ) -> None:
        super().__init__(segments, **kw)
        self.after_previous = after_previous
        self.wait_limit_ms = wait_limit_s * 1000.0
        self.forced: list[int] = []

    def _ready_for(self, seg: Segment) -> Any:
        i = len(self.starts)
        if self.after_previous[i]:
            begun = self.starts[i - 1]
            ready = lambda: now_ms() >= begun + (seg.barge_in_at_ms or 0)
        else:
            ready = super()._ready_for(seg)
        deadline = now_ms() + self.wait_limit_ms

        def ready_or_late() -> bool:
            if ready():
                return True
            if now_ms() < deadline:
                return False
            self.forced.append(i)
            return True

        return ready_or_late


class Recorder:
    """The session's trace events, each tagged with the user turn whose audio was playing."""

    def __init__(self, source: TimelineSource) -> None:
        self.source = source
        self.events: list[dict[str, Any]] = []

    def __call__(self, ev: dict[str, Any]) -> None:
        if ev["type"] == "trace":
            self.events.append({**ev["event"], "playing": len(self.source.starts) - 1})


async def _converse(
    comps: Any,
    cfg: Any,
    source: ScriptedTimeline,
    tracer: Tracer,
    timeout_s: float,
) -> tuple[Recorder, bool]:
    from dllm_voice.audio.sinks import CallbackSink

    async def discard(_: bytes) -> None:
        return None

    sink = CallbackSink(discard, comps.tts.sample_rate_hz, realtime=True)
    rec = Recorder(source)
    try:
        await asyncio.wait_for(run_session(comps, cfg, source, sink, tracer, rec), timeout_s)
        return rec, False
    except TimeoutError:
        return rec, True
    finally:
        await sink.aclose()


def _answers(script: Script, events: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Answers (turn_done) and interruptions (barge_in), both tied to user turns."""
    turn_of: dict[int, int] = {}  # pipeline turn -> script turn
    speaking = -1  # script turn of the latest speech_start
    answers: list[dict[str, Any]] = []
    barges: list[dict[str, Any]] = []
    # Answers cut because the user went on right after an early end of turn: premature starts
    # of one turn's answer, counted apart from the answers.
    reopened = {ev["gen"] for ev in events if ev["event"] == "reopen_cancel"}
    # Blurts: those whose audio had started, so the user heard the agent start and stop (and,
    # below, answers to the first part of a turn cut by its rest as a barge-in).
    blurted = {ev["gen"] for ev in events if ev["event"] == "reopen_cancel" and ev.get("audible")}
    for ev in events:
        kind = ev["event"]
        if kind == "speech_start":
            speaking = turn_of[ev["turn"]] = ev["playing"]
        elif kind == "turn_done":
            heard = ev.get("heard", "")
            answers.append(
                {
                    "gen": ev["gen"],
                    "turn": turn_of.get(ev["turn"], speaking),
                    "status": ev["status"],
                    "text": ev.get("text", ""),
                    "heard": heard,
                    "heard_words": len(m.words(heard)),
                    "reopened": ev["gen"] in reopened,
                    "blurt": ev["gen"] in blurted,
                }
            )
        elif kind == "barge_in":
            barges.append({"gen": ev["gen"], "heard": ev.get("heard", ""), "by_turn": speaking})
    for i, a in enumerate(answers):
        earlier = [e for e in answers[:i] if e["heard_words"]]
        a["repeat_of"] = next((e["gen"] for e in earlier if m.repeats(a["text"], e["text"])), None)
        a["loop"] = m.loop(a["text"])
        a["loop_heard"] = m.loop(a["heard"])
    by_gen = {a["gen"]: a for a in answers}
    for b in barges:
        b["by_kind"] = script.turns[b["by_turn"]].kind if b["by_turn"] >= 0 else "none"
        cut = by_gen.get(b["gen"])
        if cut is not None and cut["turn"] == b["by_turn"] and cut["heard"]:
            cut["blurt"] = True  # it answered the first part of this turn ("Wait.") aloud
        after = [
            a
            for a in answers
            if a["gen"] > b["gen"] and a["turn"] == b["by_turn"] and not a["reopened"]
        ]
        b["answer_gen"] = after[0]["gen"] if after else None
        interrupted = by_gen.get(b["gen"], {"text": ""})
        asked = script.turns[b["by_turn"]].text if b["by_turn"] >= 0 else ""
        b["continues"] = (
            m.continuation(after[0]["text"], interrupted["text"], b["heard"], asked)
            if after
            else None
        )
        keywords = script.turns[b["by_turn"]].keywords if b["by_turn"] >= 0 else ()
        b["keyword_hit"] = m.keyword_hit(after[0]["text"], keywords) if after and keywords else None
    return answers, barges


def analyze(
    script: Script,
    events: list[dict[str, Any]],
    speech_s: list[float],
    forced: list[int],
    timed_out: bool = False,
    wall_s: float = 0.0,
) -> dict[str, Any]:
    """One conversation's turns, answers, interruptions and counts, from its trace events
    (each with ``playing``: the script turn whose audio was playing, -1 before the first)."""
    all_answers, barges = _answers(script, events)
    answers = [a for a in all_answers if not a["reopened"]]
    turn_of = {e["turn"]: e["playing"] for e in events if e["event"] == "speech_start"}
    # The last final of each pipeline turn: a reopened turn's later final holds all of it.
    last_final: dict[int, tuple[int, str]] = {}
    # A long turn's closed segments at its final, and how many the final's whole pass covered.
    segments: dict[int, list[int]] = {}
    for e in events:
        if e["event"] == "asr_final" and e.get("text", "").strip():
            scripted = turn_of.get(e["turn"], e["playing"])
            last_final[e["turn"]] = (scripted, e["text"].strip())
            if e.get("segments"):
                segments[scripted] = [e["segments"], e["segments_whole"]]
    # What the history kept: the final, or the refinement that revised it after the final.
    kept_text = {turn: text for turn, (_, text) in last_final.items()}
    for e in events:
        if e["event"] == "asr_refined" and e["turn"] in kept_text:
            kept_text[e["turn"]] = e["text"].strip()
    finals: dict[int, list[str]] = {}
    kept: dict[int, list[str]] = {}
    for turn, (scripted, text) in last_final.items():
        finals.setdefault(scripted, []).append(text)
        kept.setdefault(scripted, []).append(kept_text[turn])
    utterances = [e["turn"] for e in events if e["event"] == "speech_start"]
    final_turns = {e["turn"] for e in events if e["event"] == "asr_final"}
    dropped = [{"turn": turn_of[u], "utterance": u} for u in utterances if u not in final_turns]
    empty = sum(1 for e in events if e["event"] == "asr_final" and not e.get("text", "").strip())
    holds = [e["playing"] for e in events if e["event"] == "barge_in_hold"]
    resumes = [e["playing"] for e in events if e["event"] == "barge_in_resume"]
    turns = []
    for i, (t, seconds) in enumerate(zip(script.turns, speech_s, strict=True)):
        transcript = " ".join(finals.get(i, []))
        mine = [a for a in answers if a["turn"] == i]
        last = next((a for a in reversed(mine) if a["text"]), None)
        hit = None
        if t.kind in NEW_TOPIC and t.keywords:
            hit = last is not None and m.keyword_hit(last["text"], t.keywords)
        turns.append(
            {
                "kind": t.kind,
                "at_ms": t.at_ms,
                "speech_s": round(seconds, 2),
                "said": t.text,
                "transcript": transcript,
                "wer": m.wer(t.text, transcript),
                "kept": " ".join(kept.get(i, [])),
                "segments_and_whole": segments.get(i),
                "answers": [a["gen"] for a in mine],
                "keyword_hit": hit,
                "interrupted": any(b["by_turn"] == i for b in barges),
                "forced_start": i in forced,
            }
        )
    kinds = [t.kind for t in script.turns]
    return {
        "name": script.name,
        "voice": script.voice,
        "overrides": list(script.overrides),
        "wall_s": round(wall_s, 1),
        "timed_out": timed_out,
        "counts": {
            "user_turns": len(turns),
            "finals": sum(1 for i in range(len(turns)) if finals.get(i)),
            "lost": sum(1 for i in range(len(turns)) if not finals.get(i)),
            "lost_questions": sum(
                1 for i, t in enumerate(turns) if not finals.get(i) and t["kind"] != "backchannel"
            ),
            "utterances": len(utterances),
            "utterances_dropped": len(dropped),
            "empty_finals": empty,
            "answers": len(answers),
            "reopened": len(all_answers) - len(answers),
            "blurts": sum(a["blurt"] for a in all_answers),
            "completed": sum(a["status"] == "completed" for a in answers),
            "cancelled": sum(a["status"] == "cancelled" for a in answers),
            "barge_ins_scripted": kinds.count("barge_in"),
            "barge_ins": len(barges),
            "barge_ins_scripted_effective": sum(
                t["interrupted"] for t in turns if t["kind"] == "barge_in"
            ),
            "interruptions_without_answer": sum(b["answer_gen"] is None for b in barges),
            "backchannels": kinds.count("backchannel"),
            "backchannel_interruptions": sum(b["by_kind"] == "backchannel" for b in barges),
            "backchannel_answers": sum(
                a["turn"] >= 0 and kinds[a["turn"]] == "backchannel" for a in answers
            ),
            "holds": len(holds),
            "resumes": len(resumes),
            "forced_starts": len(forced),
        },
        "turns": turns,
        "dropped_utterances": dropped,
        "answers": all_answers,
        "interruptions": barges,
    }


def _rate(hits: list[bool]) -> dict[str, Any]:
    return {
        "n": len(hits),
        "hits": sum(hits),
        "rate": round(sum(hits) / len(hits), 3) if hits else None,
    }


def defects(convs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every answer, interruption and turn that misses a target, with its evidence."""
    out: list[dict[str, Any]] = []
    for c in convs:
        add = lambda defect, name=c["name"], **detail: out.append(
            {"conversation": name, "defect": defect, **detail}
        )
        for a in c["answers"]:
            if a["blurt"]:
                add("blurt", gen=a["gen"], turn=a["turn"], heard=a["heard"])
            if a["repeat_of"] is not None:
                add("repeat", gen=a["gen"], of=a["repeat_of"], text=a["text"][:160])
            if a["loop"]:
                add("loop", gen=a["gen"], what=a["loop"], heard=bool(a["loop_heard"]))
        for b in c["interruptions"]:
            if b["continues"]:
                add("continues", gen=b["answer_gen"], what=b["continues"], heard=b["heard"][-80:])
            if b["by_kind"] == "backchannel":
                add("backchannel interrupted", gen=b["gen"], by_turn=b["by_turn"])
            if b["answer_gen"] is None:
                add("interrupted, then no answer", gen=b["gen"], by_turn=b["by_turn"])
        for d in c["dropped_utterances"]:
            add("utterance without a final", **d)
        for i, t in enumerate(c["turns"]):
            if not t["transcript"] and t["kind"] != "backchannel":
                add("lost turn", turn=i, said=t["said"][:80])
        if c["timed_out"]:
            add("timed out")
    return out


def summarize(convs: list[dict[str, Any]]) -> dict[str, Any]:
    """The aggregate over conversations, with every defect listed."""
    counts: dict[str, int] = {"timed_out": sum(c["timed_out"] for c in convs)}
    for c in convs:
        for k, v in c["counts"].items():
            counts[k] = counts.get(k, 0) + v
    answers = [(c["name"], a) for c in convs for a in c["answers"] if not a["reopened"]]
    barges = [(c["name"], b) for c in convs for b in c["interruptions"]]
    turns = [t for c in convs for t in c["turns"]]
    heard = [a["heard_words"] for _, a in answers]
    after = [b for _, b in barges if b["by_kind"] == "barge_in"]
    return {
        "counts": counts,
        "repeated_answers": sum(a["repeat_of"] is not None for _, a in answers),
        "looping_answers": sum(bool(a["loop"]) for _, a in answers),
        "looping_answers_heard": sum(bool(a["loop_heard"]) for _, a in answers),
        "continued_after_interruption": sum(bool(b["continues"]) for _, b in barges),
        "answers_after_interruption": sum(b["answer_gen"] is not None for _, b in barges),
        "topic_after_interruption": _rate(
            [b["keyword_hit"] for b in after if b["keyword_hit"] is not None]
        ),
        "topic_all_questions": _rate(
            [t["keyword_hit"] for t in turns if t["keyword_hit"] is not None]
        ),
        "heard_words_per_answer": m.median_max(heard),
        "output_words_per_answer": m.median_max([len(m.words(a["text"])) for _, a in answers]),
        "wer": {
            "pipeline": m.corpus_wer([(t["said"], t["transcript"]) for t in turns]),
            "kept_in_history": m.corpus_wer([(t["said"], t["kept"]) for t in turns]),
            "whole_pass": m.corpus_wer([(t["said"], t.get("whole_pass", "")) for t in turns]),
            "by_kind": {
                kind: {
                    "pipeline": m.corpus_wer([(t["said"], t["transcript"]) for t in of_kind]),
                    "kept_in_history": m.corpus_wer([(t["said"], t["kept"]) for t in of_kind]),
                    "whole_pass": m.corpus_wer(
                        [(t["said"], t.get("whole_pass", "")) for t in of_kind]
                    ),
                }
                for kind in sorted({t["kind"] for t in turns})
                if (of_kind := [t for t in turns if t["kind"] == kind])
            },
            "by_voice_without_backchannels": {
                voice: {
                    "pipeline": m.corpus_wer([(t["said"], t["transcript"]) for t in of_voice]),
                    "whole_pass": m.corpus_wer(
                        [(t["said"], t.get("whole_pass", "")) for t in of_voice]
                    ),
                }
                for voice in sorted({c["voice"] for c in convs})
                if (
                    of_voice := [
                        t
                        for c in convs
                        if c["voice"] == voice
                        for t in c["turns"]
                        if t["kind"] != "backchannel"
                    ]
                )
            },
        },
        "defects": defects(convs),
    }


def chosen(name: str, only: list[str]) -> bool:
    """``name`` is among ``only`` (a name, or a prefix ending in "*")."""
    return any(name == o or (o.endswith("*") and name.startswith(o[:-1])) for o in only)


def _segments(script: Script, voices: UserVoices) -> tuple[list[Segment], list[bool]]:
    segs = [
        Segment(
            voices.speak(t.sentences, script.voice, t.gap_ms or SENTENCE_GAP_MS), t.text, t.at_ms
        )
        for t in script.turns
    ]
    return segs, [t.after_previous for t in script.turns]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from dllm_voice.app.conversation.components import Components

    overrides = list(args.overrides) + ([f"lm.decoder={args.decoder}"] if args.decoder else [])
    cfg = load_config(args.config, overrides)
    scripts = [s for s in SCRIPTS if not args.only or chosen(s.name, args.only.split(","))]
    scripts = scripts[: args.conversations] if args.conversations else scripts
    if not scripts:
        raise SystemExit(f"no conversation selected; names: {', '.join(s.name for s in SCRIPTS)}")
    t_start = time.perf_counter()
    log(f"loading models (decoder {cfg.lm.decoder}, max_new_tokens {cfg.lm.max_new_tokens})")
    comps = Components.load(cfg)
    load_s = time.perf_counter() - t_start
    voices = UserVoices()
    tracer = Tracer(args.trace or None, session="conversation", keep=False)
    convs: list[dict[str, Any]] = []
    audio: list[list[np.ndarray]] = []
    try:
        for n, script in enumerate(scripts, 1):
            conv_cfg = load_config(args.config, overrides + list(script.overrides))
            segments, after_previous = _segments(script, voices)
            speech_s = sum(len(s.pcm) for s in segments) / RATE_HZ
            source = ScriptedTimeline(
                segments,
                after_previous,
                args.wait_limit_s,
                sample_rate_hz=conv_cfg.audio.sample_rate_hz,
                frame_ms=conv_cfg.audio.frame_ms,
                realtime=True,
                tail_ms=conv_cfg.vad.speech_end_ms + 500,
            )
            tracer.session = script.name
            timeout_s = speech_s + len(segments) * (args.wait_limit_s + 10) + 60
            t0 = time.perf_counter()
            rec, timed_out = asyncio.run(_converse(comps, conv_cfg, source, tracer, timeout_s))
            wall = time.perf_counter() - t0
            seconds = [len(s.pcm) / RATE_HZ for s in segments]
            conv = analyze(script, rec.events, seconds, source.forced, timed_out, wall)
            convs.append(conv)
            audio.append([s.pcm for s in segments])
            c = conv["counts"]
            log(
                f"[{n}/{len(scripts)}] {script.name} ({script.voice}): {c['user_turns']} turns, "
                f"{c['lost']} lost, {c['answers']} answers ({c['cancelled']} cancelled), "
                f"{c['barge_ins']} barge-ins, {wall:.0f} s" + (" TIMED OUT" if timed_out else "")
            )
        log("whole-utterance Whisper passes")
        t0 = time.perf_counter()
        for conv, pcms in zip(convs, audio, strict=True):
            for turn, pcm in zip(conv["turns"], pcms, strict=True):
                turn["whole_pass"] = whole_pass(comps.asr, pcm)
                turn["whole_pass_wer"] = m.wer(turn["said"], turn["whole_pass"])
        whole_s = time.perf_counter() - t0
    finally:
        tracer.close()
        comps.close()
    conv_s = sum(c["wall_s"] for c in convs)
    n_turns = sum(len(c["turns"]) for c in convs)
    all_turns = sum(len(s.turns) for s in SCRIPTS)
    return {
        "bench": "conversation",
        "decoder": cfg.lm.decoder,
        "max_new_tokens": cfg.lm.max_new_tokens,
        "overrides": overrides,
        "conversations_run": len(convs),
        "conversations_total": len(SCRIPTS),
        "voices": list(VOICES),
        "load_s": round(load_s, 1),
        "conversations_s": round(conv_s, 1),
        "whole_pass_s": round(whole_s, 1),
        "wall_s": round(time.perf_counter() - t_start, 1),
        "full_run_estimate_s": round(
            load_s + conv_s / len(convs) * len(SCRIPTS) + whole_s / n_turns * all_turns
        ),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "summary": summarize(convs),
        "per_conversation": convs,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=0, help="run the first N (0 = all)")
    ap.add_argument(
        "--only", default="", help="comma-separated conversation names ('lead-in-*': a prefix)"
    )
    ap.add_argument("--decoder", choices=["ar", "hybrid", "parallel"], default=None)
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--out", default="", help="also write the JSON here")
    ap.add_argument("--trace", default="", help="also write the JSONL trace here")
    ap.add_argument("--wait-limit-s", type=float, default=WAIT_LIMIT_S)
    args = ap.parse_args()
    result = run(args)
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    s = result["summary"]
    log(
        f"done in {result['wall_s']:.0f} s: {s['repeated_answers']} repeats, "
        f"{s['looping_answers']} loops, {s['continued_after_interruption']} continuations, "
        f"WER {s['wer']['pipeline']} (whole pass {s['wer']['whole_pass']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
