"""The ``tools`` section: which tools the agent has and how a call runs."""

from __future__ import annotations

from dataclasses import dataclass

from dllm_voice.settings import setting

BUILTIN_GROUPS = ("clock", "timers", "calculator", "units", "countries")


@dataclass(frozen=True)
class ToolsConfig:
    """Tools the agent calls: the built-in ones and yours."""

    enabled: bool = setting(True, "let the agent call tools")
    builtin: tuple[str, ...] = setting(BUILTIN_GROUPS, "built-in tool groups to offer")
    modules: tuple[str, ...] = setting(
        (), "your tools: module names or .py paths whose @tool functions are loaded at start"
    )
    threshold: float = setting(
        0.9, "chooser's probability that calls a tool its parser cannot read the words of",
        min=0.0, max=1.0,
    )  # fmt: skip
    filler_ms: int = setting(
        1000, "a call running this long gets a spoken filler first", min=0, max=60000
    )
    filler: str = setting("One moment.", "what the filler says")
    timeout_s: float = setting(
        10.0, "the longest any call may run (a tool's own timeout_s may be shorter)",
        min=0.1, max=600.0,
    )  # fmt: skip
