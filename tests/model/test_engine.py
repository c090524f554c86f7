"""ChatSession / Generation on the bundled SmolLM2: answers, stops, KV reuse, budget, cancel."""

from __future__ import annotations

import threading
import time

import pytest

from dllm_voice.model.config import LMConfig
from dllm_voice.model.engine import CPU_KERNELS, LM, _split_stop
from dllm_voice.model.errors import ContextOverflowError, UnknownDecoderError

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


def small_lm(lm: LM, **cfg: object) -> LM:
    """Same weights, another config (no reload)."""
    return LM(lm.model, lm.tokenizer, LMConfig(**cfg))


def test_capital_of_france_stops_by_itself(lm: LM) -> None:
    gen = lm.session().generate(FRANCE, decoder="ar")
    pieces = list(gen)
    assert "Paris" in gen.text
    assert "".join(pieces) == gen.text
    st = gen.stats
    assert st.stop_reason == "eos"
    assert st.new_tokens == len(gen.token_ids) < 40
    assert st.forwards == st.new_tokens + 1  # prefill + one forward per token, EOS included
    assert st.prompt_tokens > 0 and st.cached_tokens == 0
    assert 0 < st.ttft_ms <= st.total_ms and st.tokens_per_s > 0


def test_kv_reuse_across_turns_equals_fresh_session(lm: LM) -> None:
    s = lm.session()
    first = s.generate(FRANCE, max_new_tokens=8)
    list(first)
    history = [*FRANCE, {"role": "assistant", "content": first.text}]
    history.append({"role": "user", "content": "And what is the capital of Italy?"})
    second = s.generate(history, max_new_tokens=8)
    list(second)
    assert second.stats.cached_tokens > first.stats.prompt_tokens
    fresh = lm.session().generate(history, max_new_tokens=8)
    list(fresh)
    assert fresh.stats.cached_tokens == 0
    assert second.token_ids == fresh.token_ids


def test_max_tokens_and_stop_strings(lm: LM) -> None:
    s = lm.session()
    g = s.generate([{"role": "user", "content": "Count from 1 to 30."}], max_new_tokens=5)
    list(g)
    assert g.stats.stop_reason == "length" and g.stats.new_tokens == 5
    g = s.generate(FRANCE, stop=["Paris"])
    list(g)
    assert g.stats.stop_reason == "stop" and "Paris" not in g.text and g.text


def test_split_stop_holds_back_partial_matches() -> None:
    assert _split_stop("Hello Wo", ("World",), final=False) == ("Hello ", "Wo", False)
    assert _split_stop("Hello World!", ("World",), final=False) == ("Hello ", "", True)
    assert _split_stop("Hello Wo", ("World",), final=True) == ("Hello Wo", "", False)
    assert _split_stop("abc", (), final=False) == ("abc", "", False)


def test_cancel_from_inside_the_stream_and_cache_stays_consistent(lm: LM) -> None:
    s = lm.session()
    cancel = threading.Event()
    msgs = [{"role": "user", "content": "Tell me a long story about a dragon."}]
    g = s.generate(msgs, cancel=cancel, max_new_tokens=100)
    for i, _ in enumerate(g):
        if i == 2:
            cancel.set()
            forwards = g.stats.forwards
    assert g.stats.stop_reason == "cancelled"
    assert g.stats.forwards == forwards  # not a single forward after the cancel
    # The app keeps only what was played: a truncated assistant message, then a new turn.
    history = [*msgs, {"role": "assistant", "content": g.text}]
    history.append({"role": "user", "content": "Stop. What is two plus two?"})
    again = s.generate(history, max_new_tokens=10)
    list(again)
    fresh = lm.session().generate(history, max_new_tokens=10)
    list(fresh)
    assert again.stats.cached_tokens > 0 and again.token_ids == fresh.token_ids


def test_cancel_from_another_thread_within_one_forward(lm: LM) -> None:
    s = lm.session()
    cancel = threading.Event()
    g = s.generate([{"role": "user", "content": "Write a poem about the sea."}], cancel=cancel,
                   max_new_tokens=150)  # fmt: skip
    it = iter(g)
    next(it)  # warm: prefill done
    t = time.perf_counter()
    next(it)
    step_s = time.perf_counter() - t
    timer = threading.Timer(0.05, cancel.set)
    timer.start()
    t_set = time.perf_counter() + 0.05
    for _ in it:
        pass
    late_s = time.perf_counter() - t_set
    timer.join()
    assert g.stats.stop_reason == "cancelled" and g.stats.new_tokens < 150
    # Ends at the first check after the set: at most one forward later (x4 for shared-CPU noise).
    assert late_s < max(4 * step_s, 1.0)


def test_new_generation_supersedes_an_unfinished_one(lm: LM) -> None:
    s = lm.session()
    g1 = s.generate([{"role": "user", "content": "List ten fruits."}], max_new_tokens=50)
    next(iter(g1))
    g2 = s.generate(FRANCE, max_new_tokens=20)
    assert "Paris" in "".join(g2)
    assert list(g1) == [] and g1.stats.stop_reason == "cancelled"


def test_context_budget_drops_oldest_turns(lm: LM) -> None:
    small = small_lm(lm, context_tokens=160, max_new_tokens=10)
    msgs: list[dict[str, str]] = [{"role": "system", "content": "You are brief."}]
    for i in range(6):
        msgs.append({"role": "user", "content": f"Question number {i}: what is {i} plus {i}?"})
        msgs.append({"role": "assistant", "content": f"{i} plus {i} is {2 * i}."})
    msgs.append({"role": "user", "content": "What is the capital of France?"})
    s = small.session()
    ids = s.fit_budget(msgs, 10)
    assert len(ids) + 10 <= 160
    text = small.tokenizer.decode(ids)
    assert "You are brief." in text and "capital of France" in text
    assert "Question number 0" not in text and "Question number 5" in text
    g = s.generate(msgs)
    assert "Paris" in "".join(g)
    # A session whose cache holds the dropped turns rebuilds it: same answer as a fresh one.
    used = small.session()
    list(used.generate(msgs[:-3] + [msgs[-1]], max_new_tokens=4))
    again = used.generate(msgs)
    assert "".join(again) == g.text and again.stats.cached_tokens < len(ids)
    # A turn longer than the context is answered from its last words, the request's place.
    long = " ".join(f"word{i}" for i in range(400)) + " What is the capital of France?"
    ids = s.fit_budget([{"role": "user", "content": long}], 10)
    assert len(ids) + 10 <= 160
    kept = small.tokenizer.decode(ids)
    assert "capital of France?" in kept and "word0 " not in kept and "word399" in kept
    with pytest.raises(ContextOverflowError):
        s.generate([{"role": "system", "content": "Be brief. " * 200}, FRANCE[0]])


def test_seeded_sampling_is_reproducible(lm: LM) -> None:
    hot = small_lm(lm, temperature=0.9, top_p=0.9, seed=7)
    msgs = [{"role": "user", "content": "Say something about cats."}]
    a = hot.session().generate(msgs, max_new_tokens=8)
    b = hot.session().generate(msgs, max_new_tokens=8)
    assert "".join(a) == "".join(b) and len(a.token_ids) > 0


def test_unknown_decoder(lm: LM) -> None:
    with pytest.raises(UnknownDecoderError, match="available"):
        lm.session().generate(FRANCE, decoder="nope")


def test_prefill_warms_the_cache_for_the_next_answer(lm: LM) -> None:
    s = lm.session()
    system = [{"role": "system", "content": "You are a concise assistant."}]
    msgs = [*system, *FRANCE]
    n = s.prefill(msgs)
    assert n == len(s.lm.tokenizer.apply_chat(msgs)) - 1
    g = s.generate(msgs, max_new_tokens=8, decoder="ar")
    list(g)
    assert g.stats.cached_tokens == n
    # Only the last prompt token was fed: one forward per committed token (EOS included).
    assert g.stats.forwards == len(g.token_ids) + (g.stats.stop_reason == "eos")
    fresh = lm.session().generate(msgs, max_new_tokens=8)
    list(fresh)
    assert g.token_ids == fresh.token_ids
    cancel = threading.Event()
    cancel.set()
    assert s.prefill([*system, {"role": "user", "content": "Other question?"}], cancel=cancel) > 0


def test_a_lead_ending_in_an_answer_warms_the_follow_ups_prompt(lm: LM) -> None:
    # app/conversation/session.py warms the cache with History.lead() between turns.
    s = lm.session()
    lead = [*FRANCE, {"role": "assistant", "content": "The capital of France is Paris."}]
    s.prefill(lead)
    follow_up = [*lead, {"role": "user", "content": "And of Italy?"}]
    g = s.generate(follow_up, max_new_tokens=4, decoder="ar")
    list(g)
    assert g.stats.cached_tokens >= len(s.lm.tokenizer.apply_chat(lead, False))


def test_load_says_which_model_decoder_and_kernel(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="dllm_voice.model.engine"):
        lm = LM.load(LMConfig(decoder="ar"))
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("lm: "))
    assert "bundled SmolLM2-135M" in line and "ar decoding" in line
    assert line.endswith(CPU_KERNELS[lm.model.cpu_kernel])


SEA = [
    {
        "role": "system",
        "content": "You are a helpful voice assistant. Reply briefly in plain English.",
    },
    {"role": "user", "content": "Write a poem about the sea."},
]


def test_loop_guard_stops_every_decoder_at_the_same_token(lm: LM) -> None:
    # The bundled model loops on this prompt ("..., a mystic of the sea, ...") to the token cap.
    runs = {}
    for decoder in ("ar", "hybrid", "parallel"):
        gen = lm.session().generate(SEA, decoder=decoder)
        pieces = "".join(gen)
        assert gen.stats.stop_reason == "loop"
        assert gen.text.endswith((".", "!", "?", ",")) and pieces.startswith(gen.text)
        runs[decoder] = gen
    assert runs["hybrid"].token_ids == runs["ar"].token_ids  # verified decoding stays exact
    assert runs["hybrid"].text == runs["ar"].text
    off = small_lm(lm, loop_guard=False).session().generate(SEA, decoder="ar")
    list(off)
    assert off.stats.stop_reason == "length"
    assert off.token_ids[: len(runs["ar"].token_ids)] == runs["ar"].token_ids


def test_close_stops_decoding_with_a_reason(lm: LM) -> None:
    gen = lm.session().generate(FRANCE, decoder="hybrid")
    next(iter(gen))
    forwards = gen.stats.forwards
    gen.close("sentences")
    assert list(gen) == [] and gen.stats.stop_reason == "sentences"
    assert gen.stats.forwards == forwards
