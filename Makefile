# The two commands of the README. Each creates .venv when missing and installs the project into it,
# every dependency at the exact version of constraints.txt (the lock, for CPython 3.11-3.12 on
# x86_64 Linux; elsewhere pip skips its lines and takes the newest versions pyproject.toml allows).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOCK := constraints.txt
UV_VERSION := 0.13.9

.PHONY: demo lint test test-slow test-latest lock mutants chromium gpu-bundle gpu-check-dry

# The DP-MERF plug-in (method=dp_merf): a package of its own, registered by its entry point, installed
# beside the project (the fast suite tests it).
PLUGIN := examples/dp_merf

$(STAMP): pyproject.toml $(LOCK) $(PLUGIN)/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c 'import platform, sys; sys.version_info[:2] in ((3, 11), (3, 12)) and platform.machine() == "x86_64" and sys.platform == "linux" or print("warning: $(LOCK) pins CPython 3.11-3.12 on x86_64 Linux; this Python gets the newest versions pyproject.toml allows", file=sys.stderr)'
	$(PY) -m pip install --quiet --constraint $(LOCK) -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps -e $(PLUGIN)
	touch $(STAMP)

# Condense the embedded digits data with NDPDC, then evaluate the bundle (reduced protocol).
demo: $(STAMP)
	$(PY) train.py method=ndpdc run_dir=runs/demo-$$(date +%Y%m%d-%H%M%S) && \
	$(PY) evaluate.py $$(ls -d runs/demo-* | tail -n 1) eval.epochs=300 eval.runs=3

# Format and lint (ruff, configured in pyproject.toml): part of `make test`, so of CI.
lint: $(STAMP)
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/ruff check --quiet .

# The fast suite in TEST_WORKERS processes (pytest-xdist), each test file whole in one of them (its
# module fixtures are built once): 2 fills the 2-core machine the README times; `TEST_WORKERS=0`
# runs it in this one process, `TEST_WORKERS=auto` one process per core.
TEST_WORKERS ?= 2
test: lint
	@start=$$(date +%s); $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15; status=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s wall on $$(nproc --all) cores (load $$(cut -d" " -f1 /proc/loadavg) at the end)"; exit $$status

# The slow tests include the report's browser test: Debian's chromium, installed here when missing
# (as root, with apt-get), required otherwise. SLOW_WORKERS pytest processes (2: both cores; CI has
# 90 minutes for both suites), each taking whole test files and running many of them one after
# another, as a notebook runs many commands in one kernel: a run or a sweep leaves the interpreter's
# logging and streams as it found them (tests/cli/test_hydra.py); `SLOW_WORKERS=0` runs them all in one.
SLOW_WORKERS ?= 2
test-slow: $(STAMP) chromium
	@start=$$(date +%s); $(PY) -m pytest -q -m slow -p no:cacheprovider -n $(SLOW_WORKERS) --dist loadfile --durations=15; \
	status=$$?; echo "make test-slow: $$(( $$(date +%s) - start )) s wall on $$(nproc --all) cores"; exit $$status

# Mutation testing of privacy/, methods/ and data/loaders/ with mutmut ([tool.mutmut] in
# pyproject.toml), by hand, never in CI: a fixed sample of 1 mutant in MUTANTS_EVERY (all ~7000
# take days on 2 cores), each against the fast tests that reach it; results under mutants/.
MUTANTS_EVERY ?= 20
mutants: $(STAMP)
	nice -n 19 $(PY) benchmarks/privacy/mutants.py --every $(MUTANTS_EVERY)

chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  { echo "error: make test-slow needs chromium (the report's browser test): apt-get install chromium" >&2; exit 2; }

# Early warning: the fast suite on the newest releases pyproject.toml allows, unlocked, in .venv-latest.
test-latest:
	test -x .venv-latest/bin/python || $(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[dev]'
	.venv-latest/bin/python -m pip install --quiet --no-deps -e $(PLUGIN)
	@.venv-latest/bin/python -c 'from importlib.metadata import version as v; print("test-latest:", ", ".join(f"{p} {v(p)}" for p in ("torch", "lightning", "opacus", "numpy")))'
	.venv-latest/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# Regenerate constraints.txt after changing the dependencies in pyproject.toml (needs PyPI). uv
# resolves one set of versions from PyPI for every environment of [tool.uv] in pyproject.toml,
# keeping the pins already in constraints.txt where it can; `make lock UPGRADE=--upgrade` takes
# the newest release of everything instead.
lock:
	.venv-lock/bin/uv --version 2>/dev/null | grep -q ' $(UV_VERSION)' || \
	  { $(PYTHON) -m venv .venv-lock && .venv-lock/bin/python -m pip install --quiet uv==$(UV_VERSION); }
	.venv-lock/bin/uv pip compile pyproject.toml --extra dev --universal --fork-strategy fewest $(UPGRADE) \
	  --default-index https://pypi.org/simple --custom-compile-command 'make lock' --quiet -o $(LOCK)

# A lent GPU (benchmarks/README.md, "On a lent GPU"). gpu-bundle fills the ignored .gpu/ with what the
# GPU machine lacks (wheels, FashionMNIST, and the DPDC authors' loop from the checkout of their
# repository named by DPDC_REF, e.g. `make gpu-bundle DPDC_REF=../Differentially-Private-Dataset-
# Condensation`; none by default) and prints its size. gpu-check-dry runs benchmarks/gpu/gpu_check.sh on
# the CPU at a tiny size as two calls (the second resumes from what the first returned), prints the
# GPU estimate per stage, and imports the second call's files into a scratch results folder, all in
# a fresh folder of its own (benchmarks/gpu/gpu_check_dry.sh; CI runs it: the script cannot rot).
DPDC_REF ?=
gpu-bundle: $(STAMP)
	$(PY) benchmarks/gpu/gpu_bundle.py $(if $(DPDC_REF),--reference-git '$(DPDC_REF)')

gpu-check-dry: $(STAMP)
	PYTHON=$(PY) bash benchmarks/gpu/gpu_check_dry.sh
