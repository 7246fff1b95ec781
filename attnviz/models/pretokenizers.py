"""llama.cpp's pre-tokenisers, keyed by a GGUF's ``tokenizer.ggml.pre`` as ``src/llama-vocab.cpp`` keys them.

Each name stands for a list of regexes that llama.cpp applies one after the other: every regex cuts every piece
the previous ones left into its matches and the text between them (``unicode_regex_split`` in
``src/unicode.cpp``). The regexes are llama.cpp's own, carried over as they are, and run as llama.cpp runs them:

- GPT-2's and Llama 3's patterns (and Kimi-K2's and AFMoE's) are hand-coded there; GPT-2's and Llama 3's are
  the same pattern as a regex when ``\\s`` is Unicode's White_Space (what llama.cpp's table and the regex
  module's ``\\s`` both are), so they run as regexes here; Kimi-K2's and AFMoE's are carried over as code.
- Any other regex runs through C++'s ``std::regex`` (ECMAScript): one with ``\\p{…}`` classes on a "collapsed"
  text, where every character above ASCII becomes one stand-in per category (letter, number, punctuation,
  mark, symbol, other) or a vertical tab for white space, and each ``\\p{…}`` becomes its stand-in plus the
  ASCII characters of that category; one without, on the text with white space above ASCII made a vertical
  tab. ``\\s``, ``\\d``, ``\\w`` and ``\\b`` are ASCII there, ``$`` is the end of the piece. So it runs here.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .tokenizer import byte_alphabet, in_blocks, matches

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


# ---------------------------------------------------------------------------------------------- running them

Cut = Callable[[str], list[str]]  # a piece -> the pieces a regex cuts it into (its matches and the rest)

WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    map(chr, range(0x2000, 0x200B))
)  # llama.cpp's unicode_set_whitespace: Unicode's White_Space
STAND_IN = {"N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5"}  # other categories: \xd0
CLASSES = {  # \p{…} as llama.cpp writes it into a collapsed regex: its stand-in and its ASCII characters
    "N": "\xd10-9",
    "L": "\xd2A-Za-z",
    "P": "\xd3!-#%-*,-/:-;?-@\\[-\\]_\\{\\}",
    "M": "\xd4",
    "S": "\xd5\\$\\+<->^`\\|",
}
PROPERTIES = {"N": "N", "L": "L", "P": "P", "M": "M", "S": "S", "Lu": "L", "Ll": "L", "Lt": "L", "Lm": "L", "Lo": "L"}


@lru_cache(maxsize=4096)
def _stand_in(ch: str) -> str:
    if ch in WHITE_SPACE:
        return "\x0b"
    return STAND_IN.get(unicodedata.category(ch)[0], "\xd0")


def collapsed(text: str) -> str:
    """The text as llama.cpp gives it to a regex with ``\\p{…}``: ASCII kept, every other character its
    category's stand-in (white space: a vertical tab)."""
    return text if text.isascii() else "".join(c if c < "\x80" else _stand_in(c) for c in text)


def widened(text: str) -> str:
    """The text as llama.cpp gives it to a regex without ``\\p{…}``: white space above ASCII a vertical tab."""
    return text if text.isascii() else "".join("\x0b" if c > "\x7f" and c in WHITE_SPACE else c for c in text)


