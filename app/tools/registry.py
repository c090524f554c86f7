"""Tools: Python callables the agent can call, with a name, a description and a JSON schema.

A tool is declared with the ``@tool`` decorator on a function; its parameters' JSON schema is
derived from the type hints (str, int, float, bool, ``Literal[...]``, ``list[str]``), the
description from the docstring's first paragraph. A parameter annotated ``ToolContext`` is not
part of the schema: the session hands it in (timers use it to speak later). A client's tools
(``session.update`` with ``tools``) are ``Tool``s with no function: the client runs them.

What a call returns: a ``str`` is a sentence the agent says as it is; any other JSON value is
the result the LM answers from. ``ToolError("...")`` is a sentence for the user ("I don't know
the city Atlantis."); any other exception is an apology and an error in the trace.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import re
import sys
import threading
import time
import types
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Union

JSONSchema = dict[str, object]
# Reads a call's arguments from the user's words; None when they are not there.
Parser = Callable[[str], "dict[str, object] | None"]


class Guess(dict[str, object]):
    """A parser's arguments that name what its tool does not know ("the time in Barco"): the
    call says so, unless another hearing of the turn reads one it knows ("Baku")."""


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


class ToolError(Exception):
    """A failure the user is told about in the message's own words (an unknown city, a divide
    by zero); the conversation goes on."""


class ToolDefinitionError(ValueError):
    """A tool that cannot be registered: bad name, unsupported parameter type, bad schema."""


class ToolContext:
    """What a tool may use of the conversation that called it.

    ``say(text)`` speaks a sentence later, from any thread (a timer going off; the session
    waits for the user to finish a turn); ``schedule(delay_s, text)`` says it after
    ``delay_s`` seconds and returns an id for ``unschedule``; ``now()`` is the wall clock;
    ``state`` keeps a conversation's tool state (its timers) between calls.
    """

    def __init__(
        self,
        say: Callable[[str], None] | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._say = say
        self.now = now
        self.state: dict[str, object] = {}
        self._timers: dict[int, threading.Timer] = {}
        self._next = 0
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        if self._say is not None:
            self._say(text)

    def schedule(self, delay_s: float, text: str) -> int:
        with self._lock:
            self._next += 1
            key = self._next
            timer = threading.Timer(max(0.0, delay_s), self._fire, (key, text))
            timer.daemon = True
            self._timers[key] = timer
        timer.start()
        return key

    def unschedule(self, key: int) -> bool:
        with self._lock:
            timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        return timer is not None

    def close(self) -> None:
        """Cancel everything scheduled (the conversation ended)."""
        with self._lock:
            timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()

    def _fire(self, key: int, text: str) -> None:
        with self._lock:
            if self._timers.pop(key, None) is None:
                return
        self.say(text)


@dataclass(frozen=True)
class Tool:
    """One callable the agent may choose. ``fn`` None: a client-side tool."""

    name: str
    description: str
    parameters: JSONSchema
    fn: Callable[..., object] | None = None
    parse: Parser | None = None  # reads the arguments from the words (built-in tools)
    side_effects: bool = False  # never run twice for one turn (a reopened or repeated turn)
    # changes nothing, so it may run on a speculation's guess of the turn and its sentence be
    # voiced before the turn is committed (Piper's 55-70 ms off a tool turn's voice to voice)
    read_only: bool = False
    timeout_s: float = 5.0
    context_arg: str | None = None  # the parameter that receives the ToolContext

    @property
    def client_side(self) -> bool:
        return self.fn is None

    def spec(self) -> dict[str, object]:
        """The OpenAI Realtime shape: {"type": "function", "name", "description", "parameters"}."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }

    def check(self, arguments: Mapping[str, object]) -> dict[str, object]:
        """``arguments`` checked against the schema: required ones present, no unknown ones,
        each of its type (an int is a number; a whole float is an integer). ToolError if not."""
        props = _properties(self.parameters)
        out: dict[str, object] = {}
        for key, value in arguments.items():
            if key not in props:
                raise ToolError(f"{self.name} has no argument {key!r}")
            out[key] = _coerce(self.name, key, value, props[key])
        required = self.parameters.get("required", [])
        names = required if isinstance(required, list) else []
        missing = [k for k in names if isinstance(k, str) and k not in out]
        if missing:
            raise ToolError(f"{self.name} needs {', '.join(missing)}")
        return out

    async def call(self, arguments: Mapping[str, object], ctx: ToolContext) -> object:
        """Run the tool with checked ``arguments`` (awaits a coroutine function; a plain one
        runs in a worker thread so a slow one blocks nothing)."""
        if self.fn is None:
            raise ToolDefinitionError(f"{self.name} is a client-side tool")
        kwargs: dict[str, object] = dict(self.check(arguments))
        if self.context_arg:
            kwargs[self.context_arg] = ctx
        if inspect.iscoroutinefunction(self.fn):
            result = await typing.cast(Callable[..., Awaitable[object]], self.fn)(**kwargs)
        else:
            result = await asyncio.to_thread(self.fn, **kwargs)
        return result


