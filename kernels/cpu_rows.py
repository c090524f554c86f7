"""CPU matrix product for verify forwards: x @ w.T over a few rows at the cost of one.

A decode forward reads every weight once and multiplies it with the pending token's row plus
the draft rows. That is bound by memory bandwidth only if each weight is read once for all rows;
oneDNN's prepacked kernel and MKL's gemm are not built for 2-16 rows (on the 2-core dev box 5
rows cost 1.3-1.4x one row through oneDNN). `kernels/cpu_rows.c` streams each weight panel
once for up to 6 rows held in registers (BENCHMARKS.md, "Row cost"); every row is summed in the
same order however many rows share the call, so verify rows compute bit for bit what `ar`
computes for the same row.

The C file is compiled on first use with the system C compiler (`CC`, else `cc`) into
`$XDG_CACHE_HOME/dllm-voice` (default `~/.cache/dllm-voice`), named by a hash of the source and
flags, and loaded with ctypes. `available()` is False - and model/transformer.py keeps oneDNN's
kernel - on CPUs without AVX2/FMA, without a compiler, or when the build or its self-test fails
(one log line says why). DLLM_CPU_ROWS=0 turns it off.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_rows.c")
FLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC")
PANEL = 16  # output columns per panel (cpu_rows.c)
# Up to this many rows the kernel beats oneDNN and MKL on whole forwards (dev box, 2 threads:
# 24 rows 104 vs 147 / 220 ms, 64 rows 216 vs 252 / 312, 128 rows 372 vs 375 / 486); above it the
# product is compute-bound and MKL's blocked gemm on the plain weight takes over (long prefills).
MAX_ROWS = 128


class Panels(NamedTuple):
    """A weight (n, k) in the kernel's layout: (ceil(n / 16), k, 16), zero-padded columns."""

    data: torch.Tensor
    n: int


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "dllm-voice"


def _compiler() -> str:
    return os.environ.get("CC", "cc")


def _unsupported() -> str | None:
    if os.environ.get("DLLM_CPU_ROWS", "1") == "0":
        return "DLLM_CPU_ROWS=0"
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"not an x86-64 CPU ({platform.machine()})"
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        return "the CPU lacks AVX2/FMA"
    if shutil.which(_compiler()) is None:
        return f"no C compiler ({_compiler()}) on PATH"
    return None


def _build() -> Path:
    """The compiled library, built once per source and flags (atomic: concurrent builds)."""
    cc = _compiler()
    tag = hashlib.sha256(SOURCE.read_bytes() + " ".join((cc, *FLAGS)).encode()).hexdigest()[:16]
    out = cache_dir() / f"cpu_rows-{tag}.so"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        try:
            subprocess.run(
                [cc, *FLAGS, str(SOURCE), "-o", tmp], check=True, capture_output=True, text=True
            )
            os.replace(tmp, out)
        finally:
            Path(tmp).unlink(missing_ok=True)
    return out


@functools.cache
def _library() -> ctypes.CDLL | None:
    why = _unsupported()
    if why is None:
        try:
            lib = ctypes.CDLL(str(_build()))
            lib.rows_matmul.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4
            lib.rows_matmul.restype = None
            if _self_test(lib):
                return lib
            why = "its self-test disagreed with F.linear"
        except (OSError, subprocess.CalledProcessError) as e:
            lines = (getattr(e, "stderr", None) or str(e)).strip().splitlines()
            why = f"build failed: {lines[-1] if lines else type(e).__name__}"
    log.info("cpu_rows kernel off (%s): CPU matrix products use oneDNN", why)
    return None


def _call(lib: ctypes.CDLL, x: torch.Tensor, w: Panels) -> torch.Tensor:
    m, k = x.shape
    y = torch.empty(m, w.data.shape[0] * PANEL)
    lib.rows_matmul(x.data_ptr(), w.data.data_ptr(), y.data_ptr(), m, y.shape[1], k,
                    torch.get_num_threads())  # fmt: skip
    return y if y.shape[1] == w.n else y[:, : w.n]


def _self_test(lib: ctypes.CDLL) -> bool:
    gen = torch.Generator().manual_seed(0)
    w, x = torch.randn(40, 19, generator=gen), torch.randn(8, 19, generator=gen)
    return bool(torch.allclose(_call(lib, x, pack(w)), F.linear(x, w), atol=1e-5, rtol=1e-5))


def available() -> bool:
    """The kernel is built and loaded (see the module docstring for when it is not)."""
    return _library() is not None


def pack(weight: torch.Tensor) -> Panels:
    """The kernel's copy of an (n, k) fp32 CPU weight."""
    n, k = weight.shape
    pad = -n % PANEL
    w = weight.detach().float()
    if pad:
        w = torch.cat([w, w.new_zeros(pad, k)])
    return Panels(w.view(-1, PANEL, k).transpose(1, 2).contiguous(), n)


def matmul(
    x: torch.Tensor, weight: torch.Tensor, panels: Panels, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x @ weight.T (+ bias) for fp32 CPU x (..., k); panels = pack(weight). Needs available()."""
    rows = x.numel() // x.shape[-1]
    if rows > MAX_ROWS:
        return F.linear(x, weight, bias)
    y = _call(_library(), x.reshape(rows, x.shape[-1]).contiguous(), panels)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], panels.n)
