"""llama.cpp's pre-tokenisers, keyed by a GGUF's ``tokenizer.ggml.pre`` as ``src/llama-vocab.cpp`` keys them: a
table, not branches. Each name stands for a list of regexes (:data:`REGEXES`), llama.cpp's own, carried over as
they are, and for what else it sets (:class:`PreType`); :mod:`.llamacpp_split` runs them as llama.cpp runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3_CASELESS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)" + LLAMA3[len(_CONTRACTIONS) :]
QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
CASED_WORDS = (  # GPT-4o's words: capitals then small letters, with the lookaheads llama.cpp writes for \p{Lu}…
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
    + _CONTRACTIONS
    + r"?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
    + _CONTRACTIONS
    + "?"
)
CATEGORY_WORDS = (  # Tiny Aya's and Youtu's: the same with the categories spelt out
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    + _CONTRACTIONS
    + r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    + _CONTRACTIONS
    + "?"
)
DEEPSEEK3 = (
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
KANA_HAN = "[一-龥぀-ゟ゠-ヿ]+"
NORDIC = " ?[^(\\s|.,!?…。，、।۔،)]+"
DEEPSEEK_LETTERS = (  # keep the file's code points: Ω is U+2126, K U+212A, ώ U+1F7D (NFC would change them)
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷ"
    "ᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄ"
    "Ⰰ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"
)
DEEPSEEK_CJK = "[一-龥ࠀ-一가-퟿]+"
AFMOE_DIGITS = r"\p{AFMoE_digits}"
HAN = r"\p{Han}+"
THOUSANDS = r"(?=(\d{3})+(?!\d))"
DIGIT_GROUPS = r"\d{1,3}(?=(?:\d{3})*\b)"
LINES = r"[^\n]+|[\n]+"
SPACE_RUNS = "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4)) + r"|\s{1,2}(?!\S)|\s{1}"
JAIS2 = LLAMA3[: LLAMA3.index(r"|\s+(?!\S)")] + SPACE_RUNS

# llama.cpp's LLAMA_VOCAB_PRE_TYPE_* and the regexes llm_tokenizer_bpe gives each (llama-vocab.cpp)
REGEXES: dict[str, tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"),
    "llama3": (LLAMA3,),
    "jais2": (JAIS2,),
    "deepseek-llm": ("[\r\n]", DEEPSEEK_LETTERS, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", DEEPSEEK_CJK, r"\p{N}+"),
    "deepseek3": (r"\p{N}{1,3}", KANA_HAN, DEEPSEEK3),
    "spark2_5": (r"\p{N}{1,3}", KANA_HAN, r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?"
                 r"[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+", r"\p{N}"),
    "youtu": ("[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
              CATEGORY_WORDS + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "deepseek-coder": ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK, r"\p{N}"),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"),
    "starcoder": (r"\p{N}", GPT2),
    "gpt2": (GPT2,),
    "qwen2": (QWEN2,),
    "qwen35": (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+",),
    "poro": (NORDIC,),
    "viking": (NORDIC, r"\p{N}"),
    "tekken": (CASED_WORDS.replace(_CONTRACTIONS + "?", "")
               + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "chameleon": ("<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", r"\p{N}",
                  r"[\p{P}!-/:-@\[-`{-~]", GPT2),
    "gpt4o": (CASED_WORDS + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "granite-emb-multi": (CASED_WORDS.replace(r"(?=[\p{L}])", r"(?=[\p{L}\p{M}])")
                          + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "tiny-aya": (DIGIT_GROUPS,
                 CATEGORY_WORDS + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "kimi-k2": (HAN,),
    "superbpe": (r"\p{N}+", THOUSANDS),
    "bailingmoe": (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                   r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",),
    "seed-coder": (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+"
                   r"|\s+(?!\S)|\s+",),
    "ufakzeka": (QWEN2[len(_CONTRACTIONS) + 1 :],),
    "afmoe": (AFMOE_DIGITS, "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+", DEEPSEEK3),
    "laguna": (LINES, QWEN2),
    "exaone-moe": (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
                   r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",),
    "lines": (LINES,),
    "minicpm5": (r"\p{N}{1,3}", _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "whitespace": (r"\S+",),
}  # fmt: skip


@dataclass(frozen=True)
class PreType:
    """What a ``tokenizer.ggml.pre`` name sets in llama.cpp besides its regexes: whether a word that is a token
    is taken whole (``ignore_merges``), whether <bos> is added unless the file says, whether pieces are spelt
    in GPT-2's byte alphabet or left as text (with spaces as ``▁`` where ``escape_whitespaces``)."""

    regexes: str
    ignore_merges: bool = False
    add_bos: bool = False
    byte_encode: bool = True
    escape_whitespaces: bool = False
    whole_newlines: bool = False  # Gemma 4: a word of newlines that is a token is that token
    bos: bool = True  # chatglm has no <bos> by default


def _names(regexes: str, names: str, **flags: Any) -> dict[str, PreType]:
    return {name: PreType(regexes, **flags) for name in names.split()}


# tokenizer.ggml.pre as llama_vocab::impl::load reads it, each with what it sets
PRE_TYPES: dict[str, PreType] = {
    **_names("default", "default"),
    **_names("minicpm5", "minicpm5", ignore_merges=True),
    **_names("llama3", "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
             ignore_merges=True, add_bos=True),
    **_names("deepseek-llm", "deepseek-llm"),
    **_names("deepseek-coder", "deepseek-coder"),
    **_names("deepseek3", "deepseek-v3 hunyuan-dense hy_v4 joyai-llm"),
    **_names("spark2_5", "spark2_5"),
    **_names("youtu", "youtu", ignore_merges=True),
    **_names("falcon", "falcon"),
    **_names("gpt2", "mpt gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert "
                     "jina-v1-en jina-v2-code roberta-bpe olmo jais trillion granite-docling exaone4"),
    **_names("starcoder", "starcoder refact command-r smollm codeshell exaone minerva-7b mellum2"),
    **_names("jais2", "jais-2"),
    **_names("lines", "gemma4 granite-embed-multi-311m", byte_encode=False, escape_whitespaces=True,
             whole_newlines=True),
    **_names("lines", "sarvam-moe", byte_encode=False, escape_whitespaces=True),
    **_names("whitespace", "whitespace", byte_encode=False),
    **_names("qwen2", "qwen2 deepseek-r1-qwen kormo f2llmv2 stablelm2 megrez hunyuan solar-open grok-2"),
    **_names("qwen35", "qwen35"),
    **_names("llama3", "dbrx smaug-bpe"),
    **_names("poro", "poro-chat bloom gpt3-finnish"),
    **_names("llama3", "glm4 chatglm-bpe", bos=False),
    **_names("viking", "viking"),
    **_names("tekken", "tekken", ignore_merges=True, add_bos=True),
    **_names("chameleon", "chameleon", add_bos=True),
    **_names("gpt4o", "gpt-4o llama4 kanana2 talkie minimax-m2"),
    **_names("granite-emb-multi", "granite-embed-multi-97m", ignore_merges=True),
    **_names("tiny-aya", "tiny_aya cohere2moe"),
    **_names("superbpe", "superbpe"),
    **_names("bailingmoe", "bailingmoe bailingmoe2 llada-moe"),
    **_names("seed-coder", "seed-coder"),
    **_names("kimi-k2", "kimi-k2"),
    **_names("ufakzeka", "ufakzeka"),
    **_names("afmoe", "afmoe"),
    **_names("laguna", "laguna"),
    **_names("exaone-moe", "exaone-moe"),
}  # fmt: skip
