"""Tokenizer, chat template and streaming detokenizer.

Rebuilt from GGUF metadata with the `tokenizers` library: byte-level BPE (`tokenizer.ggml.model`
"gpt2": vocab + merges + the pre-tokenizer named by `tokenizer.ggml.pre`) or SentencePiece
("llama": Gemma, Llama 2, Mistral; a byte-fallback BPE whose merges come from the vocab and its
scores), each encoding as transformers' GGUF tokenizer does; or a Hugging Face tokenizer.json.
The chat template is the file's own Jinja template (model/chat_template.py), the stop tokens
its EOS/EOT ids and the token that template closes a turn with. `StreamDecoder` turns token
ids into text increments that never split a multi-byte UTF-8 character.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as RustTokenizer

from dllm_voice.model.chat_template import ChatTemplate, fallback_template
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


# Architectures whose SentencePiece files transformers reads as Gemma's (see _sentencepiece).
_GEMMA_ARCHS = ("gemma", "gemma2", "gemma3")
_HASH_BASE = np.uint64(0x100000001B3)  # FNV's 64-bit prime: an odd multiplier mod 2**64


def _spm_merges(tokens: Sequence[str], scores: Sequence[float]) -> list[tuple[str, str]]:
    """BPE merges that replay SentencePiece's BPE: every split of a token into two tokens, best
    first by the whole token's score, then the longer left piece, the longer right piece, and
    vocab order: transformers' `generate_merges`, so encodings match its GGUF tokenizer.

    The pieces are looked up as 64-bit polynomial hashes in numpy: a Python loop over the 1.2M
    splits of Gemma 3's 262K tokens took 1.7x as long. A hash collision could only name a piece
    outside the vocab, which BPE's constructor refuses: never a silent wrong merge."""
    best = dict(zip(tokens, scores, strict=True))  # transformers': first place, last score
    names = list(best)
    n = len(names)
    lens = np.fromiter(map(len, names), np.int64, n)
    codes = np.frombuffer("".join(names).encode("utf-32-le"), np.uint32).astype(np.uint64) + 1
    starts = np.cumsum(lens) - lens
    prefix = np.zeros(len(codes), np.uint64)  # prefix[starts[t] + j]: hash of names[t][: j + 1]
    with np.errstate(over="ignore"):
        prefix[starts[lens > 0]] = codes[starts[lens > 0]]
        for j in range(1, int(lens.max(initial=0))):
            at = starts[lens > j] + j
            prefix[at] = prefix[at - 1] * _HASH_BASE + codes[at]
        powers = np.cumprod(np.full(max(int(lens.max(initial=0)), 1), _HASH_BASE))  # B**(k+1)
        whole = prefix[np.maximum(starts + lens - 1, 0)]
        known = np.sort(whole[lens > 0])
        cuts = np.maximum(lens - 1, 0)
        t = np.repeat(np.arange(n), cuts)
        i = (
            np.repeat(lens, cuts)
            - 1
            - (np.arange(len(t)) - np.repeat(np.cumsum(cuts) - cuts, cuts))
        )
        left = prefix[starts[t] + i - 1]
        right = whole[t] - left * powers[lens[t] - i - 1]

    def member(h: np.ndarray) -> np.ndarray:
        k = np.minimum(np.searchsorted(known, h), len(known) - 1)
        return known[k] == h

    ok = member(left)
    ok[ok] = member(right[ok])
    t, i = t[ok], i[ok]
    score = np.asarray(list(best.values()), np.float64)
    order = np.lexsort((t, i - lens[t], -i, -score[t]))
    return [
        (names[a][:b], names[a][b:])
        for a, b in zip(t[order].tolist(), i[order].tolist(), strict=True)
    ]


def _byte_level(
    metadata: Mapping[str, MetaValue], tokens: list[str], types: list[int]
) -> RustTokenizer:
    pairs = (m.partition(" ") for m in strings(metadata, "tokenizer.ggml.merges"))
    merges = [(a, b) for a, _, b in pairs]
    tok = RustTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
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
    return tok


