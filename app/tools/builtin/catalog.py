"""The built-in tools by the group that turns them on or off in the config (``tools.builtin``)."""

from __future__ import annotations

from collections.abc import Callable

from dllm_voice.app.tools.builtin import calculator, clock, countries, places, timers, units
from dllm_voice.app.tools.registry import Tool, tools_of

BUILTIN: dict[str, list[Tool]] = {
    "clock": tools_of(clock),
    "timers": tools_of(timers),
    "calculator": tools_of(calculator),
    "units": tools_of(units),
    "countries": tools_of(countries),
}

# What a group reads on its first call, loaded ahead by Toolset.load in the background: the
# first question about a city or a country waited ~0.8 s for the gazetteer.
WARM: dict[str, Callable[[], None]] = {
    "clock": places.warm,
    "countries": countries.warm,
    "units": units.warm,
}
