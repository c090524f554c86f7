"""verify_select (Triton via the CPU interpreter, and torch) against a float64 reference."""

from __future__ import annotations

import pytest
import torch

from dllm_voice.kernels.errors import KernelInputError
from dllm_voice.kernels.verify_select import residual_probs, verify_select

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# Probabilities are computed in fp32 from the (exactly representable) logits in every dtype.
PROB_TOL = dict(atol=1e-5, rtol=1e-4)


def reference(logits, drafts, temperature=0.0, uniforms=None):
    """float64 per-row softmax statistics and the accepted prefix, by plain loops."""
    x = logits.cpu().double()
    if temperature > 0:
        x = x / temperature
    argmax = x.argmax(-1)  # first index among ties
    p = torch.softmax(x, -1)
    accepted = 0
    draft_prob = []
    for i, d in enumerate(drafts.tolist()):
        draft_prob.append(float(p[i, d]))
        ok = uniforms[i] < p[i, d] if temperature > 0 else int(argmax[i]) == d
        accepted += int(ok and accepted == i)
    return argmax, p.max(-1).values, torch.logsumexp(x, -1), torch.tensor(draft_prob), accepted


def check(result, logits, drafts, temperature=0.0, uniforms=None):
    argmax, max_prob, lse, draft_prob, accepted = reference(logits, drafts, temperature, uniforms)
    assert result.argmax.dtype == torch.int64 and result.accepted.dtype == torch.int64
    assert result.argmax.cpu().tolist() == argmax.tolist()
    torch.testing.assert_close(result.max_prob.cpu().double(), max_prob, **PROB_TOL)
    torch.testing.assert_close(result.lse.cpu().double(), lse, **PROB_TOL)
    torch.testing.assert_close(result.draft_prob.cpu().double(), draft_prob.double(), **PROB_TOL)
    assert int(result.accepted) == accepted


def logits_with_drafts(K, V, dtype, seed, n_match):
    """(K + 1, V) logits and drafts whose first n_match equal the row argmax, then a miss."""
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(K + 1, V, generator=gen) * 4).to(dtype)
    drafts = logits.float().argmax(-1)[:K].clone()
    if n_match < K:
        drafts[n_match] = (drafts[n_match] + 1) % V
    return logits.to(DEVICE), drafts.to(DEVICE)


@pytest.mark.parametrize(
    "K,V,dtype,n_match",
    [
        (4, 1000, torch.float32, 2),
        (4, 1000, torch.bfloat16, 4),  # all accepted
        (4, 1000, torch.float16, 0),  # none accepted
        (0, 1000, torch.float32, 0),  # no drafts: only the bonus row
        (4, 49152, torch.bfloat16, 3),
    ],
)
def test_greedy_matches_reference(backend_name, K, V, dtype, n_match):
    logits, drafts = logits_with_drafts(K, V, dtype, seed=K + V, n_match=n_match)
    result = verify_select(logits, drafts)
    check(result, logits, drafts)
    assert int(result.accepted) == n_match


def test_ties_take_first_index_across_tiles(backend_name):
    V = 5000  # two 4096-wide tiles: the tie spans the tile boundary
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(5))
    logits[:, [7, 4100]] = 9.0  # equal maxima in both tiles
    logits[2, 4100] = 9.5
    logits[1, :] = float("-inf")
    logits[1, [3, 17]] = 0.0  # masked vocabulary, two-way tie
    logits = logits.to(DEVICE)
    result = verify_select(logits, torch.tensor([7, 17], device=DEVICE))
    assert result.argmax.cpu().tolist() == [7, 3, 4100]
    assert int(result.accepted) == 1  # draft 17 ties with 3 but is not the first index
    torch.testing.assert_close(result.max_prob[1].cpu(), torch.tensor(0.5))
    result = verify_select(logits, torch.tensor([4100, 3], device=DEVICE))
    assert int(result.accepted) == 0


