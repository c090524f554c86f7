"""Configuration: one frozen dataclass per section, loaded once and validated with one-line errors.

Defaults live in code, next to the component that uses them (audio/config.py, model/config.py,
app/conversation/config.py, ServerConfig below). `config.yaml` restates every default with its help
text; `load_config` layers a YAML file and `--set section.key=value` overrides on top, checking
every key, type and range. Each field is a `setting` (dllm_voice/settings.py) whose metadata
carries its constraints: "help", and "min", "max" or "choices" where given.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dllm_voice.app.conversation.config import (
    BargeInConfig,
    ConversationConfig,
    EndOfTurnConfig,
    SpeculationConfig,
    TraceConfig,
)
from dllm_voice.app.tools.config import ToolsConfig
from dllm_voice.audio.config import ASRConfig, AudioConfig, EchoConfig, TTSConfig, VADConfig
from dllm_voice.model.config import LMConfig
from dllm_voice.settings import setting

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "config.yaml"


class ConfigError(ValueError):
    """A bad configuration value; its message is one line naming the key and what is allowed."""


@dataclass(frozen=True)
class ServerConfig:
    """The websocket server behind `python main.py serve`."""

    host: str = setting("127.0.0.1", "address to listen on; any but loopback needs a token")
    port: int = setting(8765, "TCP port, 0 = any free port", min=0, max=65535)
    token: str = setting(
        "", "secret a client passes as /ws?token=...; '' = none on loopback, else a generated one"
    )
    allowed_origins: tuple[str, ...] = setting(
        (), "browser origins allowed on /ws besides localhost and, with a token, the page's own"
    )
    trusted_proxies: tuple[str, ...] = setting(
        (), "reverse proxies (e.g. 127.0.0.1) whose X-Forwarded-For client is the one counted"
    )
    max_sessions: int = setting(4, "concurrent voice sessions; more are refused", min=1)
    max_sessions_per_client: int = setting(
        2, "concurrent sessions from one client address (0 = no cap)", min=0
    )
    idle_timeout_s: float = setting(
        300.0, "a session with no audio either way for this long is closed (0 = never)", min=0.0
    )
    max_message_bytes: int = setting(1 << 20, "largest websocket message accepted", min=1024)
    input_gap_fill_ms: int = setting(
        500, "audio this late is padded with silence so the turn ends (0 = off)", min=0, max=10000
    )
    playback_stall_ms: int = setting(
        3000, "an answer the client has not played for this long is cancelled", min=500, max=60000
    )


@dataclass(frozen=True)
class Config:
    """The whole configuration: one attribute per section."""

    audio: AudioConfig = field(default_factory=AudioConfig)
    vad: VADConfig = field(default_factory=VADConfig)
    asr: ASRConfig = field(default_factory=ASRConfig)
    tts: TTSConfig = field(default_factory=TTSConfig)
    echo: EchoConfig = field(default_factory=EchoConfig)
    lm: LMConfig = field(default_factory=LMConfig)
    conversation: ConversationConfig = field(default_factory=ConversationConfig)
    end_of_turn: EndOfTurnConfig = field(default_factory=EndOfTurnConfig)
    speculation: SpeculationConfig = field(default_factory=SpeculationConfig)
    barge_in: BargeInConfig = field(default_factory=BargeInConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    server: ServerConfig = field(default_factory=ServerConfig)


# A section's dataclass (AudioConfig, LMConfig, ...), its class picked by name at run time.
_Section = Any


def _section_types() -> dict[str, type]:
    hints = typing.get_type_hints(Config)
    return {f.name: hints[f.name] for f in dataclasses.fields(Config)}


def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1)
    return f"did you mean '{close[0]}'? " if close else ""


def _describe(tp: object) -> str:
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return f"list of {_describe(args[0])}" if args else "list"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _coerce(key: str, value: object, tp: object) -> object:
    """Return `value` as type `tp`, or raise ConfigError naming the key."""
    wrong = ConfigError(f"config: {key} = {value!r} has the wrong type (expected {_describe(tp)})")
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is type(None) and value is None:
                return None
            try:
                return _coerce(key, value, arg)
            except ConfigError:
                continue
        raise wrong
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise wrong
        (item_tp, *_) = [a for a in typing.get_args(tp) if a is not Ellipsis] or [object]
        items = [_coerce(key, v, item_tp) for v in value]
        return tuple(items) if origin is tuple else items
    if tp is object or tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise wrong
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise wrong
    if tp is float:
        # NaN passes every range check and no client can parse it back: finite numbers only.
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an int past a double's range
                number = math.inf
            if not math.isfinite(number):
                raise ConfigError(f"config: {key} = {value!r} is not a finite number")
            return number
        raise wrong
    if tp is str:
        # YAML reads `input_device: 2` as an int; a string field takes it as its text.
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, bool):  # YAML 1.1 reads `off` / `on` as false / true
            return "on" if value else "off"
        raise wrong
    raise wrong


def _check_range(key: str, value: object, meta: typing.Mapping[str, object]) -> None:
    # dllm_voice/settings.py stores choices as a tuple and min/max as numbers.
    choices = meta.get("choices")
    if isinstance(choices, tuple) and value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"config: {key} = {value!r} is not allowed (choose one of: {allowed})")
    lo, hi = meta.get("min"), meta.get("max")
    for v in value if isinstance(value, list | tuple) else [value]:
        if not isinstance(v, int | float):
            continue
        if (isinstance(lo, int | float) and v < lo) or (isinstance(hi, int | float) and v > hi):
            span = f"{lo if lo is not None else '-inf'} .. {hi if hi is not None else 'inf'}"
            raise ConfigError(f"config: {key} = {value!r} is out of range (allowed: {span})")


def _build_section(name: str, cls: type, values: typing.Mapping[str, object]) -> _Section:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, object] = {}
    for key, raw in values.items():
        full = f"{name}.{key}"
        if key not in fields:
            known = list(fields)
            raise ConfigError(
                f"config: unknown key '{full}' ({_did_you_mean(key, known)}"
                f"known keys in {name}: {', '.join(known)})"
            )
        value = _coerce(full, raw, hints[key])
        _check_range(full, value, fields[key].metadata)
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"config: {name}: {exc}") from None


def parse_override(text: str) -> tuple[str, str, object]:
    """Split `section.key=value` into its parts; the value is parsed as YAML (1, 0.5, true, cpu)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"config: --set {text!r} is malformed (expected section.key=value)")
    path, raw = text.split("=", 1)
    section, key = path.strip().split(".", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return section, key.strip(), value


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults ← YAML file (default: the project's config.yaml, if present) ← `--set` overrides."""
    data: dict[str, dict[str, object]] = {}
    if path is not None or DEFAULT_CONFIG_PATH.exists():
        file = Path(path) if path is not None else DEFAULT_CONFIG_PATH
        try:
            loaded = yaml.safe_load(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config: file not found: {file}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config: cannot read {file}: {exc}") from None
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            line = f" at line {where.line + 1}" if where is not None else ""
            raise ConfigError(f"config: {file} is not valid YAML{line}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config: {file} must be a mapping of sections (audio:, lm:, ...)")
        for section, values in loaded.items():
            if values is None:
                values = {}
            if not isinstance(values, dict):
                raise ConfigError(f"config: section '{section}' must be a mapping of key: value")
            data[str(section)] = dict(values)
    for text in overrides or []:
        section, key, value = parse_override(text)
        data.setdefault(section, {})[key] = value

    sections = _section_types()
    built: dict[str, _Section] = {}
    for section, values in data.items():
        if section not in sections:
            raise ConfigError(
                f"config: unknown section '{section}' ({_did_you_mean(section, list(sections))}"
                f"sections: {', '.join(sections)})"
            )
        built[section] = _build_section(section, sections[section], values)
    return Config(**built)


def with_changes(cfg: Config, changes: typing.Mapping[str, typing.Mapping[str, object]]) -> Config:
    """``cfg`` with ``{section: {key: value}}`` applied, each value checked as load_config
    checks a file's (a session's settings: the server's ``session.update``)."""
    sections = _section_types()
    built: dict[str, _Section] = {}
    for section, values in changes.items():
        if section not in sections:
            raise ConfigError(
                f"config: unknown section '{section}' ({_did_you_mean(section, list(sections))}"
                f"sections: {', '.join(sections)})"
            )
        current = dataclasses.asdict(getattr(cfg, section))
        built[section] = _build_section(section, sections[section], {**current, **values})
    return dataclasses.replace(cfg, **built)


def _yaml_scalar(value: object) -> str:
    text: str = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def render_yaml(cfg: Config) -> str:
    """The configuration as commented YAML: every section, every key, its help and constraints."""
    lines = [
        "# Every setting with its default. Override with --config FILE or",
        "# --set section.key=value. Generated by `python main.py config`; a test keeps it true.",
    ]
    for section in dataclasses.fields(Config):
        obj = getattr(cfg, section.name)
        doc = (type(obj).__doc__ or "").strip().splitlines()[0]
        lines += ["", f"{section.name}:  # {doc}"]
        for f in dataclasses.fields(obj):
            meta = f.metadata
            notes = [meta.get("help", "")]
            if "choices" in meta:
                notes.append("one of: " + ", ".join(str(c) for c in meta["choices"]))
            if "min" in meta or "max" in meta:
                notes.append(f"range: {meta.get('min', '-inf')} .. {meta.get('max', 'inf')}")
            comment = "; ".join(n for n in notes if n)
            value = _yaml_scalar(getattr(obj, f.name))
            lines.append(f"  {f.name}: {value}" + (f"  # {comment}" if comment else ""))
    return "\n".join(lines) + "\n"
