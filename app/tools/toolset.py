"""The tools every conversation starts with, loaded once: built-ins, yours, and the chooser."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from dllm_voice.app.tools.chooser import Head, ToolChooser
from dllm_voice.app.tools.config import BUILTIN_GROUPS, ToolsConfig
from dllm_voice.app.tools.registry import Tool, ToolBox, ToolDefinitionError, load_module, tools_of

log = logging.getLogger(__name__)


@dataclass
class Toolset:
    """The server's tools (``box``), the chooser over them, and how calls run (``cfg``)."""

    cfg: ToolsConfig
    box: ToolBox
    chooser: ToolChooser

    @classmethod
    def load(cls, cfg: ToolsConfig, lm_parameters: int) -> Toolset:
        """Built-in groups and ``tools.modules``' tools; ToolDefinitionError names a bad one.
        The chooser's head serves only the LM it was trained on (by parameter count)."""
        tools: list[Tool] = []
        if cfg.enabled:
            from dllm_voice.app.tools.builtin.catalog import BUILTIN

            for group in cfg.builtin:
                if group not in BUILTIN_GROUPS:
                    raise ToolDefinitionError(
                        f"tools.builtin: no group {group!r} (groups: {', '.join(BUILTIN_GROUPS)})"
                    )
                tools += BUILTIN[group]
            _warm_in_background(cfg.builtin)
            for name in cfg.modules:
                found = tools_of(load_module(name))
                if not found:
                    raise ToolDefinitionError(f"tools.modules: {name} declares no @tool function")
                tools += found
        head = Head.load()
        if head is not None and head.parameters != lm_parameters:
            log.info("the tool chooser's head is for another LM: tools are chosen by name only")
            head = None
        return cls(cfg, ToolBox.of(tools), ToolChooser(head, cfg.threshold))


def _warm_in_background(groups: Sequence[str]) -> None:
    """Load what the built-in groups read on first use, beside the other models' loading."""
    from dllm_voice.app.tools.builtin.catalog import WARM

    loads = list(dict.fromkeys(WARM[g] for g in groups if g in WARM))
    if loads:
        threading.Thread(
            target=lambda: [load() for load in loads], name="tools-warm", daemon=True
        ).start()
