"""Decoders: the token loops behind ChatSession.generate, and their registry.

A decoder is a generator function taking a DecodeRequest and yielding, once per forward pass,
the list of token ids that pass committed (possibly empty, e.g. a prefill chunk). Contract:
- on entry the cache holds `prompt[:cache.length]` (the reused prefix, at least one token short
  of the prompt); the decoder prefills the rest, and hands the logits of the prompt row
  `req.tap` (when set, and among the rows it feeds) to `req.on_tap` from the forward that
  feeds it;
- whenever it yields, the cache holds a prefix of `prompt + every token yielded so far`
  (rejected draft rows already rolled back), so the session can reuse it next turn;
- it may be abandoned at any yield (EOS, stop string, max tokens, cancel): the engine owns
  those decisions and never resumes it after.
Decoders run inside torch.inference_mode (entered by the engine around every step) and run the
model through `req.run`, which may batch their forward with other sessions' (model/batch.py).
`ar` lives here; model/hybrid.py registers `hybrid` and `parallel` with @register when it is
imported (model/engine.py imports it), so this module imports no decoder.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

import torch

from dllm_voice.kernels import cpu_rows
from dllm_voice.model.config import LMConfig
from dllm_voice.model.errors import UnknownDecoderError
from dllm_voice.model.kv_cache import KVCache
from dllm_voice.model.transformer import Forward, Transformer

# Prompt rows per prefill forward: bounds the time between cancel checks on long prompts
# (a 2000-token history is 8 forwards, each checked), while the chunks stay large enough for
# matrix-matrix products.
PREFILL_CHUNK = 256
TOP_P_CANDIDATES = 1024


class Sampler:
    """Greedy (temperature 0) or seeded temperature + top-p sampling over one logits row."""

    def __init__(self, temperature: float, top_p: float, seed: int, device: torch.device) -> None:
        self.temperature, self.top_p = temperature, top_p
        self.greedy = temperature <= 0.0
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def nucleus(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., V) logits -> (probs, ids), each (..., N): the top-p nucleus, most likely first,
        zeros past each row's nucleus, renormalized. N = V without top-p."""
        p = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p >= 1.0:
            return p, torch.arange(p.shape[-1], device=p.device).expand_as(p)
        # The nucleus is a prefix of the sorted order: when the top 1024 already hold top_p of
        # the mass (nearly always) a partial topk (0.3 ms) replaces the full sort (18 ms).
        k = min(p.shape[-1], TOP_P_CANDIDATES)
        sorted_p, order = p.topk(k, dim=-1)  # descending
        if k < p.shape[-1] and bool((sorted_p.sum(-1) < self.top_p).any()):
            sorted_p, order = p.sort(dim=-1, descending=True)
        # Keep the smallest head whose mass reaches top_p (the top token is always kept).
        drop = sorted_p.cumsum(-1) - sorted_p >= self.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        return sorted_p / sorted_p.sum(-1, keepdim=True), order

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V) logits -> (..., V) float32 probabilities after temperature and top-p."""
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        sorted_p, order = self.nucleus(logits)
        return torch.zeros_like(logits, dtype=torch.float32).scatter_(-1, order, sorted_p)

    def sample_probs(self, p: torch.Tensor) -> int:
        return int(torch.multinomial(p, 1, generator=self.generator))

    def __call__(self, logits: torch.Tensor) -> int:
        """One token id from a (V,) logits row (sampled within the nucleus: multinomial over
        49K entries costs 8.6 ms, over the nucleus a few microseconds)."""
        if self.greedy:
            return cpu_rows.argmax(logits)[0]
        sorted_p, order = self.nucleus(logits)
        return int(order[self.sample_probs(sorted_p)])


@dataclass
class DecodeRequest:
    model: Transformer
    cache: KVCache
    prompt: list[int]
    sampler: Sampler
    max_new_tokens: int
    stop_ids: frozenset[int]
    cfg: LMConfig
    drafts: list[int] | None = None  # an earlier answer's ids as first drafts (refinement)
    # The model's forward as this request runs it (`run`): model/batch.py's StepBatcher where
    # sessions share one model (their steps run as one forward); the model itself by default.
    forward: Forward | None = None
    # How many sessions' steps share a forward now (StepBatcher.sessions): a hybrid decoder's
    # verify rows then cost every one of them time.
    sharing: Callable[[], int] = lambda: 1
    # A prompt row the caller reads too (the end-of-turn score's and the tool chooser's,
    # ChatSession): its prefill forward computes it as well and hands on_tap its logits (V,)
    # and final-normed hidden state (dim,), once.
    tap: int | None = None
    on_tap: Callable[[torch.Tensor, torch.Tensor], None] | None = None

    def __post_init__(self) -> None:
        self.run: Forward = self.model if self.forward is None else self.forward

    @property
    def sketched(self) -> bool:
        """Greedy steps take the next token through the head's sketch (Transformer.head_argmax)
        rather than from logits."""
        return self.sampler.greedy and self.cfg.head_sketch and self.model.sketched


Steps = Generator[list[int], None, None]  # a decoder's committed ids, one list per forward
Decoder = Callable[[DecodeRequest], Steps]
Prepare = Callable[[Transformer, LMConfig], None]
DECODERS: dict[str, Decoder] = {}
PREPARE: dict[str, Prepare] = {}


def register(name: str, prepare: Prepare | None = None) -> Callable[[Decoder], Decoder]:
    """Register a decoder; `prepare(model, cfg)` loads what it needs once, at LM.load (so a
    bad file fails at startup and the first answer pays no loading time)."""

    def deco(fn: Decoder) -> Decoder:
        DECODERS[name] = fn
        if prepare is not None:
            PREPARE[name] = prepare
        return fn

    return deco


def prepare(name: str, model: Transformer, cfg: LMConfig) -> None:
    if name in PREPARE:
        PREPARE[name](model, cfg)


def get_decoder(name: str) -> Decoder:
    if name not in DECODERS:
        raise UnknownDecoderError(
            f"decoder {name!r} is not available (available: {', '.join(sorted(DECODERS))})"
        )
    return DECODERS[name]


def prefill(req: DecodeRequest) -> Iterator[torch.Tensor | None]:
    """Feed prompt[cache.length:] in chunks; yields None after each non-final chunk, and the
    last prompt row's (V,) logits at the end."""
    rest = req.prompt[req.cache.length :]
    assert rest, "the engine always leaves at least one prompt token to prefill"
    for i in range(0, len(rest), PREFILL_CHUNK):
        yield feed_rows(req, rest[i : i + PREFILL_CHUNK], last=i + PREFILL_CHUNK >= len(rest))


