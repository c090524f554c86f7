"""Tokenizer, chat template and streaming detokenizer.

Byte-level BPE rebuilt from GGUF metadata with the `tokenizers` library (vocab + merges +
the pre-tokenizer named by `tokenizer.ggml.pre`), or a Hugging Face tokenizer.json. Chat
templates are written out in Python (ChatML for SmolLM2/Qwen2, Llama-3 headers, Mistral
[INST]) and chosen by the model's own jinja template text, so no jinja dependency; ChatML's
default system prompt is read from that template. `StreamDecoder` turns token ids into text
increments that never split a multi-byte UTF-8 character.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as RustTokenizer

from dllm_voice.model.errors import ModelLoadError
from dllm_voice.model.gguf_file import MetaValue, ints, scalar, strings

# Pre-tokenizer split patterns of llama.cpp's `tokenizer.ggml.pre` names.
_LLAMA3_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
STOP_TOKEN_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>")


def _byte_decoder() -> dict[str, int]:
    """GPT-2's reversible byte <-> printable-unicode map, inverted (unicode char -> byte)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += list(range(ord("®"), ord("ÿ") + 1))
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


def _gguf_pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    if pre == "smollm":  # digits split one by one, then GPT-2 regex
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    if pre in ("llama-bpe", "llama3", "qwen2"):
        pat = _QWEN2_PAT if pre == "qwen2" else _LLAMA3_PAT
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pat), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)  # gpt2 / default


