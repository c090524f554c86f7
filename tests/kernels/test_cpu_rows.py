"""kernels/cpu_rows.py: the CPU product of verify forwards, against F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels import cpu_rows

needs_kernel = pytest.mark.skipif(
    not cpu_rows.available(), reason="cpu_rows kernel not built here (no AVX2 or no compiler)"
)


@needs_kernel
@pytest.mark.parametrize("n,k", [(64, 48), (40, 19), (960, 576), (576, 1536), (7, 300)])
@pytest.mark.parametrize("rows", [1, 2, 5, 6, 7, 13, cpu_rows.MAX_ROWS, cpu_rows.MAX_ROWS + 5])
def test_matches_f_linear(n: int, k: int, rows: int) -> None:
    gen = torch.Generator().manual_seed(n * 1000 + k + rows)
    w, x = torch.randn(n, k, generator=gen), torch.randn(1, rows, k, generator=gen)
    bias = torch.randn(n, generator=gen)
    panels = cpu_rows.pack(w)
    assert panels.data.shape == (-(-n // cpu_rows.PANEL), k, cpu_rows.PANEL)
    y = cpu_rows.matmul(x, w, panels, bias)
    assert y.shape == (1, rows, n)
    torch.testing.assert_close(y, F.linear(x, w, bias), atol=1e-4, rtol=1e-4)


@needs_kernel
def test_a_row_is_bit_identical_whatever_shares_the_call() -> None:
    """Verify rows compute exactly what a 1-row forward computes: same summation order for any
    number of rows (register groups of 6, k blocks) and any thread count."""
    gen = torch.Generator().manual_seed(0)
    w, x = torch.randn(96, 700, generator=gen), torch.randn(13, 700, generator=gen)
    panels = cpu_rows.pack(w)
    alone = torch.cat([cpu_rows.matmul(x[i : i + 1], w, panels) for i in range(13)])
    threads = torch.get_num_threads()
    for t in {1, 2, threads}:
        torch.set_num_threads(t)
        try:
            for m in (2, 7, 13):
                assert torch.equal(cpu_rows.matmul(x[:m], w, panels), alone[:m])
        finally:
            torch.set_num_threads(threads)


def test_switched_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLLM_CPU_ROWS", "0")
    assert cpu_rows._unsupported() == "DLLM_CPU_ROWS=0"
    monkeypatch.setenv("DLLM_CPU_ROWS", "1")
    monkeypatch.setenv("CC", "no-such-compiler")
    assert cpu_rows._unsupported() is not None  # no compiler (or no AVX2 CPU to begin with)