def feed_rows(req: DecodeRequest, ids: list[int], last: bool) -> torch.Tensor | None:
    """One forward over prompt rows `ids`: the tapped row's logits, if it is one of them, go
    to `req.on_tap`; returns the last row's (V,) logits when `last`, else None."""
    tap = tap_row(req, len(ids))
    rows = tap if tap is not None else "last" if last else "none"
    chunk = torch.tensor([ids], device=req.model.embed.weight.device)  # (1, T)
    out = req.run(chunk, cache=req.cache, logits=rows, hidden=tap is not None)
    if tap is not None and req.on_tap is not None and out.logits is not None:
        assert out.hidden_normed is not None
        req.on_tap(out.logits[0, 0], out.hidden_normed[0, tap])
    return out.logits[0, -1] if last and out.logits is not None else None


def tap_row(req: DecodeRequest, rows: int) -> int | None:
    """The index of the tapped prompt row among the next `rows` rows fed, if it is one."""
    at = None if req.tap is None else req.tap - req.cache.length
    return at if at is not None and 0 <= at < rows else None


@register("ar")
def decode_ar(req: DecodeRequest) -> Steps:
    """Plain autoregressive decoding: one token per forward pass."""
    logits = None
    for logits in prefill(req):
        if logits is None:
            yield []
    assert logits is not None
    token = torch.empty(1, 1, dtype=torch.long, device=req.model.embed.weight.device)  # (1, 1)
    t = req.sampler(logits)
    for _ in range(req.max_new_tokens):
        yield [t]
        token.fill_(t)
        if req.sketched:
            out = req.run(token, cache=req.cache, logits="none", hidden=True)
            assert out.hidden_normed is not None
            t = req.model.head_argmax(out.hidden_normed[0])[0]
            continue
        out = req.run(token, cache=req.cache)
        assert out.logits is not None
        t = req.sampler(out.logits[0, -1])
