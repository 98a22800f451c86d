# Two commands: `make serve` sets up and serves the bundled example repository; `make test` sets up
# and runs the tests. Both create .venv on first use. `make bench` compares conch with Triton, MLServer
# and a naive server on this machine (3 alternating rounds, about 25 minutes; BENCH_ARGS="--quick" for one
# round; see bench/README.md).
PYTHON ?= python3
VENV := .venv
# Serving needs the runtime dependencies only: the bundled models are ONNX files already built.
STAMP := $(VENV)/.installed
# pyproject.toml declares ranges; both installs take the exact versions CI tested from here.
CONSTRAINTS := constraints.txt
# The tests add the test tools, the exporters' libraries (scikit-learn, skl2onnx, pandas) and the
# optional torch extra (torch==2.13.0, a CPU build from this machine's disk).
TEST_STAMP := $(VENV)/.installed-test

.PHONY: serve test unit lint bench clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -c $(CONSTRAINTS) -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(VENV)/bin/pip install -q -c $(CONSTRAINTS) -e '.[test,torch]'
	touch $(TEST_STAMP)

serve: $(STAMP)
	$(VENV)/bin/conch serve

# Programs from Debian's packages that the tests and the benchmarks drive (the package is named as
# the command): Prometheus (tests/integration/test_prometheus.py, the release judge), headless
# Chromium (tests/integration/test_status_page.py), redis-server (tests/*stream*, bench/streams.py) and
# wrk (bench/). Missing ones are installed with
# apt-get as root on Debian; elsewhere this says which are missing (see README).
define debian_programs
	@missing=$$(for p in $(1); do command -v $$p >/dev/null || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing" $$missing; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing" $$missing": install them, or what drives them skips or fails"; \
	  fi; \
	fi
endef

test: $(TEST_STAMP)
	$(call debian_programs,prometheus chromium redis-server)
	$(VENV)/bin/ruff check conch tests examples bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest -q

# The first loop while changing code: lint, types, import contracts and the unit tests (no server
# process, no Debian program). `make test` runs everything; `-m 'not prometheus and not chromium'`
# and the other markers in pyproject.toml leave out the suites a machine cannot run.
unit: $(TEST_STAMP)
	$(VENV)/bin/ruff check conch tests examples bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/pytest -q tests/unit

bench: $(TEST_STAMP)
	$(VENV)/bin/pip install -q -c $(CONSTRAINTS) -e '.[bench]'
	$(call debian_programs,wrk)
	$(VENV)/bin/python -m bench.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
