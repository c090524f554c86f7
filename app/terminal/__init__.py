"""The terminal front ends: live microphone chat, and WAV files run through a session."""