def _sentencepiece(
    metadata: Mapping[str, MetaValue], tokens: list[str], types: list[int]
) -> RustTokenizer:
    """A byte-fallback BPE over the vocab: "▁" for spaces (prepended to the text where
    tokenizer.ggml.add_space_prefix says so, llama.cpp's default), control tokens (type 3)
    matched whole as special tokens, user-defined ones (type 4: Gemma's "\\n" runs, <think>)
    matched whole as plain ones."""
    gemma = metadata.get("general.architecture") in _GEMMA_ARCHS
    if gemma:
        # Gemma files store the runs-of-spaces tokens as spaces, which the text (with "▁" for
        # " ") never holds; and Gemma's scores are not its merge order, the token order is.
        pieces = ["▁" * len(t) if " " in t and not t.strip() else t for t in tokens]
        scores: Sequence[float] = range(0, -len(tokens), -1)
    else:
        pieces = tokens
        raw = metadata.get("tokenizer.ggml.scores")
        if not isinstance(raw, list) or len(raw) != len(tokens):
            raise TypeError("GGUF tokenizer.ggml.scores: not one score per token")
        scores = [float(s) for s in raw]  # type: ignore[arg-type]
    vocab = {t: i for i, t in enumerate(pieces)}
    unk = metadata.get("tokenizer.ggml.unknown_token_id")
    bpe = models.BPE(
        vocab=vocab,
        merges=_spm_merges(pieces, scores),
        byte_fallback=True,
        fuse_unk=True,
        unk_token=pieces[unk] if isinstance(unk, int) and 0 <= unk < len(pieces) else None,
    )
    tok = RustTokenizer(bpe)
    prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="first" if prefix else "never", split=False
    )
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    tok.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, ty in zip(tokens, types, strict=True)
            if ty == 3
        ]
    )
    # As transformers: a user-defined token whose text is no vocab piece (Gemma's runs of
    # spaces, respelled above) is left to BPE.
    tok.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t, ty in zip(tokens, types, strict=True)
            if ty == 4 and t in vocab
        ]
    )
    return tok


def _token_text(tokens: list[str], metadata: Mapping[str, MetaValue], key: str) -> str:
    i = metadata.get(key)
    return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else ""


