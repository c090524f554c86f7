"""One answer's words, made in the conversation's LM thread and cut into speakable clauses.

``ClauseStream.run`` iterates the LM's generation, cuts its text into clauses (the first one
early, after a few words, so TTS starts sooner), holds the first words back until the copy
check has read them, stops at the answer's last spoken sentence, and hands text and clauses to
the event loop. A speculative answer *parks* after its first clause (the iterator is kept, the
thread freed for others) and continues where it stopped on release.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from dllm_voice.app.conversation.text import normalize
from dllm_voice.app.tools.calls import prepare

if TYPE_CHECKING:
    import torch

    from dllm_voice.app.conversation.answer import Answer
    from dllm_voice.app.conversation.end_of_turn import EndScore
    from dllm_voice.app.conversation.ports import Chunker, Generation
    from dllm_voice.app.tools.calls import Call
    from dllm_voice.app.tools.chooser import Choice

# An answer whose first 4-8 words were said in an earlier answer is a copy, not an answer ("The
# capital of France is Paris." to a request for a joke); 3 words ("The capital of") legitimately
# start many answers.
COPY_MIN_WORDS = 4
COPY_WORDS = 8
# Once the first clause is handed out the LM waits (up to this long) for TTS to voice it: the
# user waits on that audio alone, and decoding the rest meanwhile slowed Piper's first clause
# from ~95 to 128 ms on 2 cores.
FIRST_AUDIO_WAIT_S = 0.5
# A chunk that ends a sentence (the chunker cuts at . ! ? only where a sentence ends).
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")
_WORD = re.compile(r"\S+")

Post = Callable[..., object]  # loop.call_soon_threadsafe
Tap = Callable[["torch.Tensor | None"], None]


def word_boundary(text: str, n: int) -> int | None:
    """Index just past the ``n``-th word of ``text`` when whitespace follows it (the word is
    whole), else None."""
    words = list(itertools.islice(_WORD.finditer(text), n))
    if len(words) < n:
        return None
    end = words[-1].end()
    return end if end < len(text) else None


def _after(pieces: Iterator[str], skip: int) -> Iterator[str]:
    """``pieces`` without their first ``skip`` characters."""
    for piece in pieces:
        if skip >= len(piece):
            skip -= len(piece)
            continue
        yield piece[skip:]
        skip = 0


def without_history(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The system message and the new user message only."""
    system = [m for m in messages[:1] if m["role"] == "system"]
    return [*system, messages[-1]]