@pytest.mark.parametrize("V,dtype", [(1000, torch.float32), (4099, torch.float16)])
def test_sampling_matches_reference(backend_name, V, dtype):
    K, temperature = 4, 0.7
    logits, drafts = logits_with_drafts(K, V, dtype, seed=V, n_match=K)
    logits = logits / 4  # flatter rows: draft probabilities well inside (0, 1)
    probs = torch.softmax(logits.float().cpu() / temperature, -1)
    p_draft = probs[torch.arange(K), drafts.cpu()]
    # Uniforms just below p for drafts 0, 1 (accept), just above for draft 2 (reject).
    uniforms = torch.stack([p_draft[0] * 0.99, p_draft[1] * 0.5, p_draft[2] * 1.01, p_draft[3]])
    result = verify_select(logits, drafts, temperature, uniforms.to(DEVICE))
    check(result, logits, drafts, temperature, uniforms.double())
    assert int(result.accepted) == 2
    all_in = verify_select(logits, drafts, temperature, torch.zeros(K, device=DEVICE))
    assert int(all_in.accepted) == K
    none_in = verify_select(logits, drafts, temperature, torch.full((K,), 0.9999, device=DEVICE))
    assert int(none_in.accepted) == 0


def test_speculative_sampling_preserves_distribution(torch_backend):
    """Draft, accept with u < p(draft), else resample the residual: the output follows p."""
    gen = torch.Generator().manual_seed(6)
    V, temperature, trials = 6, 0.8, 3000
    logits = torch.tensor([[1.0, 0.2, -0.5, 2.0, 0.0, -1.0], [0.0] * V])
    p = torch.softmax(logits[0] / temperature, -1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 3000 tiny calls: 18 s on 2 busy threads, 1.8 s on one
    try:
        counts = sample_counts(logits, temperature, trials, gen)
    finally:
        torch.set_num_threads(threads)
    # Chi-square with 5 degrees of freedom: 20.5 is the 0.1 % critical value.
    chi2 = float(((counts - trials * p) ** 2 / (trials * p)).sum())
    assert chi2 < 20.5, (counts / trials, p)


def sample_counts(logits, temperature, trials, gen):
    """Histogram of tokens emitted by verify_select + residual resampling at row 0."""
    V = logits.shape[1]
    counts = torch.zeros(V)
    for t in range(trials):
        draft = t % V  # any drafter, here a deterministic sweep over the vocabulary
        u = torch.rand(1, generator=gen)
        r = verify_select(logits, torch.tensor([draft]), temperature, u, check_drafts=False)
        if int(r.accepted) == 1:
            counts[draft] += 1
        else:
            residual = residual_probs(logits[0], r.lse[0], draft, temperature)
            counts[int(torch.multinomial(residual, 1, generator=gen))] += 1
    return counts


def test_residual_probs():
    logits = torch.tensor([0.0, 1.0, 2.0])
    lse = torch.logsumexp(logits, -1)
    r = residual_probs(logits, lse, 2, 1.0)
    torch.testing.assert_close(r, torch.tensor([1.0, torch.e, 0.0]) / (1 + torch.e))
    certain = torch.tensor([0.0, -200.0])
    torch.testing.assert_close(
        residual_probs(certain, torch.tensor(0.0), 0, 1.0)[0], torch.tensor(1.0)
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(drafts=torch.tensor([1, 2])), r"shape \(N - 1,\)"),
        (dict(drafts=torch.tensor([1.0, 2.0, 3.0])), "integer"),
        (dict(drafts=torch.tensor([1, 2, 10])), r"drafts\[2\] = 10"),
        (dict(temperature=-1.0), "temperature"),
        (dict(temperature=1.0), "uniforms"),
        (dict(uniforms=torch.zeros(3)), "sampling"),
        (dict(logits=torch.zeros(4, 10, dtype=torch.float64)), "dtype"),
    ],
)
def test_bad_inputs_raise(kwargs, match):
    args = dict(logits=torch.zeros(4, 10), drafts=torch.tensor([1, 2, 3]))
    args.update(kwargs)
    with pytest.raises(KernelInputError, match=match):
        verify_select(**args)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_triton_on_gpu(dtype):
    from dllm_voice.kernels.verify_select import verify_select_triton

    for K, V, n_match in [(4, 49152, 2), (8, 49152, 8), (0, 1000, 0)]:
        logits, drafts = logits_with_drafts(K, V, dtype, seed=K, n_match=n_match)
        check(verify_select_triton(logits, drafts, 0.0, None), logits, drafts)
        u = torch.rand(K, device=DEVICE)
        check(verify_select_triton(logits, drafts, 0.9, u), logits, drafts, 0.9, u.cpu().double())
