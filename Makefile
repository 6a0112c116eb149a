# Newcomer entry points: `make demo` and `make test` set up .venv from the
# project's own files, then run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint validate bench docs docs-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,docs]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/progenax demo --output-dir demo_output

# Two workers, whole files per worker (module fixtures are built once), the
# longest files first (tests/conftest.py: LONGEST_FILES; xdist keeps that order).
PYTEST_WORKERS ?= 2
PYTEST_DIST = -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: $(STAMP)
	$(MAKE) --no-print-directory lint
	$(BIN)/python -m pytest -q $(PYTEST_DIST)
	$(MAKE) --no-print-directory docs-check

# ruff lint and format check (configured in pyproject.toml), part of `make test`.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

validate: $(STAMP)
	$(BIN)/python -m pytest -q -m slow $(PYTEST_DIST)

bench: $(STAMP)
	$(BIN)/python benchmarks/builders.py

# Regenerate the site's figures and tables from the code (docs/scripts/: builders
# gallery ~2 min, gradient-audit table ~3 min, King profiles, benchmark output
# ~7 min on 2 cores), then build. `make docs DOCS_BENCH=0` keeps the committed
# benchmark output (timings are best captured on a quiet machine).
DOCS_BENCH ?= 1
docs: $(STAMP)
	$(BIN)/python docs/scripts/gallery.py
	$(BIN)/python docs/scripts/audit_table.py
	$(BIN)/python docs/scripts/king_profiles.py
	if [ "$(DOCS_BENCH)" != 0 ]; then $(BIN)/python docs/scripts/benchmarks_page.py; fi
	$(MAKE) --no-print-directory docs-check

# Strict build of the committed pages and figures: fails on a broken link,
# reference or snippet (part of `make test`).
docs-check: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) demo_output .pytest_cache site
