"""The conversation core: a session's wiring, listening, end of turn, turn-taking, answers."""
