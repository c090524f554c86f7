"""Row-invariant kernels (Triton; on CPU through the interpreter): a row's bits do not depend on
the other rows of the call, a tree row over scattered ancestors equals the same row over a
contiguous cache, the values match torch, and the hybrid decoder running on them commits
exactly `ar`'s tokens."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields

import pytest
import torch
import torch.nn.functional as F

from dllm_voice.kernels import backend, exact_rows
from dllm_voice.model import hybrid
from dllm_voice.model.args import ModelArgs
from dllm_voice.model.config import LMConfig
from dllm_voice.model.decode import DecodeRequest, Sampler, get_decoder
from dllm_voice.model.drafter import BlockDrafter
from dllm_voice.model.transformer import Transformer

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(autouse=True)
def triton_rows() -> Iterator[None]:
    reason = backend.triton_unavailable(torch.empty(0, device=DEVICE))
    if reason:
        pytest.skip(reason)
    previous = backend.set_backend("triton")
    exact_rows.FORCE = True
    yield
    exact_rows.FORCE = False
    backend.set_backend(previous)


DTYPES = [torch.float32, torch.bfloat16]  # bf16: the CUDA default
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.bfloat16: dict(atol=0.1, rtol=0.02)}


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_rows_do_not_depend_on_their_neighbours(dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x, w, b = (
        torch.randn(*s, generator=g).to(DEVICE, dtype) for s in ((13, 200), (70, 200), (70,))
    )
    y = exact_rows.linear(x, w, b)
    ref = x.float() @ w.float().T + b.float()
    torch.testing.assert_close(y.float(), ref, **TOL[dtype])
    alone = exact_rows.linear(x[5:6], w, b)
    elsewhere = exact_rows.linear(torch.cat((torch.randn(3, 200).to(DEVICE, dtype), x[5:6])), w, b)
    assert torch.equal(alone[0], y[5]) and torch.equal(elsewhere[3], y[5])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_rows_do_not_depend_on_their_neighbours(dtype) -> None:
    x, w = (
        torch.randn(9, 576, device=DEVICE, dtype=dtype),
        torch.randn(576, device=DEVICE, dtype=dtype),
    )
    y = exact_rows.rms_norm(x, w, 1e-5)
    ref = F.rms_norm(x.float(), (576,), w.float(), 1e-5)
    torch.testing.assert_close(y.float(), ref, **TOL[dtype])
    assert torch.equal(exact_rows.rms_norm(x[4:5], w, 1e-5)[0], y[4])


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_tree_row_equals_the_same_row_over_a_contiguous_cache(dtype) -> None:
    """Row 1 of a tree sees the prefix and its ancestor at slot 42, past a sibling branch;
    `ar` sees the same keys contiguously. Same bits; and both agree with SDPA."""
    g = torch.Generator().manual_seed(1)
    prefix, h, hkv, d = 37, 9, 3, 64  # SmolLM2-135M: 9 query heads in groups of 3
    keys = torch.randn(1, hkv, 45, d, generator=g).to(DEVICE, dtype)
    values = torch.randn(1, hkv, 45, d, generator=g).to(DEVICE, dtype)
    q = torch.randn(1, 2, h, d, generator=g).to(DEVICE, dtype)
    tree = torch.zeros(2, 45, dtype=torch.bool, device=DEVICE)
    tree[:, :prefix] = True
    tree[0, 42] = True  # row 0: the ancestor at slot 42
    tree[1, [42, 44]] = True  # row 1: the ancestor, then itself at slot 44
    got = exact_rows.attention(q, keys, values, tree, False)
    order = list(range(prefix)) + [42, 44]
    contiguous = exact_rows.attention(q[:, 1:], keys[:, :, order], values[:, :, order], None, True)
    assert torch.equal(got[0, 1], contiguous[0, 0])
    ref = F.scaled_dot_product_attention(
        q.float().transpose(1, 2), keys.float(), values.float(), attn_mask=tree, enable_gqa=True
    ).transpose(1, 2)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=0.02, rtol=0.02)
    torch.testing.assert_close(got.float(), ref.reshape(1, 2, h * d), **tol)


def test_the_layers_of_a_forward_gather_their_visible_keys_once(monkeypatch) -> None:
    calls = []
    gather = exact_rows.visible_keys
    monkeypatch.setattr(exact_rows, "visible_keys", lambda *a: calls.append(1) or gather(*a))
    torch.manual_seed(0)
    model = Transformer(ModelArgs.preset("tiny", n_layers=3)).eval().requires_grad_(False)
    model = model.to(DEVICE)
    cache = model.new_cache(32)
    tree = torch.ones(3, 8, dtype=torch.bool, device=DEVICE).tril(5)
    tree[2, 6] = False  # row 2 sees row 0, not row 1: a tree, not a chain
    with torch.inference_mode():
        model(torch.tensor([[1, 2, 3, 4, 5]], device=DEVICE), cache=cache, logits="none")
        assert len(calls) == 1  # causal prefill: three layers, one gather
        model(torch.tensor([[6, 7, 8]], device=DEVICE), cache=cache, mask=tree, logits="none")
    assert len(calls) == 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_hybrid_on_the_row_kernels_commits_ar_tokens(dtype) -> None:
    torch.manual_seed(0)
    model = Transformer(ModelArgs.preset("tiny", n_layers=1)).eval().requires_grad_(False)
    model = model.to(DEVICE, dtype)
    hybrid.set_drafter(model, "random", BlockDrafter.random(model, block=4, seed=1))
    cfg = LMConfig(drafter="random", ngram="none", row_cost=0.0, draft_len=6)

    def decode(decoder: str, ids: list[int]) -> list[int]:
        cache = model.new_cache(64)
        req = DecodeRequest(model, cache, ids, Sampler(0.0, 1.0, 0, DEVICE), 10, frozenset(),
                            cfg, None)  # fmt: skip
        out: list[int] = []
        with torch.inference_mode():
            for toks in get_decoder(decoder)(req):
                out += toks
                if len(out) >= 10:
                    break
        return out[:10]

    assert exact_rows.applies(torch.zeros(1, 3, 64, device=DEVICE))
    ids = torch.randint(0, 512, (8,), generator=torch.Generator().manual_seed(0)).tolist()
    assert decode("hybrid", ids) == decode("ar", ids)
    assert not exact_rows.applies(torch.zeros(2, 3, 64, device=DEVICE))  # batches: cuBLAS
    assert not exact_rows.applies(torch.zeros(1, 129, 64, device=DEVICE))  # a long prefill
    most = max(f.metadata["max"] for f in fields(LMConfig) if f.name in ("draft_len", "refine_len"))
    assert most + 1 <= exact_rows.MAX_ROWS  # every decode step's rows stay on these kernels
    with torch.autocast(DEVICE.type, torch.bfloat16):  # the drafter's training: torch's rules
        assert not exact_rows.applies(torch.zeros(1, 3, 64, device=DEVICE))
