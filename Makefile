# The two commands: `make run` and `make test`. Both set up .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# rmq is installed in editable mode: a change to the Python sources needs nothing, a
# change to the core (or to the build configuration) rebuilds the extension.
CORE_SOURCES := $(filter-out src/_core/_core.c,$(wildcard src/_core/*.pyx src/_core/*.pxi src/_core/*.c src/_core/*.h)) \
                pyproject.toml setup.py
STAMP  := $(VENV)/.rmq-installed
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
# Four workers on two cores (many tests wait on sockets and timers); a module's tests stay
# on one worker (--dist loadscope), so that its module fixtures (one Spark session, one
# build of the packages) are made once.
XDIST  ?= -n 4 --dist loadscope

.PHONY: run test test-fast spark-cluster-test nox wheel-test wheel-test-py314 aarch64-test bench load scale hardening fuzz install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python $(CORE_SOURCES)
	$(BIN)/python -m pip install -q -e ".[test,bench]"
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

# The suite on the compiled core; then the pure-Python pass, which runs only what
# differs between the implementations (tests/conftest.py); then the benchmarks once as
# smoke tests (no timing, they must still run).
test: install $(INTEROP)
	$(PYTEST) tests $(XDIST)
	RMQ_PUREPYTHON=1 $(PYTEST) tests $(XDIST)
	$(PYTEST) bench --benchmark-disable -q $(XDIST)

# The trace job on a real Spark standalone cluster (a master and two workers from
# pyspark's jars on 127.0.0.1, a venv-pack environment shipped with the job), compared
# with a local[2] run: tests/test_spark_cluster.py alone, ~3 min (make test runs it too).
spark-cluster-test: install
	$(PYTEST) tests/test_spark_cluster.py -v

# The edit loop: the compiled core only, no slow integrations, stop at the first failure.
test-fast: install
	$(PYTEST) tests $(XDIST) -m "not slow" -x -q

# The suite on every CPython 3.10-3.13 that pyenv has (noxfile.py): ~15 min.
nox: install $(INTEROP)
	$(BIN)/python -m pip install -q nox
	$(BIN)/python -m nox

# The wheel built, repaired with auditwheel and tested as cibuildwheel does on this
# platform: cibuildwheel's test-command (pyproject.toml) on the installed wheel in a
# fresh venv, from outside the checkout (tools/wheel-test.sh; PYTHON chooses the
# interpreter, bench/README.md has the time it takes).
wheel-test:
	PYTHON=$(PYTHON) tools/wheel-test.sh

# The same on CPython 3.14, which neither this Debian nor pyenv has: in a Debian sid
# root with Debian's python3.14, made once with debootstrap (root; tools/wheel-test-sid.sh).
wheel-test-py314:
	tools/wheel-test-sid.sh

# rmq._core built for aarch64 in an arm64 Debian root and cibuildwheel's aarch64
# test-command (pyproject.toml), the ARMv8 CRC32 kernels included, run under QEMU user
# emulation (root; docs/aarch64.md has what it does and how long it takes).
# AARCH64_TEST_ARGS replaces the test-command by pytest arguments.
aarch64-test:
	tools/aarch64-test.sh $(AARCH64_TEST_ARGS)

# Side-by-side measurements (compiled vs pure Python vs stdlib/isal), with a
# summary of the targets at the end.
bench: install
	$(BIN)/python -m pytest bench --benchmark-only --benchmark-columns=min,median,ops --benchmark-sort=name

bench/loadgen: bench/loadgen.c
	$(CC) -O2 -o $@ $<

# loadgen with --tls: needs OpenSSL's headers and libraries (libssl-dev)
bench/loadgen-tls: bench/loadgen.c
	$(CC) -O2 -DLOADGEN_TLS -o $@ $< -lssl -lcrypto

# W1 route throughput over TLS vs plain on one permissive port (TLS_ARGS=--quick: ~20 s)
tls-bench: install bench/loadgen-tls
	$(BIN)/python bench/tls.py $(TLS_ARGS)

# The NameServer under load from a separate process (W1 routes at 16 and 1 in flight,
# 10,000-topic registrations, RSS): ~1 min; LOAD_ARGS=--quick for ~15 s.
load: install bench/loadgen
	$(BIN)/python bench/load.py $(LOAD_ARGS)

# Scale (issue 15): W3 (300 brokers x 10,000 topics), W4 (1,000 x 1,000 on 8) and
# 1,000 of 10,000 brokers expiring under route load: ~2 min; SCALE_ARGS=--quick ~30 s.
scale: install bench/loadgen
	$(BIN)/python bench/scale.py $(SCALE_ARGS)

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
	rm -rf build dist src/*.egg-info src/rmq/*.so src/_core/_core.c .pytest_cache .benchmarks bench/loadgen bench/loadgen-tls
