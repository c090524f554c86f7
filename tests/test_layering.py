"""Which package may import which (docs/architecture.md, "Layering"), checked on every .py file.

Each file's imports are read with ``ast``: module level, inside functions, under
``if TYPE_CHECKING:``, relative ones resolved. A broken rule fails with the file, the line and
the rule.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".venv", ".git", ".gpu", "build", "dist", "data", "runs", "node_modules", "__pycache__"}
# The installed package's subpackages: the top-level folders, imported only as dllm_voice.<name>.
SUBPACKAGES = ("app", "audio", "model", "kernels")
OURS = {*SUBPACKAGES, "dllm_voice", "lab", "bench", "testkit", "tests", "main"}
# importer -> the packages of ours it may import besides itself ("dllm_voice" is the root
# package, whose __init__ every dllm_voice import runs anyway).
ALLOWED: dict[str, set[str]] = {
    "kernels": {"dllm_voice"},
    "model": {"dllm_voice", "kernels"},
    "audio": {"dllm_voice"},
    "app": {"dllm_voice", "audio", "model", "kernels"},
    "lab": {"dllm_voice", "model"},
    "testkit": {"dllm_voice", *SUBPACKAGES},
    "bench": {"dllm_voice", *SUBPACKAGES, "lab", "testkit"},
    "tests": OURS - {"bench"},  # bench: only tests/test_bench_*.py, which test its scripts
    "main": {"dllm_voice", "app", "audio", "model"},  # main.py, the command line
    "dllm_voice": set(),
}
# One file's own allowance beyond its package's: the acoustic end-of-turn trainer synthesizes
# speech with audio/, the tool chooser's trainer writes app/'s head; both keep the benchmarks'
# sentences (testkit) out of their training sets.
EXTRA: dict[str, set[str]] = {
    "lab/train_turn_audio.py": {"audio", "testkit"},
    "lab/train_tool_chooser.py": {"app", "testkit"},
}


def python_files(root: Path = ROOT) -> list[Path]:
    """Every .py file of the project; dllm_voice/'s symlinks to the folders are not followed."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP and not d.endswith(".egg-info")]
        out += [Path(folder) / f for f in files if f.endswith(".py")]
    return sorted(out)


def module_name(rel: Path) -> str:
    """The dotted name a file is imported as: app/x.py is dllm_voice.app.x."""
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] in SUBPACKAGES:
        parts.insert(0, "dllm_voice")
    return ".".join(parts)


def package_of(module: str) -> str:
    """The layer a dotted name belongs to: dllm_voice.model.x -> model, lab.x -> lab."""
    parts = module.split(".")
    if parts[0] == "dllm_voice" and len(parts) > 1 and parts[1] in SUBPACKAGES:
        return parts[1]
    return parts[0]


def imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every import anywhere in the tree, in line order; a
    ``from X import y`` counts as X.y, since y may be a subpackage (``from dllm_voice import
    model``)."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            name = ".".join([*base, *([node.module] if node.module else [])])
            out += [(node.lineno, f"{name}.{a.name}".lstrip(".")) for a in node.names]
    return sorted(out)


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for path in python_files(root):
        rel = path.relative_to(root)
        module = module_name(rel)
        layer = package_of(module)
        allowed = ALLOWED.get(layer, set()) | EXTRA.get(rel.as_posix(), set()) | {layer}
        tree = ast.parse(path.read_text(), str(path))
        for line, name in imports(tree, module, path.name == "__init__.py"):
            top = name.split(".")[0]
            where = f"{rel}:{line}: import of {name}"
            if top in SUBPACKAGES:
                found.append(f"{where}: a bare `{top}`; import it as dllm_voice.{top}")
                continue
            target = package_of(name)
            if target not in OURS or target in allowed:
                continue
            if target == "bench":
                if layer != "tests" or not rel.name.startswith("test_bench_"):
                    found.append(f"{where}: only tests/test_bench_*.py import bench")
                continue
            may = ", ".join(sorted(allowed - {layer, "dllm_voice"})) or "nothing of ours"
            found.append(f"{where}: {layer} may import {may}")
    return found


def test_every_import_follows_the_layering() -> None:
    found = violations()
    assert not found, "\n".join(found)


def test_the_checker_sees_imports_everywhere(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from dllm_voice.app import x\n"
        "def f():\n    import lab.gen_data\n"
        "from .. import audio\n"
        "import model.engine\n"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("from bench.lm import main\n")
    (tmp_path / "tests" / "test_bench_x.py").write_text("from bench.lm import main\n")
    found = violations(tmp_path)
    assert [f.split(": ")[0] for f in found] == [
        "model/a.py:3",  # under TYPE_CHECKING
        "model/a.py:5",  # inside a function
        "model/a.py:6",  # relative, up to dllm_voice.audio
        "model/a.py:7",  # bare
        "tests/test_x.py:1",  # bench from a test that is not a bench script's
    ], found
