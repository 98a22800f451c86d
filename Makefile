# Two commands: `make serve` sets up and serves the bundled example repository; `make test` sets up
# and runs the tests. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: serve test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/conch serve

test: $(STAMP)
	$(VENV)/bin/ruff check conch tests examples bench
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q

clean:
	rm -rf $(VENV) build *.egg-info
