"""The command-line options, declared once and shared by every command that takes them.

Single options are ``Annotated`` aliases; the options of the attention layer and of figures
come as groups (:data:`LAYER`, :data:`FIGURE`) that :func:`with_options` puts into a command's
signature, so a new command takes them all with one parameter each.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, TypeVar

import typer

from ..engine.view import ColourScale, SinkMode
from ..errors import UsageError
from ..render.figure import FigureStyle, Format, Preset, Theme, parse_size
from ..sources.config import Embed, LayerConfig, Positions

if TYPE_CHECKING:
    from ..engine.attention import Attention
    from ..engine.stack import AttentionStack, Layers, Want
    from ..sources import Shape, Source
    from ..sources.layer import Layer

R = TypeVar("R")

P_LAYER = "Attention layer"
P_OUT = "Output"
P_FIG = "Figures (with -o)"
P_SOURCE = "Real attention"

PAGE_COMMANDS = (
    "heatmap",
    "lines",
    "explain",
    "heads",
    "ablate",
    "patch",
    "lens",
    "dla",
    "flow",
    "generate",
)  # the views that write a page
PAGE_VIEWS = (
    "heatmap (also --all-layers: the model view), lines, explain, heads, ablate, patch, lens, dla, flow and generate"
)

Tokens = Annotated[
    list[str] | None,
    typer.Argument(
        help="The text: with a model, as the model tokenises it (the arguments joined by spaces); without, words "
        "split on whitespace; - reads stdin.",
        show_default=False,
    ),
]
File = Annotated[
    Path | None,
    typer.Option(
        "--file",
        "-f",
        help="Read tokens from a text file or a JSON array of strings (- for stdin).",
        show_default=False,
        rich_help_panel=P_LAYER,
    ),
]
TextFile = Annotated[
    Path | None,
    typer.Option(
        "--file",
        "-f",
        help="Read the text from a file, exactly as it is (its last newline too).",
        show_default=False,
    ),
]
Stdin = Annotated[
    bool, typer.Option("--stdin", help="Read the text from stdin, exactly as it is (its last newline too).")
]
Keys = Annotated[
    str | None,
    typer.Option(
        "--keys",
        help="Cross-attention: keys and values from this sequence, queries from the tokens.",
        show_default=False,
        rich_help_panel=P_LAYER,
    ),
]
KeysFile = Annotated[
    Path | None,
    typer.Option(
        "--keys-file",
        help="Cross-attention keys from a text file or a JSON array of strings (- for stdin).",
        show_default=False,
        rich_help_panel=P_LAYER,
    ),
]
ModelName = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="A pretrained model instead of the random layer: minilm (encoder, 6 layers × 12 heads), "
        "smollm2 (causal decoder, 30 layers × 9 heads) or gemma3 (Gemma 3 270M, 18 layers × 4 heads, "
        "sliding windows); or one already on this machine: ollama:NAME[:TAG] (Ollama's store), hf:ORG/NAME "
        "(the Hugging Face cache). attnviz models lists them.",
        show_default=False,
        rich_help_panel=P_SOURCE,
    ),
]
ModelDir = Annotated[
    Path | None,
    typer.Option(
        "--model-dir",
        help="A Hugging Face checkpoint folder (config.json, tokenizer.json, safetensors): BERT, RoBERTa, "
        "DistilBERT, Nomic BERT, GPT-2, Llama, Mistral, Qwen2, Qwen3, SmolLM3, OLMo 2, Phi-3, Gemma 2 or Gemma 3.",
        show_default=False,
        rich_help_panel=P_SOURCE,
    ),
]
ModelFile = Annotated[
    Path | None,
    typer.Option(
        "--model-file",
        help="A local GGUF file: Llama, Mistral, Qwen2, Qwen3, SmolLM3, OLMo 2, Phi-3, Gemma 2, Gemma 3, GPT-2, "
        "BERT or Nomic BERT (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K weights); attnviz "
        "tokenize reads a vocabulary-only one.",
        show_default=False,
        rich_help_panel=P_SOURCE,
    ),
]
Pair = Annotated[
    str | None,
    typer.Option(
        "--pair",
        help="A second sentence for the model ([CLS] A [SEP] B [SEP]).",
        show_default=False,
        rich_help_panel=P_SOURCE,
    ),
]
MaxTokens = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        min=1,
        max=2**24,
        help="Run only the text's first N tokens (the model's own tokens, its template's kept), said in the "
        "title: for a document longer than the model takes.",
        show_default=False,
        rich_help_panel=P_SOURCE,
    ),
]
LayerIndex = Annotated[
    int | None,
    typer.Option(
        "--layer",
        "-L",
        min=0,
        help="The model's layer to show. Default: the last.",
        show_default=False,
        rich_help_panel=P_SOURCE,
    ),
]
FromFile = Annotated[
    Path | None,
    typer.Option(
        "--from",
        help="Attention saved by another tool: .npy, .npz or attnviz JSON.",
        show_default=False,
        rich_help_panel=P_SOURCE,
    ),
]
TokensFile = Annotated[
    Path | None,
    typer.Option(
        "--tokens-file",
        help="Tokens for --from, when the file has none (text or JSON array).",
        show_default=False,
        rich_help_panel=P_SOURCE,
    ),
]
Heads = Annotated[int, typer.Option("--heads", "-H", min=1, help="Number of heads h.", rich_help_panel=P_LAYER)]
DModel = Annotated[
    int, typer.Option("--d-model", min=1, help="Model width; d_k = d_model / heads.", rich_help_panel=P_LAYER)
]
Seed = Annotated[int, typer.Option("--seed", min=0, help="Seed of every random draw.", rich_help_panel=P_LAYER)]
EmbedOption = Annotated[
    Embed,
    typer.Option(
        "--embed",
        metavar="<mode>",
        help="How input vectors X are made: token, position or textbook (see README).",
        rich_help_panel=P_LAYER,
    ),
]
PositionsOption = Annotated[
    Positions | None,
    typer.Option(
        "--positions",
        help="Add sinusoidal positional encodings. Default: sinusoidal with --embed token, none otherwise.",
        show_default=False,
        rich_help_panel=P_LAYER,
    ),
]
Scale = Annotated[
    str, typer.Option("--scale", help="Score scale: sqrt (1/√d_k), none (1), or a number.", rich_help_panel=P_LAYER)
]
Causal = Annotated[
    bool,
    typer.Option(
        "--causal/--no-causal", help="Mask the future: position t sees only positions ≤ t.", rich_help_panel=P_LAYER
    ),
]
Chars = Annotated[
    bool,
    typer.Option(
        "--chars",
        help="Split the text into characters, not at spaces: for Chinese, Japanese, Thai and other scripts "
        "written without spaces.",
        rich_help_panel=P_LAYER,
    ),
]
PadTo = Annotated[
    int | None,
    typer.Option(
        "--pad-to",
        min=1,
        help="Append [PAD] tokens up to this length; they get zero weight.",
        show_default=False,
        rich_help_panel=P_LAYER,
    ),
]
Head = Annotated[
    int | None,
    typer.Option("--head", min=0, help="Show only this head.", show_default=False, rich_help_panel=P_OUT),
]
Mean = Annotated[bool, typer.Option("--mean", help="Show the mean over heads.", rich_help_panel=P_OUT)]
DocumentFrom = Annotated[
    Path | None,
    typer.Option("--from", help="Show a document this command wrote with --json, without running the model.",
                 show_default=False, rich_help_panel=P_SOURCE),
]  # fmt: skip
Json = Annotated[bool, typer.Option("--json", help="Write one JSON document to stdout.", rich_help_panel=P_OUT)]
Jsonl = Annotated[bool, typer.Option("--jsonl", help="Write one compact JSON object per head.", rich_help_panel=P_OUT)]
Scores = Annotated[
    bool,
    typer.Option("--scores", help="Add pre-softmax scores to the JSON (masked: null).", rich_help_panel=P_OUT),
]
ColourScaleOption = Annotated[
    ColourScale,
    typer.Option(
        "--color-scale",
        help="Colours of the weights: linear, log (from a tenth of uniform to 1) or power (square roots). "
        "Default (auto): log for pooled maps, maps of more than 64 keys and maps with attention sinks, "
        "else linear.",
        rich_help_panel=P_OUT,
    ),
]
SinksOption = Annotated[
    SinkMode,
    typer.Option(
        "--sinks",
        help="Keys that take a quarter or more of all the weight (the first token, punctuation): show them as "
        "they are, mark them (outlined in figures), or hide them and renormalise the rows without them.",
        rich_help_panel=P_OUT,
    ),
]
NoColor = Annotated[
    bool,
    typer.Option("--no-color", help="Plain text, no colour or styles (also NO_COLOR).", rich_help_panel=P_OUT),
]

Output = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help=f"Write a figure to this file (.png, .svg, .pdf; also an interactive .html page: {PAGE_VIEWS}), or - "
        "for stdout.",
        show_default=False,
        rich_help_panel=P_FIG,
    ),
]
OutputFormat = Literal[Format, "html"]  # html: a page, for the views that have one (see cli.output.PAGE_VIEWS)
FormatOption = Annotated[
    OutputFormat | None,
    typer.Option(
        "--format",
        help="Image format, or html for a page. Default: from the file's extension (png for -).",
        show_default=False,
        rich_help_panel=P_FIG,
    ),
]
ThemeOption = Annotated[Theme, typer.Option("--theme", help="Light or dark background.", rich_help_panel=P_FIG)]
Cmap = Annotated[
    str,
    typer.Option(
        "--cmap",
        help="Colour map of the weights: viridis, cividis, Greys (print), or any matplotlib name.",
        rich_help_panel=P_FIG,
    ),
]
PresetOption = Annotated[
    Preset,
    typer.Option(
        "--preset", help="screen; slide (16:9, large fonts); paper (column width, small fonts).", rich_help_panel=P_FIG
    ),
]
Size = Annotated[
    str | None,
    typer.Option(
        "--size", help="Figure size WIDTHxHEIGHT in inches, e.g. 8x4.5.", show_default=False, rich_help_panel=P_FIG
    ),
]
Dpi = Annotated[
    int | None,
    typer.Option(
        "--dpi",
        help="Resolution of PNG files. Default: 150 (300 with --preset paper).",
        show_default=False,
        rich_help_panel=P_FIG,
    ),
]
Annotate = Annotated[
    bool | None,
    typer.Option(
        "--annotate/--no-annotate",
        help="Write values in the cells. Default: when they fit.",
        show_default=False,
        rich_help_panel=P_FIG,
    ),
]

AuditOption = Annotated[
    bool,
    typer.Option(
        "--audit",
        help="Measure the figure's layout (text sizes, overlaps, cells, colour bar, fill): each problem on stderr, "
        "exit 1 if any; the file is written all the same.",
        rich_help_panel=P_FIG,
    ),
]

QUIET_HELP = "No progress bar or time estimate on stderr (shown only when stderr is a terminal)."
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help=QUIET_HELP, rich_help_panel=P_OUT)]


# Option groups: a command names a group as one parameter; the group's options take its place
# on the command line and arrive built (a LayerRequest, a FigureRequest).


@dataclass(frozen=True)
class LayerRequest:
    """Where the attention comes from: the random layer (tokens, keys, config), a model, or a file."""

    tokens: list[str]
    keys: list[str] | None
    config: LayerConfig
    model: str | None = None
    model_dir: Path | None = None
    model_file: Path | None = None
    text: str = ""
    pair: str | None = None
    layer: int | None = None
    from_file: Path | None = None
    repeat: str | None = None
    max_tokens: int | None = None

    @property
    def external(self) -> bool:
        """True for a pretrained model or a file, whose attention has many layers."""
        return any(x is not None for x in (self.model, self.model_dir, self.model_file, self.from_file))

    @cached_property
    def source(self) -> Source:
        """The source opened: the model loaded and its text tokenised, the file read, or the random layer's tokens;
        kept from the shape a view sizes itself to (:meth:`shape`) until the request it then makes."""
        if self.from_file is not None:
            from ..sources.arrays import FileSource

            return FileSource.open(self.from_file, self.tokens or None)
        if self.external:
            from ..sources.model import open_model

            return open_model(
                self.model, self.model_dir, self.text, self.pair, self.repeat, self.model_file, self.max_tokens
            )
        from ..sources.layer import RandomSource

        return RandomSource(self.tokens, self.config, self.keys)

    def one_layer(self, want: Want) -> Want:
        """``want`` of the one layer a view of one layer shows: ``--layer``, by default the last."""
        return replace(want, layers=(-1 if self.layer is None else self.layer,))

    def shape(self, want: Want) -> Shape:
        """What ``want`` will make of the source (tokens, maps, layers, title), for a view to size it to."""
        from ..sources import shape_of

        return shape_of(self.source, want)

    def stack(self, want: Want | None = None, consume: Layers | None = None) -> AttentionStack:
        """What ``want`` asks for of every layer's attention, from the model or the file."""
        from ..engine.stack import Want

        return self._asked().stack(want or Want(), consume)

    def _asked(self) -> Source:
        """The opened source, let go of as it is asked: what it holds (a model's weights) is freed before the view
        draws, and a command that asks again opens it again."""
        source = self.source
        del self.__dict__["source"]  # cached_property's own slot
        return source

    def attention(self, want: Want | None = None) -> Attention:
        """One layer's attention (a model's ``--layer``, by default its last) as ``want`` asks for it."""
        from ..engine.stack import Want

        return self._asked().attention(want or Want(), self.layer)

    def prepare(self) -> tuple[Layer, Attention]:
        from ..sources.layer import prepare

        return prepare(self.tokens, self.config, self.keys)


