# The two commands of the README. Each creates .venv when missing and installs the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Condense the embedded digits data with NDPDC, then evaluate the bundle (reduced protocol).
demo: $(STAMP)
	$(PY) train.py method=ndpdc run_dir=runs/demo-$$(date +%Y%m%d-%H%M%S) && \
	$(PY) evaluate.py $$(ls -d runs/demo-* | tail -n 1) eval.epochs=300 eval.runs=3

test: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow
