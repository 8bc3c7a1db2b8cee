# Two commands on a fresh machine: `make demo` and `make test`. Both set themselves up.
# `make test` leaves out the tests marked slow (repeats of the heaviest end-to-end runs);
# `make test-all` runs every test: run it before changing grading.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all lint release lab clean

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required, this is " + sys.version' 
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

demo: install  ## grade a fictional class end to end in .demo/
	$(PY) -m course demo

test: install lint  ## lint, then every test not marked slow, browser tests included (CI)
	$(PY) -m pytest -m "not slow"

test-all: install lint  ## lint, then every test, slow ones too: run it before changing grading
	$(PY) -m pytest

lint: install  ## ruff: lint rules and formatting
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

release: install  ## regenerate release/ from source/
	$(PY) -m course release

lab: install  ## JupyterLab on the course root, open on the first student notebook (formgrader works)
	$(PY) -m course lab

clean:
	rm -rf .demo test-artifacts .pytest_cache
