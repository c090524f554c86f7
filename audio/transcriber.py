"""One turn's streaming transcription: `StreamingTranscriber`, over the shared `WhisperASR`.

Partial passes while the user talks, a final that reuses the last pass when only silence came
after it, and long turns cut into segments at the VAD's `segment` events so a pass only ever
sees the current one. At the pause a short last segment is heard again with the audio before
its cut; the `Refiner` (refiner.py) transcribes the closed segments again in whole passes.
"""

import time
from concurrent.futures import Future
from dataclasses import replace

import numpy as np

from dllm_voice.audio.asr import (
    EMPTY,
    FRAME,
    MAX_SHORT_S,
    RATE_HZ,
    Transcript,
    WhisperASR,
    merge_overlap,
    sound_goes_on,
)
from dllm_voice.audio.config import ASRConfig
from dllm_voice.audio.errors import AudioFormatError
from dllm_voice.audio.refiner import Refiner
from dllm_voice.audio.resample import PCM, PCM16, to_int16

# close_segment() cuts at the quietest 30 ms of the segment's last 0.6 s and carries the rest
# over to the next segment: a cut right at the VAD event splits words (18.2% WER vs 14.3%).
_CUT_SEARCH = 6 * RATE_HZ // 10
_OVERLAP = RATE_HZ  # audio before a segment's cut that the next segment transcribes again
# Longest turn a refinement transcribes again: 2 min of audio is ~4 MB kept and ~4 Whisper
# windows (~4 s on a 2-core Zen 1, idle class); a longer turn keeps its segments' text.
_REFINE_MAX = 120 * RATE_HZ
# A long turn's last segment shorter than this past its cut is heard again, at the pause (else
# at the final), with the audio before the cut: heard alone, the 0.5 s a cut at a breath left
# came out as words never said. With all of the closed segment before it where no whole pass
# covers that one yet and the pass stays in the short window, else with its last _REHEAR (~9
# words, within what merge_overlap() joins on).
_SHORT_LAST = 3 * RATE_HZ
_REHEAR = 3 * RATE_HZ
# Most words a listener says over an answer ("Oh, I see, yeah."); more is a request.
LISTENER_WORDS = 4


