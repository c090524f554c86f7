"""Sound devices through sounddevice (PortAudio): import guard, listing, selection.

PortAudio missing or no device present becomes one AudioDeviceError line that says how to fix
it, so `main.py run` fails clearly and `serve` (browser audio) needs no sound device at all.
"""

import logging
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, TypedDict, overload

import numpy as np
import numpy.typing as npt

from dllm_voice.audio.errors import AudioDeviceError

log = logging.getLogger(__name__)

_NO_PORTAUDIO = (
    "PortAudio is missing (sounddevice cannot load it): apt-get install libportaudio2, "
    "or use `python main.py serve` (browser audio) / `run` with WAV input and output"
)


class DeviceInfo(TypedDict):
    """The fields of a sounddevice device dict that audio/ reads."""

    name: str
    max_input_channels: int
    max_output_channels: int
    default_samplerate: float


class CallbackFlags(Protocol):
    """sounddevice.CallbackFlags: true when any flag is set."""

    def __bool__(self) -> bool: ...

    @property
    def output_underflow(self) -> bool: ...


class Stream(Protocol):
    """A sounddevice InputStream or OutputStream."""

    @property
    def active(self) -> bool: ...

    @property
    def latency(self) -> float: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


class _Defaults(Protocol):
    @property
    def device(self) -> Sequence[int]: ...  # (input, output); -1 for none


class SoundDevice(Protocol):
    """The sounddevice module, as audio/ uses it (float32 input, int16 output)."""

    @property
    def default(self) -> _Defaults: ...

    @overload
    def query_devices(self) -> Sequence[DeviceInfo]: ...

    @overload
    def query_devices(self, *, kind: str) -> DeviceInfo: ...

    def InputStream(  # a class in the module
        self,
        *,
        device: int,
        samplerate: int,
        channels: int,
        dtype: Literal["float32"],
        blocksize: int,
        latency: Literal["low"],
        callback: Callable[[npt.NDArray[np.float32], int, object, CallbackFlags], None],
    ) -> Stream: ...

    def OutputStream(  # a class in the module
        self,
        *,
        device: int,
        samplerate: int,
        channels: int,
        dtype: Literal["int16"],
        blocksize: int,
        latency: float,
        callback: Callable[[npt.NDArray[np.int16], int, object, CallbackFlags], None],
    ) -> Stream: ...


def sounddevice() -> SoundDevice:
    """The sounddevice module, or AudioDeviceError when PortAudio cannot be loaded."""
    try:
        import sounddevice as sd
    except (OSError, ImportError) as e:
        raise AudioDeviceError(_NO_PORTAUDIO) from e
    sound_device: SoundDevice = sd  # untyped module (no stubs): the protocol says what is used
    return sound_device


def _all_devices(sd: SoundDevice) -> list[DeviceInfo]:
    try:
        return [d.copy() for d in sd.query_devices()]
    except Exception as e:  # PortAudioError subclasses Exception only
        raise AudioDeviceError(f"cannot query sound devices ({e}); {_NO_PORTAUDIO}") from e


def resolve_device(spec: str, kind: Literal["input", "output"]) -> tuple[int, DeviceInfo]:
    """Device index and info for `spec` ("" = default, an index, or a name substring).

    kind: "input" or "output". Raises AudioDeviceError naming the devices that exist.
    """
    sd = sounddevice()
    devices = _all_devices(sd)
    usable = [(i, d) for i, d in enumerate(devices) if _channels(d, kind) > 0]
    if not usable:
        raise AudioDeviceError(
            f"no {kind} sound device found; plug one in, or use `python main.py serve` "
            "(browser audio) / `run` with WAV files"
        )
    if spec == "":
        try:
            info = sd.query_devices(kind=kind).copy()
        except Exception as e:
            raise AudioDeviceError(
                f"no default {kind} device ({e}); set audio.{kind}_device"
            ) from e
        index = next((i for i, d in usable if d["name"] == info["name"]), usable[0][0])
        return index, info
    if spec.strip().isdigit():
        index = int(spec)
        for i, d in usable:
            if i == index:
                return i, d
        raise AudioDeviceError(f"{kind} device {index} does not exist; `python main.py devices`")
    matches = [(i, d) for i, d in usable if spec.lower() in d["name"].lower()]
    if not matches:
        names = ", ".join(repr(d["name"]) for _, d in usable)
        raise AudioDeviceError(f"no {kind} device matches {spec!r}; available: {names}")
    return matches[0]


def _channels(info: DeviceInfo, kind: Literal["input", "output"]) -> int:
    return info["max_input_channels"] if kind == "input" else info["max_output_channels"]


def list_devices() -> str:
    """A table of sound devices for `python main.py devices` (marks the defaults)."""
    sd = sounddevice()
    devices = _all_devices(sd)
    try:
        default_in, default_out = sd.default.device
    except Exception:
        default_in, default_out = -1, -1
    if not devices:
        return "no sound devices found (PortAudio sees none)"
    lines = [f"{'idx':>3}  {'in':>3} {'out':>3}  {'rate':>6}  name"]
    for i, d in enumerate(devices):
        mark = (">" if i == default_in else " ") + ("<" if i == default_out else " ")
        lines.append(
            f"{i:>3}{mark}{d['max_input_channels']:>3} {d['max_output_channels']:>3}  "
            f"{int(d['default_samplerate']):>6}  {d['name']}"
        )
    lines.append(
        "> default input, < default output; pick others by index or name substring: "
        "python main.py --set audio.input_device=0 --set audio.output_device=NAME"
    )
    return "\n".join(lines)
