"""LM core, what runs at inference: Llama-family transformer, GGUF/HF loading, tokenizer,
decoders, chat engine. The lab that builds the drafter and the n-gram store is model.training,
which nothing here imports.

Importing the package sets OMP_WAIT_POLICY=PASSIVE unless already set, which only takes effect
if torch is not imported yet: torch's OpenMP workers otherwise spin while waiting, and with
other busy processes on the cores that made a prefill ~8x slower (~0.35 s -> ~3 s). Set the
variable yourself to choose otherwise.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
