"""Block drafter (design (b), DFlash-like): drafts K tokens in one cheap parallel pass.

Architecture. `n_layers` transformer blocks initialised from the base's top layers. Drafter layer
l attends to the context through the base's OWN key/value cache of base layer L - n + l (so the
context costs nothing extra at run time: the verify pass already wrote it) and, bidirectionally,
to the K + 1 rows of its block:

    row 0      : embedding of the last committed token (the pending token, position p)
    rows 1..K  : a learned mask embedding              (positions p + 1 .. p + K)
    every row  : + a learned per-offset embedding + ctx_proj(base's final hidden at p - 1)

Rows 1..K go through the base's final norm (a trainable copy) and the base's tied output
embedding restricted to a draft vocabulary of the most frequent answer tokens (8192 of 49152
ids cover ~99 % of answer tokens and cut the head cost 6x); the top few tokens per offset and
their probabilities are the drafts and confidences that feed the draft tree (model/tree.py).
Nothing here writes to the base cache or touches the base pass: the verified decoder's output
cannot depend on the drafter.

Files: safetensors with the architecture in the metadata. Every matrix is stored as its change
from where training started (the base's top blocks; zeros for ctx_proj), in 4 bits with one
fp16 scale per 32 values: the changes are ~15 % of the weights, so the rounding error is ~1 % of
a weight and the file a third of fp16's. Vectors, embeddings and `vocab_ids` are stored as they
are. Loading adds the changes back onto the base's own blocks, so a file only fits the base
weights it was trained from (checked by a fingerprint of those blocks).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from dllm_voice.kernels import cpu_rows
from dllm_voice.kernels.cpu_rows import Quantized, quantize_q8_0
from dllm_voice.model.args import ModelArgs
from dllm_voice.model.errors import ModelLoadError
from dllm_voice.model.kv_cache import KVCache
from dllm_voice.model.layer_stack import Local, run_layers
from dllm_voice.model.layers import Block, rms_norm
from dllm_voice.model.packing import Linear, Packed, linear, prepack
from dllm_voice.model.transformer import Transformer

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

DEFAULT_ADAPTER = Path(__file__).parent / "adapters" / "drafter.safetensors"


Q_GROUP = 32  # values per 4-bit scale


def q4_encode(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric 4-bit code of x (..., n), n a multiple of Q_GROUP: (codes uint8 (..., n / 2),
    two per byte, scales fp16 (..., n / Q_GROUP)). Error <= scale / 2 per value."""
    g = x.detach().float().cpu().reshape(*x.shape[:-1], -1, Q_GROUP)
    scale = (g.abs().amax(-1, keepdim=True) / 7).half().float().clamp(min=1e-8)
    q = ((g / scale).round().clamp(-7, 7) + 8).to(torch.uint8).reshape(*x.shape[:-1], -1)
    return q[..., 0::2] | (q[..., 1::2] << 4), scale.squeeze(-1).half()


