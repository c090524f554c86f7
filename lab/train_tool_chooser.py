"""Trains the tool chooser's head: a softmax regression on the LM's hidden state at the
user's last word, over the built-in tools and "none" (app/tools/chooser.py).

The requests come from lab/tool_requests.py; each one goes through the same prompt the agent
builds (system prompt + user message, the final marks dropped as the end-of-turn score drops
them), and the row the end-of-turn score reads gives the feature. Validation holds out whole
templates, so it measures new phrasings; the benchmark's requests (testkit/tool_requests.py)
are checked to be absent from training.

    python -m lab.train_tool_chooser            # writes app/tools/chooser.npz
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from dllm_voice.app.conversation.config import DEFAULT_SYSTEM_PROMPT
from dllm_voice.app.tools.builtin.catalog import BUILTIN
from dllm_voice.app.tools.chooser import HEAD_FILE, NONE, Head, ToolChooser
from dllm_voice.app.tools.config import ToolsConfig
from dllm_voice.app.tools.registry import ToolBox
from dllm_voice.model.config import LMConfig
from dllm_voice.model.engine import LM, ChatSession
from lab.tool_requests import Request, held_out_split, requests
from testkit.tool_requests import REQUESTS


def features(session: ChatSession, texts: list[str], system: str) -> np.ndarray:
    """(N, dim) final-normed hidden states of each text's scored row."""
    rows = []
    for text in texts:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
        _, state = session._score(session._end_probe(messages), None)
        assert state is not None, f"no scored row for {text!r}"
        rows.append(state.float().numpy())
    return np.stack(rows)


def fit(
    x: np.ndarray, y: np.ndarray, n_labels: int, *, decay: float, epochs: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Softmax regression by full-batch L-BFGS with L2 ``decay``; classes weighted equally."""
    torch.manual_seed(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    counts = torch.bincount(yt, minlength=n_labels).float().clamp(min=1)
    weights = counts.sum() / (n_labels * counts)
    w = torch.zeros(n_labels, x.shape[1], requires_grad=True)
    b = torch.zeros(n_labels, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=epochs, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        opt.zero_grad()
        out = torch.nn.functional.cross_entropy(xt @ w.T + b, yt, weight=weights)
        out = out + decay * (w**2).sum()
        out.backward()
        return out

    opt.step(loss)
    return w.detach().numpy(), b.detach().numpy()


def report(head: Head, x: np.ndarray, reqs: list[Request], threshold: float) -> dict[str, float]:
    """Tool-choice precision and recall, and false calls on "none" turns, of the chooser the
    agent runs (the head, the built-in tools' parsers, ``threshold``)."""
    box = ToolBox.of(t for group in BUILTIN.values() for t in group)
    chooser = ToolChooser(head, threshold)
    picked = []
    for row, r in zip(x, reqs, strict=True):
        choice = chooser.choose(box, row, r.text)
        picked.append(NONE if choice is None else choice.tool.name)
    labels = [r.label for r in reqs]
    tool_turns = [i for i, label in enumerate(labels) if label != NONE]
    calls = [i for i, label in enumerate(picked) if label != NONE]
    right = sum(picked[i] == labels[i] for i in calls)
    none_turns = [i for i, label in enumerate(labels) if label == NONE]
    return {
        "precision": round(right / max(1, len(calls)), 3),
        "recall": round(right / max(1, len(tool_turns)), 3),
        "false_calls": round(
            sum(picked[i] != NONE for i in none_turns) / max(1, len(none_turns)), 3
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HEAD_FILE))
    ap.add_argument("--decay", type=float, default=1e-3)
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--threshold", type=float, default=ToolsConfig().threshold)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--features", help="an .npz that keeps the features between runs")
    args = ap.parse_args()

    reqs = requests(args.seed)
    bench = {r.text.lower().strip(" ?.!") for r in REQUESTS}
    leaked = [r.text for r in reqs if r.text.lower().strip(" ?.!") in bench]
    assert not leaked, f"benchmark requests in the training set: {leaked[:3]}"
    train, val = held_out_split(reqs, seed=args.seed)
    labels = sorted({r.label for r in reqs} - {NONE}) + [NONE]
    index = {label: i for i, label in enumerate(labels)}
    counts = Counter(r.label for r in train)
    print(f"{len(train)} train, {len(val)} held-out-template requests: {counts}")

    lm = LM.load(LMConfig())
    if args.features and Path(args.features).is_file():
        with np.load(args.features) as f:
            x_train, x_val = f["train"], f["val"]
    else:
        session = lm.session()
        t0 = time.perf_counter()
        x_train = features(session, [r.text for r in train], DEFAULT_SYSTEM_PROMPT)
        x_val = features(session, [r.text for r in val], DEFAULT_SYSTEM_PROMPT)
        print(f"features: {time.perf_counter() - t0:.0f} s")
        if args.features:
            np.savez(args.features, train=x_train, val=x_val)

    y_train = np.array([index[r.label] for r in train])
    w, b = fit(x_train, y_train, len(labels), decay=args.decay, epochs=args.epochs, seed=args.seed)
    head = Head(w, b, tuple(labels), lm.parameter_count())
    for name, x, rs in (("train", x_train, train), ("held-out", x_val, val)):
        print(name, report(head, x, rs, args.threshold))

    # The shipped head learns from every template.
    x_all = np.concatenate([x_train, x_val])
    y_all = np.array([index[r.label] for r in [*train, *val]])
    w, b = fit(x_all, y_all, len(labels), decay=args.decay, epochs=args.epochs, seed=args.seed)
    Head(w, b, tuple(labels), lm.parameter_count()).save(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