class StreamingTranscriber:
    """One turn's streaming state, cut into segments on long turns.

    A partial pass runs every partial_interval_ms of new audio (or as much audio as the last pass
    took to compute, where that is longer); its stable prefix is the words two consecutive passes
    agree on. The final reuses the last pass when only silence came after it: call
    partial(at_pause=True) at the VAD `pause` event and final() at `speech_end` returns at once
    (in a long turn that pass also hears a short last segment again). close_segment() at the VAD
    `segment` event keeps the segment's text and drops its audio, so a pass only ever sees the
    current segment however long the user talks. A segment heard alone lacks the context of the
    ones before it, so the `Refiner` transcribes the turn again in whole passes when the CPU is
    otherwise idle: during the turn over the closed segments, whose text the turn then takes
    (7.9 % WER joined from segments, 4.2 % with these passes), and after the final over all of
    it, for the history (`refinement()`).

    Not thread-safe: one owner (an ASR worker) calls feed, partial, close_segment and final, in
    the order the audio arrived.
    """

    def __init__(
        self,
        asr: WhisperASR,
        cfg: ASRConfig,
        refiner: Refiner | None = None,
        over_answer: bool = False,
    ) -> None:
        self.asr = asr
        self.cfg = cfg
        self.refiner = refiner
        # A turn whose speech began over the agent's answer: heard with the listener's prompt
        # (WhisperASR.listener_prompt), its final heard again with the usual one where it asks
        # for something (more than LISTENER_WORDS words).
        self.over_answer = over_answer
        self._interval = RATE_HZ * cfg.partial_interval_ms // 1000
        self._refining: Future[str] | None = None  # the whole pass after the final, once asked
        self._rolling: Future[str] | None = None  # one over the first closed segments
        self.reset()

    def reset(self) -> None:
        for fut in (self._refining, self._rolling):
            if fut is not None:
                fut.cancel()
        self._refining = None
        self._refined_n = 0  # the turn's samples it covers
        self._rolling = None
        self._rolling_k = 0  # how many the last one asked for covers (once each: not retried)
        self._texts: list[str] = []  # each closed segment's own text
        self._prefix_k = 0  # the closed segments the newest whole pass in the turn's text covers
        self._head = ""  # the turn's text up to the last closed segment
        # ... up to the closed segment before it (None: a whole pass covers the last one)
        self._head_before: str | None = ""
        self._before_cut = np.zeros(0, np.int16)  # the last _REHEAR of audio before the cut
        self._closed = 0  # where the last closed segment ends in the turn's audio
        self._origin = 0  # where the current segment's audio begins in the turn's
        # The turn's audio up to _closed, kept for the refinement only (None: too long for one).
        self._kept: list[PCM16] | None = [] if self.refiner is not None else None
        self._closed_ms = 0.0  # their audio
        self._chunks: list[PCM16] = []  # the current segment's audio
        self._n = 0  # samples fed to the current segment
        self._n_at_pass = 0  # samples covered by the last pass
        self._seg = EMPTY  # the last pass over the current segment alone
        self._again: Transcript | None = None  # ... or the turn, heard again at the pause

    def feed(self, pcm16k: PCM) -> None:
        pcm = np.asarray(pcm16k)
        if pcm.ndim != 1:
            raise AudioFormatError(f"ASR wants mono 1-D 16 kHz PCM, got shape {pcm.shape}")
        if len(pcm):
            self._chunks.append(to_int16(pcm))
            self._n += len(pcm)

    def audio(self) -> PCM16:
        """The current segment's audio (the whole turn until a segment is closed)."""
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        return self._chunks[0] if self._chunks else np.zeros(0, np.int16)

    def partial_due(self) -> bool:
        # At least as much new audio as the last pass took to compute: where a pass costs more
        # than partial_interval_ms (~750 ms for a 3 s question on 2 Zen 1 cores), passes back to
        # back would hold the CPU for the whole turn and the final would queue behind one.
        due = max(self._interval, int(RATE_HZ * self._seg.compute_ms / 1000))
        return self._n - self._n_at_pass >= due

    def partial(self, at_pause: bool = False) -> Transcript:
        """Transcribe the current segment (blocking; run in a worker); text is the turn's.
        ``at_pause``: a pass after the words (in a pause, or the silence before one is
        detected), which the end of the turn may wait on: in a long turn with a short last
        segment it hears that segment again with the audio before its cut, as the final would,
        so the end-of-turn score and the speculation read that text and the final reuses it."""
        n = self._n
        self._roll()
        again = self._short_last_again(n) if at_pause else None
        self._again = again
        if again is None:
            self._seg = self.asr.transcribe(
                self.audio()[:n], final=False, prev=self._seg, listener=self.over_answer
            )
        self._n_at_pass = n
        return self._joined(self._seg) if again is None else replace(again, final=False)

    def close_segment(self) -> Transcript:
        """Finish the current segment (at the VAD `segment` event): transcribe it, or reuse the
        last pass when only silence followed it, keep its text and drop its audio, so later
        passes see only what comes after. Returns the turn so far (all of it stable). Blocking.
        """
        t0 = time.perf_counter()
        pcm = self.audio()
        # What followed the last pass goes on to the next segment (not one heard again at a
        # pause: its text is the turn's, not this segment's).
        if self._again is None and self._reusable():
            seg, rest, closed = self._seg, pcm[self._n_at_pass :], self._n_at_pass
        else:
            # The segment ends at a quiet point, and the next one starts _OVERLAP earlier: tiny.en
            # often drops a segment's last word ("... in big glass [jars]"), which the next
            # segment then hears with what follows; merge_overlap() drops the repeat.
            closed = self._quiet_cut(pcm)
            seg = self.asr.transcribe(
                pcm[:closed], final=True, prev=self._seg, listener=self.over_answer
            )
            start = self._quiet_cut(pcm[: max(closed - _OVERLAP, 0)])
            rest = pcm[min(start, closed) :]
        if self._origin + closed > self._closed:
            if self._kept is not None:
                self._kept.append(pcm[self._closed - self._origin : closed].copy())
                if self._origin + closed > _REFINE_MAX:
                    self._kept = None
            self._closed = self._origin + closed
        self._texts.append(seg.text)
        self._head_before, self._head = self._head, merge_overlap(self._head, seg.text)
        self._before_cut = pcm[max(0, closed - _REHEAR) : closed].copy()
        self._roll()
        self._closed_ms += 1000.0 * (len(pcm) - len(rest)) / RATE_HZ
        self._origin += len(pcm) - len(rest)
        self._chunks = [rest.copy()] if len(rest) else []
        self._n, self._n_at_pass, self._seg, self._again = len(rest), 0, EMPTY, None
        ms = 1000.0 * (time.perf_counter() - t0)
        return Transcript(self._head, self._head, False, self._closed_ms, ms)

    def final(self) -> Transcript:
        """The final transcript; reuses the last pass when only silence was fed after it."""
        t0 = time.perf_counter()
        self._roll()
        reusable = self._reusable()
        last = self._again if reusable else None
        if last is None:
            last = self._short_last_again(self._n)
        if last is None:
            if not reusable:
                self._seg = self.asr.transcribe(
                    self.audio(), final=True, prev=self._seg, listener=self.over_answer
                )
                self._n_at_pass = self._n
            last = self._joined(self._seg)
        if self.over_answer and not self._texts and len(last.text.split()) > LISTENER_WORDS:
            # A request, not a listener's word: the usual prompt hears requests better (tool
            # requests 16.6 % WER against 21.4 % with the listener's).
            last = self.asr.transcribe(self.audio()[: self._n], final=True)
        ms = 1000.0 * (time.perf_counter() - t0)
        segments = (len(self._texts), self._prefix_k)
        return Transcript(
            last.text, last.text, True, last.audio_ms, ms, segments, last.logprob,
            last.alternatives, last.slower,
        )  # fmt: skip

    def _short_last_again(self, n: int) -> Transcript | None:
        """The turn up to sample ``n`` of a last segment of under _SHORT_LAST past its cut,
        heard again with the audio before the cut and joined to the turn's text before that
        audio: all of the last closed segment (and the overlap before it) where no whole pass
        covers it yet and all of it fits the short window, else its last _REHEAR. None for a
        turn without a cut, a longer last segment, or a pass that heard nothing (the segments'
        text stands). One pass of up to 9 s (6 s)."""
        new = self.audio()[max(0, self._closed - self._origin) : n]
        if not self._texts or len(new) >= _SHORT_LAST:
            return None
        kept = self._kept or []
        lead = kept[-2][-_OVERLAP:] if len(kept) >= 2 else new[:0]
        fits = bool(kept) and len(lead) + len(kept[-1]) + len(new) <= MAX_SHORT_S * RATE_HZ
        if fits and self._head_before is not None:
            pcm, head = np.concatenate([lead, kept[-1], new]), self._head_before
        else:
            pcm, head = np.concatenate([self._before_cut, new]), self._head
        seg = self.asr.transcribe(pcm, final=True, listener=self.over_answer)
        if not seg.text:
            return None
        text = merge_overlap(head, seg.text)
        audio_ms = self._closed_ms + 1000.0 * n / RATE_HZ
        return Transcript(text, text, True, audio_ms, seg.compute_ms, logprob=seg.logprob)

    def refinement(self) -> Future[str] | None:
        """After the final of a long turn (one with closed segments): one whole pass over all of
        its audio on the Refiner, asked for at the first call; None for a turn heard in one
        segment, one too long to keep, or without a Refiner. Its text replaces the turn's in
        the history: segments heard apart lack each other's context (7.9 % WER joined from
        segments, 5.6–5.9 % in one whole pass)."""
        if not self._kept or self.refiner is None:  # no Refiner, one segment, or too long to keep
            return None
        if self._rolling is not None:  # this pass covers more; one still queued is not needed
            self._rolling.cancel()
        rest = self.audio()[self._closed - self._origin : self._n]
        n = self._closed + len(rest)
        if self._refining is None or n > self._refined_n:  # asked again when the turn went on
            if self._refining is not None:
                self._refining.cancel()
            self._refining = None
            if n <= _REFINE_MAX:
                self._refining = self.refiner.submit(np.concatenate([*self._kept, rest]))
                self._refined_n = n
        return self._refining

    def _roll(self) -> None:
        """Take the newest whole pass over the closed segments into the turn's text once it is
        done, and ask for one over all of them when more have closed since (one at a time, on
        the Refiner). Two or more: a lone segment was already heard in one pass."""
        fut = self._rolling
        if fut is not None and fut.done():
            self._rolling = None
            if not fut.cancelled() and fut.exception() is None and fut.result():
                heads, self._prefix_k = [fut.result()], self._rolling_k
                for text in self._texts[self._prefix_k :]:
                    heads.append(merge_overlap(heads[-1], text))
                self._head = heads[-1]
                self._head_before = heads[-2] if len(heads) >= 2 else None
        k = len(self._texts)
        kept, refiner = self._kept, self.refiner
        if self._rolling is None and kept and refiner and k >= 2 and k > self._rolling_k:
            self._rolling = refiner.submit(np.concatenate(kept))
            self._rolling_k = k

    def _joined(self, seg: Transcript) -> Transcript:
        """A pass over the current segment preceded by the closed segments' text."""
        if not self._head:
            return seg
        text = merge_overlap(self._head, seg.text)
        stable = merge_overlap(self._head, seg.stable)
        audio_ms = self._closed_ms + seg.audio_ms
        return Transcript(text, stable, seg.final, audio_ms, seg.compute_ms, logprob=seg.logprob)

    def _reusable(self) -> bool:
        """The last pass covers all the speech fed: nothing new, or only silence after it, and
        the pass did not end inside a sound that went on."""
        if self._n == self._n_at_pass:
            return True
        if self._n_at_pass == 0:
            return False
        tail = self.audio()[self._n_at_pass :]
        return not sound_goes_on(tail, self.cfg.min_rms_dbfs) and not self.asr.has_speech(tail)

    @staticmethod
    def _quiet_cut(pcm: PCM16) -> int:
        """Sample index in the middle of the longest run of the quietest 30 ms windows in the
        last _CUT_SEARCH samples: a cut at the first of them ends the segment right on the last
        word, which Whisper then drops ("... in big glass [jars]")."""
        lo = max(0, len(pcm) - _CUT_SEARCH)
        if len(pcm) - lo <= FRAME:
            return len(pcm)
        power = np.cumsum(np.square(pcm[lo:].astype(np.float64)))  # (m,)
        energy = power[FRAME:] - power[:-FRAME]  # (m - 480,): 30 ms windows
        quiet = np.flatnonzero(energy <= 2.0 * energy.min() + FRAME)  # within 3 dB (or ~0)
        runs = np.split(quiet, np.flatnonzero(np.diff(quiet) > 1) + 1)
        run = max(runs, key=len)
        return lo + int(run[(len(run) - 1) // 2]) + FRAME // 2
