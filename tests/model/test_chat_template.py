"""Chat templates: the real templates of Llama 3.1/3.2, Qwen2.5, Qwen3 and Gemma 3 (as their
tokenizer_config.json carries them; llama.cpp's models/templates/ copies, Gemma 3's from
google/gemma-3-4b-it) rendered here and by transformers' own renderer, which
`apply_chat_template` calls; the texts around a turn; the fallbacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from dllm_voice.model.chat_template import (
    CHATML,
    GEMMA,
    PLAIN,
    ChatTemplate,
    TurnTexts,
    fallback_template,
)

TEMPLATES = Path(__file__).parent / "templates"
# name -> (file, bos text, eos text), as each model's tokenizer_config.json names them
MODELS = {
    "llama-3.1": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.2": ("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>"),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>"),
    "gemma-3": ("google-gemma-3-4b-it.jinja", "<bos>", "<eos>"),
}
HISTORY = [
    {"role": "system", "content": "You are a voice assistant. Be brief."},
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "It is sunny, 21 °C."},
    {"role": "user", "content": "And tomorrow — «demain»?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather forecast for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    }
]
DATE = "05 Dec 2026"
LLAMA_ASSISTANT = "<|start_header_id|>assistant<|end_header_id|>\n\n"
QWEN3_ASSISTANT = "<|im_start|>assistant\n<think>\n\n</think>\n\n"  # thinking off


def _template(name: str) -> ChatTemplate:
    file, bos, eos = MODELS[name]
    return ChatTemplate((TEMPLATES / file).read_text(), bos_token=bos, eos_token=eos)


def _reference(name: str, messages, add_generation_prompt: bool, tools=None) -> str:
    """transformers' rendering, with what apply_chat_template passes (the special tokens) and
    what ours adds (date_string, enable_thinking=False)."""
    render = pytest.importorskip("transformers.utils.chat_template_utils").render_jinja_template
    file, bos, eos = MODELS[name]
    rendered, _ = render(
        conversations=[messages],
        tools=tools,
        chat_template=(TEMPLATES / file).read_text(),
        add_generation_prompt=add_generation_prompt,
        bos_token=bos,
        eos_token=eos,
        date_string=DATE,
        enable_thinking=False,
    )
    return rendered[0]


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["plain", "tools"])
def test_matches_transformers(name: str, tools) -> None:
    tpl = _template(name)
    for msgs, gen in ((HISTORY, True), (HISTORY[:3], False), (HISTORY[1:2], True)):
        ours = tpl.render(msgs, gen, tools, date_string=DATE)
        assert ours == _reference(name, msgs, gen, tools)
        assert msgs[-1]["content"].strip() in ours


def test_what_the_templates_write() -> None:
    """Spot checks that the renders above are the models' formats, not just equal."""
    msgs = HISTORY[:2]
    assert _template("gemma-3").render(msgs) == (
        "<bos><start_of_turn>user\nYou are a voice assistant. Be brief.\n\n"
        "What's the weather in Paris?<end_of_turn>\n<start_of_turn>model\n"
    )
    assert (
        _template("qwen3")
        .render(msgs)
        .endswith(
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"  # enable_thinking=False: no thinking
        )
    )
    llama = _template("llama-3.2").render(msgs, date_string=DATE)
    assert llama.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n")
    assert f"Today Date: {DATE}\n\nYou are a voice assistant." in llama
    qwen_tools = _template("qwen2.5").render(msgs, tools=TOOLS)
    assert '"name": "get_weather"' in qwen_tools and "Zürich" in qwen_tools  # no \u escapes


@pytest.mark.parametrize(
    ("name", "turn"),
    [
        ("llama-3.1", TurnTexts("<|eot_id|>", LLAMA_ASSISTANT, "<|eot_id|>")),
        ("llama-3.2", TurnTexts("<|eot_id|>", LLAMA_ASSISTANT, "<|eot_id|>")),
        ("qwen2.5", TurnTexts("<|im_end|>\n", "<|im_start|>assistant\n", "<|im_end|>\n")),
        ("qwen3", TurnTexts("<|im_end|>\n", QWEN3_ASSISTANT, "<|im_end|>\n")),
        ("gemma-3", TurnTexts("<end_of_turn>\n", "<start_of_turn>model\n", "<end_of_turn>\n")),
    ],
)  # fmt: skip
def test_turn_texts(name: str, turn: TurnTexts) -> None:
    assert _template(name).turn_texts() == turn


def test_today_is_the_default_date() -> None:
    from datetime import datetime

    text = _template("llama-3.1").render(HISTORY[1:2])
    assert f"Today Date: {datetime.now().strftime('%d %b %Y')}" in text


def test_template_errors_are_value_errors() -> None:
    two_users = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(ValueError, match="must alternate"):
        _template("gemma-3").render(two_users)  # raise_exception
    with pytest.raises(ValueError, match="does not parse"):
        ChatTemplate("{% for %}")


def test_sandboxed() -> None:
    sneaky = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ValueError):
        sneaky.render([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError):  # immutable: a template cannot change the caller's messages
        ChatTemplate("{{ messages.append(1) }}").render([{"role": "user", "content": "x"}])


def test_fallbacks() -> None:
    assert fallback_template({"<|im_start|>", "<|im_end|>"}) == CHATML
    assert fallback_template({"<start_of_turn>", "<end_of_turn>", "<bos>"}) == GEMMA
    assert fallback_template({"<s>", "</s>"}) == PLAIN
    msgs = HISTORY[:3]
    assert ChatTemplate(CHATML).render(msgs) == (
        "<|im_start|>system\nYou are a voice assistant. Be brief.<|im_end|>\n"
        "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\nIt is sunny, 21 °C.<|im_end|>\n<|im_start|>assistant\n"
    )
    # The fallback writes what Gemma 3's own template writes.
    gemma = ChatTemplate(GEMMA, bos_token="<bos>")
    for m in (HISTORY, HISTORY[1:], HISTORY[:3]):
        for gen in (True, False):
            assert gemma.render(m, gen) == _template("gemma-3").render(m, gen)
    assert ChatTemplate(PLAIN, bos_token="<s>").render(msgs) == (
        "<s>System: You are a voice assistant. Be brief.\nUser: What's the weather in Paris?\n"
        "Assistant: It is sunny, 21 °C.\nAssistant:"
    )
    assert ChatTemplate(PLAIN).turn_texts() == TurnTexts("\n", "Assistant:", "\n")