def layer_options(
    tokens: Tokens = None,
    file: File = None,
    keys: Keys = None,
    keys_file: KeysFile = None,
    heads: Heads = 4,
    d_model: DModel = 64,
    seed: Seed = 0,
    embed: EmbedOption = "token",
    positions: PositionsOption = None,
    scale: Scale = "sqrt",
    causal: Causal = False,
    pad_to: PadTo = None,
    chars: Chars = False,
    model: ModelName = None,
    model_dir: ModelDir = None,
    model_file: ModelFile = None,
    pair: Pair = None,
    max_tokens: MaxTokens = None,
    layer: LayerIndex = None,
    from_file: FromFile = None,
    tokens_file: TokensFile = None,
) -> LayerRequest:
    """Validate the options first, then read the input (stdin only when asked)."""
    external = any(x is not None for x in (model, model_dir, model_file, from_file))
    random_options = (heads, d_model, seed, embed, positions, scale, pad_to, keys, keys_file)
    if external and random_options != (4, 64, 0, "token", None, "sqrt", None, None, None):
        raise UsageError(
            "the random layer's options (--heads, --d-model, --seed, --embed, --positions, --scale, "
            "--pad-to, --keys) do not apply to --model or --from"
        )
    config = LayerConfig(
        d_model=d_model,
        heads=heads,
        seed=seed,
        embed=embed,
        positions=positions,
        scale=scale,
        causal=causal,
        pad_to=pad_to,
    )
    from ..sources.text import read_key_tokens, read_text, read_tokens

    if not external:
        if max_tokens is not None:
            raise UsageError("--max-tokens goes with --model: a model tokenises its text itself")
        for name, value in (("--pair", pair), ("--layer", layer), ("--tokens-file", tokens_file)):
            if value is not None:
                raise UsageError(f"{name} goes with --model or --from")
        if file is not None and str(file) == "-" and keys_file is not None and str(keys_file) == "-":
            raise UsageError("only one of --file and --keys-file can read stdin")
        sequences = read_tokens(tokens or [], file, chars=chars), read_key_tokens(keys, keys_file, chars=chars)
        return LayerRequest(*_split(*sequences, chars), config)
    if chars:
        raise UsageError("--chars goes with the random layer: a model tokenises its text itself")
    if sum(x is not None for x in (model, model_dir, model_file, from_file)) > 1:
        raise UsageError("choose one of --model, --model-dir, --model-file and --from")
    if from_file is not None:
        from ..files import stdin_alias

        from_file = stdin_alias(from_file)
        if pair is not None or max_tokens is not None:
            raise UsageError(f"{'--pair' if pair is not None else '--max-tokens'} goes with --model")
        from ..sources.arrays import read_tokens_file

        given = (
            read_tokens_file(tokens_file)
            if tokens_file is not None
            else read_tokens(tokens or [], file)
            if tokens or file is not None
            else []
        )
        return LayerRequest(given, None, config, layer=layer, from_file=from_file)
    if tokens_file is not None:
        raise UsageError("--tokens-file goes with --from; a model tokenises its text itself")
    return LayerRequest(
        [],
        None,
        config,
        model=model,
        model_dir=model_dir,
        model_file=model_file,
        text=read_text(tokens or [], file),
        pair=pair,
        layer=layer,
        max_tokens=max_tokens,
    )


