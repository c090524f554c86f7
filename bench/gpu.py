"""The GPU check of the hybrid decoder, for a session lent a device machine: prepared here, run
there in two calls, its results brought back into the repo.

A device call carries the working tree, at most 64 MiB, and the bundled GGUF alone is 98 MB, so
the model travels in two halves, one per call; the machine stays warm for 30 s after a call and
keeps /tmp, so the second call must follow the first at once. Here, in the repo root:

    .venv/bin/python -m bench.gpu prepare      # .gpu/1, .gpu/2 (model halves), .gpu/whl (gguf)

then two device calls (`run`), the second straight after the first:

    carry [".gpu/1", ".gpu/whl"], timeout_s 300:  python3 -m bench.gpu part1
    carry [".gpu/2", ".gpu/whl"], timeout_s 590:  python3 -m bench.gpu part2

(15 device minutes a session: with less than ~11 left after part1, give part2 a smaller
--budget-s, its planned wall time, and a timeout_s ~30 s above it.)

part1 stashes the first half in /tmp, runs the kernel tests (compiled Triton on CUDA, the `gpu`
tests included) and bench/kernel_timings.py. part2 joins the model, benchmarks ar / hybrid /
parallel with the shipped drafter and n-gram store, and hybrid with a 24-node tree of 4 branches
(lm.draft_len 24, lm.draft_branch 4: rows free on CPU 2.56 tokens/forward against 2.47 at the
default 12 / 3; does a GPU verify 25 rows as cheaply as 13?) (lm_before.json; lm_torch.json: ar
/ hybrid / chain without the row-invariant kernels, cuBLAS and SDPA instead), runs the
one-command GPU recipe (`lab.train_drafter --recipe h200`: data, n-gram store,
drafter) with its caps fitted to what is left of --budget-s, benchmarks again with what it trained
(lm_after.json) and packs the new adapter and store. Each stage's output is logged with
timestamps under $OUT; a failed stage is logged and the next one still runs. Then, here, on the
folder the call's files came back to:

    .venv/bin/python -m bench.gpu collect DIR  # runs/gpu/*; the new adapter + store staged in
                                               # runs/gpu/adapters/ for review, not installed

`--smoke` runs part1 / part2 on this CPU at toy sizes (OUT defaults to /tmp/dllm-gpu-out), to
check the flow before spending device time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGE = ROOT / ".gpu"  # gitignored: what prepare makes for the device calls
STASH = Path("/tmp/dllm-gpu")  # on the device machine: survives between two calls while warm
GGUF_PIN = "gguf==0.19.0"  # the one package our model code needs that the device image lacks
PIECE_BYTES = 15 << 20  # files back from $OUT: 16 MiB each at most, 8 files, 64 MiB in all
PACK_BYTES = 4 * PIECE_BYTES  # room left beside part2's log and three benchmark files


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def prepare() -> None:
    from dllm_voice.model.loader import default_model_path

    gguf = default_model_path()
    data = gguf.read_bytes()
    half = len(data) // 2 + 1
    shutil.rmtree(STAGE, ignore_errors=True)
    for i, piece in enumerate((data[:half], data[half:]), start=1):
        (STAGE / str(i)).mkdir(parents=True)
        (STAGE / str(i) / "model.part").write_bytes(piece)
    (STAGE / "2" / "model.json").write_text(
        json.dumps(
            {"name": gguf.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        )
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "-d", str(STAGE / "whl"), GGUF_PIN],
        check=True,
    )  # fmt: skip
    print(f"{STAGE}: model halves of {gguf.name} ({len(data)} bytes) and the {GGUF_PIN} wheel")
    print('device call 1: carry [".gpu/1", ".gpu/whl"], timeout_s 300: python3 -m bench.gpu part1')
    print('device call 2, at once: carry [".gpu/2", ".gpu/whl"], timeout_s 590: '
          "python3 -m bench.gpu part2")  # fmt: skip


class Run:
    """Stages as subprocesses, their output teed to stdout and $OUT/<name>.log with elapsed
    times; the gguf wheel on PYTHONPATH."""

    def __init__(self, name: str, smoke: bool) -> None:
        self.out = Path(os.environ.get("OUT") or "/tmp/dllm-gpu-out")
        self.out.mkdir(parents=True, exist_ok=True)
        if not STAGE.is_dir():
            sys.exit(f"{STAGE} is missing: run `python -m bench.gpu prepare`, carry its folders")
        self.log = (self.out / f"{name}.log").open("a")
        self.t0 = time.time()
        self.smoke = smoke
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        STASH.mkdir(parents=True, exist_ok=True)
        if not smoke:
            site = STASH / "site"
            wheels = sorted(str(p) for p in (STAGE / "whl").glob("*.whl"))
            self.stage("install gguf", [sys.executable, "-m", "pip", "install", "-q", "--no-index",
                                        "--no-deps", "--target", str(site), *wheels])  # fmt: skip
            self.env["PYTHONPATH"] = f"{site}:{ROOT}"

    def note(self, text: str) -> None:
        line = f"[{time.time() - self.t0:6.1f} s] {text}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def left(self, budget_s: float) -> float:
        return budget_s - (time.time() - self.t0)

    def stage(self, name: str, cmd: list[str], stdout: Path | None = None,
              timeout: float | None = None, env: dict[str, str] | None = None) -> bool:  # fmt: skip
        """Run one stage; stdout to a file when given (a JSON result), else into the log."""
        self.note(f"== {name}: {' '.join(cmd)}" + (f" with {env}" if env else ""))
        sink = stdout.open("w") if stdout else subprocess.PIPE
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**self.env, **(env or {})}, stdout=sink,
                                stderr=subprocess.STDOUT if stdout is None else subprocess.PIPE,
                                text=True)  # fmt: skip
        stream = proc.stdout if stdout is None else proc.stderr
        assert stream is not None
        watchdog = threading.Timer(timeout, proc.kill) if timeout else None
        if watchdog:
            watchdog.start()
        for line in stream:
            self.note(f"   {line.rstrip()}")
        rc = proc.wait()
        if watchdog:
            watchdog.cancel()
        if stdout:
            sink.close()
        killed = " (stopped at its time limit)" if rc == -9 else ""
        self.note(f"== {name}: exit {rc}{killed}")
        return rc == 0


def info(run: Run) -> None:
    code = (
        "import torch, triton; print(torch.__version__, 'triton', triton.__version__, "
        "torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
    )
    run.stage("versions", [sys.executable, "-c", code])
    if shutil.which("nvidia-smi"):
        run.stage("nvidia-smi", ["nvidia-smi", "--query-gpu=name,memory.total,clocks.sm",
                                 "--format=csv"])  # fmt: skip


def part1(smoke: bool) -> None:
    run = Run("part1", smoke)
    shutil.copy(STAGE / "1" / "model.part", STASH / "model.part1")
    run.note(f"stashed the model's first half in {STASH}")
    info(run)
    tests = ["tests/kernels", "-q", "-p", "no:cacheprovider", "-m", "not slow"]
    run.stage("kernel tests", [sys.executable, "-m", "pytest", *tests])
    reps = ["--quick", "--reps", "3"] if smoke else ["--reps", "50"]
    run.stage("kernel bench", [sys.executable, "-m", "bench.kernel_timings", *reps],
              stdout=run.out / "kernels.json")  # fmt: skip


def join_model(run: Run) -> Path | None:
    meta = json.loads((STAGE / "2" / "model.json").read_text())
    model = STASH / meta["name"]
    if model.exists() and model.stat().st_size == meta["bytes"]:
        return model
    first = STASH / "model.part1"
    if not first.exists():
        run.note(f"{first} is missing: part1 must run on this machine just before part2 "
                 "(a machine that went back starts bare)")  # fmt: skip
        return None
    with model.open("wb") as f:
        f.write(first.read_bytes())
        f.write((STAGE / "2" / "model.part").read_bytes())
    if sha256(model) != meta["sha256"]:
        model.unlink()
        run.note("the joined model's sha256 does not match: run prepare again, then both parts")
        return None
    run.note(f"joined {model} ({meta['bytes']} bytes, sha256 ok)")
    return model


def bench_lm(run: Run, name: str, model: Path, adapters: Path, timeout: float,
             extra: tuple[str, ...] = ("--decoders", "ar,hybrid,parallel", "--thresholds",
                                       "0.5,0.7,0.9", "--lookup-only", "--compare-tree", "24,4"),
             env: dict[str, str] | None = None) -> bool:  # fmt: skip
    """bench/lm.py on the unseen prompts with the adapter and store in `adapters`."""
    size = ("cpu", "1", "8") if run.smoke else ("cuda", "12", "64")
    cmd = [sys.executable, "-m", "bench.lm", "--model", str(model), "--drafter",
           str(adapters / "drafter.safetensors"), "--ngram", str(adapters / "ngram.safetensors"),
           "--prompt-set", "unseen", "--device", size[0], "--prompts", size[1],
           "--max-new-tokens", size[2], *extra]  # fmt: skip
    return run.stage(name, cmd, stdout=run.out / f"{name}.json", timeout=timeout, env=env)


def part2(smoke: bool, budget_s: float) -> None:
    run = Run("part2", smoke)
    model = join_model(run)
    if model is None:
        sys.exit(1)
    info(run)
    shipped = ROOT / "model" / "adapters"
    t = time.time()
    bench_lm(run, "lm_before", model, shipped, timeout=run.left(budget_s) / 3)
    bench_s = time.time() - t
    # The same without kernels/exact_rows.py (cuBLAS and SDPA, as torch picks them): what the
    # row-invariant kernels cost in speed and buy in exactness.
    bench_lm(run, "lm_torch", model, shipped, timeout=bench_s / 2 + 30,
             extra=("--decoders", "ar,hybrid", "--chain"),
             env={"DLLM_KERNEL_BACKEND": "torch"})  # fmt: skip
    new = STASH / "new"
    shutil.rmtree(new, ignore_errors=True)
    shutil.rmtree(STASH / "data", ignore_errors=True)
    # What is left, less the second benchmark and packing, goes to the recipe: half to
    # generation, 30% to training, the rest to loading the model and features twice (n-gram
    # store, training) and building the store.
    spend = max(run.left(budget_s) - bench_s - 30, 60)
    recipe = [sys.executable, "-m", "lab.train_drafter", "--recipe", "h200", "--model",
              str(model), "--data", str(STASH / "data"), "--save", str(new / "drafter.safetensors"),
              "--out-dir", str(new / "run"), "--gen-minutes", f"{0.5 * spend / 60:.2f}",
              "--minutes", f"{0.3 * spend / 60:.2f}"]  # fmt: skip
    if smoke:
        recipe += ["--device", "cpu", "--dtype", "float32", "--gen-batch", "4",
                   "--gen-minutes", "0.001", "--steps", "2", "--batch", "2", "--blocks", "2",
                   "--eval-answers", "2"]  # fmt: skip
    trained = run.stage("recipe", recipe, timeout=spend + 30)
    if trained:
        bench_lm(run, "lm_after", model, new, timeout=max(run.left(budget_s) - 15, 30))
    pack(run, [new / "drafter.safetensors", new / "ngram.safetensors", new / "run" / "log.jsonl"])


def pack(run: Run, paths: list[Path]) -> None:
    """What the recipe made as one gzipped tar, in pieces that each come back; a call brings
    back 64 MiB at most, so a tar over PACK_BYTES is made again without the n-gram store."""
    files = [p for p in paths if p.exists()]
    tar = STASH / "adapters.tar.gz"

    def write() -> None:
        with tarfile.open(tar, "w:gz", compresslevel=3) as t:
            for p in files:
                t.add(p, arcname=p.name)

    if files:
        write()
    if files and tar.stat().st_size > PACK_BYTES:
        run.note(f"{tar.stat().st_size} bytes would not come back: packing again without the store")
        files = [p for p in files if p.name != "ngram.safetensors"]
        if files:
            write()
    if not files:
        return
    data = tar.read_bytes()
    for i in range(0, len(data), PIECE_BYTES):
        (run.out / f"adapters.tar.gz.{i // PIECE_BYTES}").write_bytes(data[i : i + PIECE_BYTES])
    run.note(f"packed {[p.name for p in files]}: {len(data)} bytes")


def collect(src: Path) -> None:
    dest = ROOT / "runs" / "gpu"
    dest.mkdir(parents=True, exist_ok=True)
    for p in sorted(src.rglob("*")):
        if p.is_file() and not p.name.startswith("adapters.tar.gz."):
            shutil.copy(p, dest / p.name)
    pieces = sorted(src.rglob("adapters.tar.gz.*"), key=lambda p: int(p.suffix[1:]))
    if pieces:
        tar = dest / "adapters.tar.gz"
        tar.write_bytes(b"".join(p.read_bytes() for p in pieces))
        with tarfile.open(tar) as t:
            t.extractall(dest / "adapters", filter="data")
        tar.unlink()
    keys = (
        "tokens_per_s",
        "tokens_per_forward",
        "speed_vs_ar",
        "exact_match_vs_ar",
        "token_agreement_vs_ar",
    )
    for name in ("lm_before", "lm_torch", "lm_after"):
        f = dest / f"{name}.json"
        if f.exists() and f.stat().st_size:
            print(f"{name}: {', '.join(keys)}")
            for d, v in json.loads(f.read_text())["decoders"].items():
                print(f"  {d:14} " + "  ".join(str(v["median"].get(k, "-")) for k in keys))
    made = {p.name: p.stat().st_size for p in sorted((dest / "adapters").glob("*"))}
    print(f"{dest}: logs and benchmarks; in adapters/, what the recipe made {made}. Compare "
          "lm_after with lm_before before copying the adapter and store into model/adapters/ "
          "(a store of tens of MB wants pruning first) and updating their cards")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("step", choices=("prepare", "part1", "part2", "collect"))
    ap.add_argument("dir", nargs="?", help="collect: the folder the device call's files are in")
    ap.add_argument("--budget-s", type=float, default=560, help="part2's wall-clock plan")
    ap.add_argument("--smoke", action="store_true", help="part1/part2 on CPU at toy sizes")
    a = ap.parse_args()
    if a.step == "prepare":
        prepare()
    elif a.step == "part1":
        part1(a.smoke)
    elif a.step == "part2":
        part2(a.smoke, a.budget_s)
    else:
        if not a.dir:
            ap.error("collect needs the folder the device call's files came back to")
        collect(Path(a.dir))


if __name__ == "__main__":
    main()
