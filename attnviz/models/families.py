"""The families attnviz runs, one table per format: a config.json's ``model_type`` and how its folder is read
(:data:`MODEL_TYPES`), a GGUF file's ``general.architecture`` and its loader (:data:`ARCHITECTURES`). A family is
its own short file, which names its tensors and says how its forward pass differs, and an entry here for each
format it comes in: the readers, ``attnviz models`` and every listing of what runs read these tables (the help
texts and the README name each family too, and a test holds them to these tables)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import bert, gemma2, gemma3, gpt2, llama, nomic_bert, olmo2, phi3, qwen3, smollm3

if TYPE_CHECKING:
    import numpy as np

    from .metadata import Settings
    from .model import Model
    from .tokenizers.pipeline import Tokenizer
    from .weights import FolderTensors, Tensors


@dataclass(frozen=True)
class Folder:
    """How one model_type's folder is read: the model it makes (each family's from_config), its tensors' names
    (stored -> the forward pass's, after one of the model-class ``prefixes``), the class an older config.json
    names in ``architectures`` instead of a model_type, matrices stored in × out, and a change as a tensor is
    read."""

    make: Callable[[str, FolderTensors, Settings, Tokenizer, str], Model]
    names: dict[str, str]
    prefixes: tuple[str, ...]
    classes: str  # the start of its architectures' class names ("Llama": LlamaForCausalLM)
    transposed: Callable[[str], bool] = lambda name: False
    adjust: Callable[[str, np.ndarray], np.ndarray] | None = None


MODEL_TYPES = {
    "bert": Folder(bert.from_config, bert.NAMES, ("bert.",), "Bert"),
    "roberta": Folder(bert.from_config, bert.NAMES, ("roberta.",), "Roberta"),
    "xlm-roberta": Folder(bert.from_config, bert.NAMES, ("roberta.",), "XLMRoberta"),
    "distilbert": Folder(bert.from_config, bert.DISTILBERT_NAMES, ("distilbert.",), "DistilBert"),
    "nomic_bert": Folder(nomic_bert.from_config, nomic_bert.NAMES, ("nomic_bert.", "bert."), "NomicBert"),
    "gpt2": Folder(gpt2.from_config, gpt2.NAMES, ("transformer.",), "GPT2", gpt2.transposed),
    "llama": Folder(llama.from_config, llama.NAMES, ("model.",), "Llama"),
    "mistral": Folder(llama.from_config, llama.NAMES, ("model.",), "Mistral"),
    "qwen2": Folder(llama.from_config, llama.NAMES, ("model.",), "Qwen2"),
    "smollm3": Folder(smollm3.from_config, llama.NAMES, ("model.",), "SmolLM3"),
    "gemma2": Folder(gemma2.from_config, gemma2.NAMES, ("model.",), "Gemma2", adjust=gemma3.offset_norms),
    "gemma3_text": Folder(gemma3.from_config, gemma3.NAMES, ("model.",), "Gemma3", adjust=gemma3.offset_norms),
    "qwen3": Folder(qwen3.from_config, qwen3.NAMES, ("model.",), "Qwen3"),
    "olmo2": Folder(olmo2.from_config, olmo2.NAMES, ("model.",), "Olmo2"),
    "phi3": Folder(phi3.from_config, phi3.NAMES, ("model.",), "Phi3"),
}  # fmt: skip

GGUFLoader = Callable[[str, "Tensors", "Settings", "Tokenizer", str], "Model"]
ARCHITECTURES: dict[str, GGUFLoader] = {
    "llama": llama.load_gguf, "qwen2": llama.load_gguf, "gemma2": gemma2.load_gguf, "gemma3": gemma3.load_gguf,
    "gpt2": gpt2.load_gguf, "qwen3": qwen3.load_gguf, "olmo2": olmo2.load_gguf, "smollm3": smollm3.load_gguf,
    "phi3": phi3.load_gguf, "bert": bert.load_gguf, "nomic-bert": nomic_bert.load_gguf,
}  # fmt: skip


def supported(architecture: str) -> list[str]:
    """The families attnviz runs, sorted: GGUF ``general.architecture`` values (``architecture`` "gguf") or
    config.json ``model_type`` values ("folder"), read from the loaders' own tables so a listing never disagrees."""
    return sorted(ARCHITECTURES if architecture == "gguf" else MODEL_TYPES)
