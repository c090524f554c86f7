"""Minimal GGUF (v2/v3) parser: metadata dict + memory-mapped tensor data.

Why not gguf.GGUFReader: it wraps every one of the ~100K vocab/merge strings in numpy memmap
views: 11.7 s just to open the bundled SmolLM2 file, against ~0.2 s here. Dequantization still
goes through `gguf.quants.dequantize`, and the type tables (block sizes, type names) come from
the `gguf` package.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

MAGIC = b"GGUF"
# value type id -> struct format of a scalar (8 = string and 9 = array are handled apart)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}  # fmt: skip

# A metadata value: a number, bool or string, or an array of them (arrays may nest).
MetaValue = int | float | bool | str | list["MetaValue"]


def scalar(
    meta: Mapping[str, MetaValue], key: str, default: float | str | None = None
) -> float | str:
    """meta[key], or `default` where it is missing and given; TypeError where it is an array."""
    value = meta[key] if default is None else meta.get(key, default)
    if isinstance(value, list):
        raise TypeError(f"GGUF {key}: an array where one value belongs")
    return value


def _all_str(values: list[MetaValue]) -> TypeGuard[list[str]]:
    return all(isinstance(v, str) for v in values)


def _all_int(values: list[MetaValue]) -> TypeGuard[list[int]]:
    return all(isinstance(v, int) for v in values)


def strings(meta: Mapping[str, MetaValue], key: str) -> list[str]:
    """meta[key], an array of strings; TypeError where it is something else."""
    value = meta[key]
    if not isinstance(value, list) or not _all_str(value):
        raise TypeError(f"GGUF {key}: not an array of strings")
    return value


def ints(meta: Mapping[str, MetaValue], key: str) -> list[int]:
    """meta[key], an array of integers; TypeError where it is something else."""
    value = meta[key]
    if not isinstance(value, list) or not _all_int(value):
        raise TypeError(f"GGUF {key}: not an array of integers")
    return value


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order (rows, ..., cols): GGUF dims reversed
    qtype: GGMLQuantizationType
    offset: int  # absolute byte offset in the file


class GGUFFile:
    """`meta`: key -> value (lists for arrays); `tensors`: name -> TensorInfo; `read(name)`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # A plain ndarray view of the map: slicing np.memmap itself costs a Python
        # __array_finalize__ per view, 228K of them inside gguf's dequantize (1.5 s).
        self._map = np.asarray(np.memmap(self.path, dtype=np.uint8, mode="r"))
        buf = self._buf = self._map.data
        if bytes(buf[:4]) != MAGIC:
            raise ValueError("bad magic (not a GGUF file)")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} (supported: 2, 3)")
        self._pos = 24
        self.meta: dict[str, MetaValue] = {}
        for _ in range(n_kv):
            key = self._str()
            self.meta[key] = self._value(self._u32())
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            n_dims = self._u32()
            dims = struct.unpack_from(f"<{n_dims}Q", buf, self._pos)
            self._pos += 8 * n_dims
            qtype, offset = struct.unpack_from("<IQ", buf, self._pos)
            self._pos += 12
            infos.append((name, tuple(reversed(dims)), GGMLQuantizationType(qtype), offset))
        align = int(scalar(self.meta, "general.alignment", 32))
        start = -(-self._pos // align) * align
        self.tensors = {n: TensorInfo(n, s, q, start + o) for n, s, q, o in infos}

    def _u32(self) -> int:
        (v,) = struct.unpack_from("<I", self._buf, self._pos)
        self._pos += 4
        return v

    def _str(self) -> str:
        (n,) = struct.unpack_from("<Q", self._buf, self._pos)
        s = bytes(self._buf[self._pos + 8 : self._pos + 8 + n]).decode("utf-8", errors="replace")
        self._pos += 8 + n
        return s

    def _value(self, vtype: int) -> MetaValue:
        if vtype == 8:
            return self._str()
        if vtype == 9:
            etype = self._u32()
            (count,) = struct.unpack_from("<Q", self._buf, self._pos)
            self._pos += 8
            if etype in _SCALARS:
                fmt = _SCALARS[etype]
                vals = list(struct.unpack_from(f"<{count}{fmt}", self._buf, self._pos))
                self._pos += count * struct.calcsize(fmt)
                return vals
            return [self._value(etype) for _ in range(count)]
        fmt = _SCALARS[vtype]  # KeyError on an unknown type: reported as a corrupt file
        (v,) = struct.unpack_from("<" + fmt, self._buf, self._pos)
        self._pos += struct.calcsize(fmt)
        return v

    def raw(self, name: str) -> np.ndarray:
        """Tensor `name`'s bytes as stored, a read-only (rows, bytes per row) view of the file."""
        t = self.tensors[name]
        block, type_size = GGML_QUANT_SIZES[t.qtype]
        n = int(np.prod(t.shape))
        nbytes = n // block * type_size
        if t.offset + nbytes > len(self._map):
            raise ValueError(f"tensor {name} runs past the end of the file (truncated download?)")
        return self._map[t.offset : t.offset + nbytes].reshape(n // t.shape[-1], -1)

    def read(self, name: str) -> np.ndarray:
        """Tensor `name` as a new float32 array in numpy order (dequantized if quantized)."""
        t = self.tensors[name]
        raw = self.raw(name)
        if t.qtype == GGMLQuantizationType.F32:
            return np.array(raw.view(np.float32).reshape(t.shape))
        if t.qtype == GGMLQuantizationType.F16:
            return raw.view(np.float16).reshape(t.shape).astype(np.float32)
        rows = raw.reshape(*t.shape[:-1], raw.shape[-1])  # (..., row bytes)
        return dequantize(rows, t.qtype).astype(np.float32, copy=False)
