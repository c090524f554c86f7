"""Tools the chooser was never trained on: called when the user names them plainly?

Ten invented tools (weather, restaurant tables, music, messages, recipes, taxis, stock, lights,
parcels, flights) join the built-in ones, each with typed parameters and no parser, so their
arguments come from the LM under the schema's grammar. Four requests per tool name it or say
its description plainly; the benchmark's no-tool requests (testkit/tool_requests.py) count
false calls with the ten registered. Typed, through the path of ``python main.py ask``.
Prints JSON: calls right, arguments right, tokens per forward inside calls, false calls.

    .venv/bin/python -m bench.tool_names [--set section.key=value]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace

from dllm_voice.app.config import load_config
from dllm_voice.app.terminal.ask import answer
from dllm_voice.app.tools.registry import Tool, ToolBox, ToolContext, tool
from dllm_voice.app.tools.toolset import Toolset
from dllm_voice.model.engine import LM
from testkit.tool_requests import REQUESTS


def _said(name: str):  # noqa: ANN202 - a tool body that reports its arguments
    def run(**kwargs: object) -> str:
        return f"{name} {json.dumps(kwargs, sort_keys=True)}"

    return run


def _tool(name: str, description: str, params: dict[str, str]) -> Tool:
    props = {k: {"type": v} for k, v in params.items()}
    schema = {"type": "object", "properties": props, "required": list(params)}
    declared = tool(name, description=description, parameters=schema)(_said(name))
    made: Tool = declared.__dict__["__tool__"]
    return made


INVENTED = [
    _tool("get_weather", "The weather forecast for a city.", {"city": "string"}),
    _tool("book_table", "Book a table at a restaurant.",
          {"restaurant": "string", "people": "integer"}),
    _tool("play_music", "Play songs by an artist.", {"artist": "string"}),
    _tool("send_message", "Send a text message to a contact.",
          {"contact": "string", "text": "string"}),
    _tool("find_recipe", "Find a recipe for a dish.", {"dish": "string"}),
    _tool("order_taxi", "Order a taxi to an address.", {"destination": "string"}),
    _tool("check_stock", "How many of a product the shop has in stock.", {"product": "string"}),
    _tool("turn_on_lights", "Turn on the lights in a room.", {"room": "string"}),
    _tool("track_package", "Track a parcel by its number.", {"number": "string"}),
    _tool("find_flight", "Find flights to a city.", {"destination": "string"}),
]  # fmt: skip

# (request, tool, the argument that must come out, its value)
NAMED = [
    ("What's the weather in Lisbon?", "get_weather", "city", "Lisbon"),
    ("Get me the weather forecast for Chicago.", "get_weather", "city", "Chicago"),
    ("Is the weather nice in Rome today?", "get_weather", "city", "Rome"),
    ("Tell me the weather in Oslo.", "get_weather", "city", "Oslo"),
    ("Book a table at Nando's for four people.", "book_table", "restaurant", "Nando's"),
    ("Can you book a table for two at the Golden Dragon?", "book_table", "people", 2),
    ("Book table for six at Luigi's please.", "book_table", "people", 6),
    ("I'd like to book a restaurant table at Sakura for three.", "book_table", "restaurant",
     "Sakura"),
    ("Play music by Adele.", "play_music", "artist", "Adele"),
    ("Play some songs by Queen.", "play_music", "artist", "Queen"),
    ("Could you play music from Taylor Swift?", "play_music", "artist", "Taylor Swift"),
    ("Play me a few songs by the Beatles.", "play_music", "artist", "the Beatles"),
    ("Send a message to Anna saying I'm late.", "send_message", "contact", "Anna"),
    ("Send Tom a text message that dinner is ready.", "send_message", "contact", "Tom"),
    ("Please send a message to Maria: see you soon.", "send_message", "contact", "Maria"),
    ("Text message my mom that I landed.", "send_message", "contact", "mom"),
    ("Find a recipe for lasagna.", "find_recipe", "dish", "lasagna"),
    ("Can you find me a recipe for banana bread?", "find_recipe", "dish", "banana bread"),
    ("I need a recipe for chicken curry.", "find_recipe", "dish", "chicken curry"),
    ("Find recipe pancakes.", "find_recipe", "dish", "pancakes"),
    ("Order a taxi to the airport.", "order_taxi", "destination", "the airport"),
    ("Please order me a taxi to Central Station.", "order_taxi", "destination", "Central Station"),
    ("Order taxi to 12 Baker Street.", "order_taxi", "destination", "12 Baker Street"),
    ("Can you order a taxi to the museum?", "order_taxi", "destination", "the museum"),
    ("Check the stock of blue mugs.", "check_stock", "product", "blue mugs"),
    ("How many umbrellas does the shop have in stock?", "check_stock", "product", "umbrellas"),
    ("Check stock for running shoes.", "check_stock", "product", "running shoes"),
    ("Is the red kettle in stock? Check the stock.", "check_stock", "product", "red kettle"),
    ("Turn on the lights in the kitchen.", "turn_on_lights", "room", "kitchen"),
    ("Turn on lights in the bedroom please.", "turn_on_lights", "room", "bedroom"),
    ("Can you turn on the lights in the living room?", "turn_on_lights", "room", "living room"),
    ("Turn the lights on in the garage.", "turn_on_lights", "room", "garage"),
    ("Track package 48213.", "track_package", "number", "48213"),
    ("Where is my parcel? Track package number 7731.", "track_package", "number", "7731"),
    ("Can you track my package 5520?", "track_package", "number", "5520"),
    ("Track the parcel number 90210 for me.", "track_package", "number", "90210"),
    ("Find a flight to Madrid.", "find_flight", "destination", "Madrid"),
    ("Find me flights to Tokyo next week.", "find_flight", "destination", "Tokyo"),
    ("Can you find flights to Berlin?", "find_flight", "destination", "Berlin"),
    ("I want to find a flight to Dublin.", "find_flight", "destination", "Dublin"),
]  # fmt: skip


def same(got: object, want: object) -> bool:
    if isinstance(want, str):
        return isinstance(got, str) and got.strip().lower() == want.lower()
    return got == want


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    cfg = load_config(overrides=ap.parse_args().set)
    lm = LM.load(cfg.lm)
    base = Toolset.load(cfg.tools, lm.parameter_count())
    tools = replace(base, box=ToolBox.of([*base.box.tools.values(), *INVENTED]))
    system = cfg.conversation.system_prompt
    right = args_right = 0
    tpf: list[float] = []
    misses = []
    for text, name, key, value in NAMED:
        ctx = ToolContext()
        got = answer(lm, tools, text, system, ctx)
        ctx.close()
        called = got.call.tool.name if got.call else None
        if called == name and got.call is not None:
            right += 1
            args_right += same(got.call.arguments.get(key), value)
            if got.call.arg_stats is not None:
                tpf.append(got.call.arg_stats.tokens_per_forward)
        else:
            misses.append({"text": text, "expected": name, "got": called})
        print(f"{text!r} -> {called} {got.call.arguments if got.call else ''}", file=sys.stderr)
    none = [r.text for r in REQUESTS if r.tool is None]
    false = []
    for text in none:
        ctx = ToolContext()
        got = answer(lm, tools, text, system, ctx)
        ctx.close()
        if got.call is not None:
            false.append({"text": text, "got": got.call.tool.name})
    print(
        json.dumps(
            {
                "named_requests": len(NAMED),
                "called_right": round(right / len(NAMED), 3),
                "argument_right": round(args_right / max(1, right), 3),
                "tokens_per_forward_median": round(statistics.median(tpf), 2) if tpf else None,
                "no_tool_requests": len(none),
                "false_calls": round(len(false) / len(none), 3),
                "misses": misses,
                "false": false,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