def collapse_regex(regex: str) -> str:
    """llama.cpp's rewriting of a regex for the collapsed text: each ``\\p{…}`` it knows becomes its stand-in
    and ASCII characters, inside brackets unless it is inside a class already."""
    out, inside, i = [], False, 0
    while i < len(regex):
        ch = regex[i]
        if ch == "[" and (i == 0 or regex[i - 1] != "\\"):
            out.append("[")
            inside = True
        elif inside and ch == "]" and regex[i - 1] != "\\":
            out.append("]")
            inside = False
        elif regex.startswith("\\p{", i) and i + 3 < len(regex):
            close = regex.find("}", i + 3)
            name = regex[i + 3 : close] if 0 <= close <= i + 10 else None
            if name in PROPERTIES:
                body = CLASSES[PROPERTIES[name]]
                out.append(body if inside else f"[{body}]")
                i = close + 1
                continue
            out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _ecmascript(regex: str) -> str:
    """``$`` outside a class as ECMAScript reads it: the end of the input only."""
    out, inside, escaped = [], False, False
    for ch in regex:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "[":
            inside = True
        elif ch == "]":
            inside = False
        elif ch == "$" and not inside:
            out.append(r"\Z")
            continue
        out.append(ch)
    return "".join(out)


def _pieces(piece: str, found: list[tuple[int, int]]) -> list[str]:
    """Matches and the text between them, as llama.cpp keeps both (an empty match still cuts there)."""
    pieces, at = [], 0
    for start, end in found:
        if start > at:
            pieces.append(piece[at:start])
        if end > start:
            pieces.append(piece[start:end])
        at = end
    if at < len(piece):
        pieces.append(piece[at:])
    return pieces


@lru_cache(maxsize=128)
def cutter(regex: str) -> Cut:
    """How llama.cpp cuts a piece with ``regex``."""
    import regex as re  # type: ignore[import-untyped]

    if regex in (GPT2, LLAMA3, LLAMA3_CASELESS):  # their alternatives match every character: no text between
        return re.compile(GPT2 + r"|\s+" if regex == GPT2 else LLAMA3).findall  # type: ignore[no-any-return]
    if regex in (HAN, AFMOE_DIGITS):
        custom = _kimi_k2 if regex == HAN else _afmoe_digits
        return lambda piece: [piece[s:e] for s, e in custom(piece)]
    if regex == THOUSANDS:  # the same cuts in one pass (as a regex, quadratic in a run of digits)
        return _thousands
    if regex == DIGIT_GROUPS:  # the same, for tiny-aya's groups of three
        return lambda piece: _pieces(piece, _digit_groups(widened(piece)))
    classes = any(f"\\p{{{name}}}" in regex for name in PROPERTIES)
    if classes and not regex.isascii():
        raise ValueError("llama.cpp refuses a regex with both \\p{…} classes and characters above ASCII")
    ecma = re.compile(_ecmascript(collapse_regex(regex) if classes else regex), re.ASCII | re.V0)
    form = collapsed if classes else widened
    if regex == JAIS2:
        return lambda piece: _pieces(piece, _space_runs(ecma, form(piece)))
    # within the text's time budget: superbpe's lookahead is quadratic in a run of digits, in llama.cpp too
    return lambda piece: _pieces(piece, matches(ecma, form(piece)))


class Splitter:
    """``unicode_regex_split``: each regex cuts every piece the ones before it left, into its matches and the
    text between them. What a piece becomes depends on it alone, so the pieces of each stage are looked up
    when seen before (words repeat: a 200,000-character text was 2 s, cut piece by piece)."""

    def __init__(self, regexes: tuple[str, ...], spell: Callable[[str], str] = str) -> None:
        self.cuts = [cutter(regex) for regex in regexes]
        self.spell = spell
        self.stages = [lru_cache(maxsize=65536)(self._stage(k)) for k in range(len(self.cuts) + 1)]

    def _stage(self, k: int) -> Callable[[str], tuple[str, ...]]:
        if k == len(self.cuts):
            return lambda piece: (self.spell(piece),)

        def stage(piece: str) -> tuple[str, ...]:
            then = self.stages[k + 1]
            return tuple(p for part in self.cuts[k](piece) for p in then(part))

        return stage

    def __call__(self, text: str) -> list[str]:
        if not text:
            return []
        then = self.stages[1]
        return [p for part in self.cuts[0](text) for p in then(part)]


