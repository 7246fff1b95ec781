"""attnviz: see self-attention, in the terminal, as figures and as data.

    >>> import attnviz
    >>> att = attnviz.self_attention("the cat sat on the mat".split(), attnviz.LayerConfig(heads=2))
    >>> att.weights.shape
    (2, 6, 6)

Names are imported on first use, so that ``attnviz --help`` does not pay for NumPy.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from ._version import __version__

_EXPORTS = {
    "Attention": "engine.attention",
    "AttnvizError": "errors",
    "UsageError": "errors",
    "LayerConfig": "sources.config",
    "self_attention": "sources.layer",
    "cross_attention": "sources.layer",
    "sinusoidal_positions": "sources.layer",
    "causal_mask": "engine.core",
    "padding_mask": "engine.core",
    "softmax": "engine.core",
    "scaled_dot_product_attention": "engine.core",
    "multi_head_attention": "engine.core",
    "measure_saturation": "analysis.saturation",
    "model_stack": "sources.model",
    "load_model": "models",
    "generate": "analysis.generate",
    "Sampling": "analysis.generate",
    "file_stack": "sources.arrays",
    "AttentionStack": "engine.stack",
    "rollout": "analysis.heads",
    "head_patterns": "analysis.heads",
    "check_attention": "engine.checks",
    "FigureStyle": "render.figure",
    "save_figure": "render.figure",
    "render_heatmap_figure": "render.heatmap",
    "render_mask_figure": "render.mask",
    "render_saturation_figure": "render.saturation",
    "head_view": "notebook",
    "model_view": "notebook",
}

__all__ = [
    "Attention",
    "AttentionStack",
    "AttnvizError",
    "FigureStyle",
    "LayerConfig",
    "Sampling",
    "UsageError",
    "__version__",
    "causal_mask",
    "check_attention",
    "cross_attention",
    "file_stack",
    "generate",
    "head_patterns",
    "head_view",
    "load_model",
    "measure_saturation",
    "model_stack",
    "model_view",
    "multi_head_attention",
    "padding_mask",
    "render_heatmap_figure",
    "render_mask_figure",
    "render_saturation_figure",
    "rollout",
    "save_figure",
    "scaled_dot_product_attention",
    "self_attention",
    "sinusoidal_positions",
    "softmax",
]

if TYPE_CHECKING:
    from .analysis.generate import Sampling, generate
    from .analysis.heads import head_patterns, rollout
    from .analysis.saturation import measure_saturation
    from .engine.attention import Attention
    from .engine.checks import check_attention
    from .engine.core import causal_mask, multi_head_attention, padding_mask, scaled_dot_product_attention, softmax
    from .engine.stack import AttentionStack
    from .errors import AttnvizError, UsageError
    from .models import load_model
    from .notebook import head_view, model_view
    from .render.figure import FigureStyle, save_figure
    from .render.heatmap import render_heatmap_figure
    from .render.mask import render_mask_figure
    from .render.saturation import render_saturation_figure
    from .sources.arrays import file_stack
    from .sources.config import LayerConfig
    from .sources.layer import cross_attention, self_attention, sinusoidal_positions
    from .sources.model import model_stack


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'attnviz' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


DISPLAYED = {"engine.attention": "Attention", "engine.stack": "AttentionStack"}
"""What shows itself in a notebook as a page: module (below this package) and class."""


def _register_display() -> None:
    """In IPython (Jupyter, Colab, VS Code's notebooks), an Attention or an AttentionStack that ends a cell shows as
    its page (:func:`attnviz.notebook.displayed`). Registered by the classes' names, so that nothing is imported
    until one is shown, and so that the engine's classes know nothing of pages."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return
    formatter = shell.display_formatter.formatters["text/html"]
    for module, name in DISPLAYED.items():
        formatter.for_type_by_name(f"{__name__}.{module}", name, _displayed)


def _displayed(value: Any) -> str:
    from .notebook import displayed

    return displayed(value)


_register_display()
