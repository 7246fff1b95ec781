"""A Hugging Face checkpoint folder as ``save_pretrained`` writes it: ``config.json`` says the family,
``tokenizer.json`` (or a BERT's ``vocab.txt``) the tokenizer, ``model.safetensors`` (or the shards of
``model.safetensors.index.json``) the weights. Each family's tensor names are translated to the names
its forward pass reads — the same pass a GGUF file of that family runs."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import AttnvizError, quoted
from ..inputs import open_regular, parse_json, read_file
from . import bert, gemma2, gemma3, gpt2, llama, nomic_bert, olmo2, phi3, qwen3, refuse_unused, smollm3
from .metadata import INERT_CONFIG_KEYS, MAX_CONFIG_BYTES, Settings, refuse_unread
from .tokenizer import Tokenizer, read_tokenizer_json
from .vocabulary import from_vocab_txt
from .weights import INDEX, FolderTensors, pickled_hint

if TYPE_CHECKING:
    from . import Model


LLAMA_NAMES = {
    "embed_tokens.weight": "token_embd.weight",
    "norm.weight": "output_norm.weight",
    "layers.{i}.input_layernorm.weight": "blk.{i}.attn_norm.weight",
    "layers.{i}.self_attn.q_proj.{w}": "blk.{i}.attn_q.{w}",
    "layers.{i}.self_attn.k_proj.{w}": "blk.{i}.attn_k.{w}",
    "layers.{i}.self_attn.v_proj.{w}": "blk.{i}.attn_v.{w}",
    "layers.{i}.self_attn.o_proj.{w}": "blk.{i}.attn_output.{w}",
    "layers.{i}.post_attention_layernorm.weight": "blk.{i}.ffn_norm.weight",
    "layers.{i}.mlp.gate_proj.weight": "blk.{i}.ffn_gate.weight",
    "layers.{i}.mlp.up_proj.weight": "blk.{i}.ffn_up.weight",
    "layers.{i}.mlp.down_proj.weight": "blk.{i}.ffn_down.weight",
    "lm_head.weight": "output.weight",  # absent where the embeddings are tied
}
GEMMA2_NAMES = LLAMA_NAMES | {
    "layers.{i}.post_attention_layernorm.weight": "blk.{i}.post_attention_norm.weight",
    "layers.{i}.pre_feedforward_layernorm.weight": "blk.{i}.ffn_norm.weight",
    "layers.{i}.post_feedforward_layernorm.weight": "blk.{i}.post_ffw_norm.weight",
}
GEMMA3_NAMES = GEMMA2_NAMES | {
    "layers.{i}.self_attn.q_norm.weight": "blk.{i}.attn_q_norm.weight",
    "layers.{i}.self_attn.k_norm.weight": "blk.{i}.attn_k_norm.weight",
}
QWEN3_NAMES = LLAMA_NAMES | {
    "layers.{i}.self_attn.q_norm.weight": "blk.{i}.attn_q_norm.weight",
    "layers.{i}.self_attn.k_norm.weight": "blk.{i}.attn_k_norm.weight",
}
OLMO2_NAMES = {k: v for k, v in QWEN3_NAMES.items() if "layernorm" not in k} | {  # no norm before attention
    "layers.{i}.post_attention_layernorm.weight": "blk.{i}.post_attention_norm.weight",
    "layers.{i}.post_feedforward_layernorm.weight": "blk.{i}.post_ffw_norm.weight",
}
PHI3_NAMES = {k: v for k, v in LLAMA_NAMES.items() if "_proj" not in k} | {
    "layers.{i}.self_attn.qkv_proj.weight": "blk.{i}.attn_qkv.weight",
    "layers.{i}.self_attn.o_proj.weight": "blk.{i}.attn_output.weight",
    "layers.{i}.mlp.gate_up_proj.weight": "blk.{i}.ffn_up.weight",
    "layers.{i}.mlp.down_proj.weight": "blk.{i}.ffn_down.weight",
}
GPT2_NAMES = {
    "wte.weight": "token_embd.weight",
    "wpe.weight": "position_embd.weight",
    "ln_f.{w}": "output_norm.{w}",
    "h.{i}.ln_1.{w}": "blk.{i}.attn_norm.{w}",
    "h.{i}.attn.c_attn.{w}": "blk.{i}.attn_qkv.{w}",
    "h.{i}.attn.c_proj.{w}": "blk.{i}.attn_output.{w}",
    "h.{i}.ln_2.{w}": "blk.{i}.ffn_norm.{w}",
    "h.{i}.mlp.c_fc.{w}": "blk.{i}.ffn_up.{w}",
    "h.{i}.mlp.c_proj.{w}": "blk.{i}.ffn_down.{w}",
}
DISTILBERT_NAMES = {
    "embeddings.{rest}": "embeddings.{rest}",
    "transformer.layer.{i}.attention.q_lin.{w}": "encoder.layer.{i}.attention.self.query.{w}",
    "transformer.layer.{i}.attention.k_lin.{w}": "encoder.layer.{i}.attention.self.key.{w}",
    "transformer.layer.{i}.attention.v_lin.{w}": "encoder.layer.{i}.attention.self.value.{w}",
    "transformer.layer.{i}.attention.out_lin.{w}": "encoder.layer.{i}.attention.output.dense.{w}",
    "transformer.layer.{i}.sa_layer_norm.{w}": "encoder.layer.{i}.attention.output.LayerNorm.{w}",
    "transformer.layer.{i}.ffn.lin1.{w}": "encoder.layer.{i}.intermediate.dense.{w}",
    "transformer.layer.{i}.ffn.lin2.{w}": "encoder.layer.{i}.output.dense.{w}",
    "transformer.layer.{i}.output_layer_norm.{w}": "encoder.layer.{i}.output.LayerNorm.{w}",
}
BERT_NAMES = {"{rest}": "{rest}"}
NOMIC_NAMES = {  # nomic's own names (save_pretrained writes them too) -> BERT's, {i} the layer
    "embeddings.word_embeddings.weight": "embeddings.word_embeddings.weight",
    "embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
    "emb_ln.{w}": "embeddings.LayerNorm.{w}",
    "encoder.layers.{i}.attn.Wqkv.{w}": "encoder.layer.{i}.attention.self.qkv.{w}",
    "encoder.layers.{i}.attn.out_proj.{w}": "encoder.layer.{i}.attention.output.dense.{w}",
    "encoder.layers.{i}.norm1.{w}": "encoder.layer.{i}.attention.output.LayerNorm.{w}",
    "encoder.layers.{i}.mlp.fc11.{w}": "encoder.layer.{i}.intermediate.dense.{w}",
    "encoder.layers.{i}.mlp.fc12.{w}": "encoder.layer.{i}.intermediate.gate.{w}",
    "encoder.layers.{i}.mlp.fc2.{w}": "encoder.layer.{i}.output.dense.{w}",
    "encoder.layers.{i}.norm2.{w}": "encoder.layer.{i}.output.LayerNorm.{w}",
}
CONV1D = ("attn_qkv.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight")  # GPT-2's in × out matrices


def renamer(table: dict[str, str], prefixes: tuple[str, ...]) -> Callable[[str], str | None]:
    """Stored name -> the forward pass's name, after dropping a model-class prefix (``model.``, ``bert.``)."""
    fields = {"{i}": r"(?P<i>\d+)", "{w}": r"(?P<w>weight|bias)", "{rest}": r"(?P<rest>.+)"}
    patterns = []
    for stored, read in table.items():
        pattern = re.escape(stored)
        for field, group in fields.items():
            pattern = pattern.replace(re.escape(field), group)
        patterns.append((re.compile(pattern), read))

    def rename(name: str) -> str | None:
        name = next((name[len(p) :] for p in prefixes if name.startswith(p)), name)
        for pattern, read in patterns:
            match = pattern.fullmatch(name)
            if match:
                return read.format(**match.groupdict())
        return None

    return rename


