# The two commands: `make run` serves ctxd, `make test` runs every check. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The real agent harnesses the end-to-end tests drive offline (pinned; skipped without npm).
HARNESS := .harness/node_modules/.bin/gemini
# A real Ray head for the `ray` watch's test and the engines bench, in a virtualenv of its own
# (pinned; 380 MB; both skip, saying why, where it cannot be installed). ctxd never imports Ray.
RAY := .ray/bin/ray

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# PYTHONWARNINGS: setuptools' notes on editable installs (a page of asterisks) are not the
# user's business; pip's own errors still show.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# `make run PORT=18765` (or CTXD_PORT) serves on another port; the store stays in ./snapshots.
PORT ?= $(or $(CTXD_PORT),8765)

run: $(STAMP)
	$(BIN)/ctxd serve --host 127.0.0.1 --port $(PORT) --data-dir ./snapshots

lint: $(STAMP)
	$(BIN)/ruff check service tests bench
	$(BIN)/ruff format --check service tests bench
	$(BIN)/mypy service/ctxd

$(HARNESS):
	@command -v npm >/dev/null || { echo "npm not found: the real-harness tests will skip"; exit 0; }; \
	npm install --silent --no-audit --no-fund --prefix .harness \
		@anthropic-ai/claude-code@2.1.197 opencode-ai@1.18.33 @openai/codex@0.171.0 \
		@google/gemini-cli@0.61.0 \
		|| echo "harness install failed: the real-harness tests will skip"

$(RAY):
	$(PYTHON) -m venv .ray && .ray/bin/python -m pip install --quiet 'ray[default]==2.60.0' \
		|| echo "ray install failed: the Ray test will skip"

test: lint $(HARNESS) $(RAY)
	$(BIN)/python -m pytest -q --durations=20

bench: $(STAMP) $(RAY)
	command -v wrk >/dev/null || [ "$$(id -u)" != 0 ] || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .harness .ray .mypy_cache .ruff_cache .pytest_cache
