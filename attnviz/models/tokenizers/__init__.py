"""One tokeniser for every model: Hugging Face's pipeline, read from a ``tokenizer.json`` or built from a GGUF.

Text goes through the stages Hugging Face's ``tokenizers`` defines, in its order: added tokens (special
tokens written in the text) are cut out first; each remaining segment is normalised (Unicode forms,
lower-casing, BERT's cleaning, replacements), cut into pieces by the pre-tokeniser (whitespace and
punctuation, GPT-2's regex, a Split pattern, SentencePiece's ``▁``), and each piece becomes tokens by
the model (WordPiece, or BPE merges by rank, with byte fallback); the post-processor adds [CLS], <bos>
and the like from its template; the decoder says what text each token stands for, which is what the
views show. Every component a tokenizer.json may name that attnviz does not implement is refused by name.

A tokenizer.json is a small program a stranger wrote, so each step is bounded: a normaliser, pre-tokeniser or
decoder makes at most GROWTH times its input, patterns are sized before they are compiled and the patterns of
one text share one time budget, WordPiece and the added tokens take time linear in the text, and ids run from 0
without a gap.

One module per stage, as the ``tokenizers`` crate lays them out: :mod:`.added`, :mod:`.normalizers`,
:mod:`.pre_tokenizers`, the models (:mod:`.wordpiece`, :mod:`.bpe`, :mod:`.sentencepiece`), :mod:`.processors`
(templates) and :mod:`.decoders`, run in order by :mod:`.pipeline`; :mod:`.from_json` reads a tokenizer.json,
:mod:`.vocabulary` a GGUF's vocabulary (cut as llama.cpp cuts it: :mod:`.llamacpp_pre`, :mod:`.llamacpp_split`)
or a vocab.txt; :mod:`.offsets` says where each token lies in the text (:mod:`.laying`). What every stage
shares: :mod:`.fields` (a component's fields), :mod:`.budget` (its bounds) and :mod:`.characters`.
"""
