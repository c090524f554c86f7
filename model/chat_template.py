"""A model's chat template: the Jinja text its file carries, rendered as transformers renders it.

The template comes from GGUF metadata (`tokenizer.chat_template`) or a Hugging Face dir's
tokenizer_config.json (`chat_template`). Rendering follows transformers' `apply_chat_template`
so that a prompt here is the prompt the model was tuned on: an `ImmutableSandboxedEnvironment`
(a template is code from the Hub) with trim_blocks, lstrip_blocks and loop controls, the globals
`raise_exception` and `strftime_now`, and transformers' `tojson` (no HTML escaping, non-ASCII
kept, indent/separators/sort_keys). Variables: messages, add_generation_prompt, tools,
bos_token, eos_token, date_string (today) and enable_thinking=False (Qwen3 then writes an empty
think block: a voice agent must not think aloud).

A file without a template (a base model such as Gemma 3 270M, the tiny test models) gets
`fallback_template`'s: ChatML, Gemma's turns or a plain "User: / Assistant:" transcript.
"""

from __future__ import annotations

import json
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The fallbacks, the one place they are stated (see fallback_template).
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Gemma 3's own format: a system message opens the first user turn; the assistant is "model".
GEMMA = (
    "{{ bos_token }}{% set ns = namespace(system='') %}{% for m in messages %}"
    "{% if m.role == 'system' %}{% set ns.system = ns.system + m.content | trim + '\n\n' %}"
    "{% else %}{{ '<start_of_turn>' + ('model' if m.role == 'assistant' else m.role) + '\n'"
    " + ns.system + m.content | trim + '<end_of_turn>\n' }}{% set ns.system = '' %}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
PLAIN = (
    "{{ bos_token }}{% for m in messages %}{{ m.role | capitalize + ': ' + m.content + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def fallback_template(vocab: Container[str]) -> str:
    """The template for a file that carries none (a base model), chosen by its vocab.

    A base model follows no chat format, but a vocab that has a format's turn tokens (ChatML's
    <|im_start|>, Gemma's <start_of_turn>) was made for that format and its family's tuned
    models speak it, so the turn tokens mean something to it; any other base model is best
    prompted as a plain transcript it can continue ("User: ... / Assistant:")."""
    if "<|im_start|>" in vocab and "<|im_end|>" in vocab:
        return CHATML
    if "<start_of_turn>" in vocab and "<end_of_turn>" in vocab:
        return GEMMA
    return PLAIN


def _tojson(
    x: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers' filter: Jinja's own escapes <, >, & and ' for HTML, which no prompt wants.
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _environment()


@dataclass(frozen=True)
class TurnTexts:
    """What a template writes around the words of a turn ("" where a probe render failed).

    user_end: after a user message's words (ChatML "<|im_end|>\\n", Llama 3 "<|eot_id|>").
    assistant_start: the generation prompt after that ("<|im_start|>assistant\\n").
    assistant_end: after an assistant message's words ("<|im_end|>\\n", "<end_of_turn>\\n").
    """

    user_end: str = ""
    assistant_start: str = ""
    assistant_end: str = ""


class ChatTemplate:
    """A compiled chat template with the token texts it is rendered with."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source
        self.bos_token, self.eos_token = bos_token, eos_token
        try:
            self._compiled = _ENV.from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise ValueError(f"chat template does not parse: {e}") from e
        self.takes_tools = "tools" in source

    def render(
        self,
        messages: Sequence[Mapping[str, object]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, object]] | None = None,
        **variables: object,
    ) -> str:
        """The prompt text; `tools` are OpenAI-style function schemas ({"type": "function",
        "function": {...}}), seen only by a template that reads them. `variables` override the
        defaults (date_string, enable_thinking, ...). ValueError where the template raises."""
        context: dict[str, object] = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "date_string": datetime.now().strftime("%d %b %Y"),
            "enable_thinking": False,
            **variables,
        }
        try:
            return self._compiled.render(
                messages=[dict(m) for m in messages],
                tools=None if tools is None else [dict(t) for t in tools],
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **context,
            )
        except jinja2.TemplateError as e:
            raise ValueError(f"chat template: {e}") from e

    def turn_texts(self) -> TurnTexts:
        """The texts around a turn's words, read off renders of a probe conversation."""
        user, reply = "Zq7 user words", "Zq7 assistant words"
        u = [{"role": "user", "content": user}]
        try:
            closed = self.render(u, add_generation_prompt=False)
            opened = self.render(u, add_generation_prompt=True)
            answered = self.render([*u, {"role": "assistant", "content": reply}], False)
        except ValueError:
            return TurnTexts()
        if user not in closed or reply not in answered:
            return TurnTexts()
        user_end = closed[closed.rindex(user) + len(user) :]
        start = opened[len(closed) :] if opened.startswith(closed) else ""
        return TurnTexts(user_end, start, answered[answered.rindex(reply) + len(reply) :])
