# The two commands a new user needs: `make run` and `make test` (see README.md).
PY := .venv/bin/python

.PHONY: run test install install-dev lint format bench

run: install
	$(PY) main.py serve

test: install-dev
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(PY) -m mypy --strict -p dllm_voice.app -p dllm_voice.audio
	$(PY) -m pytest -q -m "not slow and not gpu"

install:
	bash scripts/install.sh

install-dev:
	bash scripts/install.sh --dev

lint:
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench:
	$(PY) -m bench.lm --decoders ar,hybrid,parallel
