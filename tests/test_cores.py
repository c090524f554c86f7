"""dllm_voice/cores.py: when the LM's layer stack may take every core."""

from __future__ import annotations

import threading

import pytest

from dllm_voice import cores


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "_running", 0)
    monkeypatch.setattr(cores, "_crowded_until", 0.0)
    monkeypatch.setattr(cores, "_back_off", cores.CROWDED_S[0])


def test_not_while_another_model_computes() -> None:
    assert cores.all_free()
    started, release = threading.Event(), threading.Event()

    def job() -> None:
        with cores.busy():
            started.set()
            release.wait(5)

    worker = threading.Thread(target=job)
    worker.start()
    assert started.wait(5)
    with cores.busy():
        assert not cores.all_free()
    assert not cores.all_free()  # the worker's job still runs
    release.set()
    worker.join(5)
    assert cores.all_free()


def test_a_preempted_thread_backs_off_longer_while_it_recurs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(cores.time, "monotonic", lambda: now[0])
    least, most = cores.CROWDED_S
    cores.crowded()
    assert not cores.all_free()
    now[0] += least
    assert cores.all_free()
    cores.crowded()  # again on the first try: twice as long
    now[0] += least
    assert not cores.all_free()
    now[0] += least
    assert cores.all_free()
    for _ in range(8):
        cores.crowded()
        now[0] += most
    assert cores.all_free()  # never longer than the most
    now[0] += 10 * most
    cores.crowded()  # a lone preemption long after: the least again
    now[0] += least
    assert cores.all_free()