def _content(value: object) -> str:
    """A tokenizer_config.json special token: a string or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


class _Vocab:
    """`text in vocab` for a tokenizer."""

    def __init__(self, tok: RustTokenizer) -> None:
        self._tok = tok

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and self._tok.token_to_id(text) is not None


class Tokenizer:
    def __init__(
        self,
        tok: RustTokenizer,
        *,
        chat_template: str = "",
        eos_ids: Iterable[int] = (),
        byte_level: bool = True,
        bos_token: str = "",
        eos_token: str = "",
        add_bos: bool = False,
        eot_ids: Iterable[int] = (),
    ) -> None:
        """`chat_template`: the file's Jinja template ("" = none: `fallback_template`'s);
        `eos_ids`/`eot_ids`: the file's end-of-sequence and end-of-turn ids; `bos_token` /
        `eos_token`: their texts, as templates see them; `add_bos`: prompts start with BOS."""
        self._tok = tok
        self.template_text = chat_template
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.byte_level = byte_level
        vocab = _Vocab(tok)  # get_vocab() would build a 262K-entry dict for a few lookups
        eos_ids = list(eos_ids)
        if not eos_token and eos_ids:
            eos_token = tok.id_to_token(eos_ids[0]) or ""
        self.bos_id: int | None = tok.token_to_id(bos_token) if bos_token else None
        self.add_bos = add_bos and self.bos_id is not None
        self.special_ids: frozenset[int] = frozenset(
            i for i, t in tok.get_added_tokens_decoder().items() if t.special
        )
        self.template = ChatTemplate(
            chat_template or fallback_template(vocab), bos_token=bos_token, eos_token=eos_token
        )
        turn = self.template.turn_texts()
        # The token that closes a user message (the end-of-turn score reads its probability)
        # and the one that closes an assistant message; None where that text opens with no
        # control token (Mistral's [/INST] in older vocabs, the plain fallback's newline).
        self.user_end_id = self._control_id(turn.user_end)
        self.assistant_end_id = self._control_id(turn.assistant_end)
        self.end_of_turn_ids: frozenset[int] = frozenset(
            {i for i in (self.user_end_id, self.assistant_end_id) if i is not None}
        )
        # From the end of a user's words to the start of the assistant's: "<|im_end|>\\n
        # <|im_start|>assistant\\n" (ChatML), "<|eot_id|><|start_header_id|>assistant...".
        self.turn_handoff = turn.user_end + turn.assistant_start
        stops = {i for t in STOP_TOKEN_TEXTS if (i := tok.token_to_id(t)) is not None}
        self.stop_ids: frozenset[int] = frozenset(
            stops | set(eos_ids) | set(eot_ids) | self.end_of_turn_ids
        )

    def _control_id(self, text: str) -> int | None:
        ids = self.encode(text) if text else []
        return ids[0] if ids and ids[0] in self.special_ids else None

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def from_gguf_meta(cls, metadata: Mapping[str, MetaValue]) -> Tokenizer:
        """From GGUF metadata: tokenizer.ggml.{model,tokens,scores,merges,token_type,pre,...}."""
        kind = metadata.get("tokenizer.ggml.model")
        if kind not in ("gpt2", "llama"):
            raise ModelLoadError(
                f"GGUF tokenizer model {kind!r} is not supported (supported: gpt2 byte-level "
                "BPE, llama SentencePiece)"
            )
        tokens = strings(metadata, "tokenizer.ggml.tokens")
        typed = "tokenizer.ggml.token_type" in metadata
        types = ints(metadata, "tokenizer.ggml.token_type") if typed else [1] * len(tokens)
        if kind == "gpt2":
            tok = _byte_level(metadata, tokens, types)
        else:
            tok = _sentencepiece(metadata, tokens, types)
        ids = {
            k: [int(scalar(metadata, f"tokenizer.ggml.{k}_token_id"))]
            if f"tokenizer.ggml.{k}_token_id" in metadata
            else []
            for k in ("eos", "eot", "eom")
        }
        return cls(
            tok,
            chat_template=str(scalar(metadata, "tokenizer.chat_template", "")),
            eos_ids=ids["eos"],
            eot_ids=ids["eot"] + ids["eom"],
            byte_level=kind == "gpt2",
            bos_token=_token_text(tokens, metadata, "tokenizer.ggml.bos_token_id"),
            eos_token=_token_text(tokens, metadata, "tokenizer.ggml.eos_token_id"),
            # llama.cpp adds BOS to a SentencePiece vocab whose file does not say otherwise.
            add_bos=bool(metadata.get("tokenizer.ggml.add_bos_token", kind == "llama")),
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
        jinja = path / "chat_template.jinja"  # where newer transformers save it
        if not template and jinja.is_file():
            template = jinja.read_text()
        eos: set[int] = set()
        for name in ("generation_config.json", "config.json"):
            gf = path / name
            if gf.is_file():
                e = json.loads(gf.read_text()).get("eos_token_id")
                eos.update(e if isinstance(e, list) else [] if e is None else [e])
        byte_level = "Ġ" in tok.get_vocab() or "Ċ" in tok.get_vocab()
        return cls(
            tok,
            chat_template=template,
            eos_ids=eos,
            byte_level=byte_level,
            bos_token=_content(cfg.get("bos_token")),
            eos_token=_content(cfg.get("eos_token")),
            add_bos=bool(cfg.get("add_bos_token", False)),
        )

    # --- text <-> ids ---------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Special-token texts (<|im_start|>, ...) in `text` become their ids; no BOS added."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """Full decode, special tokens dropped."""
        return b"".join(self.token_bytes[i] for i in ids).decode("utf-8", errors="replace")

    @cached_property
    def sentence_end_ids(self) -> tuple[int, ...]:
        """Ids of ".", "?" and "!" where each is a token of its own (looked up, not encoded:
        a SentencePiece vocab would encode "." as "▁.", the mark after a space)."""
        return tuple(i for m in ".?!" if (i := self._tok.token_to_id(m)) is not None)

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
        self,
        messages: Sequence[Mapping[str, object]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, object]] | None = None,
    ) -> str:
        """`messages` in the model's chat template; `tools`: OpenAI-style function schemas,
        for a template that takes them. ValueError where the template refuses the messages."""
        return self.template.render(messages, add_generation_prompt, tools)

    def apply_chat(
        self,
        messages: Sequence[Mapping[str, object]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, object]] | None = None,
    ) -> list[int]:
        """render_chat's ids, BOS first where the vocab adds one and the template wrote none."""
        ids = self.encode(self.render_chat(messages, add_generation_prompt, tools))
        if self.add_bos and (not ids or ids[0] != self.bos_id):
            assert self.bos_id is not None
            ids.insert(0, self.bos_id)
        return ids


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
