"""Sample-rate conversion, down-mixing and PCM sanitizing (numpy only, no scipy).

`Resampler` is a streaming windowed-sinc (Kaiser, 16 zero crossings) polyphase converter for
any rational rate ratio: feed it blocks, it keeps the filter history, so a microphone stream
converted block by block equals the whole signal converted at once. `resample()` is the
one-shot form. Cutoff is 0.95 x the lower Nyquist, which keeps aliasing of a 48 kHz mic below
-60 dB in the 16 kHz band Whisper and webrtcvad use.
"""

import logging
from math import gcd
from typing import TypeAlias, overload

import numpy as np
import numpy.typing as npt

from dllm_voice.audio.errors import AudioFormatError

log = logging.getLogger(__name__)

PCM16: TypeAlias = npt.NDArray[np.int16]  # full scale 32768
FloatPCM: TypeAlias = npt.NDArray[np.float32]  # in [-1, 1]
PCM: TypeAlias = npt.NDArray[np.generic]  # any numeric dtype: to_int16 / to_float32 take it

_ZERO_CROSSINGS = 16
_ROLLOFF = 0.95
_KAISER_BETA = 8.6
_MAX_TABLE_PHASES = 4096  # standard rates need <= 441 phases; exotic ones compute taps per block


def to_int16(pcm: PCM) -> PCM16:
    """Any numeric PCM -> int16. Floats are in [-1, 1]; NaN/inf become 0/full scale, clipped."""
    a = np.asarray(pcm)
    if a.dtype == np.int16:
        return a.astype(np.int16, copy=False)
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a)
        if bad.any():
            log.warning("audio: %d NaN/inf samples replaced", int(bad.sum()))
        f = np.nan_to_num(a.astype(np.float32), nan=0.0, posinf=1.0, neginf=-1.0)
        return (np.clip(f, -1.0, 1.0) * 32767.0).astype(np.int16)
    if a.dtype.kind in "iu":
        if a.dtype.itemsize == 1 and a.dtype.kind == "u":  # 8-bit WAV is unsigned
            return ((a.astype(np.int32) - 128) << 8).astype(np.int16)
        bits = 8 * a.dtype.itemsize
        if bits <= 16:
            return np.clip(a.astype(np.int32), -32768, 32767).astype(np.int16)
        shifted: npt.NDArray[np.int64] = a.astype(np.int64) >> (bits - 16)
        return np.clip(shifted, -32768, 32767).astype(np.int16)
    raise AudioFormatError(f"unsupported PCM dtype {a.dtype}; pass int16 or float32 samples")


def to_float32(pcm: PCM) -> FloatPCM:
    """Any numeric PCM -> float32 in [-1, 1] (NaN/inf sanitized)."""
    a = np.asarray(pcm)
    if a.dtype.kind == "f" and np.isfinite(a).all():
        return np.clip(a.astype(np.float32), -1.0, 1.0)
    return to_int16(a).astype(np.float32) / 32768.0


def to_mono(pcm: PCM, channels: int = 0) -> PCM:
    """Down-mix to mono by averaging channels.

    pcm: (n,) mono, (n, channels) frames, or interleaved (n * channels,) when `channels` > 1.
    Keeps the dtype (int16 stays int16).
    """
    a = np.asarray(pcm)
    if a.ndim == 1 and channels > 1:
        usable = len(a) - len(a) % channels
        if usable != len(a):
            log.warning("audio: %d trailing samples of a partial frame dropped", len(a) - usable)
        a = a[:usable].reshape(-1, channels)  # (n, channels)
    if a.ndim == 1:
        return a
    if a.ndim != 2:
        raise AudioFormatError(f"PCM must be 1-D or (samples, channels), got shape {a.shape}")
    if a.shape[1] == 1:
        return a[:, 0]
    mixed: FloatPCM = a.astype(np.float32).mean(axis=1)
    return mixed.astype(a.dtype) if a.dtype.kind in "iu" else mixed


