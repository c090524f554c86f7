# The two commands a new user needs: `make run` and `make test` (see README.md).
PY := .venv/bin/python

.PHONY: run test install install-dev lint format bench

run: install
	$(PY) main.py serve

# mypy (one core, 15 s from a fresh clone) runs while pytest's workers start (13 s of imports);
# its report follows the tests', and either failing fails the target. One pytest worker per
# core, up to 4: on 2 cores the suite takes 0.6 of one process's wall time.
test: install-dev
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	@echo "$(PY) -m mypy --strict -p dllm_voice.app -p dllm_voice.audio (beside the tests)"
	@log=$$(mktemp); \
	$(PY) -m mypy --strict -p dllm_voice.app -p dllm_voice.audio >"$$log" 2>&1 & types=$$!; \
	$(PY) -m pytest -q -m "not slow and not gpu" -n auto --maxprocesses 4; tests=$$?; \
	wait $$types; typed=$$?; cat "$$log"; rm -f "$$log"; \
	exit $$(( tests ? tests : typed ))

install:
	bash scripts/install.sh

install-dev:
	bash scripts/install.sh --dev

lint:
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench:
	$(PY) -m bench.lm --decoders ar,hybrid,parallel
