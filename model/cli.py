"""`ask`: one question in, the streamed answer out (the `python main.py ask` subcommand)."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from dllm_voice.model.config import LMConfig
from dllm_voice.model.engine import LM


def ask(
    cfg: LMConfig,
    question: str,
    *,
    system: str = "",
    json_stats: bool = False,
    out: TextIO = sys.stdout,
) -> int:
    """Stream the answer to `question` to `out`; with json_stats, a stats JSON line follows.

    system: system prompt ("" = the model's template default). Returns the exit status (0).
    """
    lm = LM.load(cfg)
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": question})
    gen = lm.session().generate(messages)
    for piece in gen:
        out.write(piece)
        out.flush()
    out.write("\n")
    if json_stats:
        stats = {"decoder": cfg.decoder, **gen.stats.as_dict()}
        out.write(json.dumps(stats) + "\n")
    out.flush()
    return 0
