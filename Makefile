# feedpipe: the two commands are `make demo` and `make test`; both install on first use.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
STAMP := $(VENV)/.installed
PACKAGES := $(VENV)/.packages
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYTHONDONTWRITEBYTECODE :=
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: install demo test check lint lock clean bench

install: $(STAMP)

# The venv is built from PyPI alone (pip runs isolated from the machine's configuration);
# uv installs the locked set, then the project itself in editable mode. The JVM helpers come
# next: the S3A jars, then the class archive, made again when its recipe (jobs/common/cds.py:
# the collector, the training application) changes. Lint needs only the packages, so `make
# test` and `make check` run it while the helpers are made (mypy and the archive's training
# application each keep one core busy for about 40 s).
$(PACKAGES): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --isolated --disable-pip-version-check -q uv==$(UV_VERSION)
	$(BIN)/uv pip sync --python $(BIN)/python requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python --no-deps -e .
	@touch $(PACKAGES)

$(STAMP): $(PACKAGES) jobs/common/cds.py
	$(BIN)/python -m jobs.common.s3a
	$(BIN)/python -m jobs.common.cds
	@touch $(STAMP)

lock:
	@test -x $(BIN)/uv || { $(PY) -m venv $(VENV) && $(BIN)/python -m pip install --isolated -q uv==$(UV_VERSION); }
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 \
	    --custom-compile-command "make lock" -o requirements.lock

demo: $(STAMP)
	$(BIN)/python -m jobs.dev.demo

lint: $(PACKAGES)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The suite runs in TEST_WORKERS processes (pytest-xdist), each test file in one of them so
# a file's shared fixtures (an Airflow, a cluster, a multi-day run) are built once; what
# several files share is built once per run (tests/support/once.py). Files are handed out in
# collection order, the longest first (tests/conftest.py).
TEST_WORKERS ?= 2
PYTEST := $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# the fast tier: lint, types, stage and unit tests (the stage files first: they share a
# multi-day build, which one process makes while the other runs the rest)
check:
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint install
	$(PYTEST) tests/stages tests/unit

# everything: the README's test command, which .ci/run calls
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint install
	$(PYTEST)

# Benchmarks (not part of `make test`): a day of ff2010 against the DuckDB reference
# (python -m bench.day; BENCH_ARGS="--scales 0.25,1,4 --reps 3" for the scaling run).
BENCH_ARGS ?= --scales 1 --reps 3
bench: $(STAMP)
	$(BIN)/python -m bench.day $(BENCH_ARGS)

clean:
	rm -rf var build *.egg-info .pytest_cache .mypy_cache .ruff_cache
