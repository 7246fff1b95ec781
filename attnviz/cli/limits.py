"""How many tokens of a text a command runs: --max-tokens for the commands that hand a text to a decoder's analyses
(ablate, saliency, patch, explain, generate), their refusals of a longer text, and how a view says it was cut."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import AttnvizError, UsageError

if TYPE_CHECKING:
    from ..models import Encoding
    from ..models.decoder import Decoder


def taken(model: Decoder, text: str, most: int | None, command: str) -> Encoding:
    """The text's tokens as ``command`` runs them (with --max-tokens, its first so many), or one line of why not
    naming the --max-tokens that would run: more tokens than the model takes, or than ``command`` takes (``most``;
    None: as many as the model)."""
    from ..models import TooLong

    try:
        encoding = model.encode(text)
    except TooLong as long:
        runs = long.longest if most is None else min(long.longest, most)
        raise AttnvizError(f"{long}; --max-tokens {runs} runs the first {runs}") from None
    count = len(encoding.ids)
    if most is not None and count > most:
        given = (
            f"the text is {count:,}" if model.max_tokens is None else f"--max-tokens {model.max_tokens} keeps {count:,}"
        )
        raise UsageError(f"{command} takes at most {most:,} tokens; {given}: --max-tokens {most} runs the first {most}")
    return encoding


def cut_note(encoding: Encoding) -> str:
    """What a heading says of a text cut by --max-tokens (as the attention views' titles say it), or nothing."""
    return f"the first {len(encoding.ids):,} of {encoding.total:,} tokens (--max-tokens)" if encoding.total else ""


def shown_name(model: Decoder, encoding: Encoding) -> str:
    """The model's name as a heading shows it: with the cut of its text by --max-tokens, when it was cut."""
    return " · ".join(part for part in (model.name, cut_note(encoding)) if part)


def cut_source(source: dict[str, Any], encoding: Encoding) -> dict[str, Any]:
    """A JSON document's source, with how many tokens --max-tokens kept of how many, as the attention views'."""
    return source | ({"max_tokens": {"kept": len(encoding.ids), "tokens": encoding.total}} if encoding.total else {})


def within_memory(model: Decoder, encoding: Encoding, command: str, kept_per_token: int = 0) -> None:
    """Refuse in one line, before the model runs, a text whose backward pass (ablate --estimate, saliency, patch
    --estimate) would need more than the memory budget: what it needs, and the --max-tokens that fits."""
    from ..analysis.gradients import most_tokens, needed_bytes, too_long
    from ..resources import memory_budget

    budget, n = memory_budget(), len(encoding.ids)
    if budget is None:
        return
    needed = needed_bytes(model, n, None, kept_per_token * n)
    if needed > budget:
        runs = most_tokens(model, budget, kept_per_token)
        hint = f": --max-tokens {runs} runs the first {runs}" if runs >= 2 else ""
        raise AttnvizError(f"{command}: {too_long(n, needed, budget)}{hint}")
