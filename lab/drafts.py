"""Drafts for the loaded model in one command: self-distilled answers, the n-gram store and the
block drafter, built for any model lm.path takes, into the folder LM.load reads them from
(model/drafts.py), so `hybrid` uses them from the next start on.

    python -m lab.drafts --model path/to/model.gguf --hours 2

Stages, each given a share of --hours: the model answers prompts.py's conversations greedily
(their held-out part scores the drafter), then prompt_bulk.py's (greedy, then sampled); the
n-gram store is counted from the answers (seconds); the drafter trains on them for the rest of
the time, writing its file at every evaluation. Every stage keeps its work on disk: the same
command after a stop (Ctrl+C, a crash) goes on where it stopped, and one run after the last stage
only reports. On a GPU (--device auto finds it) the batches are larger and the drafter trains in
bf16.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from safetensors import safe_open

from dllm_voice.model import drafts
from lab import gen_data, ngram, train_drafter


@dataclass(frozen=True)
class Stage:
    name: str
    share: float  # of the whole budget; a stage may also use what the ones before left
    what: str


# Shares of the budget: answers first (the n-gram store and the drafter both learn from them),
# the chat set's greedy round before the bulk one, as its held-out part scores the drafter.
STAGES = (
    Stage("chat", 0.15, "answers to prompts.py's conversations"),
    Stage("bulk", 0.35, "answers to prompt_bulk.py's conversations"),
    Stage("ngram", 0.0, "the n-gram store"),
    Stage("train", 0.5, "the block drafter"),
)
LOG_EVERY = 60.0  # seconds between status lines where the output is not a terminal
BULK_ROUNDS = 3  # greedy + 2 sampled: more than a 2-hour CPU budget answers for a ~300M model


def settings(a: argparse.Namespace, cuda: bool) -> dict[str, list[str]]:
    """Each stage's command-line options for lab's own commands."""
    folder = Path(a.out)
    model = [
        "--model",
        a.model,
        "--device",
        a.device,
        "--dtype",
        a.dtype,
        "--threads",
        str(a.threads),
    ]
    gen = [*model, "--batch", str(a.batch or (1024 if cuda else 64)), "--no-hidden"]
    gen += ["--max-new-tokens", str(a.max_new_tokens)]
    chat, bulk = folder / "data" / "chat", folder / "data" / "bulk"
    data = f"{chat},{bulk}"
    train = [*model, "--data", data, "--out-dir", str(folder / "run"), "--resume",
             "--save", str(folder / drafts.FILES["drafter"]), "--steps", "1000000"]  # fmt: skip
    if cuda:  # the h200 recipe's training options
        train += ["--batch", "64", "--blocks", "64", "--eval-every", "500", "--lr", "1e-3"]
    else:
        train += ["--batch", "4", "--blocks", "64", "--eval-every", "300"]
    return {
        "chat": [*gen, "--out", str(chat), "--rounds", "1"],
        "bulk": [*gen, "--out", str(bulk), "--prompt-set", "bulk", "--rounds", str(BULK_ROUNDS)],
        "ngram": ["--data", data, "--out", str(folder / drafts.FILES["ngram"])],
        "train": train,
    }


class State:
    """state.json in the drafts folder: seconds spent per stage and the stages finished."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data = json.loads(path.read_text()) if path.is_file() else {}
        self.spent: dict[str, float] = data.get("spent", {})
        self.done: list[str] = data.get("done", [])

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"spent": self.spent, "done": self.done}, indent=1) + "\n")
        tmp.replace(self.path)


def run_stage(name: str, argv: list[str], minutes: float, report: gen_data.Progress) -> None:
    if name == "ngram":
        ngram.main(argv)
    elif name == "train":
        train_drafter.main([*argv, "--minutes", f"{minutes:.3f}"], report)
    else:
        gen_data.main([*argv, "--minutes", f"{minutes:.3f}"], report)


def summary(folder: Path) -> dict:
    """What the folder holds: the n-gram store's size and the drafter's last held-out score."""
    out: dict = {"folder": str(folder)}
    store_file, log = folder / drafts.FILES["ngram"], folder / "run" / "log.jsonl"
    if store_file.is_file():
        with safe_open(str(store_file), "pt") as f:
            info = json.loads((f.metadata() or {}).get("info", "{}"))
        out["ngram"] = {k: info.get(k) for k in ("answers", "tokens", "contexts")}
    if (folder / drafts.FILES["drafter"]).is_file() and log.is_file():
        last = json.loads(log.read_text().splitlines()[-1])
        keep = ("step", "data_tokens", "tokens_per_step", "tokens_per_step_lookup")
        out["drafter"] = {k: last[k] for k in keep if k in last}
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="", help="lm.path: a .gguf file or a Hugging Face folder")
    ap.add_argument("--hours", type=float, default=2.0, help="the whole budget")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--batch", type=int, default=0, help="answers per batch (0: 64, GPU 1024)")
    ap.add_argument("--max-new-tokens", type=int, default=160, help="answer length at most")
    ap.add_argument("--out", default="", help="folder (default: where lm.drafter '' looks)")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.model and not Path(a.model).exists():
        raise SystemExit(f"--model: no such file or folder: {a.model}")
    a.out = a.out or str(drafts.model_dir(a.model))
    folder = Path(a.out)
    folder.mkdir(parents=True, exist_ok=True)
    cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    state, argvs = State(folder / "state.json"), settings(a, cuda)
    budget = 3600 * a.hours
    print(f"drafts for {a.model or 'the bundled model'} in {folder}", flush=True)
    columns = (TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
               TextColumn("ETA {task.fields[eta]}"))  # fmt: skip
    try:
        with Progress(*columns) as bar:
            task = bar.add_task("", total=1.0, eta="?")
            for i, stage in enumerate(STAGES):
                if stage.name not in state.done:
                    deadline = budget * sum(s.share for s in STAGES[: i + 1])
                    run_one(stage, deadline, budget - deadline, state, argvs[stage.name], bar, task)
    except KeyboardInterrupt:
        print("stopped: the same command goes on from here", flush=True)
        return 130
    print(json.dumps(summary(folder), indent=1), flush=True)
    return 0


def run_one(
    stage: Stage,
    deadline: float,
    later: float,
    state: State,
    argv: list[str],
    bar: Progress,
    task: TaskID,
) -> None:
    """Run one stage until `deadline`, seconds of the budget from the start of the first stage
    (what an earlier stage left unused goes to the next); `later`: the seconds planned after."""
    left = max(0.0, deadline - sum(state.spent.values()))
    if stage.share and left < 1.0:
        if stage.name in state.spent:  # its time is spent: what it made is what it has
            state.done.append(stage.name)
            state.save()
            return
        # The stages before it overran its share (a slow or busy machine): a second still makes
        # its first batch, or the drafter's first evaluation and file.
        left = 1.0
    start = time.time()
    seen: list[tuple[float, float]] = []  # (seconds, share) of the first report of this call
    printed = [-LOG_EVERY]  # when the last status line went to a log

    def report(share: float, line: str) -> None:
        el = time.time() - start
        if not seen:
            seen.append((el, share))
        t0, s0 = seen[0]
        rate = (share - s0) / (el - t0) if el > t0 else 0.0  # this call's pace (a resume's too)
        eta = (1 - share) / rate if rate > 0 else left - el
        clock = time.strftime("%H:%M:%S", time.gmtime(max(0.0, min(eta, left - el)) + later))
        bar.update(task, completed=share, description=f"{stage.what}: {line}", eta=clock)
        if not bar.console.is_terminal and el - printed[0] >= LOG_EVERY:
            printed[0] = el  # a log file gets a line now and then instead of the bar
            print(f"{stage.name} {100 * share:.0f}%, ETA {clock}: {line}", flush=True)

    bar.update(task, completed=0.0, description=stage.what)
    try:
        run_stage(stage.name, argv, left / 60, report)
    finally:
        state.spent[stage.name] = state.spent.get(stage.name, 0.0) + time.time() - start
        state.save()
    state.done.append(stage.name)
    state.save()


if __name__ == "__main__":
    raise SystemExit(main())
