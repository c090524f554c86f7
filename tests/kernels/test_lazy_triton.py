"""A CPU process that never launches a Triton kernel never imports triton: importing every model
and kernels module, loading the bundled LM and decoding with the auto backend leave triton (and
torch._dynamo, which imports it) out of sys.modules, so no nanobind leak report prints at exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import importlib, pkgutil, sys
import torch
import dllm_voice.kernels, dllm_voice.model

for pkg in (dllm_voice.kernels, dllm_voice.model):
    for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
        if not info.ispkg:
            importlib.import_module(info.name)

from dllm_voice.kernels import backend, exact_rows
from dllm_voice.kernels.hybrid_attention import causal_desc, hybrid_attention
from dllm_voice.kernels.verify_select import verify_select
from dllm_voice.model.config import LMConfig
from dllm_voice.model.engine import LM

assert backend.get_backend() == "auto"
q, kv = torch.randn(1, 2, 3, 8), torch.randn(1, 1, 5, 8)
hybrid_attention(q, kv, kv, causal_desc(3, 5))
verify_select(torch.randn(3, 10), torch.tensor([1, 2]))
exact_rows.applies(q)
lm = LM.load(LMConfig(device="cpu", decoder="hybrid", max_new_tokens=8))
answer = "".join(lm.session().generate([{"role": "user", "content": "Hi there"}]))
assert answer, "no text decoded"
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "triton" or m == "torch._dynamo")
print("loaded:", loaded)
"""


def test_cpu_inference_never_imports_triton() -> None:
    # The kernel tests' conftest sets TRITON_INTERPRET, which sends CPU tensors to Triton.
    env = {
        k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "DLLM_KERNEL_BACKEND")
    }
    env["CUDA_VISIBLE_DEVICES"] = ""
    out = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "loaded: []" in out.stdout, out.stdout
    assert "nanobind" not in out.stderr, out.stderr
