# The two commands: `make run` and `make test`. Both set up .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# rmq is installed in editable mode: a change to the Python sources needs nothing, a
# change to the core (or to the build configuration) rebuilds the extension.
CORE_SOURCES := $(filter-out src/_core/_core.c,$(wildcard src/_core/*.pyx src/_core/*.pxi src/_core/*.pxd src/_core/*.c src/_core/*.h)) \
                pyproject.toml setup.py
STAMP  := $(VENV)/.rmq-installed
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
# Four workers on two cores (many tests wait on sockets and timers); a module's tests stay
# on one worker (--dist loadscope), so that its module fixtures (one Spark session, one
# build of the packages) are made once.
XDIST  ?= -n 4 --dist loadscope

.PHONY: run test parts test-fast test-debug spark-cluster-test nox wheel-test wheel-test-py314 aarch64-test bench load scale soak hardening fuzz install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python $(CORE_SOURCES)
	$(BIN)/python -m pip install -q -e ".[test,bench]"
	touch $(STAMP)

install: $(STAMP)

# The parts the suite needs beyond rmq (tests/parts.py, the one list): Java, Node and
# ali-ons, the C++ client (x86_64), openssl, prometheus, tcpdump, systemd-analyze...
# Installs what is missing (apt-get as root, npm, pip into .venv) and reports each;
# with CI set, a part still missing stops here, naming it.
parts: install
	$(BIN)/python tests/parts.py install

# The NameServer on 127.0.0.1:9876, its kvConfig.json under ./data (Ctrl-C stops it).
run: install
	$(BIN)/rmq version
	$(BIN)/rmq namesrv --listen 127.0.0.1:9876 --kv-config data/namesrv/kvConfig.json

# The suite on the compiled core; then the pure-Python pass, which runs only what
# differs between the implementations (tests/conftest.py); then the benchmarks once as
# smoke tests (no timing, they must still run).
test: install parts
	$(PYTEST) tests $(XDIST)
	RMQ_PUREPYTHON=1 $(PYTEST) tests $(XDIST)
	$(PYTEST) bench --benchmark-disable -q $(XDIST)

# The core built with RMQ_DEBUG=1 (assertions, Cython's bounds checks) and instrumented
# with ASan and UBSan, in its own venv so that .venv stays a release build; then the
# core, route-table, differential and serving tests on it, the NameServers they start as
# subprocesses included. Python itself is not instrumented: the sanitizer runtimes are
# preloaded (the environment carries them into every subprocess), leak checks are off
# (CPython leaves memory behind at exit by design) and PYTHONMALLOC=malloc puts Python's
# objects, the core's output buffers among them, under ASan's checks.
# A finding aborts its process. So that one in a subprocess fails the run even where no
# test looks at how it ended, the run is then searched for reports: ASan writes its own
# files under $(SAN_DIR); UBSan, beside ASan, writes only to stderr, which is the pytest
# output (--capture=sys leaves the C level's stderr alone) or a server's log under the
# tests' temporary directories.
DVENV    := .venv-debug
DBIN     := $(DVENV)/bin
DSTAMP   := $(DVENV)/.rmq-installed
SANITIZE ?= address,undefined
SAN_DIR  := $(CURDIR)/$(DVENV)/sanitizer
SAN_FOUND := ERROR: AddressSanitizer|runtime error:
# rmq is installed, not editable: the extension of an editable install lands in src/rmq,
# where it would replace .venv's. So the Python sources are prerequisites too.
PY_SOURCES := $(wildcard src/rmq/*.py src/rmq/*.pyi src/rmq/*/*.py src/rmq/*/*/*.py)
DEBUG_TESTS ?= test_crc32.py test_frame_decoder.py test_frame_splitter.py test_command.py \
	test_roundtrip.py test_differential.py test_vectors.py test_bodies.py test_scan.py \
	test_scan_compressed.py test_routes.py test_table_hashing.py test_columns.py \
	test_trace_rows.py test_errors.py test_core_agreement.py test_route_cache.py \
	test_serve_routes.py test_namesrv_e2e.py test_namesrv_vectors.py test_hardening.py \
	test_namesrv_shutdown.py test_warm_restart.py test_zone_mode.py test_namesrv_vectors_5.py \
	test_namesrv_5x_answers.py test_engine.py test_dataplane.py test_tls.py \
	test_namesrv_abuse.py test_namesrv_liveness.py test_fuzz.py test_trace.py
DEBUG_XDIST ?= -n 2 --dist loadscope
SAN_ENV := LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:log_path=$(SAN_DIR)/asan \
	UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1 \
	PYTHONMALLOC=malloc HYPOTHESIS_PROFILE=quick

$(DBIN)/python:
	$(PYTHON) -m venv $(DVENV)
	$(DBIN)/python -m pip install -q --upgrade pip

$(DSTAMP): $(DBIN)/python $(CORE_SOURCES) $(PY_SOURCES)
	RMQ_DEBUG=1 RMQ_SANITIZE=$(SANITIZE) $(DBIN)/python -m pip install -q ".[fast]" \
		"pytest>=8" "pytest-xdist>=3.5" "hypothesis>=6.100" "pyarrow>=14"
	touch $(DSTAMP)

test-debug: $(DSTAMP)
	rm -rf $(SAN_DIR) && mkdir -p $(SAN_DIR)
	$(SAN_ENV) $(DBIN)/python -c "import rmq._core as c, sys; sys.exit(not c.DEBUG_BUILD)" \
		|| { echo "rmq._core in $(DVENV) is not a debug build"; exit 1; }
	{ $(SAN_ENV) $(DBIN)/python -m pytest -p no:cacheprovider -q --capture=sys \
		--basetemp=$(SAN_DIR)/tmp $(DEBUG_XDIST) $(addprefix tests/,$(DEBUG_TESTS)); \
		echo $$? >$(SAN_DIR)/status; } 2>&1 | tee $(SAN_DIR)/pytest.log
	@found=$$(grep -rlaE "$(SAN_FOUND)" $(SAN_DIR)); if [ -n "$$found" ]; then \
		for f in $$found; do echo "== $$f"; grep -aE -A40 "$(SAN_FOUND)" $$f; done; \
		echo "test-debug: sanitizer reports in the files above"; exit 1; fi
	@exit $$(cat $(SAN_DIR)/status)

# The trace job on a real Spark standalone cluster (a master and two workers from
# pyspark's jars on 127.0.0.1, a venv-pack environment shipped with the job), compared
# with a local[2] run: tests/test_spark_cluster.py alone, ~3 min (make test runs it too).
spark-cluster-test: install
	$(PYTEST) tests/test_spark_cluster.py -v

# The edit loop: the compiled core only, no slow integrations, stop at the first failure.
test-fast: install
	$(PYTEST) tests $(XDIST) -m "not slow" -x -q

# The suite on every CPython 3.10-3.13 that pyenv has (noxfile.py): ~15 min.
nox: install parts
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

# rmq._core cross-compiled for aarch64 on the host (Debian's aarch64 gcc, an arm64
# Debian root as sysroot) and cibuildwheel's aarch64 test-command (pyproject.toml), the
# ARMv8 CRC32 kernels included, run in that root under QEMU user emulation (root; ~7-8 min
# with a fresh root; docs/aarch64.md has what it does and how long it takes).
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

# The soak (issue 30): mixed load for SOAK_MINUTES on the I/O engine (routes at 4 x 16
# and 1,000 x 1, registrations of 8 brokers x 10,000 topics every 30 s, churn, KV puts,
# 206s, faults), RSS and latency per minute; fails on a lost answer. CI runs 5 minutes.
SOAK_MINUTES ?= 60
soak: install bench/loadgen
	$(BIN)/python bench/soak.py --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

# Hostile load (issue 12): route latency while one client floods 206, while KV puts
# run on a 100 MiB table, while 100,000-topic registrations run; RSS of bombs and of
# clients that never read: ~3 min.
hardening: install
	$(BIN)/python bench/hardening.py $(HARDENING_ARGS)

# Differential fuzzing, compiled core vs pure-Python reference (frames, headers, bodies,
# the serving path): ~1 min by default; see bench/README.md for the long run.
FUZZ_ARGS ?= --count 40000 --jobs 2
fuzz: install
	$(BIN)/python tests/fuzz.py $(FUZZ_ARGS)

clean:
	rm -rf $(DVENV) build dist src/*.egg-info src/rmq/*.so src/_core/_core.c .pytest_cache .benchmarks bench/loadgen bench/loadgen-tls
