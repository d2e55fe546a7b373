# Strand: `make run` serves the app, `make test` runs every test. Both set everything up.
SHELL := /bin/bash
.DEFAULT_GOAL := run

VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.strand-installed
HOST ?= 127.0.0.1
PORT ?= 8000

# The first Python >= 3.11 on PATH.
PYTHON := $(shell for p in python3 python3.13 python3.12 python3.11; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& { echo $$p; break; }; done)

.PHONY: run test test-deps setup migrate demo lint typecheck pytest browser-deps pi-deps system-deps pi16-deps haproxy-deps sandbox-deps phoenix-deps bench cluster clean

setup: $(STAMP) migrate

$(STAMP): pyproject.toml
	@if [ -z "$(PYTHON)" ]; then \
		echo "Strand needs Python 3.11 or newer; found: $$(python3 --version 2>&1 || echo 'no python3')." >&2; \
		echo "Install python3.11 (or newer) and run make again." >&2; exit 1; fi
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

migrate: $(STAMP)
	@$(BIN)/python manage.py migrate --verbosity 0

demo: setup
	@STRAND_URL=http://$(HOST):$(PORT)/ $(BIN)/python manage.py demo

# A deep listen backlog and a handshake timeout to spare for bursts of viewers (deploy/daphne.py).
run: setup demo
	@echo "Strand: http://$(HOST):$(PORT)/"
	$(BIN)/daphne -e tcp:port=$(PORT):interface=$(HOST):backlog=2048 \
		--websocket_connect_timeout 30 config.asgi:application

# Several processes behind HAProxy, Redis for the channel layer (see deploy/cluster.py).
cluster: setup demo haproxy-deps
	$(BIN)/python -m deploy.cluster

# Debian's haproxy, installed when it is missing: the load balancer of `make cluster`, of the
# cluster benchmarks and of the restart tests.
haproxy-deps:
	@command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || { \
		echo "Installing Debian's haproxy for the cluster..."; \
		apt-get update -qq && apt-get install -y -qq haproxy >/dev/null; }

# Debian's chromium for the browser tests, installed when it is missing; and Pi's own code
# (npm) for the tests that have Pi read what Strand exports.
browser-deps: pi-deps
	@command -v chromium >/dev/null 2>&1 || { \
		echo "Installing Debian's chromium for the browser tests..."; \
		apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

pi-deps:
	@if command -v npm >/dev/null 2>&1 && [ ! -d tests/fixtures/pi/node_modules ]; then \
		npm ci --prefix tests/fixtures/pi --no-audit --no-fund --silent; fi

# The Debian packages the tests need (chromium, haproxy, bubblewrap), those missing
# installed in one apt-get: apt takes one lock, so they cannot go in parallel.
system-deps:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing="$$missing haproxy"; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	if [ -n "$$missing" ]; then \
		echo "Installing Debian's$$missing for the tests..."; \
		apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; fi

# Debian's bubblewrap, installed when it is missing: the sandbox the agent's `bash` runs in
# (runtime/sandbox.py). Without it the server does not offer `bash` at all.
sandbox-deps:
	@command -v bwrap >/dev/null 2>&1 || { \
		echo "Installing Debian's bubblewrap for the agent's sandbox..."; \
		apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; }

# Pi 1.6 (npm), for the tests that compare with it and have it open what Strand exports, and
# the Node it needs (22.19 or newer): the npm registry's `node` package carries the binary, so
# it does not matter which Node the machine has, only that npm is there.
PI16 := tests/fixtures/pi/v1.6
pi16-deps:
	@if command -v npm >/dev/null 2>&1 && [ ! -x $(PI16)/node_modules/node/bin/node ]; then \
		echo "Installing Pi 1.6 and Node 22 (npm) for the Pi 1.6 tests..."; \
		npm ci --prefix $(PI16) --no-audit --no-fund --silent; fi

# Arize Phoenix (PyPI), in an environment of its own, for the tests that read Strand's OTLP
# export back from a real tracing backend (tests/interop): it runs offline on SQLite.
PHOENIX_VENV := .strand/phoenix-venv
PHOENIX_VERSION := 20.26.1
phoenix-deps:
	@if [ ! -f $(PHOENIX_VENV)/.installed-$(PHOENIX_VERSION) ]; then \
		echo "Installing Arize Phoenix $(PHOENIX_VERSION) for the OTLP export tests..."; \
		$(PYTHON) -m venv $(PHOENIX_VENV) && \
		$(PHOENIX_VENV)/bin/pip install --quiet --disable-pip-version-check \
			'arize-phoenix==$(PHOENIX_VERSION)' && \
		touch $(PHOENIX_VENV)/.installed-$(PHOENIX_VERSION); fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy loads the settings (django-stubs); a placeholder URL keeps it from starting a server.
typecheck: $(STAMP)
	DATABASE_URL=postgres://mypy@127.0.0.1/unused $(BIN)/mypy .

# Every test, and mypy, at once: much of each part is spent waiting (on servers, browsers,
# turns), so the parts overlap rather than queue. The tests that need no browser run on
# every core (at most four workers, each with a test database of its own); beside them the
# browser tests in one process (Playwright's loop must not share one with the asyncio tests),
# on test databases of their own (`test_strand_browser`); and mypy. What the browser tests
# and mypy print is shown whole when they end; the target fails if any of the three failed.
test: test-deps lint
	@out=$$(mktemp -d); \
	DATABASE_URL=postgres://mypy@127.0.0.1/unused $(BIN)/mypy . >$$out/mypy 2>&1 & mypy=$$!; \
	$(BIN)/pytest -m browser -q >$$out/browser 2>&1 & browser=$$!; \
	trap 'kill $$mypy $$browser 2>/dev/null' INT TERM; \
	$(BIN)/pytest -m "not browser" -q -n auto --maxprocesses 4; rest=$$?; \
	wait $$browser; seen=$$?; [ $$seen -eq 5 ] && seen=0; \
	echo "--- browser tests (pytest -m browser)"; cat $$out/browser; \
	wait $$mypy; typed=$$?; echo "--- mypy"; cat $$out/mypy; rm -rf $$out; \
	[ $$rest -eq 0 ] && [ $$seen -eq 0 ] && [ $$typed -eq 0 ]

# What the tests need, made side by side: the environment and the database, the Debian
# packages, Pi (two versions, npm) and Phoenix (its own environment). Each is mostly
# waiting on downloads, unpacking and compiling, and none needs another.
test-deps:
	@$(MAKE) --no-print-directory -j 5 setup system-deps pi-deps pi16-deps phoenix-deps

BENCH_STAMP := $(VENV)/.strand-bench-installed

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

bench: setup $(BENCH_STAMP) haproxy-deps
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .strand