class Tokenizer:
    def __init__(
        self,
        tok: RustTokenizer,
        *,
        chat_template: str = "",
        eos_ids: Iterable[int] = (),
        byte_level: bool = True,
    ) -> None:
        self._tok = tok
        self.template_text = chat_template
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.byte_level = byte_level
        vocab = tok.get_vocab(with_added_tokens=True)
        stops = {vocab[t] for t in STOP_TOKEN_TEXTS if t in vocab}
        self.stop_ids: frozenset[int] = frozenset(stops | set(eos_ids))
        self.special_ids: frozenset[int] = frozenset(
            i for i, t in tok.get_added_tokens_decoder().items() if t.special
        )
        if "<|start_header_id|>" in chat_template:
            self.template = "llama3"
        elif "[INST]" in chat_template:
            self.template = "mistral"
        else:
            self.template = "chatml"
        m = re.search(r"<\|im_start\|>system(?:\n|\\n)(.*?)<\|im_end\|>", chat_template, re.S)
        self.default_system = m.group(1) if m and self.template == "chatml" else ""

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def from_gguf_meta(cls, metadata: Mapping[str, MetaValue]) -> Tokenizer:
        """From GGUF metadata: tokenizer.ggml.{model,tokens,merges,token_type,pre,...}."""
        kind = metadata.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ModelLoadError(
                f"GGUF tokenizer model {kind!r} is not supported (supported: gpt2 byte-level BPE)"
            )
        tokens = strings(metadata, "tokenizer.ggml.tokens")
        pairs = (m.partition(" ") for m in strings(metadata, "tokenizer.ggml.merges"))
        merges = [(a, b) for a, _, b in pairs]
        typed = "tokenizer.ggml.token_type" in metadata
        types = ints(metadata, "tokenizer.ggml.token_type") if typed else [1] * len(tokens)
        bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges)
        tok = RustTokenizer(bpe)
        tok.pre_tokenizer = _gguf_pre_tokenizer(str(scalar(metadata, "tokenizer.ggml.pre", "gpt2")))
        tok.decoder = decoders.ByteLevel()
        # 3 = control, 4 = user-defined: matched whole in text, never split by BPE.
        tok.add_special_tokens(
            [
                AddedToken(t, special=True, normalized=False)
                for t, ty in zip(tokens, types, strict=True)
                if ty in (3, 4)
            ]
        )
        eos = "tokenizer.ggml.eos_token_id"
        return cls(
            tok,
            chat_template=str(scalar(metadata, "tokenizer.chat_template", "")),
            eos_ids=(int(scalar(metadata, eos)),) if eos in metadata else (),
        )

    @classmethod
    def from_hf_dir(cls, path: Path) -> Tokenizer:
        f = path / "tokenizer.json"
        if not f.is_file():
            raise ModelLoadError(f"{path}: tokenizer.json missing (needed for HF model dirs)")
        tok = RustTokenizer.from_file(str(f))
        cfg_file = path / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
        template = cfg.get("chat_template") or ""
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            template = next((t["template"] for t in template if t.get("name") == "default"), "")
        eos: set[int] = set()
        for name in ("generation_config.json", "config.json"):
            gf = path / name
            if gf.is_file():
                e = json.loads(gf.read_text()).get("eos_token_id")
                eos.update(e if isinstance(e, list) else [] if e is None else [e])
        byte_level = "Ġ" in tok.get_vocab() or "Ċ" in tok.get_vocab()
        return cls(tok, chat_template=template, eos_ids=eos, byte_level=byte_level)

    # --- text <-> ids ---------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Special-token texts (<|im_start|>, ...) in `text` become their ids; no BOS added."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """Full decode, special tokens dropped."""
        return b"".join(self.token_bytes[i] for i in ids).decode("utf-8", errors="replace")

    @cached_property
    def sentence_end_ids(self) -> tuple[int, ...]:
        """Ids of ".", "?" and "!" where each is a token of its own."""
        return tuple(ids[0] for m in ".?!" if len(ids := self.encode(m)) == 1)

    @cached_property
    def token_bytes(self) -> list[bytes]:
        """Raw bytes of every token id (b"" for special tokens): ~50 ms once."""
        bmap = _byte_decoder()
        out: list[bytes] = []
        for i in range(self.vocab_size):
            t = self._tok.id_to_token(i)
            if t is None or i in self.special_ids:
                out.append(b"")
            elif self.byte_level:
                out.append(bytes(bmap[c] for c in t) if all(c in bmap for c in t) else t.encode())
            elif re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", t):  # sentencepiece byte fallback
                out.append(bytes([int(t[3:5], 16)]))
            else:
                out.append(t.replace("▁", " ").encode())
        return out

    def stream(self) -> StreamDecoder:
        return StreamDecoder(self.token_bytes)

    # --- chat template --------------------------------------------------------------------

    def render_chat(
        self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        for m in messages:
            if m.get("role") not in ("system", "user", "assistant"):
                raise ValueError(f"chat message role must be system|user|assistant, got {m!r}")
        if self.template == "llama3":
            parts = ["<|begin_of_text|>"]
            parts += [
                f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>"
                for m in messages
            ]
            if add_generation_prompt:
                parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
            return "".join(parts)
        if self.template == "mistral":
            return self._render_mistral(messages)
        parts = []
        if self.default_system and (not messages or messages[0]["role"] != "system"):
            parts.append(f"<|im_start|>system\n{self.default_system}<|im_end|>\n")
        parts += [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
        if add_generation_prompt:
            parts.append("<|im_start|>assistant\n")
        return "".join(parts)

    @staticmethod
    def _render_mistral(messages: Sequence[dict[str, str]]) -> str:
        """Mistral [INST] format; a system message is prepended to the first user turn (the
        generation prompt is implicit: the answer follows [/INST])."""
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        parts = ["<s>"]
        for m in messages:
            if m["role"] == "user":
                text = f"{system}\n\n{m['content']}" if system else m["content"]
                parts.append(f"[INST] {text} [/INST]")
                system = ""
            elif m["role"] == "assistant":
                parts.append(f"{m['content']}</s>")
        return "".join(parts)

    def apply_chat(
        self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True
    ) -> list[int]:
        return self.encode(self.render_chat(messages, add_generation_prompt))


class StreamDecoder:
    """Token ids in, text out; holds back bytes of an incomplete UTF-8 character."""

    def __init__(self, token_bytes: list[bytes]) -> None:
        self._bytes = token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, ids: Iterable[int]) -> str:
        return self._utf8.decode(b"".join(self._bytes[i] for i in ids))

    def flush(self) -> str:
        """End of stream: a dangling partial character becomes U+FFFD."""
        return self._utf8.decode(b"", final=True)
