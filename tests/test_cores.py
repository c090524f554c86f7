"""dllm_voice/cores.py: how many cores the LM's layer stack may take."""

from __future__ import annotations

import threading

import pytest

from dllm_voice import cores


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cores, "_jobs", cores._Count())
    monkeypatch.setattr(cores, "_crowded_until", 0.0)
    monkeypatch.setattr(cores, "_back_off", cores.CROWDED_S[0])
    monkeypatch.setattr(cores, "_conversations", cores._Count())


def test_one_core_less_for_each_job_another_model_runs() -> None:
    assert cores.threads(2, 1)[0] == 2
    started, release = threading.Event(), threading.Event()

    def job() -> None:
        with cores.busy():
            started.set()
            release.wait(5)

    worker = threading.Thread(target=job)
    worker.start()
    assert started.wait(5)
    assert cores.threads(2, 1)[0] == 1
    assert cores.threads(16, 1)[0] == 15
    with cores.busy():
        assert (cores.threads(2, 1)[0], cores.threads(16, 1)[0]) == (1, 14)
    release.set()
    worker.join(5)
    assert cores.threads(2, 1)[0] == 2


def test_a_preempted_thread_halves_them_for_longer_while_it_recurs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(cores.time, "monotonic", lambda: now[0])
    least, most = cores.CROWDED_S
    cores.crowded()
    assert (cores.threads(2, 1)[0], cores.threads(16, 1)[0]) == (1, 8)
    now[0] += least
    assert cores.threads(2, 1)[0] == 2
    cores.crowded()  # again on the first try: twice as long
    now[0] += least
    assert cores.threads(2, 1)[0] == 1
    now[0] += least
    assert cores.threads(2, 1)[0] == 2
    for _ in range(8):
        cores.crowded()
        now[0] += most
    assert cores.threads(2, 1)[0] == 2  # never longer than the most
    now[0] += 10 * most
    cores.crowded()  # a lone preemption long after: the least again
    now[0] += least
    assert cores.threads(2, 1)[0] == 2


def test_several_conversations_keep_short_forwards_on_one_sleeping_thread() -> None:
    with cores.conversation():
        assert cores.threads(2, 1) == (2, True)  # one conversation: every core, spinning
        with cores.conversation():
            assert cores.threads(2, 1) == (1, False)
            assert cores.threads(2, cores.SHARED_SOLO_ROWS + 1) == (2, False)
        assert cores.threads(2, 1) == (2, True)


def test_numpys_blas_runs_one_thread() -> None:
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    with threadpool_limits(2, user_api="blas"):  # restored after the test
        cores.one_blas_thread()
        blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
        assert blas and all(i["num_threads"] == 1 for i in blas)
        a = np.ones((256, 256))
        assert float((a @ a)[0, 0]) == 256.0
