"""`python main.py ask` with tools: a typed question answered by a tool or by the LM.

The question goes through the prompt a conversation builds; the generation's first forward
hands the chooser the hidden state of the question's last word, as in a voice turn. A chosen
tool's call is prepared and run like a voice turn's (calls.py) and its sentence printed; else
the LM's answer streams.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from dllm_voice.app.tools import calls
from dllm_voice.app.tools.registry import ToolContext

if TYPE_CHECKING:
    import torch

    from dllm_voice.app.config import Config
    from dllm_voice.app.tools.chooser import Choice
    from dllm_voice.app.tools.toolset import Toolset
    from dllm_voice.model.engine import LM


@dataclass
class Asked:
    """One question's answer, and the call that made it (None: the LM answered)."""

    text: str
    call: calls.Call | None = None
    outcome: calls.Outcome | None = None
    stats: dict[str, object] = field(default_factory=dict)


def answer(
    lm: LM,
    tools: Toolset,
    question: str,
    system: str,
    ctx: ToolContext,
    out: TextIO | None = None,
) -> Asked:
    """Answer ``question``: a tool's sentence, or the LM's words (streamed to ``out``)."""
    session = lm.session()
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    chosen: list[Choice | None] = []

    def choose(state: torch.Tensor | None) -> None:
        row = None if state is None else state.float().cpu().numpy()
        chosen.append(tools.chooser.choose(tools.box, row, question))

    gen = session.generate(messages, turn_state=choose)
    text = ""
    for piece in gen:
        if chosen and chosen[0] is not None:
            gen.close("tool")
            break
        text += piece
        if out is not None:
            out.write(piece)
            out.flush()
    choice = chosen[0] if chosen else None
    if choice is None:
        return Asked(text, stats={**gen.stats.as_dict()})
    call = calls.prepare(choice, question, session, lm.tokenizer)
    assert call is not None  # nothing cancels it
    outcome = asyncio.run(calls.run(call, ctx, tools.cfg.timeout_s))
    said = outcome.said if outcome.said is not None else json.dumps(outcome.output)
    if out is not None:
        out.write(said)
    return Asked(said, call, outcome)


def ask(cfg: Config, question: str, *, json_stats: bool = False, out: TextIO = sys.stdout) -> int:
    """Print the answer to ``question``; with json_stats a JSON line of how it was made."""
    from dllm_voice.app.tools.toolset import Toolset
    from dllm_voice.model.engine import LM

    lm = LM.load(cfg.lm)
    tools = Toolset.load(cfg.tools, lm.parameter_count())
    ctx = ToolContext(say=lambda text: None)
    got = answer(lm, tools, question, cfg.conversation.system_prompt, ctx, out)
    out.write("\n")
    if json_stats:
        stats: dict[str, object] = {"decoder": cfg.lm.decoder, **got.stats}
        if got.call is not None and got.outcome is not None:
            stats |= {
                "tool": got.call.tool.name,
                "arguments": got.call.arguments,
                "args_by": got.call.args_by,
                "tool_ms": got.outcome.ms,
                "error": got.outcome.error,
            }
        out.write(json.dumps(stats) + "\n")
    out.flush()
    ctx.close()
    return 0
