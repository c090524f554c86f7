"""Everything between air and text: sources, sinks, VAD, streaming ASR and TTS, echo control."""
