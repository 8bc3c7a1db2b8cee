# Two commands on a fresh machine: `make demo` and `make test`. Both set themselves up.
# `make test` leaves out the tests marked slow (repeats of the heaviest end-to-end runs);
# `make test-all` runs every test: run it before changing grading. `make test-fast` runs the
# unit tests alone (tests/unit: no kernel, no browser, no command run), in about a minute.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# PyTorch's CPU build (on Linux, PyPI's torch is the CUDA build: several GB). For CUDA, see
# docs/instructor-guide.md, "PyTorch: the CPU build, or CUDA".
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# `demo`, `lab` and `release` run in the environment active in this shell when it can run the
# course (e.g. the course's environment from last term's folder), as `python -m course` does;
# else in .venv, made on first use.
ACTIVE := $(shell for env in "$$VIRTUAL_ENV" "$$CONDA_PREFIX"; do \
	[ -n "$$env" ] && [ "$$env" != "$(CURDIR)/$(VENV)" ] && "$$env/bin/python" -c \
	'import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, sys.argv[1:])))' \
	nbgrader jupyterlab torch 2>/dev/null && echo "$$env" && break; done)
RUN := $(if $(ACTIVE),$(ACTIVE)/bin/python,$(PY))
READY := $(if $(ACTIVE),,install)

.PHONY: install demo test test-fast test-all lint release lab clean

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required, this is " + sys.version' 
	@echo "Installing the course's environment in $(VENV) (once; a few minutes: PyTorch and JupyterLab)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --no-deps --extra-index-url $(TORCH_INDEX) -c requirements.txt torch
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

demo: $(READY)  ## grade a fictional class end to end in .demo/
	$(RUN) -m course demo

test: install lint  ## lint, then every test not marked slow, browser tests included (CI)
	$(PY) -m pytest -m "not slow"

test-fast: install  ## the unit tests alone: no kernel, no browser, no command run (about a minute)
	$(PY) -m pytest tests/unit

test-all: install lint  ## lint, then every test, slow ones too: run it before changing grading
	$(PY) -m pytest

lint: install  ## ruff: lint rules and formatting
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

release: $(READY)  ## regenerate release/ from source/
	$(RUN) -m course release

lab: $(READY)  ## JupyterLab on the course root, open on the first student notebook (formgrader works)
	$(RUN) -m course lab

clean:
	rm -rf .demo test-artifacts .pytest_cache
