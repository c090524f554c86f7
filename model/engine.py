"""The LM API the app uses: LM (weights + tokenizer), ChatSession (one KV cache per
conversation), Generation (a lazy, cancellable stream of committed text) and its stats.

A generation runs in whatever thread iterates it. Per forward pass it advances the decoder one
step, then handles what the decoder committed: stop tokens, max tokens, stop strings, UTF-8-safe
detokenization; `cancel` is checked before every forward. KV reuse: the session remembers which
token ids its cache holds; a new call keeps the longest common prefix with the new prompt and
prefills only the rest, whatever changed (new turn, edited history, dropped old turns).
"""

from __future__ import annotations

import copy
import logging
import re
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import asdict, dataclass

import torch

from dllm_voice.model import (
    decode,
    hybrid,  # noqa: F401  (importing it registers the hybrid and parallel decoders)
    loader,
)
from dllm_voice.model import profile as profiles
from dllm_voice.model.batch import StepBatcher
from dllm_voice.model.config import LMConfig
from dllm_voice.model.errors import ContextOverflowError
from dllm_voice.model.repeat import RepeatGuard
from dllm_voice.model.tokenizer import Tokenizer
from dllm_voice.model.transformer import Transformer

log = logging.getLogger(__name__)
# What Transformer.cpu_kernel names, for the startup log line.
CPU_KERNELS = {
    "vnni": "integer products on the GGUF blocks (AVX-512 VNNI, or AVX2 for 8-bit codes)",
    "quant": "fp32 products on the GGUF blocks",
    "rows": "fp32 panels",
    "onednn": "oneDNN",
    "plain": "F.linear",
}

# Cache rows beyond the context budget: room for a hybrid decoder's verify rows at the very end
# of an answer (they are written, then rolled back).
CACHE_SLACK = 64
_TRAILING_MARKS = re.compile(r"[\s.?!,;:\u2026]+$")  # a transcript's final marks, "..." too


def _ignore(_: object) -> None:
    pass


# What generate(end_score=, turn_state=) asks of its first forward: the scored prompt and the
# index of its end token (None: nothing to score), and who takes the score and the state.
_Tap = tuple[
    tuple[list[int], int] | None,
    Callable[[float | None], None],
    Callable[[torch.Tensor | None], None],
]


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens reused from the session's KV cache
    new_tokens: int = 0
    forwards: int = 0  # forward passes, prefill chunks included
    ttft_ms: float = 0.0  # first iteration -> first committed token
    total_ms: float = 0.0
    tokens_per_s: float = 0.0  # decode rate after the first token: (new - 1) / (total - ttft)
    stop_reason: str = ""  # eos | stop | length | loop | cancelled | closed

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


class LM:
    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        cfg: LMConfig,
        profile: profiles.Profile | None = None,
    ) -> None:
        self.model, self.tokenizer, self.profile = model, tokenizer, profile
        self.cfg = cfg if profile is None else profile.apply(cfg)
        self.device = model.embed.weight.device
        # Every session's forwards go through it: concurrent sessions' steps run as one forward.
        self.batcher = StepBatcher(model)
        _ = tokenizer.token_bytes  # build the detokenizer table now, not in the first answer

    @classmethod
    def load(cls, cfg: LMConfig) -> LM:
        """Weights + tokenizer from cfg.path; ModelLoadError with a one-line reason on failure."""
        decode.get_decoder(cfg.decoder)  # fail at startup, not at the first answer
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        model, tok = loader.load(cfg.path, cfg.device, cfg.dtype)
        decode.prepare(cfg.decoder, model, cfg)
        dev = model.embed.weight.device
        kernel = CPU_KERNELS[model.cpu_kernel] if dev.type == "cpu" else str(dev)
        log.info("lm: %s, %s decoding, %s", cfg.path or "bundled SmolLM2-135M", cfg.decoder, kernel)
        profile = profiles.find(cfg, model)
        if profile is not None:
            log.info("lm: decoding profile %s: %s", profile.path, profile.settings)
        return cls(model, tok, cfg, profile)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def session(self) -> ChatSession:
        return ChatSession(self)


