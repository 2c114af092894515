# The two commands: `make run` and `make test`. Both set up .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Reinstall only when the sources or the build configuration change.
SOURCES := $(shell find src -name '*.py' -o -name '*.pyx' -o -name '*.pxi' -o -name '*.c' -o -name '*.h' -o -name '*.pyi') pyproject.toml setup.py
STAMP  := $(VENV)/.rmq-installed

.PHONY: run test bench load hardening fuzz install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python $(SOURCES)
	$(BIN)/python -m pip install -q ".[test,bench]"
	touch $(STAMP)

# Real third-party clients for the interop tests: ali-ons (pure JavaScript) and the
# Apache C++ client bundled in the PyPI package rocketmq 0.4.4 (x86_64 only).
INTEROP := tests/interop/node_modules/.package-lock.json
$(INTEROP): tests/interop/package.json tests/interop/package-lock.json
	npm ci --prefix tests/interop --no-audit --no-fund --loglevel=error
	if [ "$$(uname -m)" = x86_64 ]; then $(BIN)/python -m pip install -q rocketmq==0.4.4; fi

install: $(STAMP)

# The NameServer on 127.0.0.1:9876, its kvConfig.json under ./data (Ctrl-C stops it).
run: install
	$(BIN)/rmq version
	$(BIN)/rmq namesrv --listen 127.0.0.1:9876 --kv-config data/namesrv/kvConfig.json

# The whole suite twice: the compiled core, then the pure-Python reference;
# then the benchmarks once as smoke tests (no timing, they must still run).
test: install $(INTEROP)
	$(BIN)/python -m pytest tests
	RMQ_PUREPYTHON=1 $(BIN)/python -m pytest tests
	$(BIN)/python -m pytest bench --benchmark-disable -q

# Side-by-side measurements (compiled vs pure Python vs stdlib/isal), with a
# summary of the targets at the end.
bench: install
	$(BIN)/python -m pytest bench --benchmark-only --benchmark-columns=min,median,ops --benchmark-sort=name

bench/loadgen: bench/loadgen.c
	$(CC) -O2 -o $@ $<

# The NameServer under load from a separate process (W1 routes at 16 and 1 in flight,
# 10,000-topic registrations, RSS): ~1 min; LOAD_ARGS=--quick for ~15 s.
load: install bench/loadgen
	$(BIN)/python bench/load.py $(LOAD_ARGS)

# Hostile load (issue 12): route latency while one client floods 206, while KV puts
# run on a 100 MiB table, while 100,000-topic registrations run; RSS of bombs and of
# clients that never read: ~3 min.
hardening: install
	$(BIN)/python bench/hardening.py $(HARDENING_ARGS)

# Differential fuzzing, compiled core vs pure-Python reference (frames, headers, bodies,
# the serving path): ~1 min by default; see bench/README.md for the long run.
FUZZ_ARGS ?= --count 40000 --jobs 2
fuzz: install
	$(BIN)/python bench/fuzz.py $(FUZZ_ARGS)

clean:
	rm -rf build dist src/*.egg-info src/rmq/*.so src/_core/_core.c .pytest_cache .benchmarks bench/loadgen