def _properties(schema: Mapping[str, object]) -> dict[str, Mapping[str, object]]:
    props = schema.get("properties", {})
    return dict(props) if isinstance(props, dict) else {}


def _coerce(tool: str, key: str, value: object, prop: Mapping[str, object]) -> object:
    kind = prop.get("type")
    bad = ToolError(f"{tool}: {key} must be {kind or 'a value'}, not {value!r}")
    if "enum" in prop:
        options = prop["enum"]
        if not isinstance(options, list) or value not in options:
            raise ToolError(f"{tool}: {key} must be one of {options}, not {value!r}")
        return value
    if kind == "string":
        if not isinstance(value, str):
            raise bad
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad
    elif kind == "integer":
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
    elif kind == "boolean":
        if not isinstance(value, bool):
            raise bad
    elif kind == "array" and not isinstance(value, list):
        raise bad
    return value


_SIMPLE: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_of(hint: object, where: str) -> JSONSchema:
    origin = typing.get_origin(hint)
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if origin is Literal:
        options = list(typing.get_args(hint))
        kinds = {_SIMPLE.get(type(o)) for o in options}
        if len(kinds) != 1 or None in kinds:
            raise ToolDefinitionError(f"{where}: a Literal of one plain type (str, int, ...)")
        return {"type": kinds.pop(), "enum": options}
    if origin is list:
        (item,) = typing.get_args(hint) or (str,)
        return {"type": "array", "items": _schema_of(item, where)}
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return _schema_of(args[0], where)
    raise ToolDefinitionError(f"{where}: unsupported parameter type {hint!r}")


def schema_from_signature(fn: Callable[..., object]) -> tuple[JSONSchema, str | None]:
    """The JSON schema of ``fn``'s parameters and the name of its ToolContext parameter."""
    hints = typing.get_type_hints(fn)
    props: dict[str, object] = {}
    required: list[str] = []
    context_arg = None
    for name, param in inspect.signature(fn).parameters.items():
        hint = hints.get(name)
        if hint is ToolContext:
            context_arg = name
            continue
        if hint is None:
            raise ToolDefinitionError(f"{fn.__name__}: parameter {name!r} has no type hint")
        props[name] = _schema_of(hint, f"{fn.__name__}({name})")
        if param.default is inspect.Parameter.empty:
            required.append(name)
    return {"type": "object", "properties": props, "required": required}, context_arg


def tool(
    name: str | None = None,
    *,
    description: str | None = None,
    parameters: JSONSchema | None = None,
    parse: Parser | None = None,
    side_effects: bool = False,
    read_only: bool = False,
    timeout_s: float = 5.0,
) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """Declare a function a tool; the module that holds it is named in ``tools.modules``.

    ``parameters`` given overrides the schema derived from the type hints; ``parse`` reads the
    arguments from the user's words (else the LM fills them in under the schema's grammar);
    ``side_effects``: a call that changes something (a booking), never repeated for one turn;
    ``read_only``: a call that changes nothing (a lookup), run as soon as a speculation guesses
    the turn, its result voiced ahead and kept once the turn is committed.
    """

    def declare(fn: Callable[..., object]) -> Callable[..., object]:
        if parameters is None:
            derived, context_arg = schema_from_signature(fn)
        else:  # given whole: the hints only say where the ToolContext goes
            hints = typing.get_type_hints(fn)
            derived = parameters
            context_arg = next((k for k, h in hints.items() if h is ToolContext), None)
        doc = inspect.getdoc(fn) or ""
        made = Tool(
            name=name or fn.__name__,
            description=description or doc.split("\n\n")[0].replace("\n", " ").strip(),
            parameters=derived,
            fn=fn,
            parse=parse,
            side_effects=side_effects,
            read_only=read_only,
            timeout_s=timeout_s,
            context_arg=context_arg,
        )
        validate(made)
        fn.__dict__["__tool__"] = made
        return fn

    return declare


