"""Exceptions of the audio package, defined in one place.

Every message is one line that says what went wrong and how to fix it.
"""


class AudioError(RuntimeError):
    """Base class of every error raised by audio/."""


class AudioDeviceError(AudioError):
    """A sound device (or PortAudio itself) is missing or cannot be opened."""


class AudioFormatError(AudioError, ValueError):
    """Audio data or a file has a shape, rate or encoding that cannot be used."""


class ModelLoadError(AudioError):
    """A speech model (Whisper directory, Piper voice) is missing or unreadable."""
