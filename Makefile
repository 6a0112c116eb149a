# Newcomer entry points: `make demo` and `make test` set up .venv from the
# project's own files, then run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test validate bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/progenax demo --output-dir demo_output

test: $(STAMP)
	$(BIN)/python -m pytest -q

validate: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/builders.py

clean:
	rm -rf $(VENV) demo_output .pytest_cache
