"""LM core: Llama-family transformer, GGUF/HF loading, tokenizer, decoders, chat engine.

Importing the package sets OMP_WAIT_POLICY=PASSIVE unless already set, which only takes effect
if torch is not imported yet: torch's OpenMP workers otherwise spin while waiting, and with
other busy processes on the 2 cores that collapsed prefill from ~0.35 s to ~3 s (measured,
load average ~6). Set the variable yourself to choose otherwise.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
