"""One answer's playback: its synthesized audio written to the sink, and what the user heard.

``Playback`` keeps the answer's audio as segments (one per TTS piece, tagged with its clause),
writes it in 20 ms slices once the answer is released and not held, and tracks where the
answer's sample 0 sits in the sink's played-sample count, so that after a flush ``heard_text``
knows which words the user actually heard.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dllm_voice.app.observe.trace import now_ms

if TYPE_CHECKING:
    from dllm_voice.app.conversation.answer import Answer

# Sink writes are cut to 20 ms slices so a hold or cancel lands between two slices at worst.
SLICE_MS = 20


@dataclass
class _Segment:
    start: int  # answer sample offset
    pcm: np.ndarray
    text: str
    clause: int


class Playback:
    """The audio of answer ``ans``, played to its session's sink."""

    def __init__(self, ans: Answer) -> None:
        self.ans = ans
        self.held = False
        self._unheld = asyncio.Event()
        self._unheld.set()
        self._epoch = 0  # bumped by every hold, so an in-flight write knows it was flushed
        self._segments: list[_Segment] = []
        self.total_samples = 0
        self.cursor = 0  # answer offset of the next sample to write
        self.base: int | None = None  # sink played-sample position of answer offset 0
        self.tts_done = False
        self._new_audio = asyncio.Event()

    def add(self, pcm: np.ndarray, text: str, clause: int) -> None:
        """Synthesized audio of ``clause`` (whose text is ``text``), at the sink's rate."""
        self._segments.append(_Segment(self.total_samples, pcm, text, clause))
        self.total_samples += len(pcm)
        self._new_audio.set()

    def end(self) -> None:
        """No more audio will come."""
        self.tts_done = True
        self._new_audio.set()

    def _slice(self, n: int) -> np.ndarray:
        for seg in reversed(self._segments):
            if seg.start <= self.cursor:
                off = self.cursor - seg.start
                return seg.pcm[off : off + n]
        return np.zeros(0, dtype=np.int16)

    async def run(self) -> None:
        """Play the answer once released, to its end or its cancel."""
        ans, sink = self.ans, self.ans.s.sink
        slice_n = max(1, sink.sample_rate_hz * SLICE_MS // 1000)
        await ans.released.wait()
        while not ans.cancelled:
            if self.held:
                await self._unheld.wait()
                continue
            if self.cursor < self.total_samples:
                if self.base is None and not ans.s.may_play():
                    await asyncio.sleep(SLICE_MS / 1000)  # an unsure end: silent a while yet
                    continue
                pcm = self._slice(slice_n)
                if self.base is None:
                    self.base = ans.s.sink_cursor - self.cursor
                    ans.times["audio_out_first"] = now_ms()
                    ans.s.on_audio_started(ans)
                epoch = self._epoch
                await sink.write(pcm)
                if self._epoch != epoch or ans.cancelled:
                    self.stop()  # the slice may have landed after the flush
                    continue
                self.cursor += len(pcm)
                ans.s.sink_cursor += len(pcm)
            elif self.tts_done:
                if self.base is None or sink.played_samples >= self.base + self.total_samples:
                    ans.finish("completed")
                    return
                await asyncio.sleep(0.01)
            else:
                self._new_audio.clear()
                await self._new_audio.wait()

    def stop(self) -> None:
        """Flush the sink and rewind the cursor to the first sample the user did not hear."""
        s = self.ans.s
        s.sink.flush()
        played = s.sink.played_samples
        s.sink_cursor = played
        if self.base is not None:
            heard = min(max(played - self.base, 0), self.cursor)
            self.cursor = heard
            self.base = played - heard

    def hold(self) -> None:
        self.held = True
        self._unheld.clear()
        self._epoch += 1
        self.stop()

    def resume(self) -> None:
        self.held = False
        self._unheld.set()

    def cancel(self) -> None:
        """Drop the unplayed audio and let the playback task end."""
        if self.base is not None:
            self.stop()
        self._unheld.set()
        self._new_audio.set()

    def heard_samples(self) -> int:
        if self.base is None:
            return 0
        return min(max(self.ans.s.sink.played_samples - self.base, 0), self.cursor)

    def heard_text(self) -> str:
        """The words the user heard: whole clauses, plus the played share of the current one."""
        heard = self.heard_samples()
        clauses: dict[int, list[int]] = {}  # clause -> [samples, samples heard]
        texts: dict[int, str] = {}
        for seg in self._segments:
            c = clauses.setdefault(seg.clause, [0, 0])
            c[0] += len(seg.pcm)
            c[1] += min(max(heard - seg.start, 0), len(seg.pcm))
            texts[seg.clause] = seg.text
        words: list[str] = []
        for idx in sorted(clauses):
            total, got = clauses[idx]
            w = texts[idx].split()
            if got >= total:
                words += w
            else:
                # Piper speaks at a near-even word rate, so the played share of the clause's
                # samples picks the word being spoken (kept: the user heard it start).
                words += w[: int(np.ceil(len(w) * got / max(total, 1)))]
                break
        return " ".join(words)
