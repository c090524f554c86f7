"""The voice agent application: streaming pipeline, turn-taking, latency trace, CLI front ends."""
