"""The notebook's functions check every argument as the command line checks its options: a wrong one raises
attnviz.UsageError in one line naming it — never an IndexError, a NumPy truth-value error or a page that breaks
in the browser — and any sequence bertviz's callers pass (a list, a tuple, a NumPy array) is taken alike."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnviz
from attnviz.errors import UsageError

N = 6
TOKENS = ["[CLS]", "the", "cat", "sat", "down", "[SEP]"]


def soft(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layers(count: int = 3, heads: int = 2, n: int = N, m: int | None = None, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(soft(rng.normal(size=(1, heads, n, m or n))) for _ in range(count))


def blob(page: Any) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="attnviz-data">(.*?)</script>', page.data, re.S)
    assert found is not None
    parsed: dict[str, Any] = json.loads(found.group(1))
    return parsed


def self_attention(**changed: Any) -> dict[str, Any]:
    return {"attention": layers(), "tokens": TOKENS, "html_action": "return", **changed}


def encoder_decoder(**changed: Any) -> dict[str, Any]:
    return {
        "encoder_attention": layers(2, 2, 5),
        "decoder_attention": layers(2, 2, 4, seed=1),
        "cross_attention": layers(2, 2, 4, 5, seed=2),
        "encoder_tokens": list("abcde"),
        "decoder_tokens": list("wxyz"),
        "html_action": "return",
        **changed,
    }


SEQUENCES = [list, tuple, np.array]


@pytest.mark.parametrize("function", ["head_view", "model_view"])
@pytest.mark.parametrize("sequence", SEQUENCES)
def test_tokens_and_indices_of_any_sequence_make_the_same_page(function: str, sequence: Any) -> None:
    """bertviz's callers pass lists, tuples and NumPy arrays (of str, of int): each gives the very page a list does."""
    view = getattr(attnviz, function)
    extra: dict[str, Any] = {"include_layers": [0, 2]}
    extra.update({"heads": [1]} if function == "head_view" else {"include_heads": [1, 0]})
    plain = view(**self_attention(**extra))
    given_as = view(**self_attention(tokens=sequence(TOKENS), **{k: sequence(v) for k, v in extra.items()}))
    assert given_as.data == plain.data
    pair = view(**encoder_decoder(encoder_tokens=sequence(list("abcde")), decoder_tokens=sequence(list("wxyz"))))
    assert pair.data == view(**encoder_decoder()).data
    assert view(**self_attention(tokens=np.array(TOKENS, dtype=object), sentence_b_start=np.int64(3))) is not None


BAD: dict[str, list[Any]] = {
    "tokens": ["the cat sat down now ok", [1, 2, 3, 4, 5, 6], np.array([TOKENS]), 7, TOKENS[:5], [*TOKENS, "x"]],
    "include_layers": [[], [0, 0], [-1], [3], ["0"], [1.0], [True], 1, "0", np.array([[0]]), [np.nan]],
    "sentence_b_start": ["1", 1.0, True, 0, N, -1, [2]],
    "prettify_tokens": ["yes", 1, None],
    "html_action": ["show", None, 1, ["return"]],
    "attention": [
        (np.zeros((1, 1, 0, 0)),),
        (np.zeros((1, 0, N, N)),),
        (np.ones((1, 1, N, N), dtype=complex) / N,),
        (np.ones((1, 1, N, N), dtype=bool),),
        (np.ones((1, 1, N, N)) / N * (1 + 0j),),
        (np.ones((2, 1, N, N)) / N,),
        (np.ones((1, 1, N, N + 1)) / (N + 1),),
        (np.ones((1, 1, N, N)) / N, np.ones((1, 2, N, N)) / N),
        "attention",
        np.ones((1, 1, N, N)) / N,
        (np.ones((1, 1, N, N)) / (2 * N),),
        (),
    ],
}
HEAD_VIEW_BAD: dict[str, list[Any]] = {
    "layer": ["1", 1.5, True, 3, -1],
    "heads": [[], [0, 0], [-1], [2], ["0"], 0, [0.5]],
}
MODEL_VIEW_BAD: dict[str, list[Any]] = {
    "include_heads": [[], [1, 1], [-1], [2], ["1"], 1, [1.0]],
    "display_mode": ["blue", None, 1],
}
PAIR_BAD: dict[str, list[Any]] = {
    "encoder_tokens": ["abcde", [1, 2, 3, 4, 5], list("abcd"), np.array([list("abcde")])],
    "decoder_tokens": ["wxyz", [None] * 4, list("wxyzq")],
    "cross_attention": [(np.ones((1, 2, 4, 5), dtype=complex) / 5,) * 2, (np.zeros((1, 2, 4, 0)),) * 2],
    "encoder_attention": [(np.full((1, 2, 5, 5), 0.1),) * 2],
}


