"""The built-in tools by the group that turns them on or off in the config (``tools.builtin``)."""

from __future__ import annotations

from dllm_voice.app.tools.builtin import calculator, clock, countries, timers, units
from dllm_voice.app.tools.registry import Tool, tools_of

BUILTIN: dict[str, list[Tool]] = {
    "clock": tools_of(clock),
    "timers": tools_of(timers),
    "calculator": tools_of(calculator),
    "units": tools_of(units),
    "countries": tools_of(countries),
}
