"""attnviz batch: every figure of a plan, in parallel, redrawing only what changed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import UsageError, plural, printable, say
from . import options as opt
from .entry import app
from .output import write_json


@app.command()
@opt.with_options()
def batch(
    plan: Annotated[
        Path,
        typer.Argument(help="The plan: a TOML file of \\[defaults] and \\[\\[figure]] entries.", show_default=False),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Directory for the figures. Default: build/<plan name>.", show_default=False
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help="Figures drawn at once. Default: the cores.", show_default=False),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Redraw every figure, changed or not, over any file in its place.")
    ] = False,
    audit: Annotated[
        bool,
        typer.Option(
            "--audit",
            help="Measure every figure's layout (it redraws them all): each problem on stderr, exit 1 if any.",
        ),
    ] = False,
    check_only: Annotated[bool, typer.Option("--check", help="Validate the whole plan; draw nothing.")] = False,
    shard_spec: Annotated[
        str | None, typer.Option("--shard", help="Draw only slice K of N (K/N), e.g. 2/4.", show_default=False)
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a manifest of the figures to stdout.")] = False,
    allow_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--allow-dir",
            metavar="DIR",
            help="A folder outside the plan's own whose files the plan may read (repeatable).",
            show_default=False,
        ),
    ] = None,
    allow_models: Annotated[
        bool,
        typer.Option(
            "--allow-models",
            help="Let the plan name models of your stores (ollama:…, hf:…), not only the bundled ones.",
        ),
    ] = False,
) -> None:
    """Draw a deck of figures from a plan, in parallel, redrawing only what changed.

    Each \\[\\[figure]] names a command and its options, as on the command line; a list value
    draws one figure per element, and {option} in the name is filled in.

    A plan is data: its tokens are never read as options, it reads files only inside its own
    folder (and the folders of --allow-dir), models of your Ollama store or Hugging Face cache
    only with --allow-models, and it writes only its figures, into the output folder.

    [bold]Examples[/bold]

      attnviz batch samples/slides.toml -o build/figures

      attnviz batch samples/slides.toml --check

      attnviz batch plan.toml --shard 2/4 --json
    """
    from ..files import files_only
    from . import batch as plans

    with files_only():  # a plan may name no pipe: its token file a FIFO would hang the run
        entries, errors = plans.load_plan(plan, tuple(allow_dir or ()), stores=allow_models)
        directory = plans.output_directory(plan, output)
        entries = plans.shard(entries, shard_spec)
        valid = []
        for entry in entries:
            try:
                plans.validate(entry, directory)
                valid.append(entry)
            except UsageError as err:
                errors.append(f"{entry.where()}: {err}")
            except Exception as err:  # a bug: this figure's error, not the plan's
                errors.append(f"{entry.where()}: {plans.unexpected(err)}")
        name = printable(str(plan))
        for error in errors:
            say(f"attnviz: error: {name}: {error}")
        if check_only:
            if not quiet:
                say(f"{name}: {plural(len(valid), 'figure')} valid, {plural(len(errors), 'error')}")
            if errors:
                raise typer.Exit(2)
            return
        if audit:  # a figure is measured as it is drawn: every figure is drawn
            for entry in valid:
                entry.args.insert(entry.args.index("--"), "--audit")
        progress = not quiet
        jobs = jobs or plans.default_jobs()
        outcomes = plans.run_plan(valid, directory, jobs=jobs, force=force or audit, progress=progress)
        for failed in (o for o in outcomes if o.status == "failed"):
            say(f"attnviz: error: {name}: {failed.entry.where()}: {failed.message}")
        for problem in (p for o in outcomes for p in o.problems):
            say(f"attnviz: audit: {problem}")
        audited = sum(bool(o.problems) for o in outcomes)
        if as_json:
            write_json([plans.manifest_document(outcomes, directory)])
        if not quiet:
            counts = {s: sum(o.status == s for o in outcomes) for s in ("drawn", "skipped", "failed")}
            say(
                f"{printable(str(directory))}: {counts['drawn']} drawn, {counts['skipped']} up to date, "
                f"{counts['failed'] + len(errors)} failed" + (f", {audited} with layout problems" if audit else "")
            )
        if errors or any(o.status == "failed" for o in outcomes) or audited:
            raise typer.Exit(1)