PAGE_SUFFIXES = (".html", ".htm")


@dataclass(frozen=True)
class FigureRequest:
    """Where a figure goes (None: no figure), in which format, and how it looks."""

    output: str | None
    fmt: str | None
    style: FigureStyle
    audit: bool = False

    @property
    def page(self) -> bool:
        """Whether -o asks for a page: --format html, or a file named .html (or .htm) with no --format."""
        if self.output is None:
            return False
        if self.fmt is not None:
            return self.fmt == "html"
        return self.output != "-" and Path(self.output).suffix.lower() in PAGE_SUFFIXES

    def check(self, command: str, *, destination: bool = True) -> None:
        """What can be refused before any model is loaded or layer run: a page from a view that writes none, an
        image format that cannot be told, --audit of a page, a place no file can be written (a directory, a link,
        a folder that does not exist; stdout on a terminal; unless not ``destination``: a batch plan's folder is made
        later), a colour map matplotlib does not have."""
        import sys

        from ..render.figure import colormap, format_of, regular_target

        if self.page and command not in PAGE_COMMANDS:
            raise UsageError(f"pages (.html) are written by {PAGE_VIEWS}; this view writes .png, .svg or .pdf")
        if self.page and self.audit:
            raise UsageError("--audit measures a figure's layout; a page (.html) lays itself out in the browser")
        chosen = None if self.output is None or self.page else format_of(self.output, self.fmt, page=True)
        if self.output == "-" and sys.stdout.isatty():
            what = "an HTML page" if self.page else f"{'an' if chosen == 'svg' else 'a'} {str(chosen).upper()} image"
            raise UsageError(f"refusing to write {what} to the terminal: redirect stdout, or give -o FILE")
        if destination and self.output not in (None, "-"):
            regular_target(self.output)
        if self.style.cmap != FigureStyle.cmap:
            colormap(self.style.cmap)


