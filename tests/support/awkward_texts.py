"""Awkward texts for comparing tokenisers: accents, combining marks, emoji and ZWJ sequences, CJK, code,
digits, runs of spaces and newlines, special-token strings inside text, very long words; then random
mixtures of their pieces (seeded), 220 in all."""

from __future__ import annotations

import random

BASE = [
    "The quick brown fox jumps over the lazy dog.",
    "Café naïve résumé Ångström façade",
    "é combining é vs é",
    "emoji 😀👍🏽 family 👨\u200d👩\u200d👧\u200d👦 flag 🇫🇷 keycap 1️⃣",
    "中文字符测试，日本語のテキスト、한국어 텍스트",
    "def add(a, b):\n    return a + b  # sum",
    "x = [1, 2, 3]; y = {'k': 3.14159}",
    "1234567890 3.14 1,000,000 2024-11-30 ①②③ ٣٤٥",
    "a  b   c    d",
    "\n\n\nthree newlines\n",
    "\ttabs\tand\r\nCRLF",
    " leading space",
    "trailing space ",
    "   ",
    "",
    "[CLS] [SEP] [MASK] inside text",
    "<bos>hello<eos> <pad>",
    "<|im_start|>user\nhi<|im_end|>",
    "<start_of_turn>user\nhello<end_of_turn>",
    "supercalifragilisticexpialidocioussupercalifragilisticexpialidocioussupercalifragilisticexpialidocioussupercalifragilisticexpialidocious",
    "Ω≈ç√∫˜µ≤≥÷",
    "don't can't I'm you're we've they'll he'd",
    "DON'T SHOUT",
    "ΣΊΣΥΦΟΣ σίσυφος ΟΔΟΣ",
    "İstanbul ıi",
    "\u200b zero\u200bwidth \xa0nbsp \u2028line \u3000ideo",
    "\x00\x01\x1c\x1f ctrl \x7f\x85",
    "hello�replacement",
    "ﬁ ligature ｆｕｌｌｗｉｄｔｈ",
    "naïve—dash – en … ellipsis «quotes» „low“",
    "$x^2 + y_i$ \\frac{a}{b}",
    "https://example.com/a?b=c&d=e#f",
    "user@example.com",
    "🙂🙂🙂🙂🙂🙂🙂🙂🙂🙂",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "abababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababab!",
    "mixed中english混合text",
    "עברית ועוד",
    "مرحبا بالعالم",
    "हिन्दी भाषा",
    "ﾃｽﾄ",
    "x́́́́́",
    "\ue000 private use",
    "tab\x0bvertical\x0cform",
    "    indented code\n\tmore",
    "...!!!???",
    "####",
    "##ing ##",
    "C++ C# F# .NET",
    "3.0e-10 0x1F 0b1010",
    "<unused5> <mask> [multimodal]",
]


def awkward_texts(count: int = 220, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = list(BASE)
    characters = [c for t in BASE for c in t] + list(" \n\t")
    while len(texts) < count:
        if rng.random() < 0.4:
            texts.append("".join(rng.choice(characters) for _ in range(rng.randint(1, 30))))
        else:
            texts.append(" ".join(rng.choice(BASE)[: rng.randint(0, 40)] for _ in range(rng.randint(1, 4))))
    return texts
