"""lab.drafts, the one command that builds a model's drafts: every stage at toy scale on the
bundled model, stopped and resumed, into the folder the decoder then loads them from."""

from __future__ import annotations

import json

import pytest
import torch

from dllm_voice.model import drafts
from dllm_voice.model.drafter import BlockDrafter
from dllm_voice.model.ngram import NgramStore
from lab import drafts as command

# 7.2 s in all: each data stage has time for about one batch, the drafter for its first eval.
TOY = ["--hours", "0.002", "--batch", "4", "--max-new-tokens", "6", "--threads", "1"]


def test_builds_stops_and_goes_on_into_the_models_folder(lm, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(drafts.DRAFTS_ENV, str(tmp_path))
    folder = drafts.model_dir("")
    real = command.run_stage

    def stopped_at_ngram(name, *args):
        if name == "ngram":
            raise KeyboardInterrupt
        real(name, *args)

    monkeypatch.setattr(command, "run_stage", stopped_at_ngram)
    assert command.main(TOY) == 130
    state = json.loads((folder / "state.json").read_text())
    assert state["done"] == ["chat", "bulk"] and set(state["spent"]) == {"chat", "bulk", "ngram"}
    chat = sorted((folder / "data" / "chat").glob("b*.pt"))
    assert len(torch.load(chat[0])) == 4
    # The data stages overran the whole budget (a busy machine): the drafter still gets its
    # first evaluation and file, not a skip.
    state["spent"]["bulk"] = 60.0
    (folder / "state.json").write_text(json.dumps(state))

    monkeypatch.setattr(command, "run_stage", real)
    assert command.main(TOY) == 0
    state = json.loads((folder / "state.json").read_text())
    assert state["done"] == ["chat", "bulk", "ngram", "train"]
    assert sorted((folder / "data" / "chat").glob("b*.pt")) == chat  # nothing made twice
    out = capsys.readouterr().out
    report = json.loads(out[out.rindex("\n{\n") :])
    assert report["ngram"]["answers"] >= 3 and "tokens_per_step" in report["drafter"]

    # What the decoder loads for this model from now on.
    built = drafts.resolve("", "", "drafter")
    assert built == str(folder / "drafter.safetensors")
    BlockDrafter.load(built, lm.model)
    store = NgramStore.load(drafts.resolve("", "", "ngram"), lm.model.args.vocab_size)
    assert store.info["answers"] == report["ngram"]["answers"]

    # Done: a third run only reports.
    monkeypatch.setattr(command, "run_stage", pytest.fail)
    assert command.main(TOY) == 0
