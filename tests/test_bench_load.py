"""bench/load.py: what a scenario's figures count, from recorded client turns (no server)."""

from __future__ import annotations

from bench.load import Turn, scenario_summary, starts


def test_voice_to_voice_counts_the_completed_answer_and_every_failure():
    # Answered at once: its audio 300 ms after the end of speech, the final 250 ms after.
    plain = Turn("a", speech_end_s=10.0, final_s=10.25, audio_s={0: 10.3})
    plain.answered_s, plain.answer_gen = 14.0, 0
    # A first answer (gen 1) cancelled, then the one that completed (gen 2): the user waited
    # for gen 1's audio at 0.2 s, but the answer given started at 0.9 s.
    redone = Turn("b", speech_end_s=20.0, final_s=20.5, audio_s={1: 20.2, 2: 20.9}, cancelled=1)
    redone.answered_s, redone.answer_gen = 25.0, 2
    lost = Turn("c", speech_end_s=30.0)  # no final, no answer
    clients = [
        {"turns": [plain, redone], "errors": {}, "close_code": None, "late_ms": [0.0, 1.0]},
        {"turns": [lost], "errors": {"lm_error": 1}, "close_code": 1011, "late_ms": [3.0]},
    ]
    rows = [{"stages": {"voice_to_voice": 280.0, "asr_final": 2.0}}, {"stages": {}}]
    out = scenario_summary(clients, rows)
    assert (out["turns"], out["answered"]) == (3, 2)
    assert out["v2v_ms"]["n"] == 2
    assert round(out["v2v_ms"]["p50"]) == 600 and round(out["v2v_ms"]["max"]) == 900
    assert out["v2v_ms_by_client"] == [[300, 900], [None]]
    assert out["v2v_ms_first_turn"]["n"] == 1 and round(out["v2v_ms_first_turn"]["p50"]) == 300
    assert round(out["final_transcript_ms"]["p50"]) == 375
    assert out["server_v2v_ms"]["p50"] == 280.0 and out["server_endpoint_ms"]["n"] == 0
    assert out["errors"] == {
        "error_events": {"lm_error": 1},
        "abnormal_closes": [1011],
        "unanswered_turns": 1,
        "cancelled_answers": 1,
    }
    assert out["send_late_ms"]["max"] == 3.0


def test_starts():
    assert starts("simultaneous", 3, 1.5) == [0.0, 0.0, 0.0]
    assert starts("staggered", 4, 1.5) == [0.0, 0.5, 1.0, 1.5]
    assert starts("staggered", 1, 1.5) == [0.0]
