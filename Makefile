# attnviz: the two commands a fresh machine needs are `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/attnviz heatmap --file samples/sentence.txt --heads 2
	$(BIN)/attnviz heatmap --embed textbook --d-model 8 --heads 1 --seed 0 --causal w1 w2 w3 w4
	$(BIN)/attnviz heatmap --file samples/long.txt --head 2 --causal

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet ruff mypy
	$(BIN)/ruff check attnviz tests
	$(BIN)/ruff format --check attnviz tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info