def figure_options(
    output: Output = None,
    fmt: FormatOption = None,
    theme: ThemeOption = "light",
    cmap: Cmap = "viridis",
    preset: PresetOption = "screen",
    size: Size = None,
    dpi: Dpi = None,
    annotate: Annotate = None,
    audit: AuditOption = False,
) -> FigureRequest:
    parsed = None if size is None else parse_size(size)
    style = FigureStyle(theme=theme, cmap=cmap, preset=preset, size=parsed, dpi=dpi, annotate=annotate)
    if audit and output is None:
        raise UsageError("--audit measures a figure: give -o FILE")
    return FigureRequest(output=output, fmt=fmt, style=style, audit=audit)


class OptionGroup:
    """Options declared once, by a build function's parameters, for every command that takes them.

    The parameters are read (their annotations evaluated) when a command that takes the group is built, not when
    the group is declared: ``attnviz --help`` lists every command and builds none (start-up is a target)."""

    def __init__(
        self,
        build: Callable[..., Any],
        *,
        hidden: tuple[str, ...] = (),
        base: OptionGroup | None = None,
        **defaults: Any,
    ) -> None:
        self.build, self.hidden, self.base, self.defaults = build, hidden, base, defaults

    @cached_property
    def signature(self) -> inspect.Signature:
        """The build function's signature, evaluated once for the group and all its variants."""
        if self.base is not None:
            return self.base.signature
        return inspect.signature(self.build, eval_str=True)

    @cached_property
    def parameters(self) -> list[inspect.Parameter]:
        return [
            p.replace(default=self.defaults[p.name]) if p.name in self.defaults else p
            for p in self.signature.parameters.values()
            if p.name not in self.hidden
        ]

    def variant(self, *, hidden: tuple[str, ...] = (), **defaults: Any) -> OptionGroup:
        """The same group with other defaults, or some options left out (they keep their defaults)."""
        return OptionGroup(self.build, hidden=self.hidden + hidden, base=self.base or self, **defaults)

    def take(self, values: dict[str, Any]) -> Any:
        """Build the group's object from its options, removing them from ``values``."""
        given = {p.name: values.pop(p.name) for p in self.parameters}
        return self.build(**given)


LAYER = OptionGroup(layer_options)
RANDOM_LAYER = LAYER.variant(
    hidden=("model", "model_dir", "model_file", "pair", "max_tokens", "layer", "from_file", "tokens_file")
)
FIGURE = OptionGroup(figure_options)


class GroupedCommand(Generic[R]):
    """A command whose option groups' parameters stand in its signature in their place (what Typer reads), each
    group built from its options when the command runs; and -q/--quiet (:data:`Quiet`: -q means --quiet in every
    command) unless the command declares its own ``quiet``, which then silences the progress bar too.

    The signature is made when Typer first asks for it, as the command is built to run or to show its own help:
    importing a module of commands evaluates none of their annotations, and ``attnviz --help`` builds no command."""

    def __init__(self, command: Callable[..., R], groups: dict[str, OptionGroup]) -> None:
        functools.update_wrapper(self, command, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
        self.command, self.option_groups = command, groups  # option_groups: for checking a batch plan's entries

    @cached_property
    def own_signature(self) -> inspect.Signature:
        return inspect.signature(self.command, eval_str=True)

    @cached_property
    def __signature__(self) -> inspect.Signature:
        parameters: list[inspect.Parameter] = []
        for p in self.own_signature.parameters.values():
            parameters.extend(self.option_groups[p.name].parameters if p.name in self.option_groups else [p])
        if not self.own_quiet:
            parameters.append(
                inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=Quiet)
            )
        return self.own_signature.replace(parameters=parameters)

    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        signature = self.__signature__
        return {p.name: p.annotation for p in signature.parameters.values()} | {"return": signature.return_annotation}

    @property
    def own_quiet(self) -> bool:
        return "quiet" in self.own_signature.parameters

    def __call__(self, **values: Any) -> R:
        from ..progress import quiet

        silenced = values["quiet"] if self.own_quiet else values.pop("quiet")
        for name, group in self.option_groups.items():
            values[name] = group.take(values)
            if isinstance(values[name], FigureRequest):
                values[name].check(self.command.__name__)
        with quiet(silenced):
            return self.command(**values)