def cases() -> list[tuple[str, str, Any, dict[str, Any]]]:
    found = []
    for function in ("head_view", "model_view"):
        own = HEAD_VIEW_BAD if function == "head_view" else MODEL_VIEW_BAD
        for name, values in {**BAD, **own}.items():
            found += [(function, name, value, self_attention(**{name: value})) for value in values]
        for name, values in PAIR_BAD.items():
            found += [(function, name, value, encoder_decoder(**{name: value})) for value in values]
        found += [(function, "include_layers", value, encoder_decoder(include_layers=value)) for value in ([], [5])]
    return found


CASES = cases()


@pytest.mark.parametrize(("function", "name", "value", "arguments"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])  # fmt: skip
def test_a_wrong_argument_raises_a_usage_error_naming_it(
    function: str, name: str, value: Any, arguments: dict[str, Any]
) -> None:
    with pytest.raises(UsageError) as caught:
        getattr(attnviz, function)(**arguments)
    message = str(caught.value)
    assert "\n" not in message and name in message, message


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_mix_of_valid_sequences_and_one_wrong_argument_is_said_in_one_line(data: st.DataObject) -> None:
    """A random argument made wrong among random valid ones: always a UsageError, never another exception."""
    function, name, _, arguments = data.draw(st.sampled_from(CASES))
    sequence = data.draw(st.sampled_from(SEQUENCES))
    for key in ("tokens", "encoder_tokens", "decoder_tokens"):
        if key != name and key in arguments:
            arguments = {**arguments, key: sequence(arguments[key])}
    with pytest.raises(UsageError):
        getattr(attnviz, function)(**arguments)


def test_the_issues_own_examples() -> None:
    with pytest.raises(UsageError, match="^include_layers is empty"):
        attnviz.head_view(**self_attention(include_layers=[]))
    with pytest.raises(UsageError, match="^attention\\[0\\] has shape \\(1, 1, 0, 0\\)"):
        attnviz.model_view(np.zeros((1, 1, 1, 0, 0)), [], html_action="return")
    with pytest.raises(UsageError, match="complex"):
        attnviz.head_view(**self_attention(attention=tuple(a.astype(complex) for a in layers())))
    with pytest.raises(UsageError, match="^sentence_b_start must be a whole number"):
        attnviz.head_view(**self_attention(sentence_b_start="1"))
    with pytest.raises(UsageError, match="^include_heads names head 1 more than once"):
        attnviz.model_view(**self_attention(include_heads=[1, 1]))
    with pytest.raises(UsageError, match="^include_heads -1 is out of range"):
        attnviz.model_view(**self_attention(include_heads=[-1]))
    page = attnviz.head_view(**self_attention(tokens=np.array(TOKENS)))
    assert blob(page)["parts"][0]["queries"] == TOKENS


@pytest.mark.parametrize(("part", "tokens"), [("encoder_attention", "encoder_tokens"),
                                               ("decoder_attention", "decoder_tokens")])  # fmt: skip
def test_a_part_without_its_tokens_names_them(part: str, tokens: str) -> None:
    arguments = encoder_decoder(**{tokens: None})
    arguments.pop("cross_attention")
    with pytest.raises(UsageError, match=f"^{part}: {tokens} are required"):
        attnviz.model_view(**arguments)


@pytest.mark.parametrize("path", [None, 3, "", b"page.html"])
def test_a_page_saves_to_a_path_only(path: Any) -> None:
    page = attnviz.head_view(**self_attention())
    with pytest.raises(UsageError, match="^path must be a file's name or path"):
        page.save(path)
