"""Import structure: no import cycles among project modules, and the inference path never loads
the lab (lab/).

Run as a script it prints every cycle in the project with the kind of each edge: `top` (module
level, runs at import), `func` (inside a function, runs when called), `main` (under
`if __name__ == "__main__":`), `tc` (under `if TYPE_CHECKING:`, never runs):

    .venv/bin/python tests/model/test_imports.py
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".venv", ".git", ".gpu", "build", "dist", "data", "runs", "__pycache__"}
RANK = {"top": 0, "func": 1, "main": 2, "tc": 3}
PACKAGES = {"app", "audio", "model", "kernels"}  # imported as dllm_voice.<folder>


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the project."""
    mods = {}
    for p in root.rglob("*.py"):
        parts = p.relative_to(root).parts
        if any(s in SKIP or s.endswith(".egg-info") for s in parts):
            continue
        if parts[0] == "dllm_voice" and parts[1] in PACKAGES:
            continue  # the folders' symlinks: their files are named from the folders below
        name = list(p.relative_to(root).with_suffix("").parts)
        if name[0] in PACKAGES:
            name.insert(0, "dllm_voice")  # the folders' import name
        if name[-1] == "__init__":
            name.pop()
        mods[".".join(name)] = p
    return mods


def import_edges(mods: dict[str, Path]) -> dict[tuple[str, str], tuple[str, int]]:
    """(importer, imported) -> (kind, line) of its strongest import (the one most likely to
    run: top < func < main < tc), project modules only, imports anywhere in the file."""
    edges: dict[tuple[str, str], tuple[str, int]] = {}

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in mods:
            parts.pop()
        return ".".join(parts) or None

    def add(a: str, b: str | None, kind: str, line: int) -> None:
        if b is not None and b != a:
            old = edges.get((a, b))
            if old is None or RANK[kind] < RANK[old[0]]:
                edges[(a, b)] = (kind, line)

    def guard(test: ast.expr) -> str | None:
        if isinstance(test, ast.Name | ast.Attribute) and "TYPE_CHECKING" in ast.unparse(test):
            return "tc"
        if isinstance(test, ast.Compare) and ast.unparse(test.left) == "__name__":
            return "main"
        return None

    for mod, path in mods.items():
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]

        def visit(node: ast.AST, kind: str, mod: str = mod, package: list = package) -> None:
            for child in ast.iter_child_nodes(node):
                k = kind
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                    k = "func" if kind == "top" else kind
                elif isinstance(child, ast.If) and guard(child.test):
                    for s in child.body:
                        visit(ast.Module([s], []), guard(child.test) or kind)
                    for s in child.orelse:
                        visit(ast.Module([s], []), kind)
                    continue
                if isinstance(child, ast.Import):
                    for a in child.names:
                        add(mod, resolve(a.name), k, child.lineno)
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        up = package[: len(package) - child.level + 1]
                        base = ".".join([*up, *([child.module] if child.module else [])])
                    for a in child.names:
                        full = f"{base}.{a.name}"
                        add(mod, full if full in mods else resolve(base), k, child.lineno)
                visit(child, k)

        visit(ast.parse(path.read_text(), str(path)), "top")
    return edges


def cycles(edges: dict[tuple[str, str], tuple[str, int]]) -> list[list[str]]:
    """Every elementary cycle (up to 8 modules), each starting at its smallest module."""
    adj: dict[str, set[str]] = {}
    for a, b in edges:
        adj.setdefault(a, set()).add(b)
    found = []
    for start in sorted(adj):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(adj.get(node, ())):
                if nxt == start:
                    found.append(path)
                elif nxt > start and nxt not in path and len(path) < 8:
                    stack.append((nxt, [*path, nxt]))
    return sorted(found)


def describe(cycle: list[str], edges: dict, mods: dict[str, Path]) -> str:
    legs = []
    for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
        kind, line = edges[(a, b)]
        legs.append(f"    {a} -> {b} ({kind}, {mods[a].relative_to(ROOT)}:{line})")
    return " -> ".join([*cycle, cycle[0]]) + "\n" + "\n".join(legs)


def test_no_import_cycles_in_model_and_kernels() -> None:
    mods = project_modules()
    edges = import_edges(mods)
    assert ("dllm_voice.model.engine", "dllm_voice.model.decode") in edges  # names resolve
    inner = ("dllm_voice.model.", "dllm_voice.kernels.")
    ours = [c for c in cycles(edges) if any(m.startswith(inner) for m in c)]
    assert not ours, "\n".join(describe(c, edges, mods) for c in ours)


def test_no_cycle_anywhere_runs_at_import() -> None:
    """A cycle through app/ closes only on TYPE_CHECKING or in-function imports (a Protocol's
    owner named for the type checker); one made of module-level imports breaks at import."""
    edges = import_edges(project_modules())

    def at_import(c: list[str]) -> bool:
        return all(edges[(a, c[(i + 1) % len(c)])][0] == "top" for i, a in enumerate(c))

    bad = [c for c in cycles(edges) if at_import(c)]
    assert not bad, "\n".join(describe(c, edges, project_modules()) for c in bad)


def test_the_checker_sees_every_kind_of_import(tmp_path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.c import x\n")
    (pkg / "c.py").write_text("if __name__ == '__main__':\n    import pkg.a\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    mods = project_modules(tmp_path)
    edges = import_edges(mods)
    assert edges[("pkg.a", "pkg.b")][0] == "top"
    assert edges[("pkg.b", "pkg.c")][0] == "func"
    assert edges[("pkg.c", "pkg.a")][0] == "main"
    assert edges[("pkg.d", "pkg.a")][0] == "tc"
    assert cycles(edges) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_inference_never_loads_the_lab() -> None:
    code = (
        "import sys, dllm_voice.model.engine; "
        "print([m for m in sys.modules if m.split('.')[0] == 'lab'])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


if __name__ == "__main__":
    mods = project_modules()
    edges = import_edges(mods)
    found = cycles(edges)
    for c in found:
        print(describe(c, edges, mods))
    print(f"{len(found)} cycle(s)")
