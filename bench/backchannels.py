"""Listener sounds and short interruptions over the agent's answer: which ones stop it.

Each utterance is spoken in each voice (Piper at two rates, espeak-ng voices, generated at bench
time), heard by Whisper as the final of an interruption is (the utterance between 200 ms of
silence, through a transcriber of speech over the answer: `asr.prompt_over_answer`), and given
to the turn manager over an answer that plays: a listener's sound
("Mm-hmm.", "Wow.") should let the answer play on, a stop or a request ("Wait.", "Louder.")
should cancel it. Counts per kind and voice, and every wrong decision with what Whisper heard
and how sure it was. JSON to stdout.

    .venv/bin/python -m bench.backchannels [--set asr.prompt_over_answer=...] [--voices ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter

import numpy as np

from bench.user_voices import UserVoices
from dllm_voice.app.config import load_config
from dllm_voice.app.conversation.actions import CancelAnswer, ResumePlayback
from dllm_voice.app.conversation.turns import TurnManager
from dllm_voice.audio.asr import RATE_HZ, Transcript, WhisperASR
from dllm_voice.audio.transcriber import StreamingTranscriber

# What listeners say to show they follow, and what they say to stop or steer the agent. Both
# lists mix words in conversation.backchannels with words that are not.
LISTENER = (
    "Mm-hmm.", "Uh-huh.", "Mhm.", "Hmm.", "Mm.", "Yeah.", "Yep.", "Yes.", "Right.", "Okay.",
    "I see.", "Sure.", "Got it.", "Oh.", "Wow.", "Really?", "Cool.", "Oh, nice.", "Ah, okay.",
    "Huh.", "Interesting.", "Makes sense.", "Oh wow.", "Uh huh, yeah.",
)  # fmt: skip
TAKERS = (
    "Stop.", "Wait.", "No.", "Hold on.", "What?", "Why?", "Sorry?", "Pardon?", "Paris.",
    "Next.", "Louder.", "Slower.", "Enough.", "Wrong.", "Not that one.", "Stop, that's wrong.",
    "Wait, what about Spain?", "Tell me about dragons instead.",
)  # fmt: skip
VOICES = (
    "piper", "piper-slow", "espeak:en-us", "espeak:en-gb", "espeak:en+f3", "espeak:en+m3",
    "espeak:en-us+f2", "espeak:en+f4", "espeak:en-gb-x-rp", "espeak:en+m7",
    "espeak:en-gb-scotland", "espeak:en-029",
)  # fmt: skip
_GAP = np.zeros(RATE_HZ // 5, np.int16)  # 200 ms of silence either side
_ONSET_MS = 5000.0  # the interruption's onset in the turn manager's audio time


def decide(tm: TurnManager, speech_ms: float, heard: Transcript) -> str:
    """Over an answer that plays: "cancel" or "resume" for an utterance of ``speech_ms`` heard as
    ``heard``, as the pipeline's VAD events and final reach the turn manager ("plays": neither,
    an utterance too short to hold the answer)."""
    (ans,) = tm.on_final("Tell me about the planet Mars.")
    tm.on_audio_started(ans.gen)
    tm.on_speech_start(_ONSET_MS)
    actions = []
    for t in np.arange(_ONSET_MS + 30, _ONSET_MS + speech_ms + 1, 30):
        actions += tm.on_speech_progress(float(t))
    actions += tm.on_speech_end(_ONSET_MS + speech_ms)
    actions += tm.on_final(heard.text, heard.alternatives, heard.logprob)
    if any(isinstance(a, CancelAnswer) for a in actions):
        return "cancel"
    return "resume" if any(isinstance(a, ResumePlayback) for a in actions) else "plays"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="key=value")
    ap.add_argument("--voices", default=",".join(VOICES), help="comma list of user voices")
    a = ap.parse_args()
    cfg = load_config(None, a.overrides)
    asr = WhisperASR(cfg.asr)
    voices = UserVoices()
    names = a.voices.split(",")
    t0 = time.perf_counter()
    counts: dict[str, Counter[str]] = {"listener": Counter(), "taker": Counter()}
    wrong = []
    for kind, texts, want in (("listener", LISTENER, "resume"), ("taker", TAKERS, "cancel")):
        for text in texts:
            for voice in names:
                pcm = voices.say(text, voice)
                st = StreamingTranscriber(asr, cfg.asr, over_answer=True)
                st.feed(np.concatenate([_GAP, pcm, _GAP]))
                heard = st.final()
                speech_ms = 1000.0 * len(pcm) / RATE_HZ
                tm = TurnManager(cfg.conversation, cfg.end_of_turn, cfg.speculation, cfg.barge_in)
                got = decide(tm, speech_ms, heard)
                ok = got == want or (want == "resume" and got == "plays")
                counts[kind]["right" if ok else "wrong"] += 1
                if not ok:
                    lp = None if heard.logprob is None else round(heard.logprob, 2)
                    wrong.append(
                        {"kind": kind, "said": text, "voice": voice, "heard": heard.text,
                         "logprob": lp, "speech_ms": round(speech_ms), "decision": got}
                    )  # fmt: skip
    n_listen = sum(counts["listener"].values())
    n_take = sum(counts["taker"].values())
    out = {
        "bench": "backchannels",
        "overrides": a.overrides,
        "voices": names,
        "seconds": round(time.perf_counter() - t0, 1),
        "listener_sounds": n_listen,
        "listener_sounds_that_stop_the_answer": counts["listener"]["wrong"],
        "takers": n_take,
        "takers_that_do_not_stop_it": counts["taker"]["wrong"],
        "wrong": wrong,
    }
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