def with_options(**groups: OptionGroup) -> Callable[[Callable[..., R]], GroupedCommand[R]]:
    """Replace each parameter named in ``groups`` by that group's options, for Typer to read (a GroupedCommand)."""

    def decorate(command: Callable[..., R]) -> GroupedCommand[R]:
        return GroupedCommand(command, groups)

    return decorate


def parse_layers(text: str) -> tuple[int, ...]:
    """--layers: "12-20" (both ends included), "0,6,12", or a mix ("0-2,10")."""
    chosen: list[int] = []
    for part in text.replace(" ", "").split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()) or len(part) > 12:
            raise UsageError(f"--layers takes a range or a list of layers, like 12-20 or 0,6,12; got {text!r}")
        span = range(int(low), int(high) + 1) if dash else [int(low)]
        if not span:
            raise UsageError(f"--layers {part}: the range is empty")
        chosen.extend(i for i in span if i not in chosen)
        if len(chosen) > 4096:
            raise UsageError("--layers names more layers than any model has")
    return tuple(chosen)


def _split(tokens: list[str], keys: list[str] | None, chars: bool) -> tuple[list[str], list[str] | None]:
    """The tokens as given, or (--chars) as characters; a hint when a phrase of an unspaced script is one token."""
    from ..sources.text import GivenTokens, characters, unspaced_token

    if chars:
        return characters(tokens), None if keys is None else characters(keys)
    split = [t for sequence in (tokens, keys or []) if not isinstance(sequence, GivenTokens) for t in sequence]
    phrase = unspaced_token(split)
    if phrase is not None:
        from ..errors import say

        say(f"attnviz: hint: '{phrase}' is one token (tokens are split at spaces); --chars splits it into characters")
    return tokens, keys


def _side(layer: LayerRequest, head: Head = None, mean: Mean = False) -> None:
    """The options one side of `attnviz diff` may change: the layer's, and which head."""


SIDE = with_options(layer=RANDOM_LAYER.variant(hidden=("tokens", "file", "keys", "keys_file")))(_side)


def parse_side(text: str, name: str) -> dict[str, Any]:
    """The options given in ``--a "…"`` or ``--b "…"``, parsed by the same declarations as the CLI's."""
    import shlex

    side = typer.Typer(add_completion=False)
    side.command()(SIDE)
    command = typer.main.get_command(side)
    try:
        ctx = command.make_context(name, shlex.split(text), help_option_names=[])  # --a "--help" is no option
    except ValueError as err:
        raise UsageError(f"{name} {text!r}: {err}") from None
    except typer.TyperException as err:
        raise UsageError(f"{name} {text!r}: {err.format_message()}") from None
    given = {}
    for key, value in ctx.params.items():
        source = ctx.get_parameter_source(key)
        if source is not None and source.name == "COMMANDLINE":
            given[key] = value
    return given
