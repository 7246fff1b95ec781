"""Token sequences from command-line arguments, files and standard input.

Text is split on whitespace (or, with --chars, into characters); a JSON array of strings is
taken token for token, so tokens may hold spaces or be empty. Nothing here touches numbers.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import AttnvizError, UsageError, printable
from ..files import check_tokens, decode, parse_json, read_file, read_stdin


class GivenTokens(list[str]):
    """Tokens given one by one (a JSON array), not split from text: attnviz does not second-guess them."""


def tokens_from_text(text: str, source: str, *, force_json: bool = False, chars: bool = False) -> list[str]:
    """Whitespace-split text, or a JSON array of strings when the text is one; no token longer than MAX_TOKEN
    (``chars``: checked once split into characters, by :func:`characters`)."""
    tokens = _split_tokens(text, source, force_json)
    if not chars:
        check_tokens(tokens, source)
    return tokens


def _split_tokens(text: str, source: str, force_json: bool) -> list[str]:
    stripped = text.lstrip("\ufeff").strip()
    if force_json or stripped.startswith("["):
        try:
            data = parse_json(stripped, source)
        except AttnvizError:
            if force_json:
                raise
            return stripped.split()
        if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
            raise AttnvizError(f'{source}: a JSON token file must be an array of strings, like ["the", "cat"]')
        return GivenTokens(data)
    return stripped.split()


def read_text(args: list[str] | None, file: Path | None = None, *, stdin: bool = False) -> str:
    """The text a model runs, exactly as given: arguments joined with single spaces, or a file's or stdin's
    characters as read (a leading byte-order mark aside), none stripped: a file's last newline is a token,
    and indentation is code. The one reading of every command that tokenises (heatmap, tokenize, generate, …).

    A text that is a JSON array of strings (a token file) is its strings joined with single spaces."""
    reads_stdin = stdin or args == ["-"] or (file is not None and str(file) == "-")
    given = [bool(args) and args != ["-"], file is not None and str(file) != "-", reads_stdin]
    if sum(given) > 1:
        raise UsageError("give the text one way: as arguments, with --file, or on stdin (--stdin or -)")
    if reads_stdin:
        text, source = read_stdin(), "stdin"
    elif file is not None:
        text, source = decode(read_file(file, pipes=True), printable(str(file))), printable(str(file))
    elif args is None:
        raise UsageError("no text: give it as arguments, with --file, or on stdin with --stdin")
    else:
        return " ".join(args)
    text = text.removeprefix("\ufeff")
    if text.strip().startswith("["):
        try:
            data = parse_json(text, source)
        except AttnvizError:
            return text
        if isinstance(data, list) and all(isinstance(t, str) for t in data):
            return " ".join(data)
        raise AttnvizError(f"{source}: a JSON input must be an array of strings")
    return text


def read_tokens(args: list[str], file: Path | None = None, *, chars: bool = False) -> list[str]:
    """The sequence the user gave: arguments (joined, split on whitespace), ``--file``, or ``-`` for stdin; no token
    longer than MAX_TOKEN (``chars``: a word is checked once split into characters)."""
    if args == ["-"] or (file is not None and str(file) == "-"):
        if args not in ([], ["-"]):
            raise UsageError("give tokens either as arguments or on stdin with -, not both")
        return tokens_from_text(read_stdin(), "stdin", chars=chars)
    if file is not None:
        if args:
            raise UsageError("give tokens either as arguments or with --file, not both")
        text = decode(read_file(file, pipes=True), str(file))
        return tokens_from_text(text, str(file), force_json=file.suffix.lower() == ".json", chars=chars)
    tokens = " ".join(args).split()
    if not chars:
        check_tokens(tokens, "the tokens given", UsageError)
    return tokens


def read_key_tokens(keys: str | None, keys_file: Path | None, *, chars: bool = False) -> list[str] | None:
    """The key sequence of cross-attention, from ``--keys TEXT`` or ``--keys-file PATH``; None for self-attention."""
    if keys is not None and keys_file is not None:
        raise UsageError("give key tokens either with --keys or with --keys-file, not both")
    if keys_file is not None:
        return read_tokens([], keys_file, chars=chars)
    if keys is not None:
        if not chars:
            check_tokens(keys.split(), "--keys", UsageError)
        return keys.split()
    return None


def graphemes(text: str) -> list[str]:
    """What a reader sees as one character: a base with its combining marks, variation selectors and
    skin tones, an emoji sequence joined by ZWJ, a flag (two regional indicators or a tag sequence).

    The parts of UAX #29 that tokens need; labels are cut between these, never inside one. Cut by slicing at
    their starts, in time linear in the text (a letter with a million marks is one, found in a pass).
    """
    import unicodedata

    clusters: list[str] = []
    start = 0
    for k in range(1, len(text)):
        ch = text[k]
        code = ord(ch)
        joins = (
            unicodedata.category(ch) in ("Mn", "Me", "Mc")
            or ch == "\u200d"
            or 0xFE00 <= code <= 0xFE0F
            or 0x1F3FB <= code <= 0x1F3FF
            or 0xE0020 <= code <= 0xE007F
            or text[k - 1] == "\u200d"
            or (_regional(code) and k - start == 1 and _regional(ord(text[start])))
        )
        if not joins:
            clusters.append(text[start:k])
            start = k
    if text:
        clusters.append(text[start:])
    return clusters


def _regional(code: int) -> bool:
    return 0x1F1E6 <= code <= 0x1F1FF


UNSPACED_SCRIPTS = ((0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x3040, 0x30FF), (0x3400, 0x9FFF))
"""Thai, Lao, Myanmar, Khmer, kana and CJK ideographs: scripts written without spaces between words."""


def characters(tokens: list[str]) -> list[str]:
    """--chars: every token split into its characters (graphemes), none longer than MAX_TOKEN (a letter with a
    thousand combining marks is one)."""
    split = [g for token in tokens for g in graphemes(token)]
    check_tokens(split, "--chars", UsageError)
    return split


def unspaced_token(tokens: list[str]) -> str | None:
    """The first token of four or more characters of a script written without spaces, if any:
    splitting at whitespace left a whole phrase as one token, and --chars would split it."""
    for token in tokens:
        if len(token) >= 4 and all(any(lo <= ord(ch) <= hi for lo, hi in UNSPACED_SCRIPTS) for ch in token):
            return token
    return None