def q4_decode(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    q = torch.stack((codes & 15, codes >> 4), -1).reshape(*codes.shape[:-1], -1).float() - 8
    return (q.view(*scales.shape, Q_GROUP) * scales.float()[..., None]).flatten(-2)


def write_adapter(
    path: str | Path, tensors: dict[str, torch.Tensor], args: DataclassInstance, info: dict | None
) -> None:
    """safetensors file with the architecture (a dataclass) and training info as metadata."""
    meta = {"args": json.dumps(asdict(args)), "info": json.dumps(info or {})}
    save_file(tensors, str(path), metadata=meta)


def read_adapter(path: str | Path, args_cls: type, what: str, fix: str) -> tuple:
    """(args_cls(**metadata args), tensors, info) of a write_adapter file; one-line
    ModelLoadError naming `what` it should be and the `fix` otherwise."""
    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            args = args_cls(**json.loads(meta["args"]))
        return args, load_file(str(path)), json.loads(meta.get("info", "{}"))
    except (OSError, KeyError, ValueError, TypeError, SafetensorError) as e:
        raise ModelLoadError(f"{path}: not {what} ({type(e).__name__}: {e}); {fix}") from e


@dataclass(frozen=True)
class DrafterArgs:
    n_layers: int = 2
    block: int = 4  # K draft tokens per pass
    vocab: int = 8192  # draft vocabulary size
    base_dim: int = 576
    base_layers: int = 30
    base_vocab: int = 49152
    ffn: int = 0  # each layer's MLP width (0 = the base's; fewer keeps its strongest units)
    hidden: bool = True  # rows also read the base's final hidden state (ctx_proj), not only K/V


def narrowed(state: dict[str, torch.Tensor], width: int) -> dict[str, torch.Tensor]:
    """A base block's state dict with its MLP cut to the `width` units of largest |down column|
    x |up row| (a unit's reach into the residual stream when its gate is open), kept in order.
    A function of the base's weights alone, so a file stores no index list."""
    gate_up, down = state["mlp.w_gate_up.weight"], state["mlp.w_down.weight"]
    f = down.shape[1]
    reach = down.float().norm(dim=0) * gate_up[f:].float().norm(dim=1)
    units = reach.topk(width).indices.sort().values
    gate_up_cut = torch.cat((gate_up[units], gate_up[f + units]))
    return state | {"mlp.w_gate_up.weight": gate_up_cut, "mlp.w_down.weight": down[:, units]}


class BlockDrafter(nn.Module):
    vocab_ids: torch.Tensor  # (vocab,) base token id of each draft-vocabulary entry (a buffer)

    def __init__(self, base_args: ModelArgs, args: DrafterArgs, vocab_ids: torch.Tensor) -> None:
        super().__init__()
        assert vocab_ids.shape == (args.vocab,), "vocab_ids must list args.vocab token ids"
        self.args, self.base_args = args, base_args
        dim = base_args.dim
        first = base_args.n_layers - args.n_layers  # layer l is a copy of base layer first + l
        layer_args = replace(base_args, ffn_dim=args.ffn) if args.ffn else base_args
        self.layers = nn.ModuleList(Block(layer_args, first + i) for i in range(args.n_layers))
        self.norm = nn.Parameter(torch.ones(dim))
        self.mask_embed = nn.Parameter(torch.zeros(dim))
        self.offset_embed = nn.Parameter(torch.zeros(args.block + 1, dim))
        self.ctx_proj = Linear(dim, dim, bias=False)
        nn.init.zeros_(self.ctx_proj.weight)
        self.register_buffer("vocab_ids", vocab_ids.long())
        self.head: torch.Tensor | None = None  # (vocab, dim) rows of the base output embedding
        self.head_packed: Packed | None = None

    @property
    def first_base_layer(self) -> int:
        return self.base_args.n_layers - self.args.n_layers

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def from_base(
        cls,
        base: Transformer,
        vocab_ids: torch.Tensor,
        *,
        n_layers: int = 2,
        block: int = 4,
        ffn: int = 0,
        hidden: bool = True,
    ) -> BlockDrafter:
        """Initialised from the base: its top `n_layers` blocks (their strongest `ffn` MLP
        units when narrower), final norm, mean embedding."""
        a = base.args
        ffn = 0 if ffn >= a.ffn_dim else ffn
        args = DrafterArgs(n_layers, block, int(vocab_ids.numel()), a.dim, a.n_layers,
                           a.vocab_size, ffn, hidden)  # fmt: skip
        w = base.embed.weight
        d = cls(a, args, vocab_ids).to(device=w.device, dtype=w.dtype)
        with torch.no_grad():
            for i, layer in enumerate(d.layers):
                layer.load_state_dict(d._base_block_state(base, i))
            d.norm.copy_(base.norm)
            d.mask_embed.copy_(base.embed.dense().mean(0))
        return d.bind(base)

    @classmethod
    def random(
        cls,
        base: Transformer,
        *,
        n_layers: int = 2,
        block: int = 4,
        seed: int = 0,
        ffn: int = 0,
        hidden: bool = True,
    ) -> BlockDrafter:
        """Random weights (tests: the verified decoder must not care what the drafter says)."""
        d = cls.from_base(base, torch.arange(min(8192, base.args.vocab_size)), n_layers=n_layers,
                          block=block, ffn=ffn, hidden=hidden)  # fmt: skip
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in d.parameters():
                p.copy_(torch.randn(p.shape, generator=gen).to(p) * 0.05)
        return d

    def bind(self, base: Transformer) -> BlockDrafter:
        """Attach to a base model: check shapes and gather the draft-vocab output rows."""
        a = base.args
        if (a.dim, a.n_layers, a.vocab_size) != (
            self.args.base_dim,
            self.args.base_layers,
            self.args.base_vocab,
        ):
            raise ModelLoadError(
                f"drafter was trained for a base with dim={self.args.base_dim}, "
                f"layers={self.args.base_layers}, vocab={self.args.base_vocab}, but the loaded "
                f"model has {a.dim}, {a.n_layers}, {a.vocab_size}; set lm.drafter: none"
            )
        self.head = base.head_matrix.rows(self.vocab_ids).detach()  # (V_d, dim)
        self.head_packed = None
        return self

    def pack(self, kind: str = "auto") -> BlockDrafter:
        """Pack the matrices for CPU inference (model/packing.py's `prepack` kinds; "auto":
        Q8_0 copies, a quarter of the bytes: a drafter only proposes, so their rounding, under
        0.4 % of the largest weight of each 32, cannot change a verified token)."""
        for m in self.modules():
            if isinstance(m, Linear):
                m.quant = _q8(m.weight, kind)
                m.pack(kind)
        self.head_packed = None
        if self.head is not None:
            self.head_packed = prepack(self.head, kind, _q8(self.head, kind))
        return self

    def _base_block_state(self, base: Transformer, i: int) -> dict[str, torch.Tensor]:
        """The state drafter layer i starts from: its base block's, narrowed to args.ffn."""
        state = base.layers[self.first_base_layer + i].state_dict()
        return narrowed(state, self.args.ffn) if self.args.ffn else state

    def starting_point(self, base: Transformer) -> dict[str, torch.Tensor]:
        """Each matrix's value before training (see the file format in the module docstring)."""
        start = {"ctx_proj.weight": torch.zeros_like(self.ctx_proj.weight)}
        for i in range(self.args.n_layers):
            top = self._base_block_state(base, i)
            start |= {f"layers.{i}.{k}": v for k, v in top.items() if v.dim() == 2}
        return start

    @staticmethod
    def fingerprint(start: dict[str, torch.Tensor]) -> list[float]:
        return [round(float(v.float().abs().mean()), 6) for _, v in sorted(start.items())]

    def save(self, path: str | Path, base: Transformer, info: dict | None = None) -> None:
        start = self.starting_point(base)
        tensors = {}
        for k, v in self.state_dict().items():
            if k in start:
                tensors[k + ".q4"], tensors[k + ".scale"] = q4_encode(v - start[k])
            else:
                tensors[k] = (
                    v.detach().cpu().to(torch.float16 if v.is_floating_point() else torch.int32)
                )
        info = {**(info or {}), "base_fingerprint": self.fingerprint(start)}
        write_adapter(path, {k: v.contiguous() for k, v in tensors.items()}, self.args, info)

    @classmethod
    def load(cls, path: str | Path, base: Transformer) -> BlockDrafter:
        fix = "retrain it with python -m lab.train_drafter or set lm.drafter: none"
        args, tensors, info = read_adapter(path, DrafterArgs, "a drafter adapter", fix)
        w = base.embed.weight
        d = cls(base.args, args, tensors["vocab_ids"].long()).bind(base)
        start = d.starting_point(base)
        want, have = info.get("base_fingerprint"), d.fingerprint(start)
        if want is None or not torch.allclose(torch.tensor(want), torch.tensor(have), rtol=1e-2):
            raise ModelLoadError(f"{path}: drafter trained from other base weights; {fix}")
        state = {}
        for k, v in d.state_dict().items():
            if k in start:
                delta = q4_decode(tensors[k + ".q4"], tensors[k + ".scale"])
                state[k] = start[k].float().cpu() + delta.view(v.shape)
            else:
                state[k] = tensors[k]
        state = {k: v.to(w.dtype) if v.is_floating_point() else v.long() for k, v in state.items()}
        d.load_state_dict(state, strict=True)
        return d.to(w.device, w.dtype).eval().requires_grad_(False).pack()  # bound above

    # --- compute --------------------------------------------------------------------------

    def block_inputs(
        self, embed: nn.Embedding, tokens: torch.Tensor, h_last: torch.Tensor
    ) -> torch.Tensor:
        """tokens (B, M) pending tokens, h_last (B, M, dim) -> rows (B, M * (K + 1), dim)."""
        bsz, m = tokens.shape
        k1 = self.args.block + 1
        x = self.mask_embed.expand(bsz, m, k1, -1).clone()  # (B, M, K+1, dim)
        x[:, :, 0] = embed(tokens)
        x = x + self.offset_embed
        if self.args.hidden:
            x = x + self.ctx_proj(h_last)[:, :, None]
        return x.view(bsz, m * k1, -1)

    def rows_logits(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KVCache,
        mask: torch.Tensor | None,
        layer_offset: int,
        local: Local | None = None,
    ) -> torch.Tensor:
        """Run blocks of rows x (B, M * (K + 1), dim) against `cache` (cache layer
        layer_offset + l holds the context K/V for drafter layer l; `local`: the sliding-window
        layers' rope and mask, Transformer.rope_for); never writes the cache.
        Returns the draft rows' logits (B, M, K, V_d): a block's row 0 gets no head."""
        assert self.head is not None, "bind() the drafter to its base first"
        x = run_layers(self.layers, x, cos, sin, cache, layer_offset, 0, mask, False, local)
        x = x.view(x.shape[0], -1, self.args.block + 1, x.shape[-1])[:, :, 1:]
        x = rms_norm(x, self.norm, self.base_args.norm_eps)
        return linear(x, self.head, self.head_packed).float()

    @torch.no_grad()
    def draft(
        self, base: Transformer, cache: KVCache, token: int, h_last: torch.Tensor, top: int = 1
    ) -> tuple[list[list[int]], list[list[float]]]:
        """The `top` most likely tokens (best first) and their probabilities for each of the
        positions cache.length + 1 .. + K, given the pending token at position cache.length and
        the base's final normed hidden state (dim,) of the position before."""
        p, k = cache.length, self.args.block
        cos, sin, local = base.rope_for(p, k + 1, None, None, False)  # rows at p .. p + K
        tok = torch.tensor([[token]], device=h_last.device)
        x = self.block_inputs(base.embed, tok, h_last.view(1, 1, -1))  # (1, K+1, dim)
        logits = self.rows_logits(x, cos, sin, cache, None, self.first_base_layer, local)[0, 0]
        conf, idx = torch.softmax(logits, dim=-1).topk(top, dim=-1)  # (K, top) each
        return self.vocab_ids[idx].tolist(), conf.tolist()


def _q8(weight: torch.Tensor, kind: str) -> Quantized | None:
    cpu = weight.device.type == "cpu" and weight.dtype == torch.float32
    return quantize_q8_0(weight) if kind == "auto" and cpu and cpu_rows.available() else None


def resolve_file(spec: str, bundled: Path, key: str) -> Path | None:
    """A file setting (lm.drafter, lm.ngram): '' = the bundled file if present, 'none' =
    nothing, else a path that must exist."""
    if spec == "none" or (not spec and not bundled.exists()):
        return None
    path = Path(spec) if spec else bundled
    if not path.exists():
        raise ModelLoadError(f"{key} file not found: {path} (use '' or 'none')")
    return path


def load_default(spec: str, base: Transformer) -> BlockDrafter | None:
    """lm.drafter: '' = the bundled adapter if present, 'none' = no drafter, else a path."""
    path = resolve_file(spec, DEFAULT_ADAPTER, "lm.drafter")
    return None if path is None else BlockDrafter.load(path, base)
