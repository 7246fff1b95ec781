"""Nomic BERT (nomic-embed-text v1, v1.5): the BERT encoder with rotary positions instead of a table of them,
one fused q/k/v projection, a gated feed-forward (SwiGLU: act(gate) · up) and no biases but the LayerNorms'.

Its folders store nomic's own tensor names (``encoder.layers.<i>.attn.Wqkv``, ``mlp.fc11`` the up projection and
``fc12`` the gate, ``norm1``/``norm2``, ``emb_ln``), which transformers' save_pretrained writes too; they are read
under BERT's names (:data:`NAMES`), a GGUF's under llama.cpp's (:data:`GGUF_NAMES`). The rotation is
Hugging Face's rotate-half in both (llama.cpp's NEOX layout), over the whole head unless a GGUF says fewer
dimensions. nomic-ai's own config.json (the Hub's: n_embd, rotary_emb_base, …) is read as well as transformers'.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.core import Array
from ..errors import AttnvizError
from .bert import GGUF_NAMES as BERT_GGUF_NAMES
from .bert import MAX_LAYERS, Bert, BertConfig, Renamed, token_types
from .llama import gguf_rope, rope_of, rope_parameters
from .metadata import Settings
from .parts import ACTIVATIONS, NO_ROPE, Rope
from .tokenizers.pipeline import Tokenizer
from .weights import Tensors, renamer

GGUF_NAMES = {k: v for k, v in BERT_GGUF_NAMES.items() if "position" not in k and ".self." not in k} | {
    "encoder.layer.{i}.attention.self.qkv.{w}": "blk.{i}.attn_qkv.{w}",
    "encoder.layer.{i}.intermediate.gate.{w}": "blk.{i}.ffn_gate.{w}",
}
NAMES = {  # nomic's own names (save_pretrained writes them too) -> BERT's, {i} the layer
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
# transformers' NomicBertConfig's keys as nomic-ai's config.json names them
HUB_NAMES = {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "hidden_size": "n_embd",
             "intermediate_size": "n_inner", "layer_norm_eps": "layer_norm_epsilon"}  # fmt: skip
# and what it says of an architecture attnviz does not run (llama.cpp's converter asserts the same): the values
# attnviz runs, the first the default
HUB_CHOICES: dict[str, tuple[tuple[object, ...], str]] = {
    "causal": ((False,), "an encoder"), "prenorm": ((False,), "norms after each block"),
    "parallel_block": ((False,), "attention then feed-forward"), "use_rms_norm": ((False,), "LayerNorms"),
    "qkv_proj_bias": ((False,), "no biases"), "mlp_fc1_bias": ((False,), "no biases"),
    "mlp_fc2_bias": ((False,), "no biases"), "rotary_emb_fraction": ((1.0, 1), "every dimension rotated"),
    "rotary_emb_interleaved": ((False,), "rotate-half"), "rotary_emb_scale_base": ((None,), "no xPos scaling"),
    "rotary_scaling_factor": ((None,), "no scaling"), "scale_attn_weights": ((True,), "scores scaled by 1/√d"),
    "scale_attn_by_inverse_layer_idx": ((False,), "1/√d alone"), "moe_every_n_layers": ((0, None), "no experts"),
}  # fmt: skip
# nomic's kernel and training choices (fused kernels, float32 upcasting, the masked-LM loss, vocabulary padding),
# the norm a parallel block would tie, n_positions (the length its code sizes buffers for: rotary positions have
# no table), auto_map (where its code is): nothing attnviz computes
HUB_INERT = ("fused_bias_fc", "fused_dropout_add_ln", "use_flash_attn", "use_xentropy", "dense_seq_output",
             "pad_vocab_size_multiple", "reorder_and_upcast_attn", "parallel_block_tied_norm", "n_positions",
             "auto_map")  # fmt: skip


@dataclass(frozen=True)
class NomicConfig(BertConfig):
    head_size: int = 0
    rope: Rope = NO_ROPE


def from_config(name: str, weights: Tensors, config: Settings, tokenizer: Tokenizer, family: str) -> NomicBert:
    """transformers' NomicBertConfig (its defaults: SwiGLU, 2048 positions, rotary base 1000), or nomic-ai's
    config.json, whose keys are its own (activation_function "swiglu", n_embd, rotary_emb_base, …)."""
    hub = "n_embd" in config

    def key(name: str) -> str:
        return HUB_NAMES.get(name, name) if hub else name

    activation: object = "silu"
    if hub:
        config.choice("activation_function", "swiglu", ("swiglu",), " (the SwiGLU feed-forward attnviz runs)")
        for choice, (runs, why) in HUB_CHOICES.items():
            config.choice(choice, runs[0], runs, f" ({why}: what attnviz runs)")
        config.known(*HUB_INERT)
        base, scaling = float(config.number("rotary_emb_base", 10000.0, high=1e12)), None
        longest = config.count("max_trained_positions", 2048, high=2**24)
    else:
        activation = config.get("hidden_act", "silu")
        if not isinstance(activation, str) or activation not in ACTIVATIONS:
            raise config.fail("hidden_act", activation, f"one of {', '.join(ACTIVATIONS)}")
        base, scaling = rope_parameters(config, base=1000.0)
        longest = config.count("max_position_embeddings", 2048, high=2**24)
    heads = config.count(key("num_attention_heads"), high=1024)
    hidden = config.count(key("hidden_size"))
    if (hub or "head_dim" not in config) and hidden % heads:
        raise AttnvizError(f"{config.where}: hidden size {hidden} is not divisible by {heads} heads")
    head = hidden // heads if hub else config.count("head_dim", hidden // heads, high=4096)
    made = NomicConfig(
        config.count(key("num_hidden_layers"), high=MAX_LAYERS), heads, hidden,
        config.count(key("intermediate_size"), 3072, high=2**18), longest,
        config.count("type_vocab_size", 2, high=2**10),
        float(config.number(key("layer_norm_eps"), 1e-12, low=1e-30, high=0.5)), str(activation),
        head_size=head, rope=rope_of(config, head, base, scaling),
    )  # fmt: skip
    return NomicBert(name, weights, made, tokenizer, family)


def load_gguf(name: str, weights: Tensors, meta: Settings, tokenizer: Tokenizer, architecture: str) -> NomicBert:
    """A ``nomic-bert`` GGUF as llama.cpp runs it: SwiGLU (its graph's SiLU, whatever the folder's hidden_act was),
    the rotary base and scaling llama.cpp reads, q, k and v split from attn_qkv at embedding_length and twice it."""
    meta.choice("attention.causal", False, (False,), " (attnviz runs Nomic BERT as an encoder)")
    named = Renamed(weights, renamer({v: k for k, v in GGUF_NAMES.items()}, ()))
    heads, hidden = meta.count("attention.head_count", high=1024), meta.count("embedding_length")
    if hidden % heads:
        raise AttnvizError(f"{weights.path}: embedding length {hidden} is not divisible by {heads} heads")
    head = hidden // heads
    for key in ("attention.key_length", "attention.value_length"):
        meta.choice(key, head, (head,), " (llama.cpp splits attn_qkv at embedding_length: heads of its width)")
    dims = meta.count("rope.dimension_count", head, high=head)
    if dims % 2:
        raise meta.fail("rope.dimension_count", dims, "even")
    config = NomicConfig(
        meta.count("block_count", high=MAX_LAYERS), heads, hidden, meta.count("feed_forward_length", high=2**18),
        meta.count("context_length", 2048, high=2**24), token_types(meta, named),
        float(meta.number("attention.layer_norm_epsilon", 1e-12, low=1e-30, high=0.5)), "silu",
        head_size=head, rope=gguf_rope(meta, float(meta.number("rope.freq_base", 10000.0, high=1e12)), dims, named),
    )  # fmt: skip
    return NomicBert(name, named, config, tokenizer, architecture)


class NomicBert(Bert):
    """BERT's encoder; rotary q and k from one fused projection, a gated feed-forward, no biases."""

    config: NomicConfig
    learned_positions = False
    biased = False

    def projections(self) -> dict[str, tuple[int, ...]]:
        c = self.config
        width = c.heads * c.head_size
        return {
            "attention.self.qkv": (3 * width, c.hidden),
            "attention.output.dense": (c.hidden, width),
            "intermediate.dense": (c.intermediate, c.hidden),
            "intermediate.gate": (c.intermediate, c.hidden),
            "output.dense": (c.hidden, c.intermediate),
        }

    def attention_inputs(self, p: str, x: Array) -> tuple[Array, Array, Array]:
        c = self.config
        q, k, v = (
            self.linear(p + "attention.self.qkv", x).reshape(len(x), 3, c.heads, c.head_size).transpose(1, 2, 0, 3)
        )
        return c.rope.halves(q), c.rope.halves(k), v

    def feed_forward(self, p: str, x: Array) -> Array:
        gate = ACTIVATIONS[self.config.activation](self.linear(p + "intermediate.gate", x))
        return self.linear(p + "output.dense", gate * self.linear(p + "intermediate.dense", x))
