"""Qwen3 and Gemma 3 layers (q/k norms, output norms, GELU gate, attention scale, sliding-window
layers) in the C layer stack (model/layer_stack.py, kernels/cpu_rows.c `layers_rows`): the torch
layers' outputs up to rounding, each row on its own, on the tiny GGUF files of
testkit/gguf_models.py (Gemma 3's window is 4 positions there: the prompts cross it)."""

from __future__ import annotations

import pytest
import torch

from dllm_voice import cores
from dllm_voice.kernels import cpu_layers, cpu_rows
from dllm_voice.model import (
    hybrid,  # noqa: F401 - registers the hybrid decoder
    layer_stack,
)
from dllm_voice.model.config import LMConfig
from dllm_voice.model.decode import DecodeRequest, Sampler, get_decoder
from dllm_voice.model.loader import load
from dllm_voice.model.transformer import Call, Transformer

pytestmark = pytest.mark.skipif(not cpu_rows.available(), reason="cpu_rows kernel not built here")

PROMPT = [5, 17, 33, 101, 7, 64, 250, 3, 12, 90, 44]
CASES = [("qwen3", "f32"), ("qwen3", "q4_k_m"), ("gemma3", "f32"), ("gemma3", "q4_k_m")]


@pytest.fixture(scope="module")
def models(tiny_gguf):
    cache: dict[tuple[str, str], Transformer] = {}

    def get(arch: str, qtype: str) -> Transformer:
        if (arch, qtype) not in cache:
            cache[arch, qtype] = load(tiny_gguf(arch, qtype), device="cpu")[0]
        return cache[arch, qtype]

    return get


def steps(model: Transformer) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Logits of a prefill, decode rows past the window, a chain of 3 rows, a draft tree at
    explicit positions and rows kept out of the cache; and the cache's keys and values."""
    cache = model.new_cache(64)
    with torch.inference_mode():
        out = [model(torch.tensor([PROMPT[:5]]), cache=cache).logits]
        out += [model(torch.tensor([[t]]), cache=cache).logits for t in PROMPT[5:8]]
        out.append(model(torch.tensor([PROMPT[8:]]), cache=cache).logits)
        s = cache.length
        mask = torch.ones(3, s + 3, dtype=torch.bool).tril(s)
        mask[2, s + 1] = False  # row 2 a sibling of row 1: both at position s + 1
        pos = torch.tensor([s, s + 1, s + 1])
        out.append(model(torch.tensor([[9, 8, 7]]), cache=cache, positions=pos, mask=mask).logits)
        out.append(model(torch.tensor([[4, 2]]), cache=cache, write=0).logits)
    n = cache.length
    return out, cache.k[..., :n, :].clone(), cache.v[..., :n, :].clone()


@pytest.mark.parametrize(("arch", "qtype"), CASES)
def test_the_c_stack_computes_what_the_torch_layers_compute(models, arch, qtype, monkeypatch):
    model = models(arch, qtype)
    stack = layer_stack.c_stack(model.layers)
    assert stack is not None and stack.qk_norm
    assert stack.post_norms == stack.gelu == (arch == "gemma3")
    assert (stack.window == 4) == (arch == "gemma3")
    calls = []
    layers = cpu_layers.layers
    monkeypatch.setattr(cpu_layers, "layers", lambda *a: calls.append(1) or layers(*a))
    c_out, c_k, c_v = steps(model)
    assert len(calls) == len(c_out)  # one C call a forward
    monkeypatch.setattr(layer_stack, "c_stack", lambda layers: None)
    t_out, t_k, t_v = steps(model)
    assert len(calls) == len(c_out)
    # Integer products round activations to int16: the torch layers' last-bit differences from
    # the C stack's can move a code, ~3e-5 of a product, and random layers grow it.
    tol = 1e-3 if model.cpu_kernel == "vnni" else 1e-4
    for c, t in zip(c_out, t_out, strict=True):
        torch.testing.assert_close(c, t, rtol=tol, atol=tol * t.abs().max().item())
    for c, t in ((c_k, t_k), (c_v, t_v)):
        torch.testing.assert_close(c, t, rtol=tol, atol=tol * max(t.abs().max().item(), 1))