def split(text: str, regexes: tuple[str, ...]) -> list[str]:
    """``text`` cut by each regex in turn, as llama.cpp's ``unicode_regex_split`` cuts it (before the pieces
    are spelt in bytes)."""
    return Splitter(regexes)(text)


def llamacpp(pre: PreType) -> Callable[[str, bool], list[str]]:
    """The pre-tokeniser llama.cpp runs for ``pre``: spaces as ``▁`` where it escapes them, the text cut by
    its regexes, each piece spelt in GPT-2's byte alphabet where it encodes bytes."""
    alphabet = byte_alphabet()

    def spelled(piece: str) -> str:
        return "".join(alphabet[b] for b in piece.encode("utf-8", "surrogatepass"))

    splitter = Splitter(REGEXES[pre.regexes], spelled if pre.byte_encode else str)

    def cut(text: str, first: bool) -> list[str]:
        return splitter(text.replace(" ", "▁") if pre.escape_whitespaces else text)

    return cut


# ---------------------------------------------------------------------------------------------- hand-coded


def _flags(ch: str | None) -> str:
    """The first letter of a character's category (L, N, …), "" past the piece's end."""
    return "" if ch is None else unicodedata.category(ch)[0]


HAN_BLOCKS = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0x2CEB0, 0x2EBEF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))  # fmt: skip  # not BERT's


def is_han(ch: str | None) -> bool:
    """llama.cpp's unicode_cpt_is_han."""
    return ch is not None and in_blocks(ord(ch), HAN_BLOCKS)


def _kimi_k2(piece: str) -> list[tuple[int, int]]:
    """unicode_regex_split_custom_kimi_k2, step for step."""
    n = len(piece)

    def at(pos: int) -> str | None:
        return piece[pos] if pos < n else None

    def letter(pos: int) -> bool:
        return _flags(at(pos)) == "L" and not is_han(at(pos))

    def lower(pos: int) -> str | None:
        ch = at(pos)
        return None if ch is None else ch.lower()

    spans, prev, pos = [], 0, 0

    def add(end: int) -> int:
        nonlocal prev
        size = end - prev
        if size > 0:
            spans.append((prev, end))
        prev = end
        return size

    while pos < n:
        ch, flag = piece[pos], _flags(piece[pos])
        if is_han(ch):
            while is_han(at(pos)):
                pos += 1
            add(pos)
            continue
        leading = not (ch in "\r\n" or flag in ("L", "N"))
        if (flag == "L" and not is_han(ch)) or (leading and letter(pos + 1)):
            has_leading = False
            if leading:
                has_leading = True
                pos += 1
            has_letters = False
            while letter(pos):
                has_letters = True
                pos += 1
            if has_letters or (not has_leading and letter(pos)):
                if not has_letters:
                    pos += 1
                while letter(pos):
                    pos += 1
                if at(pos) == "'" and pos + 1 < n:
                    following = lower(pos + 1)
                    if following in ("s", "t", "m", "d"):
                        pos += 2
                    elif pos + 2 < n and (following, lower(pos + 2)) in (("r", "e"), ("v", "e"), ("l", "l")):
                        pos += 3
                add(pos)
                continue
            if has_leading:
                pos -= 1
        if flag == "N":
            start = pos
            while _flags(at(pos)) == "N":
                pos += 1
                if pos - start >= 3:
                    add(pos)
                    start = pos
            add(pos)
            continue
        following_flag = _flags(at(pos + 1)) if ch == " " else flag
        following_char = at(pos + 1) if ch == " " else ch
        if following_flag and following_flag not in ("L", "N") and following_char not in WHITE_SPACE:
            pos += ch == " "
            while True:
                c = at(pos)
                if c is None or c in WHITE_SPACE or _flags(c) in ("L", "N"):
                    break
                pos += 1
            while at(pos) in ("\r", "\n"):
                pos += 1
            add(pos)
            continue
        spaces, last_newline = 0, 0
        while at(pos + spaces) is not None and at(pos + spaces) in WHITE_SPACE:
            if at(pos + spaces) in ("\r", "\n"):
                last_newline = pos + spaces + 1
            spaces += 1
        if last_newline > 0:
            pos = last_newline
            add(pos)
            continue
        if spaces > 1 and at(pos + spaces) is not None:
            pos += spaces - 1
            add(pos)
            continue
        if spaces > 0:
            pos += spaces
            add(pos)
            continue
        pos += 1
        add(pos)
    return spans