class ClauseStream:
    """The text of answer ``ans``, pulled from the LM in its conversation's LM thread."""

    def __init__(
        self,
        ans: Answer,
        end_score: EndScore | None,
        choose: Callable[[torch.Tensor | None], Choice | None] | None = None,
    ) -> None:
        self.ans = ans
        # Takes P(end of the user's turn), which the generation's first forward reads on the way,
        # and the tool chosen on the same forward just before it.
        self._end_score = end_score
        # Picks a tool from the same row's hidden state; a tool chosen ends the generation
        # before any of its text leaves, and run() returns "tool" with the prepared ``call``.
        self._choose = choose
        self.choice: Choice | None = None
        self.call: Call | None = None
        self.generation: Generation | None = None
        self._iter: Iterator[str] | None = None
        self._prompt = ans.messages  # what the generation was asked (without history on a retry)
        self._chunker: Chunker | None = None
        self._uncut: str | None = ""  # text before the first chunk; None once it is cut
        self._sentences = 0  # sentence ends among the chunks spoken so far
        self._spoken_text = ""  # the chunks handed to TTS, joined
        self._pushed_chars = 0  # text the generation handed out
        self._first_posted = False
        # Text not handed out until the copy check; None after it, or with nothing to copy.
        self._held: str | None = ""
        self._held_chunks: list[str] = []
        self._first_clause_out = False  # the LM thread handed out the first clause

    def run(self, park_after_clause: bool, post: Post) -> str:
        """In the LM thread: pull text, chunk it, hand both to the loop; "done", "parked" (a
        speculation after its first clause) or "cancelled"."""
        ans = self.ans
        if ans.cancel_event.is_set():
            return "cancelled"
        if self._iter is None:
            self._start(ans.messages)
        elif self._gen.superseded:
            self._regenerate()
        self._yield_to_first_audio()  # a speculation released after its first clause
        conv = ans.s.cfg.conversation
        for piece in self._iter or ():
            if self.choice is not None:
                return self._prepare_call()
            self._pushed_chars += len(piece)
            if not self._first_posted:
                self._first_posted = True
                post(ans.on_first_token)
            chunks = self._cut(piece, conv.first_clause_max_words)
            if self._held is not None:
                # Nothing leaves this thread before the answer's first words are checked.
                self._held += piece
                self._held_chunks += chunks
                if not self._held_chunks or len(self._held.split()) < COPY_MIN_WORDS:
                    continue
                if self._copies_history(self._held):
                    post(ans.on_retry, self._held.strip())
                    self._start(without_history(ans.messages))
                    return self.run(park_after_clause, post)
                piece, chunks = self._held, self._held_chunks
                self._held, self._held_chunks = None, []
            chunks = self._spoken(chunks)
            post(ans.on_text, piece, chunks, list(self._gen.token_ids))
            if self._sentences >= conv.max_spoken_sentences > 0:
                self._gen.close("sentences")  # no forward past the last spoken sentence
                break
            self._first_clause_out = self._first_clause_out or bool(chunks)
            if park_after_clause and chunks and ans.speculative:
                return "parked"
            self._yield_to_first_audio()
        if ans.cancel_event.is_set():
            return "cancelled"
        if self.choice is not None:
            return self._prepare_call()
        self._end(post)
        return "done"

    def _prepare_call(self) -> str:
        """The chosen tool's call, its arguments read in this (the LM) thread."""
        assert self.choice is not None
        self._gen.close("tool")
        s = self.ans.s
        request = self.ans.messages[-1]["content"]
        self.call = prepare(
            self.choice, request, s.lm_session, s.c.lm.tokenizer, self.ans.cancel_event
        )
        return "tool" if self.call is not None else "cancelled"

    def _scored(self, end_score: EndScore) -> Callable[[float | None], None]:
        """What takes the first forward's P(end of turn): ``end_score`` with the tool chosen on
        the same forward (the engine hands out the hidden state first)."""

        def take(p: float | None) -> None:
            end_score(p, self.choice)

        return take

    def _on_state(self, choose: Callable[[torch.Tensor | None], Choice | None]) -> Tap:
        """What takes the first forward's hidden state: ``choose`` (the tap fires after
        ``_start`` has dropped it, which a retry must not get)."""

        def take(state: torch.Tensor | None) -> None:
            self.choice = choose(state)

        return take

    @property
    def _gen(self) -> Generation:
        assert self.generation is not None, "run() starts the generation"
        return self.generation

    def _cut(self, piece: str, first_clause_max_words: int) -> list[str]:
        """The clauses ``piece`` completes; with no punctuation yet after the first
        ``first_clause_max_words`` words, the first clause ends at that word, so TTS starts on
        3 words (~68 ms of Piper) instead of a whole sentence."""
        assert self._chunker is not None
        chunks: list[str] = []
        rest = piece
        if first_clause_max_words and self._uncut is not None:
            end = word_boundary(self._uncut + piece, first_clause_max_words)
            if end is not None:
                cut = max(0, end - len(self._uncut))
                chunks = self._chunker.push(piece[:cut]) + self._chunker.flush()
                rest = piece[cut:]
        chunks += self._chunker.push(rest)
        if self._uncut is not None:
            self._uncut = None if chunks else self._uncut + piece
        return chunks

    def _end(self, post: Post) -> None:
        """Hand out what the generation's end leaves: held text, the chunker's last clause."""
        assert self._chunker is not None
        gen = self._gen
        stop = gen.stats.stop_reason
        rest, tail = self._held or "", self._held_chunks
        tail += [] if stop == "sentences" else self._chunker.flush()
        if stop == "loop" and len(gen.text) < self._pushed_chars:
            # The loop guard took back text it had handed out: speak only what it kept.
            rest, tail = (gen.text, [gen.text.strip()]) if self._held is not None else ("", [])
        post(self.ans.on_text, rest, self._spoken([t for t in tail if t]), list(gen.token_ids))
        text = self._spoken_text if stop == "sentences" else gen.text
        post(self.ans.on_lm_end, gen.stats, text)

    def _start(self, messages: list[dict[str, str]]) -> None:
        ans = self.ans
        if self.generation is not None:
            self.generation.close()
        self._chunker = ans.s.c.new_chunker(ans.s.cfg.tts)
        self._uncut, self._sentences, self._spoken_text, self._pushed_chars = "", 0, "", 0
        self._prompt = messages
        # Only a prompt with earlier answers in it can be copied (a retry has none): the rest
        # go out unchecked.
        copyable = any(m["role"] == "assistant" for m in messages[:-1])
        self._held, self._held_chunks = ("" if copyable else None), []
        self.generation = ans.s.lm_session.generate(
            messages,
            cancel=ans.cancel_event,
            drafts=ans.drafts,
            end_score=self._scored(self._end_score) if self._end_score is not None else None,
            turn_state=self._on_state(self._choose) if self._choose is not None else None,
        )
        self._end_score = self._choose = None  # a retry's prompt is not the scored one
        self._iter = iter(self.generation)

    def _regenerate(self) -> None:
        """Generate again after another LM job took the session's cache from this parked
        answer (the end-of-turn score of a later pass over the same words): the same prompt
        gives the same tokens (greedy, the default), which go in as drafts, so the decoder
        verifies them in a forward or two; the text already handed out is skipped."""
        old = self._gen
        self.generation = self.ans.s.lm_session.generate(
            self._prompt, cancel=self.ans.cancel_event, drafts=list(old.token_ids)
        )
        self._iter = _after(iter(self.generation), self._pushed_chars)

    def _yield_to_first_audio(self) -> None:
        """In the LM thread: once the first clause is out, no forward until it is voiced."""
        if self._first_clause_out and not self.ans.first_voiced.is_set():
            self.ans.first_voiced.wait(FIRST_AUDIO_WAIT_S)

    def _copies_history(self, text: str) -> bool:
        """The answer starts with 4-8 words said in an answer in the prompt's history: a small
        model leaning on the last exchange instead of answering ("Mars is a terrestrial
        planet" after the user cut off "My planet Mars is a terrestrial"); the new turn then
        goes without history."""
        words = normalize(text).split()[:COPY_WORDS]
        n = len(words)
        for m in self.ans.messages[:-1]:
            said = normalize(m["content"]).split() if m["role"] == "assistant" else []
            if any(said[i : i + n] == words for i in range(len(said) - n + 1)):
                return True
        return False

    def _spoken(self, chunks: list[str]) -> list[str]:
        """The chunks up to the answer's last spoken sentence (conversation.max_spoken_sentences);
        counts sentence ends."""
        limit = self.ans.s.cfg.conversation.max_spoken_sentences
        out: list[str] = []
        for chunk in chunks:
            if limit and self._sentences >= limit:
                break
            out.append(chunk)
            self._spoken_text = f"{self._spoken_text} {chunk}".strip()
            if _SENTENCE_END.search(chunk):
                self._sentences += 1
        return out