def validate(t: Tool) -> Tool:
    """``t`` or a ToolDefinitionError naming what is wrong with it."""
    if not _NAME.match(t.name):
        raise ToolDefinitionError(f"tool name {t.name!r}: letters, digits, _ and -, up to 64")
    if not t.description.strip():
        raise ToolDefinitionError(f"tool {t.name}: a description is required")
    params = t.parameters
    if params.get("type") != "object" or not isinstance(params.get("properties", {}), dict):
        raise ToolDefinitionError(f"tool {t.name}: parameters must be an object schema")
    for key, prop in _properties(params).items():
        if not isinstance(prop, dict):
            raise ToolDefinitionError(f"tool {t.name}: parameter {key!r} must be a schema object")
        kind = prop.get("type")
        if kind not in ("string", "number", "integer", "boolean", "array") and "enum" not in prop:
            raise ToolDefinitionError(f"tool {t.name}: parameter {key!r} has type {kind!r}")
    required = params.get("required", [])
    if not isinstance(required, list) or any(k not in _properties(params) for k in required):
        raise ToolDefinitionError(f"tool {t.name}: required names a parameter it does not have")
    if not t.timeout_s > 0:
        raise ToolDefinitionError(f"tool {t.name}: timeout_s must be > 0")
    if t.read_only and t.side_effects:
        raise ToolDefinitionError(f"tool {t.name}: read_only and side_effects exclude each other")
    return t


def client_tool(spec: Mapping[str, object]) -> Tool:
    """A client-side tool from its OpenAI Realtime description; ToolDefinitionError if bad."""
    if spec.get("type", "function") != "function":
        raise ToolDefinitionError("a tool's type must be 'function'")
    name, description = spec.get("name"), spec.get("description", "")
    parameters = spec.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(name, str) or not isinstance(description, str):
        raise ToolDefinitionError("a tool needs a string name and description")
    if not isinstance(parameters, dict):
        raise ToolDefinitionError(f"tool {name}: parameters must be an object schema")
    return validate(Tool(name=name, description=description or name, parameters=parameters))


def tools_of(module: types.ModuleType) -> list[Tool]:
    """The tools a module declares, in the order they appear in it."""
    found = [getattr(v, "__dict__", {}).get("__tool__") for v in vars(module).values()]
    return [t for t in found if isinstance(t, Tool)]


def load_module(name: str) -> types.ModuleType:
    """Import ``name``: a dotted module name, or a path to a .py file."""
    if name.endswith(".py"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise ToolDefinitionError(f"tools.modules: no file {path}")
        spec = importlib.util.spec_from_file_location(f"tools_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ToolDefinitionError(f"tools.modules: cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ToolDefinitionError(f"tools.modules: cannot import {name!r} ({e})") from e


@dataclass
class ToolBox:
    """The tools one conversation may call, by name; ``choice`` as in the Realtime API:
    "auto", "none", "required" or a tool's name."""

    tools: dict[str, Tool] = field(default_factory=dict)
    choice: str = "auto"

    @classmethod
    def of(cls, tools: Iterable[Tool], choice: str = "auto") -> ToolBox:
        box = cls(choice=choice)
        for t in tools:
            box.add(t)
        return box

    def add(self, t: Tool) -> None:
        if t.name in self.tools:
            raise ToolDefinitionError(f"two tools are named {t.name!r}")
        self.tools[t.name] = t

    def with_client_tools(self, tools: Iterable[Tool], choice: str) -> ToolBox:
        """This box's server tools plus ``tools`` (a client's, replacing its earlier ones)."""
        server = [t for t in self.tools.values() if not t.client_side]
        box = ToolBox.of(server, choice)
        for t in tools:
            if t.name in box.tools:
                raise ToolDefinitionError(f"tool {t.name!r} is already a server tool")
            box.add(t)
        if choice not in ("auto", "none", "required") and choice not in box.tools:
            raise ToolDefinitionError(f"tool_choice {choice!r} names no tool")
        return box

    def with_choice(self, choice: str) -> ToolBox:
        return ToolBox(dict(self.tools), choice)

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    def __len__(self) -> int:
        return len(self.tools)

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)
