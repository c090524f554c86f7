"""What the tests and the benchmarks share, and neither owns; not installed with the agent.

- ``testkit.speech``: voices generated at run time (Piper, espeak-ng), WAV helpers, the echo
  path and the local-mode loopback run.
- ``testkit.questions``: the spoken question lists (whole, paused mid-sentence, and the ASR
  accuracy set).
- ``testkit.turn_end_set``: the labeled end-of-turn transcripts and their ROC AUC.
- ``testkit.asr_accuracy``: word error rate, and the final the pipeline's streaming path makes.
- ``testkit.pulse``: a private PulseAudio sound server with virtual devices, and ``main.py``
  driven in a terminal against it.
- ``testkit.protocol_fuzz``: Hypothesis strategies for the websocket protocol and one fuzz case.

It imports only ``dllm_voice`` packages (tests/test_layering.py checks it).
"""
