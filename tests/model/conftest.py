"""Fixtures the model tests share."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from testkit.gguf_models import write_tiny_gguf


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], str]:
    """tiny_gguf(arch, qtype): the path of a tiny random-weight GGUF file of that architecture and
    block type (testkit/gguf_models.py, seed 3), written once per test session."""
    root = tmp_path_factory.mktemp("tiny_gguf")
    paths: dict[tuple[str, str], str] = {}

    def get(arch: str, qtype: str) -> str:
        if (arch, qtype) not in paths:
            path = write_tiny_gguf(root / f"{arch}-{qtype}.gguf", arch, qtype=qtype, seed=3)
            paths[arch, qtype] = str(path)
        return paths[arch, qtype]

    return get