@dataclass(frozen=True)
class Family:
    """How one model_type's folder is read: tensor names, model-class prefixes, and the model it makes."""

    names: dict[str, str]
    prefixes: tuple[str, ...]
    make: Callable[[str, FolderTensors, Settings, Tokenizer, str], Model]  # each family's from_config
    transposed: Callable[[str], bool] = lambda name: False
    adjust: Callable[[str, np.ndarray], np.ndarray] | None = None


FAMILIES = {
    "bert": Family(BERT_NAMES, ("bert.",), bert.from_config),
    "roberta": Family(BERT_NAMES, ("roberta.",), bert.from_config),
    "xlm-roberta": Family(BERT_NAMES, ("roberta.",), bert.from_config),
    "distilbert": Family(DISTILBERT_NAMES, ("distilbert.",), bert.from_config),
    "nomic_bert": Family(NOMIC_NAMES, ("nomic_bert.", "bert."), nomic_bert.from_config),
    "gpt2": Family(GPT2_NAMES, ("transformer.",), gpt2.from_config, lambda n: n.endswith(CONV1D)),
    "llama": Family(LLAMA_NAMES, ("model.",), llama.from_config),
    "mistral": Family(LLAMA_NAMES, ("model.",), llama.from_config),
    "qwen2": Family(LLAMA_NAMES, ("model.",), llama.from_config),
    "smollm3": Family(LLAMA_NAMES, ("model.",), smollm3.from_config),
    "gemma2": Family(GEMMA2_NAMES, ("model.",), gemma2.from_config, adjust=gemma3.offset_norms),
    "gemma3_text": Family(GEMMA3_NAMES, ("model.",), gemma3.from_config, adjust=gemma3.offset_norms),
    "qwen3": Family(QWEN3_NAMES, ("model.",), qwen3.from_config),
    "olmo2": Family(OLMO2_NAMES, ("model.",), olmo2.from_config),
    "phi3": Family(PHI3_NAMES, ("model.",), phi3.from_config),
}  # fmt: skip


def read_config(directory: Path) -> tuple[dict[str, object], Path]:
    path = directory / "config.json"
    if not os.path.lexists(path):  # there but not a file (a FIFO, a device, a folder): read_file says which
        raise AttnvizError(f"{directory}: no config.json: not a Hugging Face checkpoint folder")
    raw = parse_json(read_file(path, MAX_CONFIG_BYTES, "a config.json"), str(path))
    if not isinstance(raw, dict):
        raise AttnvizError(f"{path}: not a model configuration (not a JSON object)")
    return raw, path


ARCHITECTURE_FAMILIES = {
    "Bert": "bert", "Roberta": "roberta", "XLMRoberta": "xlm-roberta", "DistilBert": "distilbert", "GPT2": "gpt2",
    "Llama": "llama", "Mistral": "mistral", "Qwen2": "qwen2", "Gemma2": "gemma2", "Gemma3": "gemma3_text",
    "Qwen3": "qwen3", "Olmo2": "olmo2", "SmolLM3": "smollm3", "Phi3": "phi3", "NomicBert": "nomic_bert",
}  # fmt: skip


def _guess_family(raw: dict[str, object], directory: Path) -> str | None:
    """Older config.json files leave out model_type: the class in ``architectures`` says it, and a folder
    with only a vocab.txt beside it is one of the first BERT checkpoints."""
    classes = raw.get("architectures")
    for name in classes if isinstance(classes, list) else []:
        found = next((f for prefix, f in ARCHITECTURE_FAMILIES.items() if str(name).startswith(prefix)), None)
        if found:
            return found
    return "bert" if os.path.lexists(directory / "vocab.txt") else None


