# roach on a fresh Debian 12 or 13 machine, as root: `make demo` or `make test`.
# Every target is safe to run again: it reuses the packages, venv and lab a previous run made.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.NOTPARALLEL:

PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-from-pyproject
# One list for both: bookworm and trixie ship these names (trixie: Slurm 24.11, MariaDB 11.8); tmux drives
# `roach top` in its terminal tests; slurmrestd serves the lab's REST API (`roach lab up --rest`).
DEBS := slurm-wlm slurmdbd slurmrestd slurm-wlm-jwt-plugin munge mariadb-server mariadb-client rsync openssh-server openssh-client git python3-venv patchelf tmux
PYTEST_ARGS ?=
# Labs for `make test`, one per pytest-xdist worker (tests/support/labs.py): twice the cores, 2 to 8; the lab
# tests mostly wait on Slurm's timers, so 4 labs on 2 cores keep both busy.
TEST_WORKERS ?= $(shell n=$$(( $$(nproc) * 2 )); echo $$(( n < 2 ? 2 : n > 8 ? 8 : n )))
# What the lab's jobs import: torch's CPU build for torch.distributed (gloo) in the demo and tests.
JOB_PACKAGES ?= torch==2.13.0 numpy

.PHONY: deps venv lab demo lint test-unit test test-matrix bench clean

## deps: install the Debian packages that are missing (needs root only when one is missing)
deps:
	@missing=""; \
	for pkg in $(DEBS); do \
	  status="$$(dpkg-query -W -f='$${Status}' "$$pkg" 2>/dev/null || true)"; \
	  [ "$$status" = "install ok installed" ] || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then echo "deps: all Debian packages present"; exit 0; fi; \
	if [ "$$(id -u)" -ne 0 ]; then \
	  echo "deps: missing Debian packages:$$missing" >&2; \
	  echo "deps: run make as root (or: sudo apt-get install -y$$missing)" >&2; \
	  exit 1; \
	fi; \
	echo "deps: installing$$missing"; \
	apt-get update; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing

## venv: .venv with roach installed editable plus its test tools; redone only when pyproject.toml changes
venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(VENV)/bin/pip || { rm -rf $(VENV); $(PYTHON) -m venv $(VENV); }
	$(VENV)/bin/pip install -e '.[test]'
	@touch $@

# Options of `roach lab up` for `make lab`, e.g. --single-host where the machine refuses namespaces.
LAB_ARGS ?=

## lab: start the lab cluster (a no-op when it is up)
lab: deps venv
	$(VENV)/bin/roach lab up $(LAB_ARGS) $(addprefix --job-package ,$(JOB_PACKAGES))

## demo: run the demo on the lab
demo: lab
	$(VENV)/bin/roach lab demo

## lint: ruff, the formatter's check, mypy and the import contracts (no root, no lab); then a report of the
## modules over 400 lines, which never fails (tests/module_lengths.py)
lint: venv
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/python -m tests.module_lengths

## test-unit: every test that needs no lab (no root, no lab; extra arguments: make test-unit PYTEST_ARGS='-k why')
test-unit: venv
	$(VENV)/bin/pytest -m 'not lab' -n $(shell nproc) $(PYTEST_ARGS)

## test: the whole suite, over $(TEST_WORKERS) labs at once, each worker on its own (make test PYTEST_ARGS='-k wheel')
test: lab
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

MATRIX_ARGS ?=

## test-matrix: the suite on the system Slurm, 24.11 (trixie root) and 26.05 (sid root), then a table; as root
## (MATRIX_ARGS='--only 26.05 --pytest-args "tests/test_slurm_versions.py"'; roots kept in /var/tmp/roach-matrix)
test-matrix: venv
	$(VENV)/bin/python -m tests.matrix $(MATRIX_ARGS)

BENCH_ARGS ?=

## bench: roach vs sbatch vs submitit on the lab -> bench/results.md and plots (BENCH_ARGS='--smoke' or '--only 2,6')
bench: lab
	$(VENV)/bin/pip install -q matplotlib
	$(VENV)/bin/python -m bench $(BENCH_ARGS)

## clean: remove build outputs (never the venv, never the lab)
clean:
	rm -rf build dist *.egg-info .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
