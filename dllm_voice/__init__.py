"""dllm_voice, the voice agent's one import name; its subpackages are the repository's folders.

- ``dllm_voice.app``: the conversation (turn-taking, answers, history) and its front ends
  (web server, terminal chat), traces and metrics.
- ``dllm_voice.audio``: everything between air and text: sources, sinks, VAD, streaming ASR and
  TTS, echo control.
- ``dllm_voice.model``: the LM at inference: transformer, GGUF/HF loading, tokenizer, decoders.
- ``dllm_voice.kernels``: the decoder's kernels (C rows on the CPU, Triton on a GPU), each with a
  torch fallback.

One distinct name keeps the folders' short names (``kernels``, ``model``) from shadowing, or
being shadowed by, other distributions' packages.

Importing the package sets OMP_WAIT_POLICY=PASSIVE unless already set (it takes effect only
before torch loads): spinning OpenMP workers made a prefill ~8x slower beside other busy
processes.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