class ChatSession:
    """One conversation: one KV cache and the token ids it holds. Not thread-safe: one
    generation at a time; starting a new one ends the previous one (stop_reason cancelled)."""

    def __init__(self, lm: LM) -> None:
        self.lm = lm
        self.cache = lm.model.new_cache(lm.cfg.context_tokens + CACHE_SLACK)
        self._seq: list[int] = []  # the cache holds self._seq[: cache.length]
        self._active: Generation | None = None

    @property
    def cfg(self) -> LMConfig:
        return self.lm.cfg

    def configure(self, cfg: LMConfig) -> None:
        """This conversation's LM settings (decoder, sampling) from its next generation on; the
        weights and the KV cache stay (a new cache is ~100 MB to zero)."""
        lm = copy.copy(self.lm)  # the weights and the batcher stay shared with other sessions
        use = lm.profile is not None and cfg.profile != "none"
        lm.cfg = lm.profile.apply(cfg) if use else cfg
        self.lm = lm

    @property
    def cached_ids(self) -> list[int]:
        return self._seq[: self.cache.length]

    def fit_budget(self, messages: Sequence[dict[str, str]], max_new: int) -> list[int]:
        """Prompt ids for `messages`, dropping the oldest non-system turns (a user message and
        the assistant reply after it) until prompt + max_new fits lm.context_tokens; a last
        message that alone does not fit keeps its last words (where a long turn's request is)."""
        budget = self.lm.cfg.context_tokens - max_new
        msgs = list(messages)
        ids = self.lm.tokenizer.apply_chat(msgs)
        while len(ids) > budget:
            first = next((i for i, m in enumerate(msgs) if m["role"] != "system"), len(msgs))
            if first >= len(msgs) - 1:
                return self._last_words_that_fit(msgs, budget, max_new)
            del msgs[first]
            if first < len(msgs) - 1 and msgs[first]["role"] == "assistant":
                del msgs[first]
            ids = self.lm.tokenizer.apply_chat(msgs)
        return ids

    def _last_words_that_fit(
        self, msgs: list[dict[str, str]], budget: int, max_new: int
    ) -> list[int]:
        """Prompt ids with the last message cut to its last words that fit ``budget``."""
        apply = self.lm.tokenizer.apply_chat
        *head, last = msgs
        words = last["content"].split()
        n = min(len(words), budget)  # a word is at least one token: no longer tail can fit
        while n > 0:
            ids = apply([*head, {**last, "content": " ".join(words[-n:])}])
            if len(ids) <= budget:
                log.warning("a %d-word message kept its last %d words to fit", len(words), n)
                return ids
            n = min(n - 1, n * budget // len(ids))
        raise ContextOverflowError(
            f"the prompt without its last message's words + {max_new} new tokens exceeds "
            f"lm.context_tokens={self.lm.cfg.context_tokens}; raise it or shorten the system prompt"
        )

    def reuse_prefix(self, prompt: list[int]) -> int:
        """Keep the longest common prefix of the cache and `prompt` (at least one prompt token
        left to feed), drop the rest; the cache now holds prompt[:returned]."""
        cached, keep = self.cached_ids, 0
        limit = min(len(cached), len(prompt) - 1)
        while keep < limit and cached[keep] == prompt[keep]:
            keep += 1
        self.cache.truncate(keep)
        self._seq = list(prompt)
        return keep

    def prefill(
        self, messages: Sequence[dict[str, str]], *, cancel: threading.Event | None = None
    ) -> int:
        """Warm the cache with `messages` before an answer is wanted (the system prompt at
        session start, a stable partial transcript while the user still speaks): a later
        generate() on the same or an extended conversation then feeds only what changed.
        Ends any running generation; checks `cancel` between chunks. Returns cached tokens."""
        self._active = None
        ids = self.fit_budget(messages, self.lm.cfg.max_new_tokens)
        self.reuse_prefix(ids)
        # The last token is fed by generate(), which needs its logits.
        self._feed(ids, len(ids) - 1, cancel, logits=False)
        return self.cache.length

    def extend(
        self, ids: list[int], *, cancel: threading.Event | None = None
    ) -> torch.Tensor | None:
        """The logits (vocab,) that follow ``ids``: the cache keeps its common prefix with them
        and the rest goes in one forward (a prefill's chunks for a long rest), so a constrained
        decoder's forced tokens and its chosen one cost one forward together. None when
        cancelled. Ends any running generation."""
        self._active = None
        self.reuse_prefix(ids)
        fed = self._feed(ids, len(ids), cancel, logits=True)
        return None if fed is None else fed[0]

    def _feed(
        self, ids: list[int], end: int, cancel: threading.Event | None, *, logits: bool
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Feed ids[cache.length:end] in chunks, `cancel` checked between them. With `logits`,
        the last fed row's logits (vocab,) and final-normed hidden state (dim,); None when
        cancelled or nothing was fed."""
        last = None
        with torch.inference_mode():
            while self.cache.length < end:
                if cancel is not None and cancel.is_set():
                    return None
                n = self.cache.length
                stop = min(end, n + decode.PREFILL_CHUNK)
                want = logits and stop == end
                out = self.lm.batcher(
                    torch.tensor([ids[n:stop]], device=self.lm.device),
                    cache=self.cache,
                    logits="last" if want else "none",
                    hidden=want,
                )
                if want and out.logits is not None and out.hidden_normed is not None:
                    last = (out.logits[0, -1], out.hidden_normed[0, -1])
        return last

    def end_of_turn(
        self, messages: Sequence[dict[str, str]], *, cancel: threading.Event | None = None
    ) -> float | None:
        """P(the last user message is complete): the probability the model gives, right after
        that message's words, to its template's end-of-message token (<|im_end|>, <|eot_id|>)
        or a sentence end (. ? !). The message's own final marks are not read: a speech
        recognizer punctuates cut speech too ("What is the capital of?"), and without them the
        two kinds of transcript separate better (ROC AUC 0.996 vs 0.965, bench/end_of_turn.py).
        The prompt shares all but the last token or two with an answer's to the same messages,
        so generate(..., end_score=) reads the same score on its first forward (no forward of
        its own), and a generate() after this call feeds little more than the assistant
        header. None where the template ends a user message with no
        stop token (Mistral's [/INST]) or when cancelled."""
        self._active = None
        return self._score(self._end_probe(messages), cancel)[0]

    def _end_probe(self, messages: Sequence[dict[str, str]]) -> tuple[list[int], int] | None:
        """The scored prompt (the last message without its final marks) and the index of the
        end-of-message token the score reads; None where there is none or no words."""
        *past, last = messages
        words = _TRAILING_MARKS.sub("", last["content"])
        ids = self.fit_budget([*past, {**last, "content": words}], self.lm.cfg.max_new_tokens)
        close = self.lm.tokenizer.user_end_id  # the template's end of a user message
        end = next((i for i in range(len(ids) - 1, 0, -1) if ids[i] == close), 0)
        return (ids, end) if end and words else None

    def _p_end(self, logits: torch.Tensor, ids: list[int], end: int) -> float:
        probs = torch.softmax(logits.float(), dim=-1)
        return float(probs[[ids[end], *self.lm.tokenizer.sentence_end_ids]].sum())

    def _score(
        self, probe: tuple[list[int], int] | None, cancel: threading.Event | None
    ) -> tuple[float | None, torch.Tensor | None]:
        """P(end) and the hidden state of the probe's scored row; (None, None) without one."""
        if probe is None:
            return None, None
        ids, end = probe
        self.reuse_prefix(ids[:end])  # leaves at least one token to feed
        fed = self._feed(ids, end, cancel, logits=True)
        if fed is None:
            return None, None
        logits, state = fed
        return self._p_end(logits, ids, end), state

    def generate(
        self,
        messages: Sequence[dict[str, str]],
        *,
        cancel: threading.Event | None = None,
        max_new_tokens: int | None = None,
        decoder: str | None = None,
        drafts: list[int] | None = None,
        stop: Sequence[str] = (),
        end_score: Callable[[float | None], None] | None = None,
        turn_state: Callable[[torch.Tensor | None], None] | None = None,
    ) -> Generation:
        """Stream the assistant's answer to `messages`; nothing runs until iterated.

        stop: extra stop strings (the text is cut before them); stop tokens (EOS, <|im_end|>)
        always apply. drafts: an earlier answer's token ids for refining decoders (ar ignores).
        end_score: called, in the iterating thread before the first text, with what
        end_of_turn(messages) would return. The score's row is one of the prompt rows the
        first forward feeds anyway (the user's last word, before its final mark and the
        assistant header), so it costs no forward of its own; where the two prompts part
        earlier (a mark the tokenizer merges into the word) it is one forward before them.
        turn_state: called likewise, just before end_score, with that row's final-normed hidden
        state (dim,), which the tool chooser reads (None where end_score would get None): the
        end-of-turn decision reads the tool chosen.
        """
        cfg = self.lm.cfg
        max_new = cfg.max_new_tokens if max_new_tokens is None else max_new_tokens
        dec = decode.get_decoder(decoder or cfg.decoder)
        prompt = self.fit_budget(messages, max_new)
        score = None
        if end_score is not None or turn_state is not None:
            score = (self._end_probe(messages), end_score or _ignore, turn_state or _ignore)
        gen = Generation(self, prompt, dec, max_new, cancel, drafts, tuple(stop), score)
        self._active = gen
        return gen


class Generation:
    """Iterator of committed text increments (valid UTF-8 pieces); see module docstring."""

    def __init__(
        self,
        session: ChatSession,
        prompt: list[int],
        decoder: decode.Decoder,
        max_new: int,
        cancel: threading.Event | None,
        drafts: list[int] | None,
        stop: tuple[str, ...],
        score: _Tap | None = None,
    ) -> None:
        self.session, self.prompt = session, prompt
        self.text = ""
        self.token_ids: list[int] = []
        self.stats = GenerationStats(prompt_tokens=len(prompt))
        self._cancel = cancel
        self._stop = stop
        self._guard = RepeatGuard() if session.lm.cfg.loop_guard else None
        # ChatSession.generate's end_score and turn_state: the scored prompt and its end, and
        # the two callbacks.
        self._score = score
        self._it = self._run(decoder, max_new, drafts)

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        return next(self._it)

    def close(self, reason: str = "closed") -> None:
        """Stop decoding now (no further forward); ``stats.stop_reason`` becomes ``reason``."""
        if not self.stats.stop_reason:
            self.stats.stop_reason = reason
        self._it.close()

    def _take_loop(self, held: str) -> bool:
        """Whether the text so far (emitted + held) has fallen into a repetition loop."""
        if self._guard is None:
            return False
        self._guard.check(self.text + held)
        return self._guard.loop

    def _release(self, piece: str, held: str, final: bool) -> tuple[str, str]:
        """Hold back the part of ``piece`` where a repetition may be forming (RepeatGuard)."""
        if self._guard is None or final:
            return piece, held
        safe = max(self._guard.check(self.text + piece) - len(self.text), 0)
        return piece[:safe], piece[safe:] + held

    def _tap(self) -> tuple[int | None, Callable[[torch.Tensor, torch.Tensor], None] | None]:
        """The prompt row the end-of-turn score reads and what takes its logits (None, None:
        no score wanted, or it was given already: no words to score, or a prompt that parts
        from the scored one before that row, which is then fed on its own first)."""
        if self._score is None:
            return None, None
        probe, on_score, on_state = self._score
        if probe is not None and self.prompt[: probe[1]] == probe[0][: probe[1]]:
            ids, end = probe

            def on_tap(logits: torch.Tensor, state: torch.Tensor) -> None:
                on_state(state)
                on_score(self.session._p_end(logits, ids, end))

            return end - 1, on_tap
        p, state = self.session._score(probe, self._cancel)
        on_state(state)
        on_score(p)
        return None, None

    @property
    def superseded(self) -> bool:
        """Another call on the session (a generation, an end-of-turn score, a prefill) has
        taken its cache since: iterated on, it stops (stop_reason "cancelled")."""
        return self.session._active is not self

    def _cancelled(self) -> bool:
        return self.superseded or (self._cancel is not None and self._cancel.is_set())

    def _run(
        self, decoder: decode.Decoder, max_new: int, drafts: list[int] | None
    ) -> Generator[str, None, None]:
        s, lm, st = self.session, self.session.lm, self.stats
        t0 = time.perf_counter()
        if self._cancelled():
            st.stop_reason = "cancelled"
            return
        # 1. Reuse the longest common prefix of cache and prompt (keep >= 1 token to prefill).
        tap, on_tap = self._tap()
        st.cached_tokens = s.reuse_prefix(self.prompt)
        if tap is not None and s.cache.length > tap:
            s.cache.truncate(tap)  # the scored row is fed again
            st.cached_tokens = tap
        cfg = lm.cfg
        req = decode.DecodeRequest(
            model=lm.model,
            forward=lm.batcher,
            sharing=lm.batcher.sessions,
            cache=s.cache,
            prompt=self.prompt,
            sampler=decode.Sampler(cfg.temperature, cfg.top_p, cfg.seed, lm.device),
            max_new_tokens=max_new,
            stop_ids=lm.tokenizer.stop_ids,
            cfg=cfg,
            drafts=drafts,
            tap=tap,
            on_tap=on_tap,
        )
        steps = decoder(req)
        detok = lm.tokenizer.stream()
        held = ""  # decoded text not yet emitted: it may be the start of a stop string
        t_first = None
        # 2. One decoder step (= one forward) per iteration, cancel checked before each.
        try:
            while True:
                if self._cancelled():
                    st.stop_reason = "cancelled"
                    break
                with torch.inference_mode():
                    committed = next(steps, None)
                if committed is None:  # decoder exhausted: only after max_new tokens
                    committed, st.stop_reason = [], "length"
                else:
                    st.forwards += 1
                s._seq.extend(committed)
                # Token by token, as ar commits them, so every decoder stops at the same token.
                for t in committed:
                    if t in lm.tokenizer.stop_ids:
                        st.stop_reason = "eos"
                        break
                    self.token_ids.append(t)
                    if len(self.token_ids) >= max_new:
                        st.stop_reason = "length"
                    held += detok.push([t])
                    if self._take_loop(held):
                        st.stop_reason = "loop"
                        break
                    if st.stop_reason:
                        break
                if self.token_ids and t_first is None:
                    t_first = time.perf_counter()
                    st.ttft_ms = (t_first - t0) * 1e3
                st.new_tokens = len(self.token_ids)
                if st.stop_reason == "loop":
                    assert self._guard is not None  # only the guard ends an answer as a loop
                    kept = self._guard.kept(self.text + held)
                    emitted, self.text = self.text, kept
                    if len(kept) > len(emitted) and kept.startswith(emitted):
                        yield kept[len(emitted) :]  # held back but before the loop: its end
                    break
                piece, held, hit = _split_stop(held, self._stop, final=bool(st.stop_reason))
                if hit:
                    st.stop_reason = "stop"
                piece, held = self._release(piece, held, final=bool(st.stop_reason))
                if piece:
                    self.text += piece
                    yield piece
                if st.stop_reason:
                    break
        finally:
            steps.close()
            lm.batcher.leave()  # other sessions' steps stop waiting for this one's
            # 3. Stats: whatever ended the loop (exhaustion, break, or the consumer closing us).
            t_end = time.perf_counter()
            st.new_tokens = len(self.token_ids)
            st.total_ms = (t_end - t0) * 1e3
            if t_first is not None and st.new_tokens > 1 and t_end > t_first:
                st.tokens_per_s = (st.new_tokens - 1) / (t_end - t_first)
            st.stop_reason = st.stop_reason or "cancelled"


def _split_stop(text: str, stops: tuple[str, ...], final: bool) -> tuple[str, str, bool]:
    """(emit, hold, hit): cut at the first stop string; else hold back a suffix that could
    still grow into one (everything is emitted when `final`)."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    if cut >= 0:
        return text[:cut], "", True
    if final:
        return text, "", False
    hold = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:n]):
                hold = n
                break
    return text[: len(text) - hold], text[len(text) - hold :], False