@pytest.mark.parametrize(("arch", "qtype"), CASES)
def test_a_row_gets_the_same_bits_alone_or_among_others(models, arch, qtype) -> None:
    """A chain of 4 rows verified together gives each row the logits it gets decoded alone (the
    window moving past early keys row by row)."""
    model = models(arch, qtype)
    with torch.inference_mode():
        together = model.new_cache(64)
        model(torch.tensor([PROMPT[:6]]), cache=together)
        four = model(torch.tensor([PROMPT[6:10]]), cache=together).logits[0]
        alone = model.new_cache(64)
        model(torch.tensor([PROMPT[:6]]), cache=alone)
        rows = [model(torch.tensor([[t]]), cache=alone).logits[0, 0] for t in PROMPT[6:10]]
    assert torch.equal(torch.stack(rows), four)


@pytest.mark.parametrize(("arch", "qtype"), CASES)
def test_a_forward_gets_the_same_bits_on_one_thread_or_two(models, arch, qtype, monkeypatch):
    """The stack's threads share each step's work and meet at spinning barriers; a row's bits
    do not depend on how many there are (one while another model computes: dllm_voice/cores.py),
    nor on whether another process took a core from one of them in mid-forward."""
    model = models(arch, qtype)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with cores.busy():  # another model's job: one thread of two
            assert cores.threads(2, 1) == (1, True)
            one, k1, v1 = steps(model)
        monkeypatch.setattr(cores, "threads", lambda most, rows: (most, True))
        two, k2, v2 = steps(model)
        monkeypatch.setattr(cores, "threads", lambda most, rows: (most, False))
        sleeping, k3, v3 = steps(model)  # OpenMP's own barriers
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(one, sleeping, strict=True))
    assert torch.equal(k1, k2) and torch.equal(v1, v2)
    assert torch.equal(k1, k3) and torch.equal(v1, v3)


@pytest.mark.parametrize(("arch", "qtype"), CASES)
def test_hybrid_matches_ar(models, arch, qtype) -> None:
    """The hybrid decoder's draft trees (explicit positions and masks, the sliding-window
    layers' masks built for them) give ar's greedy text."""
    model = models(arch, qtype)

    def greedy(decoder: str) -> list[int]:
        cfg = LMConfig(drafter="none", ngram="none", row_cost=0.0)
        sampler = Sampler(0.0, 1.0, 0, torch.device("cpu"))
        req = DecodeRequest(model, model.new_cache(64), PROMPT, sampler, 16, frozenset(), cfg)
        out: list[int] = []
        with torch.inference_mode():
            for toks in get_decoder(decoder)(req):
                out += toks
                if len(out) >= 16:
                    break
        return out[:16]

    assert greedy("hybrid") == greedy("ar")


def test_sessions_in_one_forward_get_what_each_gets_alone(models) -> None:
    """forward_many over Gemma 3 layers: sessions of different lengths (one past the window,
    one within it, one verifying a tree at explicit positions) as one C call, each session's
    logits what its forward alone gives."""
    model = models("gemma3", "q4_k_m")

    def sessions() -> list[Call]:
        caches = [model.new_cache(64) for _ in range(3)]
        with torch.inference_mode():
            for c, n in zip(caches, (9, 2, 7), strict=True):
                model(torch.tensor([PROMPT[:n]]), cache=c)
        mask = torch.ones(3, 10, dtype=torch.bool).tril(7)
        mask[2, 8] = False
        return [
            Call(caches[0], torch.tensor([[3]])),
            Call(caches[1], torch.tensor([[4, 6]])),
            Call(caches[2], torch.tensor([[1, 2, 5]]), positions=torch.tensor([7, 8, 8]),
                 mask=mask),
        ]  # fmt: skip

    with torch.inference_mode():
        together = model.forward_many(sessions())
        alone = [c.run(model.forward) for c in sessions()]
    for a, b in zip(together, alone, strict=True):
        assert torch.equal(a.logits, b.logits)
