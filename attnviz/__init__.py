"""attnviz: see self-attention, in the terminal, as figures and as data.

    >>> import attnviz
    >>> att = attnviz.self_attention("the cat sat on the mat".split(), attnviz.LayerConfig(heads=2))
    >>> att.weights.shape
    (2, 6, 6)

Names are imported on first use, so that ``attnviz --help`` does not pay for NumPy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

_EXPORTS = {
    "Attention": "attention",
    "AttnvizError": "errors",
    "UsageError": "errors",
    "LayerConfig": "config",
    "self_attention": "layer",
    "cross_attention": "layer",
    "sinusoidal_positions": "layer",
    "causal_mask": "core",
    "padding_mask": "core",
    "softmax": "core",
    "scaled_dot_product_attention": "core",
    "multi_head_attention": "core",
    "measure_saturation": "saturation",
    "model_stack": "sources",
    "load_model": "models",
    "generate": "generate",
    "Sampling": "generate",
    "file_stack": "sources",
    "AttentionStack": "sources",
    "rollout": "analysis",
    "head_patterns": "analysis",
    "check_attention": "analysis",
    "FigureStyle": "render.figure",
    "save_figure": "render.figure",
    "render_heatmap_figure": "render.heatmap",
    "render_mask_figure": "render.mask",
    "render_saturation_figure": "render.saturation",
    "head_view": "render.html.notebook",
    "model_view": "render.html.notebook",
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
    from .analysis import check_attention, head_patterns, rollout
    from .attention import Attention
    from .config import LayerConfig
    from .core import causal_mask, multi_head_attention, padding_mask, scaled_dot_product_attention, softmax
    from .errors import AttnvizError, UsageError
    from .generate import Sampling, generate
    from .layer import cross_attention, self_attention, sinusoidal_positions
    from .models import load_model
    from .render.figure import FigureStyle, save_figure
    from .render.heatmap import render_heatmap_figure
    from .render.html.notebook import head_view, model_view
    from .render.mask import render_mask_figure
    from .render.saturation import render_saturation_figure
    from .saturation import measure_saturation
    from .sources import AttentionStack, file_stack, model_stack


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'attnviz' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
