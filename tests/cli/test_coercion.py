"""Options' values coerced only where typer's coercion could change them (cli.entry.DeferredCoercion): what is passed
through is what typer's own coercion returns, for every option of every command."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer._coercion import build_runtime_param

from attnviz.cli import entry


def every_parameter() -> list[tuple[Any, Any]]:
    """(command, parameter) for every option and argument of every command, the root's and --help included."""
    group = typer.main.get_command(entry.register())
    found = []
    for command in [group, *getattr(group, "commands", {}).values()]:
        ctx = typer._click.Context(command)
        for param in [*command.params, command.get_help_option(ctx)]:
            if param is not None and hasattr(param, "type_descriptor"):
                found.append((command, param))
    return found


PARAMETERS = every_parameter()


def outcome(coerce: Any, value: Any, command: Any, param: Any) -> tuple[str, Any]:
    """What a coercion makes of ``value``: its result and its type, or the error it raises and its message."""
    try:
        result = coerce(value, param=param, ctx=typer._click.Context(command))
    except Exception as err:  # noqa: BLE001 - the error itself is the outcome compared
        return ("raised", (type(err).__name__, str(err)))
    return ("returned", (result, type(result)))


def same_as_typer(value: Any, command: Any, param: Any) -> None:
    typers = build_runtime_param(param.type_descriptor).coerce
    assert outcome(entry.DeferredCoercion().coerce, value, command, param) == outcome(typers, value, command, param), (
        command.name,
        param.name,
        value,
    )


def test_every_command_has_its_options() -> None:
    names = {command.name for command, _ in PARAMETERS}
    assert {"heatmap", "mask", "generate", "batch"} <= names and len(PARAMETERS) > 300


@pytest.mark.parametrize(("command", "param"), PARAMETERS, ids=[f"{c.name}-{p.name}" for c, p in PARAMETERS])
def test_unset_options_and_defaults_are_what_typer_makes_of_them(command: Any, param: Any) -> None:
    same_as_typer(None, command, param)
    same_as_typer(param.default, command, param)


TEXT_OPTIONS = [(c, p) for c, p in PARAMETERS if p.type_descriptor.annotation in (str, list[str], list[str] | None)]
OTHER_OPTIONS = [(c, p) for c, p in PARAMETERS if (c, p) not in TEXT_OPTIONS]
ANY_TEXT = st.text(st.characters(codec=None), max_size=12)  # lone surrogates too, as bytes not UTF-8 arrive


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(TEXT_OPTIONS), st.one_of(ANY_TEXT, st.lists(ANY_TEXT, max_size=4).map(tuple)))
def test_text_is_what_typer_makes_of_it(option: tuple[Any, Any], value: Any) -> None:
    same_as_typer(value, *option)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(OTHER_OPTIONS),
    st.one_of(ANY_TEXT, st.sampled_from(["0", "4", "-1", "1e3", "light", "max", "TOKEN", "a.png", "-", "true"])),
)
def test_other_values_are_coerced_by_typer(option: tuple[Any, Any], value: str) -> None:
    """Numbers, choices, paths and flags given as text: typer's coercion, its errors included."""
    same_as_typer(value, *option)