def _thousands(piece: str) -> list[str]:
    """Where ``(?=(\\d{3})+(?!\\d))`` matches (empty matches: cuts): before every third ASCII digit counted
    from the end of a run of them."""
    import regex as re

    edges = [0]
    for run in re.finditer(r"[0-9]+", piece):
        start, end = run.span()
        edges += [cut for cut in range(end - (end - start) // 3 * 3, end, 3) if cut > 0]
    edges.append(len(piece))
    return [piece[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]


def _digit_groups(piece: str) -> list[tuple[int, int]]:
    """Where ``\\d{1,3}(?=(?:\\d{3})*\\b)`` matches, in one pass: a run of ASCII digits that ends a word (what
    follows is not ``[A-Za-z0-9_]``) in threes from its end, the first group taking what is left over; a run
    that a letter or ``_`` follows, nowhere. The regex looks ahead to the run's end from every group:
    quadratic in a run of digits, 3 s for 20,000 of them."""
    import regex as re

    spans: list[tuple[int, int]] = []
    for run in re.finditer(r"[0-9]+", piece):
        start, end = run.span()
        if end < len(piece) and (piece[end].isascii() and (piece[end].isalnum() or piece[end] == "_")):
            continue
        first = start + (end - start - 1) % 3 + 1
        spans += [(start, first), *((at, at + 3) for at in range(first, end, 3))]
    return spans


LONG_SPACE = 1024  # white space without a line break past which jais-2's runs of 512 are cut without the regex


def _space_runs(ecma: Any, text: str) -> list[tuple[int, int]]:
    """Where jais-2's regex matches in ``text``, linear in a long run of white space. From a place in a run of
    white space with no line break from there to its end and more than 513 characters left, every alternative before
    ``\\s{512}(?!\\S)`` fails (``\\s*[\\r\\n]+`` only after scanning to the run's end, which made a run of
    n spaces cost n²/1,024: 30 s for a million) and that one matches: the next 512 characters. The scan arrives
    at such a run's start (no match reaches into it from before), so its pieces of 512 are cut here and the
    regex runs on the rest, as it would."""
    import regex as re

    spans: list[tuple[int, int]] = []
    at = 0
    for run in re.finditer(rf"(?<![^\S\r\n])[^\S\r\n]{{{LONG_SPACE},}}", text, re.ASCII | re.V0):
        start, end = run.span()
        if end < len(text) and text[end] in "\r\n":
            continue  # a line break ends it: \s*[\r\n]+ takes the run in one match
        spans += matches(ecma, text, at, start)
        at = start
        while end - at > 513:
            spans.append((at, at + 512))
            at += 512
    return spans + matches(ecma, text, at)


def _afmoe_digits(piece: str) -> list[tuple[int, int]]:
    """unicode_regex_split_custom_afmoe: a run of numbers in threes from the right, the first group taking
    the text since the last cut with it; what follows the last run is one piece."""
    spans, prev, pos, n = [], 0, 0, len(piece)

    def add(end: int) -> None:
        nonlocal prev
        if end > prev:
            spans.append((prev, end))
        prev = end

    while pos < n:
        if _flags(piece[pos]) != "N":
            pos += 1
            continue
        start = pos
        while pos < n and _flags(piece[pos]) == "N":
            pos += 1
        current = start + (pos - start) % 3
        if current > start:
            add(current)
        while current < pos:
            current += 3
            add(current)
    add(n)
    return spans
