"""The pages of the residual stream's views: the logit lens and logit attribution as grids (the ablation map's
page: each cell coloured as the figure colours it, its numbers on hover or focus), and the routes as a graph drawn
by their own script (flow.js), whose threshold a reader moves and whose nodes a reader follows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .grid import hex_colour, signed

if TYPE_CHECKING:
    from ...analysis.dla import LogitAttribution
    from ...analysis.lens import Lens
    from ...analysis.routes import Routes
    from ..figure import FigureStyle

LENS_POSITIONS = 64  # the last positions a lens page shows (the JSON has every one)


def dla_grid(result: LogitAttribution, model: str, style: FigureStyle) -> dict[str, Any]:
    """Each head's part and each layer's feed-forward's (a last column) on the figure's diverging scale."""
    from ..dla import dla_heading, measured
    from ..figure import colormap

    values = np.concatenate([result.heads, result.mlps[:, None]], axis=1).astype(np.float64)
    limit = float(np.abs(values).max()) or 1.0
    cmap = colormap("RdBu_r")
    colours = cmap((values + limit) / (2 * limit))
    layers, columns = values.shape
    names = [f"head {h}" for h in range(columns - 1)] + ["MLP"]
    cells = [[{"colour": hex_colour(colours[layer, c]), "text": signed(values[layer, c]),
               "about": [f"layer {layer}, {names[c]}: {signed(values[layer, c], 4)} to {measured(result)}",
                         "raises it" if values[layer, c] > 0 else "lowers it" if values[layer, c] < 0 else "nothing"]}
              for c in range(columns)] for layer in range(layers)]  # fmt: skip
    stops = np.linspace(-limit, limit, 9)
    return {
        "title": f"each part's {measured(result)}",
        "rows": [f"layer {i}" for i in range(layers)],
        "cols": names,
        "cells": cells,
        "heading": dla_heading(result, model),
        "scale": [{"colour": hex_colour(cmap((v + limit) / (2 * limit))), "label": signed(v, 3)} for v in stops[::-1]],
        "scale_title": f"{measured(result)} · red raises it",
        "keys": "Keys: Tab to a part, then the arrows move between heads and layers; hover or focus a part for what "
        "it writes toward the logit",
        "notes": [f"embedding {signed(result.embedding, 3)} · biases {signed(result.biases, 3)} · all parts "
                  f"{signed(result.total, 4)}" + ("" if result.additive else " (before the model's soft-cap)")],
        "opens": False,
    }  # fmt: skip


def lens_grid(result: Lens, model: str, style: FigureStyle) -> dict[str, Any]:
    """Layers (the output first) × the last positions: each cell coloured by its likeliest token's probability on
    the figure's map and labelled with it; its five likeliest and the text's next token's log-probability on hover."""
    from ..figure import colormap
    from ..labels import shown_token
    from ..lens import interleaved, lens_heading, row_names

    rows, names = interleaved(result), row_names(result, True)
    target, ranks, log_probs = result.target, rows.target_rank, rows.target_log_prob
    n = len(result.tokens)
    shown = list(range(max(0, n - LENS_POSITIONS), n))
    cmap = colormap(style.cmap)
    cells = []
    for k in reversed(range(len(names))):
        out = []
        for i in shown:
            ids, probs = rows.top_ids[k, i], rows.top_probs[k, i]
            word = result.words.get
            likeliest = [f"{word(int(t), '?')!r} {p:.3f}" for t, p in zip(ids, probs, strict=True) if t >= 0]
            about = [f"{names[k]}, position {i}: " + ", ".join(likeliest)]
            if i < n - 1:
                about.append(f"log p of the next token {result.tokens[i + 1]!r}: {rows.log_prob[k, i]:.3f}")
            out.append({"colour": hex_colour(cmap(float(probs[0]))), "text": shown_token(word(int(ids[0]), "?"), 6),
                        "about": about})  # fmt: skip
        if target is not None and ranks is not None and log_probs is not None:  # its colour: its probability
            rank, log_prob = int(ranks[k]), float(log_probs[k])
            said = f"{names[k]}: log p({target!r}) after the last position {log_prob:.2f}, rank {rank:,}"
            out.append({"colour": hex_colour(cmap(float(np.exp(log_prob)))), "text": f"#{rank:,}", "about": [said]})
        cells.append(out)
    left = [] if len(shown) == n else [f"the last {len(shown)} of {n:,} positions (the JSON has every one)"]
    cols = [f"{i} {shown_token(result.tokens[i])}" for i in shown]
    if target is not None and ranks is not None:
        cols.append(f"rank {shown_token(target)}")
        left.append(f"the last column: {shown_token(target)}'s rank after the last position, coloured by its "
                    "probability; its log-probability on hover")  # fmt: skip
    return {
        "title": "the likeliest next token read at each layer",
        "rows": list(reversed(names)),
        "cols": cols,
        "cells": cells,
        "heading": lens_heading(result, model),
        "scale": [{"colour": hex_colour(cmap(v)), "label": f"{v:.2f}"} for v in np.linspace(1, 0, 6)],
        "scale_title": "probability of the likeliest next token",
        "corner": "position",
        "keys": "Keys: Tab to a cell, then the arrows move between positions and layers; hover or focus a cell for "
        "its five likeliest tokens",
        "notes": left,
        "opens": False,
    }


def flow_entry(routes: Routes, model: str) -> dict[str, Any]:
    """What flow.js draws: the tokens, the route graph as computed, and every block's shares where they are kept
    (each query's row of attention up to its own key), for the reader's threshold and starting node."""
    from ..flow import flow_heading

    entry: dict[str, Any] = {
        "heading": flow_heading(routes, model),
        "tokens": list(routes.tokens),
        "layers": routes.layers,
        "position": routes.position,
        "threshold": routes.threshold,
        "edges": [[e.layer, e.kind, e.source, e.target, round(e.share, 5)] for e in routes.edges],
    }
    if routes.flow is not None and len(routes.tokens) <= 512:
        entry["attention"] = [[np.round(row[: i + 1].astype(np.float64), 5).tolist() for i, row in
                               enumerate(layer.matrix())] for layer in routes.flow.layers]  # fmt: skip
        entry["residual"] = [np.round(layer.residual.astype(np.float64), 5).tolist() for layer in routes.flow.layers]
        entry["ffn"] = [np.round(layer.ffn.astype(np.float64), 5).tolist() for layer in routes.flow.layers]
    return entry
