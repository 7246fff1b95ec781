"""Post-processors (Hugging Face's ``processors``): the template that puts [CLS] and [SEP], <bos> and the like
around one text or a pair of them, and the segment (type) id of each token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import AttnvizError, quoted
from .fields import TokenizerError, kind_of, list_of


@dataclass(frozen=True)
class Part:
    """One element of a template: a special token (its tokens) or a sequence (A or B), with its type id."""

    tokens: tuple[str, ...]
    sequence: str  # "A", "B", or "" for special tokens
    type_id: int


@dataclass(frozen=True)
class Template:
    single: tuple[Part, ...] = (Part((), "A", 0),)
    pair: tuple[Part, ...] = (Part((), "A", 0), Part((), "B", 1))

    def apply(self, first: list[str], second: list[str] | None) -> tuple[list[str], list[int]]:
        tokens: list[str] = []
        types: list[int] = []
        for part in self.single if second is None else self.pair:
            taken = list(part.tokens) if not part.sequence else first if part.sequence == "A" else second or []
            tokens += taken
            types += [part.type_id] * len(taken)
        return tokens, types

    def check_types(self, count: int, what: str) -> None:
        """Every type id of the template is below ``count``, the model's token types (0: it has none, and
        ignores them; one: it takes no pair, so only the single template counts)."""
        parts = [*self.single, *self.pair] if count > 1 else list(self.single)
        highest = max((p.type_id for p in parts), default=0)
        if count and highest >= count:
            raise AttnvizError(f"the tokenizer's template uses token type {highest}; {what} is {count}")


def template(spec: Any, vocab: dict[str, int]) -> Template:
    if spec is None:
        return Template()
    kind = kind_of(spec, "post_processor")
    if kind == "Sequence":
        templates = [template(s, vocab) for s in list_of(spec, "processors")]
        changing = [t for t in templates if t != Template()]
        if len(changing) > 1:
            raise TokenizerError("a post_processor Sequence with more than one template is not supported")
        return changing[0] if changing else Template()
    if kind == "ByteLevel":
        return Template()
    if kind in ("BertProcessing", "RobertaProcessing"):
        cls, sep = _special_pair(spec, "cls"), _special_pair(spec, "sep")
        if kind == "BertProcessing":
            pair = (Part((cls,), "", 0), Part((), "A", 0), Part((sep,), "", 0), Part((), "B", 1), Part((sep,), "", 1))
        else:
            pair = (
                Part((cls,), "", 0),
                Part((), "A", 0),
                Part((sep, sep), "", 0),
                Part((), "B", 0),
                Part((sep,), "", 0),
            )
        return Template((Part((cls,), "", 0), Part((), "A", 0), Part((sep,), "", 0)), pair)
    if kind == "TemplateProcessing":
        specials = spec.get("special_tokens", {})
        if not isinstance(specials, dict):
            raise TokenizerError("TemplateProcessing special_tokens is not a mapping")

        def parts(items: Any) -> tuple[Part, ...]:
            out = []
            for item in items if isinstance(items, list) else [None]:
                if isinstance(item, dict) and isinstance(item.get("SpecialToken"), dict):
                    name, type_id = item["SpecialToken"].get("id"), item["SpecialToken"].get("type_id", 0)
                    found = specials.get(name) if isinstance(name, str) else None
                    if not isinstance(found, dict) or not isinstance(found.get("tokens"), list):
                        raise TokenizerError(f"the template's special token {quoted(name, 40)} is not defined")
                    out.append(Part(tuple(map(str, found["tokens"])), "", _type_id(type_id)))
                elif isinstance(item, dict) and isinstance(item.get("Sequence"), dict):
                    which, type_id = item["Sequence"].get("id"), item["Sequence"].get("type_id", 0)
                    if which not in ("A", "B"):
                        raise TokenizerError(f"the template's sequence {quoted(which, 20)} is not A or B")
                    out.append(Part((), which, _type_id(type_id)))
                else:
                    raise TokenizerError(f"the template item {quoted(item, 60)} is not one attnviz knows")
            return tuple(out)

        return Template(parts(spec.get("single")), parts(spec.get("pair")))
    raise TokenizerError(f"post_processor {kind!r} is not supported")


def _type_id(value: Any) -> int:
    if type(value) is not int or not 0 <= value < 2**16:
        raise TokenizerError(f"the template's type_id {quoted(value, 20)} is not a small whole number")
    return value


def _special_pair(spec: dict[str, Any], key: str) -> str:
    value = spec.get(key)
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
        raise TokenizerError(f"post_processor {key} is not a [token, id] pair")
    return value[0]