def _kaiser(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Kaiser window at positions x in [-1, 1] (0 outside)."""
    inside = np.clip(1.0 - x * x, 0.0, None)
    return np.i0(_KAISER_BETA * np.sqrt(inside)) / np.i0(_KAISER_BETA)


class Resampler:
    """Streaming rational-ratio resampler of mono float32 signals.

    Output sample n sits at input time n * down / up (in input samples); its value is the
    windowed-sinc interpolation of the input around that time.
    """

    def __init__(self, src_hz: int, dst_hz: int) -> None:
        if src_hz <= 0 or dst_hz <= 0:
            raise AudioFormatError(f"sample rates must be positive, got {src_hz} -> {dst_hz} Hz")
        g = gcd(src_hz, dst_hz)
        self.src_hz, self.dst_hz = src_hz, dst_hz
        self.up, self.down = dst_hz // g, src_hz // g
        # Cutoff in cycles per input sample.
        self._fc = 0.5 * min(1.0, self.up / self.down) * _ROLLOFF
        self._hw = int(np.ceil(_ZERO_CROSSINGS / (2.0 * self._fc)))  # half width, input samples
        self._table = (
            self._taps(np.arange(self.up) / self.up) if self.up <= _MAX_TABLE_PHASES else None
        )
        self.reset()

    def reset(self) -> None:
        # The buffer starts with hw zeros so the first outputs see silence before the signal.
        self._buf = np.zeros(self._hw, dtype=np.float32)
        self._buf_start = -self._hw  # absolute input index of _buf[0]
        self._n_in = 0
        self._n_out = 0

    def _taps(self, frac: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
        """Filter taps (len(frac), 2*hw) for outputs at fractional offsets frac in [0, 1)."""
        j = np.arange(2 * self._hw)
        d = frac[:, None] + (self._hw - 1) - j[None, :]  # input time minus tap time
        h = 2.0 * self._fc * np.sinc(2.0 * self._fc * d) * _kaiser(d / self._hw)
        return h.astype(np.float32)

    def _emit(self, n_end: int) -> FloatPCM:
        """Outputs n in [_n_out, n_end); caller guarantees their input is buffered."""
        n = np.arange(self._n_out, n_end, dtype=np.int64)
        if len(n) == 0:
            return np.zeros(0, dtype=np.float32)
        pos = n * self.down
        base, phase = pos // self.up, pos % self.up
        taps = self._table[phase] if self._table is not None else self._taps(phase / self.up)
        first = base - self._hw + 1 - self._buf_start  # (n_out,) buffer index of tap 0
        idx = first[:, None] + np.arange(2 * self._hw)[None, :]  # (n_out, 2*hw)
        out: FloatPCM = np.einsum("ij,ij->i", self._buf[idx], taps)
        self._n_out = n_end
        return out.astype(np.float32)

    def process(self, x: PCM) -> FloatPCM:
        """Feed input samples (float32 mono), get every output sample that is now computable."""
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        if self.up == self.down:
            return x.copy()
        self._buf = np.concatenate([self._buf, x])
        self._n_in += len(x)
        # Output n needs input up to base + hw, i.e. n * down <= (n_in - 1 - hw) * up.
        last_ok = self._n_in - 1 - self._hw
        n_end = max(self._n_out, (last_ok * self.up) // self.down + 1) if last_ok >= 0 else 0
        outs = []
        for start in range(self._n_out, n_end, 16384):  # bounded (n_out, taps) gathers
            outs.append(self._emit(min(n_end, start + 16384)))
        # Drop input that no future output needs.
        next_base = (self._n_out * self.down) // self.up
        keep_from = next_base - self._hw + 1
        if keep_from > self._buf_start:
            self._buf = self._buf[keep_from - self._buf_start :]
            self._buf_start = keep_from
        return np.concatenate(outs) if outs else np.zeros(0, dtype=np.float32)

    def flush(self) -> FloatPCM:
        """End of stream: the remaining outputs (total = ceil(n_in * dst / src))."""
        if self.up == self.down:
            return np.zeros(0, dtype=np.float32)
        total = -(-self._n_in * self.up // self.down)
        done = self._n_out
        tail = self.process(np.zeros(2 * self._hw + 1, dtype=np.float32))
        out = tail[: max(0, total - done)]
        self.reset()
        return out


@overload
def resample(pcm: PCM16, src_hz: int, dst_hz: int) -> PCM16: ...
@overload
def resample(pcm: FloatPCM, src_hz: int, dst_hz: int) -> FloatPCM: ...
@overload
def resample(pcm: PCM, src_hz: int, dst_hz: int) -> PCM: ...
def resample(pcm: PCM, src_hz: int, dst_hz: int) -> PCM:
    """Resample mono PCM; int16 in -> int16 out, float in -> float32 out."""
    a = np.asarray(pcm)
    if a.ndim != 1:
        raise AudioFormatError(f"resample wants mono 1-D PCM, got shape {a.shape}; use to_mono")
    if src_hz == dst_hz:
        return a.copy()
    r = Resampler(src_hz, dst_hz)
    f = to_float32(a)
    y = np.concatenate([r.process(f), r.flush()])
    return to_int16(y) if a.dtype.kind in "iu" else y
