"""Hyperparameters as checked numbers, from a GGUF file's metadata or a checkpoint's config.json: a file's
word, not a promise."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import AttnvizError, printable, quoted

# The most attnviz takes from any model file, whatever its header says (the GGUF and safetensors readers,
# a checkpoint folder's JSON files): past these a file is refused before anything is allocated.
MAX_FILE_BYTES = 2**40  # 1 TiB: a weights file has no small cap, but it must be a regular file
MAX_TENSORS = 2**18  # 1,024 layers (the most attnviz runs) of 256 tensors each
MAX_ELEMENTS = 2**48  # a tensor's elements (its dimensions, a zero-length one aside): more than any file holds
MAX_CONFIG_BYTES = 4 * 2**20  # config.json and its neighbours: a few KiB in every real checkpoint
MAX_MANIFEST_BYTES = 2**20  # an Ollama manifest or a Hugging Face cache's ref: under a KiB each


class Settings:
    """``{prefix}{key}`` values of a mapping, each checked for type and range before use; errors name
    ``where`` and the key as the file spells it.

    Every key a loader asks about is remembered (:attr:`asked`): a key of the file no loader asked about
    and not known to leave the computation alone is refused by :func:`refuse_unread`, never passed over."""

    def __init__(
        self, values: Mapping[str, object], where: object, prefix: str = "", label: str = "", integers: bool = False
    ) -> None:
        self.values, self.where, self.prefix, self.label = values, where, prefix, label
        self.integers = integers  # a count must be stored as an integer (GGUF's types), not only be whole (JSON's 2.0)
        self.asked: set[str] = set()

    def get(self, key: str, default: object = None) -> object:
        self.asked.add(key)
        return self.values.get(self.prefix + key, default)

    def __contains__(self, key: str) -> bool:
        self.asked.add(key)
        return self.prefix + key in self.values

    def known(self, *keys: str) -> None:
        """Keys whose values change nothing this family computes (the caller says why): asked about, not read."""
        self.asked.update(keys)

    def unread(self) -> list[str]:
        """The file's keys (under the prefix, without it) that nothing asked about."""
        keys = (k[len(self.prefix) :] for k in self.values if k.startswith(self.prefix))
        return sorted(k for k in keys if k not in self.asked)

    def fail(self, key: str, value: object, wanted: str) -> AttnvizError:
        shown = quoted(value, 40)
        return AttnvizError(f"{self.where}: {self.label}{self.prefix}{key} = {shown} is not {wanted}")

    def choice(self, key: str, default: object, runs: tuple[object, ...], why: str = "") -> object:
        """The value, refused unless it is one of those attnviz ``runs`` (a setting that changes the computation
        in a way attnviz does not implement is never passed over)."""
        value = self.get(key, default)
        if type(value) not in {type(r) for r in runs} or value not in runs:
            wanted = " or ".join(printable(repr(r)) for r in runs)
            raise self.fail(key, value, f"{wanted}{why or ' (what attnviz runs)'}")
        return value

    def number(self, key: str, default: float | None = None, *, low: float = 1, high: float = 2**16) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise self.fail(key, value, f"a number from {bound(low)} to {bound(high)}")
        return value

    def count(self, key: str, default: int | None = None, high: int = 2**16, low: int = 1) -> int:
        value = self.number(key, default, low=low, high=high)
        if value != int(value) or (self.integers and type(value) is not int):
            raise self.fail(key, value, "a whole number")
        return int(value)


def gguf_settings(metadata: Mapping[str, object], path: object, architecture: str) -> Settings:
    return Settings(metadata, path, f"{architecture}.", "metadata ", integers=True)


# The keys of a GGUF family (after ``{architecture}.``) that llama.cpp reads as counts and lengths (its LLM_KV
# table): a file that stores one as anything but an integer type is refused, whether attnviz reads the key or not.
COUNT_KEYS = (
    "vocab_size", "context_length", "embedding_length", "embedding_length_per_layer_input", "feed_forward_length",
    "expert_feed_forward_length", "expert_shared_feed_forward_length", "block_count", "leading_dense_block_count",
    "expert_count", "expert_used_count", "expert_shared_count", "expert_group_count", "expert_group_used_count",
    "attention.head_count", "attention.head_count_kv", "attention.key_length", "attention.value_length",
    "attention.sliding_window", "attention.q_lora_rank", "attention.kv_lora_rank", "rope.dimension_count",
    "rope.scaling.original_context_length", "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size",
    "ssm.time_step_rank", "ssm.group_count",
)  # fmt: skip


# Keys that change nothing attnviz computes, whichever family: sizes the tensors' shapes already say (and
# are checked against), and what concerns training, generation defaults or other tasks. Every other key of a
# file is either asked about by its family's loader (run, or refused when its value is not one attnviz runs) or
# refuses the file: a setting attnviz does not know may change the attention, and a wrong map with exit 0 is
# the one outcome a tool that shows a model's attention must never give.
INERT_GGUF_KEYS = frozenset({
    "vocab_size", "feed_forward_length",  # the tensors' shapes (checked)
    "tensor_data_layout",  # how the converter laid out tensors: "Meta AI original pth" for old Llama files
    "pooling_type", "classifier.output_labels",  # what an embedding or classifier head does with the states
    "decoder_start_token_id",
})  # fmt: skip
INERT_CONFIG_KEYS = frozenset({
    # PretrainedConfig's own, transformers 4.x and 5.x
    "_name_or_path", "architectures", "model_type", "transformers_version", "dtype", "torch_dtype", "use_bfloat16",
    "id2label", "label2id", "problem_type", "finetuning_task", "task_specific_params", "tokenizer_class", "prefix",
    "output_attentions", "output_hidden_states", "return_dict", "torchscript", "tf_legacy_loss",
    "chunk_size_feed_forward", "is_encoder_decoder", "tie_encoder_decoder", "use_cache", "_attn_implementation",
    "_commit_hash", "cross_attention_hidden_size",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    # generation defaults older config.json files carry (generation_config.json's business)
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    # training only: dropout, initialisation, gradient checkpointing, tensor-parallel slicing of the same product
    "attention_dropout", "attention_probs_dropout_prob", "hidden_dropout_prob", "classifier_dropout", "dropout",
    "attn_pdrop", "embd_pdrop", "resid_pdrop", "qa_dropout", "seq_classif_dropout", "summary_first_dropout",
    "initializer_range", "initializer_factor", "gradient_checkpointing", "pretraining_tp",
    # GPT-2's sequence-summary head, for classification
    "summary_activation", "summary_proj_to_labels", "summary_type", "summary_use_proj",
    # sizes the tensors' shapes say, and are checked against; whether the output matrix is the embeddings'
    "vocab_size", "intermediate_size", "tie_word_embeddings",
})  # fmt: skip


def refuse_unread(settings: Settings, inert: frozenset[str], family: str) -> None:
    """The file refused, naming the first key its loader did not ask about and that is not known inert."""
    for key in settings.unread():
        if key not in inert:
            shown = quoted(settings.prefix + key, 80)
            raise AttnvizError(
                f"{settings.where}: {settings.label}{shown} is a setting attnviz does not run for {family}; "
                "it may change the attention, so the file is refused rather than shown without it"
            )


def bound(limit: float) -> str:
    """A limit as a message shows it: 16,777,216, not 1.67772e+07; 1e-06 as it is."""
    return f"{int(limit):,}" if float(limit).is_integer() and abs(limit) >= 1 else f"{limit:g}"