VOCAB_TXT_FAMILIES = ("bert", "distilbert")  # the first BERT checkpoints: a vocab.txt, no tokenizer.json


def folder_tokenizer(directory: Path, family: str) -> Tokenizer:
    """``tokenizer.json`` where there is one; a BERT family's ``vocab.txt`` otherwise."""
    if os.path.lexists(directory / "tokenizer.json"):
        return read_tokenizer_json(directory / "tokenizer.json")
    if family in VOCAB_TXT_FAMILIES:
        if not os.path.lexists(directory / "vocab.txt"):
            raise AttnvizError(f"{directory}: no tokenizer.json or vocab.txt: the checkpoint has no tokenizer")
        options = directory / "tokenizer_config.json"
        if os.path.lexists(options):  # from_vocab_txt passes over one that is not a file; refuse it instead
            open_regular(options, MAX_CONFIG_BYTES, "a tokenizer_config.json").close()
        return from_vocab_txt(directory)
    raise AttnvizError(f"{directory}: no tokenizer.json (attnviz reads the tokenizer from it)")


def missing_files(directory: Path, family: str) -> str:
    """What a checkpoint folder of ``family`` lacks of the files :func:`load_folder` reads ("" when nothing): its
    tokenizer (:func:`folder_tokenizer`) and safetensors weights (:func:`~.weights.checkpoint_tensors`), so that
    ``attnviz models`` lists as running only a folder that loads."""
    lacking = []
    has_vocab = family in VOCAB_TXT_FAMILIES and os.path.lexists(directory / "vocab.txt")
    if not os.path.lexists(directory / "tokenizer.json") and not has_vocab:
        lacking.append("tokenizer.json" + (" or vocab.txt" if family in VOCAB_TXT_FAMILIES else ""))
    if not any(os.path.lexists(directory / name) for name in ("model.safetensors", INDEX)):
        lacking.append("model.safetensors" + pickled_hint(directory))
    return f"no {' and no '.join(lacking)}" if lacking else ""


def load_folder(directory: Path, name: str, origin: str | None = None, tokenizer: Tokenizer | None = None) -> Model:
    """The model in a checkpoint folder, its family read from config.json; ``origin`` names the folder in
    the JSON a view writes (for a folder the user gave); ``tokenizer``, if given, instead of the folder's."""
    raw, path = read_config(directory)
    family = raw.get("model_type") or _guess_family(raw, directory)
    if not isinstance(family, str) or family not in FAMILIES:
        shown = quoted(family, 40) if family is not None else "missing"
        raise AttnvizError(f"{path}: model_type {shown} is not supported; attnviz reads {', '.join(sorted(FAMILIES))}")
    assert isinstance(family, str)
    spec = FAMILIES[family]
    tokenizer = tokenizer or folder_tokenizer(directory, family)
    weights = FolderTensors(directory, renamer(spec.names, spec.prefixes), spec.transposed, spec.adjust)
    config = Settings(raw, path, label="config.json key ")
    model = spec.make(name, weights, config, tokenizer, family)
    refuse_unread(config, INERT_CONFIG_KEYS, family)
    refuse_unused(model, weights)
    model.origin = origin
    model.stops = frozenset(_end_ids(raw) | _end_ids(_generation_config(directory)))  # type: ignore[attr-defined]
    return model


def _generation_config(directory: Path) -> dict[str, object]:
    path = directory / "generation_config.json"
    raw = (
        parse_json(read_file(path, MAX_CONFIG_BYTES, "a generation_config.json"), str(path))
        if os.path.lexists(path)
        else {}
    )
    return raw if isinstance(raw, dict) else {}


def _end_ids(config: dict[str, object]) -> set[int]:
    """eos_token_id: one id or a list of them (Llama 3's end of text and end of turn)."""
    value = config.get("eos_token_id")
    values = value if isinstance(value, list) else [value]
    return {v for v in values if type(v) is int}
