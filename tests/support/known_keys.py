"""Every key the file formats define: llama.cpp's whole list of GGUF metadata keys and transformers' own
config.json keys of each family with their defaults (fixtures/llama_cpp_keys.txt, transformers_config_defaults.json),
which the loaders are held to: each run, refused by name, or known to change nothing attnviz computes."""

from __future__ import annotations

import json

from paths import FIXTURES

LLAMA_CPP_KEYS = [
    line for line in (FIXTURES / "llama_cpp_keys.txt").read_text().splitlines() if line and not line.startswith("#")
]
TRANSFORMERS_DEFAULTS = json.loads((FIXTURES / "transformers_config_defaults.json").read_text())
