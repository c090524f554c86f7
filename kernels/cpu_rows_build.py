"""Compiling kernels/cpu_rows.c and loading it with ctypes, for kernels/cpu_rows.py.

The C file is compiled on first use with the system C compiler (`CC`, else `cc`; the VNNI
functions carry their own target attribute and run only where the CPU reports the feature) into
`$XDG_CACHE_HOME/dllm-voice` (default `~/.cache/dllm-voice`), named by a hash of the source and
flags, and loaded with its functions' signatures declared (`load`). `unsupported` says why this
machine cannot build it: not x86-64, no AVX2/FMA, no compiler, or DLLM_CPU_ROWS=0.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("cpu_rows.c")
FLAGS = ("-O3", "-mavx2", "-mfma", "-mf16c", "-fopenmp", "-shared", "-fPIC")


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "dllm-voice"


def _compiler() -> str:
    return os.environ.get("CC", "cc")


def unsupported() -> str | None:
    """Why the kernel cannot be built or run here, or None."""
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


def load() -> ctypes.CDLL:
    """The library, built if need be, with its functions' argument and result types set. Raises
    OSError or subprocess.CalledProcessError where the build or the load fails."""
    lib = ctypes.CDLL(str(_build()))
    lib.rows_matmul.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4
    lib.rows_matmul.restype = None
    lib.quant_matmul.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 5 + [ctypes.c_void_p]
    lib.quant_matmul.restype = None
    lib.sketch_pass.argtypes = (
        [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        + [ctypes.c_void_p] * 2
        + [ctypes.c_int]
        + [ctypes.c_void_p] * 2
        + [ctypes.c_int] * 2
    )
    lib.sketch_pass.restype = None
    lib.vnni_supported.restype = ctypes.c_int
    norm_args = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2 + [ctypes.c_float]
    lib.rms_norm_rows.argtypes = norm_args
    lib.rms_norm_rows.restype = None
    lib.argmax_rows.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,
    ]
    lib.argmax_rows.restype = None
    lib.attend_rows.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 5 + [
        ctypes.c_long, ctypes.c_long, ctypes.c_float, ctypes.c_int, ctypes.c_int
    ]  # fmt: skip
    lib.attend_rows.restype = None
    ptr, num, f32, long = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_long
    lib.layers_rows.argtypes = [num, ptr, num, num, *[ptr] * 4, f32, ptr, ptr, num,
                                *[ptr] * 5, num, long, long, *[num] * 4, f32, ptr,
                                num, num, ptr]  # fmt: skip
    lib.layers_rows.restype = ctypes.c_int
    return lib
