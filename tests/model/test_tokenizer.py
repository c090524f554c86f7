"""Tokenizer: round trips, ChatML template, special tokens, UTF-8-safe streaming."""

from __future__ import annotations

TEXTS = [
    "Hello, world! 12345 apples.",
    "Café crème, naïve façade — déjà vu.",
    "Emoji: 😀🇫🇷👍🏽 and 日本語のテキスト.",
    "  leading spaces\n\ttabs and\nnewlines  ",
]


def test_round_trip(tok) -> None:
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == text


def test_digits_are_split_one_by_one(tok) -> None:
    ids = tok.encode("2024")
    assert [tok.decode([i]) for i in ids] == ["2", "0", "2", "4"]


def test_chatml_template(tok) -> None:
    msgs = [{"role": "user", "content": "Hi"}]
    expected = (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.render_chat(msgs) == expected
    with_system = [{"role": "system", "content": "Be brief."}, *msgs]
    assert tok.render_chat(with_system).startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    ids = tok.apply_chat(msgs)
    im_start, im_end = tok.encode("<|im_start|>"), tok.encode("<|im_end|>")
    assert len(im_start) == len(im_end) == 1  # special tokens are single ids, never BPE-split
    assert ids.count(im_start[0]) == 3 and ids.count(im_end[0]) == 2
    assert im_end[0] in tok.stop_ids


def test_stream_decoder_yields_only_whole_characters(tok) -> None:
    for text in TEXTS:
        ids = tok.encode(text)
        partial = [i for i in ids if tok.token_bytes[i] and not _is_utf8(tok.token_bytes[i])]
        dec = tok.stream()
        pieces = [dec.push([i]) for i in ids]
        assert "".join(pieces) == text
        assert all("\ufffd" not in p for p in pieces)
        if "😀" in text:
            assert partial, "the emoji text should contain tokens that split a character"


def test_stream_decoder_never_emits_a_broken_character(tok) -> None:
    b = "🇫🇷".encode()
    byte_ids = [tok.token_bytes.index(bytes([x])) for x in b]  # one byte per token
    dec = tok.stream()
    out = [dec.push([i]) for i in byte_ids]
    assert out[:3] == ["", "", ""] and "".join(out) == "🇫🇷"


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_other_templates_chosen_from_the_model_template(tok) -> None:
    from dllm_voice.model.tokenizer import Tokenizer

    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    llama3 = Tokenizer(tok._tok, chat_template="{{ '<|start_header_id|>' }}")
    assert llama3.render_chat(msgs) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    mistral = Tokenizer(tok._tok, chat_template="{{ '[INST] ' + m + ' [/INST]' }}")
    assert mistral.render_chat([*msgs, {"role": "assistant", "content": "Hello."}]) == (
        "<s>[INST] Be brief.\n\nHi [/INST]Hello.</s>"
    )
    qwen = Tokenizer(tok._tok, chat_template="'<|im_start|>system\nYou are Qwen.<|im_end|>\n'")
    assert qwen.default_system == "You are Qwen."
