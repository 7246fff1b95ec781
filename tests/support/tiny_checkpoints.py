"""Tiny Hugging Face checkpoint folders of every family attnviz reads, each a good file to damage: config.json
(with a test's changes), tensors of the shapes the config implies, and a tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tiny_bert import write_safetensors, write_tiny_bert

from attnviz.models.safetensors import read_safetensors

VOCAB = ["a", "b", "c", "t", " ", "at", "<|end|>"]


def decoder_tensors(family: str, config: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Hugging Face's tensors for a config of a decoder family, of the shapes it implies."""
    h, v, layers = config.get("hidden_size", config.get("n_embd")), len(VOCAB), config.get("num_hidden_layers", 2)

    def n(*shape: int) -> np.ndarray:
        return rng.normal(scale=0.3, size=shape).astype("<f4")

    if family == "gpt2":
        t = {"wte.weight": n(v, h), "wpe.weight": n(config["n_positions"], h)}
        t |= {"ln_f.weight": np.ones(h, "<f4"), "ln_f.bias": np.zeros(h, "<f4")}
        for i in range(config["n_layer"]):
            p = f"h.{i}."
            for norm in ("ln_1", "ln_2"):
                t |= {p + norm + ".weight": np.ones(h, "<f4"), p + norm + ".bias": np.zeros(h, "<f4")}
            for name, (rows, cols) in {"attn.c_attn": (h, 3 * h), "attn.c_proj": (h, h), "mlp.c_fc": (h, 4 * h),
                                       "mlp.c_proj": (4 * h, h)}.items():  # fmt: skip
                t |= {p + name + ".weight": n(rows, cols), p + name + ".bias": n(cols)}
        return t
    d = config.get("head_dim", h // config["num_attention_heads"])
    q, kv, ffn = config["num_attention_heads"] * d, config["num_key_value_heads"] * d, config["intermediate_size"]
    t = {"model.embed_tokens.weight": n(v, h), "model.norm.weight": np.ones(h, "<f4"), "lm_head.weight": n(v, h)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t |= {p + "input_layernorm.weight": np.ones(h, "<f4"), p + "post_attention_layernorm.weight": np.ones(h, "<f4")}
        t |= {p + "self_attn.q_proj.weight": n(q, h), p + "self_attn.k_proj.weight": n(kv, h),
              p + "self_attn.v_proj.weight": n(kv, h), p + "self_attn.o_proj.weight": n(h, q),
              p + "mlp.gate_proj.weight": n(ffn, h), p + "mlp.up_proj.weight": n(ffn, h),
              p + "mlp.down_proj.weight": n(h, ffn)}  # fmt: skip
        if family == "phi3":  # q, k and v in one matrix, gate and up in another
            qkv = [t.pop(p + f"self_attn.{x}_proj.weight") for x in "qkv"]
            t[p + "self_attn.qkv_proj.weight"] = np.concatenate(qkv)
            t[p + "mlp.gate_up_proj.weight"] = np.concatenate([t.pop(p + "mlp.gate_proj.weight"),
                                                               t.pop(p + "mlp.up_proj.weight")])  # fmt: skip
        if family in ("qwen3", "olmo2"):  # OLMo 2 normalises all of q and k, Qwen 3 each head's
            width = (q, kv) if family == "olmo2" else (d, d)
            t |= {p + "self_attn.q_norm.weight": n(width[0]), p + "self_attn.k_norm.weight": n(width[1])}
        if family == "olmo2":  # its norms after attention and the MLP, none before
            del t[p + "input_layernorm.weight"]
            t[p + "post_feedforward_layernorm.weight"] = n(h)
        if family == "gemma2":
            t |= {p + "pre_feedforward_layernorm.weight": n(h), p + "post_feedforward_layernorm.weight": n(h)}
        if family == "qwen2":
            t |= {
                p + "self_attn.q_proj.bias": n(q),
                p + "self_attn.k_proj.bias": n(kv),
                p + "self_attn.v_proj.bias": n(kv),
            }
        if family == "gemma3_text":
            t |= {p + "self_attn.q_norm.weight": n(d), p + "self_attn.k_norm.weight": n(d)}
            t |= {p + "pre_feedforward_layernorm.weight": n(h), p + "post_feedforward_layernorm.weight": n(h)}
    return t


BASES: dict[str, dict[str, object]] = {
    "bert": {"model_type": "bert"},
    "roberta": {"model_type": "roberta", "pad_token_id": 1},
    "distilbert": {"model_type": "distilbert", "n_layers": 2, "n_heads": 2, "dim": 8, "hidden_dim": 32,
                   "max_position_embeddings": 16, "activation": "gelu"},
    "gpt2": {"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 32},
    "llama": {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "hidden_size": 8, "intermediate_size": 16, "max_position_embeddings": 32, "rms_norm_eps": 1e-6},
}  # fmt: skip
BASES["xlm-roberta"] = BASES["roberta"] | {"model_type": "xlm-roberta"}
BASES["mistral"] = BASES["llama"] | {"model_type": "mistral", "sliding_window": 2}
BASES["qwen2"] = BASES["llama"] | {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 2,
                                   "max_window_layers": 1}  # fmt: skip
BASES["smollm3"] = BASES["llama"] | {"model_type": "smollm3", "no_rope_layers": [1, 0]}
BASES["gemma3_text"] = BASES["llama"] | {"model_type": "gemma3_text", "head_dim": 4, "sliding_window": 2,
                                         "query_pre_attn_scalar": 4}  # fmt: skip
BASES["gemma2"] = BASES["gemma3_text"] | {"model_type": "gemma2", "attn_logit_softcapping": 50.0,
                                         "final_logit_softcapping": 30.0}  # fmt: skip
BASES["qwen3"] = BASES["llama"] | {"model_type": "qwen3", "head_dim": 4}
BASES["olmo2"] = BASES["llama"] | {"model_type": "olmo2"}
BASES["phi3"] = BASES["llama"] | {"model_type": "phi3", "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.5],
                                  "long_factor": [2.0, 3.0]}, "original_max_position_embeddings": 16}  # fmt: skip


def _distil(tensors: dict[str, np.ndarray]) -> None:
    """tiny_bert's tensors under DistilBERT's names (no token types)."""
    names = {"attention.self.query": "attention.q_lin", "attention.self.key": "attention.k_lin",
             "attention.self.value": "attention.v_lin", "attention.output.dense": "attention.out_lin",
             "attention.output.LayerNorm": "sa_layer_norm", "intermediate.dense": "ffn.lin1",
             "output.dense": "ffn.lin2", "output.LayerNorm": "output_layer_norm"}  # fmt: skip
    for name in list(tensors):
        if name.startswith("encoder.layer."):
            layer, rest = name.removeprefix("encoder.layer.").split(".", 1)
            part, which = rest.rsplit(".", 1)
            tensors[f"transformer.layer.{layer}.{names[part]}.{which}"] = tensors.pop(name)
    tensors.pop("embeddings.token_type_embeddings.weight")


def write_checkpoint(folder: Path, family: str, changes: dict[str, object] | None = None) -> Path:
    """A tiny checkpoint folder of ``family``: config.json (``changes`` applied), its tensors, and a tokenizer
    (BERT's vocab.txt and tokenizer_config.json; a decoder's tokenizer.json and generation_config.json)."""
    if family in ("bert", "roberta", "xlm-roberta", "distilbert"):
        write_tiny_bert(folder, config_changes=BASES[family] | (changes or {}),
                        tensor_changes=_distil if family == "distilbert" else None)  # fmt: skip
        if family == "distilbert":  # DistilBERT's config.json has its own names, none of BERT's
            sizes = {"vocab_size": json.loads((folder / "config.json").read_text())["vocab_size"]}
            (folder / "config.json").write_text(json.dumps(BASES[family] | sizes | (changes or {})))
        (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
        if family != "bert":  # RoBERTa's and DistilBERT's tokenizers are tokenizer.json files
            vocab = {t: i for i, t in enumerate((folder / "vocab.txt").read_text().split())}
            spec = {"model": {"type": "WordPiece", "vocab": vocab, "unk_token": "[UNK]"},
                    "pre_tokenizer": {"type": "BertPreTokenizer"}}  # fmt: skip
            (folder / "tokenizer.json").write_text(json.dumps(spec))
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    config = BASES[family] | {"vocab_size": len(VOCAB), "eos_token_id": len(VOCAB) - 1}
    tensors = decoder_tensors(family, config, np.random.default_rng(0))
    (folder / "config.json").write_text(json.dumps(config | (changes or {})))
    write_safetensors(folder / "model.safetensors", tensors)
    spec = {"model": {"type": "BPE", "vocab": {s: i for i, s in enumerate(VOCAB)}, "merges": [["a", "t"]]},
            "added_tokens": [{"id": len(VOCAB) - 1, "content": "<|end|>", "special": True}]}  # fmt: skip
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": len(VOCAB) - 1}))
    return folder


def shard(folder: Path) -> Path:
    """The folder's model.safetensors as two shards and their index."""
    stored = read_safetensors(folder / "model.safetensors")
    names = sorted(stored)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for name, members in halves.items():
        write_safetensors(folder / name, {n: np.array(stored[n].array) for n in members})
    (folder / "model.safetensors").unlink()
    index = {"weight_map": {n: shard for shard, members in halves.items() for n in members}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder
