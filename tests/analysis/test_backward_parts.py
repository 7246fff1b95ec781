"""Each part's backward against the derivative of its own forward, without torch: a central difference of the forward
in float64 along random directions, (f(x + εu) − f(x − εu)) / 2ε · g, against ⟨∂/∂x, u⟩ from the backward given g.

The central difference's error is O(ε²) times the third derivative; at ε = 1e-4 in float64 that is far below the
bound. The attention's backward computes in float32 (as its forward does): its bound is float32's, a few
hundred roundings of a sum of n · d terms, relative to the largest product."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from attnviz.engine.blocked import attend_backward
from attnviz.engine.core import causal_mask, scaled_dot_product_attention, soft_cap, soft_cap_backward
from attnviz.models.parts import (
    SLOPES,
    Rope,
    gelu,
    gelu_tanh,
    layer_norm,
    layer_norm_backward,
    rms_norm,
    rms_norm_backward,
    shared_heads,
    shared_heads_backward,
    silu,
)

EPS = 1e-4
rng = np.random.default_rng(38)


def directional(forward: Callable[[np.ndarray], np.ndarray], x: np.ndarray, grad: np.ndarray, u: np.ndarray) -> float:
    """d/dε ⟨grad, forward(x + εu)⟩ at 0, by a central difference in float64."""
    return float(((forward(x + EPS * u) - forward(x - EPS * u)) * grad).sum() / (2 * EPS))


def check(forward: Callable[[np.ndarray], np.ndarray], backward: Callable[[np.ndarray], np.ndarray],
          x: np.ndarray, bound: float = 1e-6) -> None:  # fmt: skip
    grad = rng.standard_normal(forward(x).shape)
    dx = backward(grad)
    assert dx.shape == x.shape
    for _ in range(4):
        u = rng.standard_normal(x.shape)
        expected = directional(forward, x, grad, u)
        assert abs(float((dx * u).sum()) - expected) <= bound * max(1.0, float(np.abs(dx * u).sum()))


@pytest.mark.parametrize("shape", [(5, 8), (3, 7, 16), (1, 2)])
@pytest.mark.parametrize("eps", [1e-6, 1e-2])
def test_rms_norm(shape: tuple[int, ...], eps: float) -> None:
    x, w = rng.standard_normal(shape), rng.standard_normal(shape[-1])
    check(lambda a: rms_norm(a, w, eps), lambda g: rms_norm_backward(x, w, eps, g), x)


@pytest.mark.parametrize("shape", [(5, 8), (3, 7, 16), (2, 3)])
def test_layer_norm(shape: tuple[int, ...]) -> None:
    x, w, b = rng.standard_normal(shape), rng.standard_normal(shape[-1]), rng.standard_normal(shape[-1])
    check(lambda a: layer_norm(a, w, b, 1e-5), lambda g: layer_norm_backward(x, w, 1e-5, g), x)


@pytest.mark.parametrize("activation", [gelu, gelu_tanh, silu], ids=lambda f: f.__name__)
@pytest.mark.parametrize("scale", [0.1, 1.0, 6.0])
def test_activations(activation: Callable[[np.ndarray], np.ndarray], scale: float) -> None:
    x = rng.standard_normal((4, 9)) * scale
    bound = 1e-6 if activation is not gelu else 1e-5  # erf to 1.5e-7 (Abramowitz & Stegun): its slope to about that
    check(activation, lambda g: g * SLOPES[activation](x), x, bound)


@pytest.mark.parametrize("rows", [1, 5, 64])
def test_gated_is_the_activation_times_up_in_any_blocks_of_rows(rows: int, monkeypatch) -> None:
    """activation(gate) · up, made a block of rows at a time among the threads: every value as if made whole."""
    from attnviz.models import parts

    monkeypatch.setattr(parts, "GATED_BYTES", 4 * 9 * 2)  # 2 rows a block: several blocks on several threads
    gate, up = (rng.standard_normal((rows, 9)).astype(np.float32) * 4 for _ in range(2))
    for activation in (silu, gelu_tanh):
        np.testing.assert_array_equal(parts.gated(activation, gate, up), activation(gate) * up)


@pytest.mark.parametrize(
    "rope",
    [Rope(10000.0, 8), Rope(10000.0, 6), Rope(500.0, 8, "linear", 4.0), Rope(10000.0, 4, attention=1.3),
     Rope(10000.0, 8, original=3, divisors=(1.0, 2.0, 3.0, 4.0), long=(2.0, 3.0, 5.0, 8.0), attention=1.2)],
    ids=["whole", "partial", "linear", "attention factor", "longrope long"],
)  # fmt: skip
@pytest.mark.parametrize("layout", ["pairs", "halves"])
def test_rope(rope: Rope, layout: str) -> None:
    x = rng.standard_normal((3, 7, 8))
    forward, backward = getattr(rope, layout), getattr(rope, layout + "_backward")
    check(forward, backward, x)


@pytest.mark.parametrize("kv", [1, 2, 4])
def test_shared_heads(kv: int) -> None:
    k = rng.standard_normal((kv, 5, 4))
    check(lambda a: shared_heads(a, a, 4)[0], lambda g: shared_heads_backward(g, kv), k)


@pytest.mark.parametrize("cap", [0.5, 3.0, 50.0])
def test_soft_cap(cap: float) -> None:
    s = rng.standard_normal((4, 6)) * 3
    check(lambda a: soft_cap(a, cap), lambda g: soft_cap_backward(soft_cap(s, cap), cap, g), s)


@pytest.mark.parametrize(
    ("n", "window", "softcap", "rows"),
    [(9, None, None, None), (9, 3, None, None), (9, None, 2.0, None), (12, 4, 1.5, 5), (1, None, None, None),
     (40, 7, None, 16)],
)  # fmt: skip
def test_attention(n: int, window: int | None, softcap: float | None, rows: int | None,
                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Causal, a sliding window, soft-capped scores, blocks of rows smaller than the text (``rows``)."""
    if rows is not None:
        monkeypatch.setattr("attnviz.engine.blocked.ROWS_PER_BLOCK", rows)
    heads, d, scale = 3, 8, 0.35
    q, k, v = (rng.standard_normal((heads, n, d)) for _ in range(3))
    allowed = causal_mask(n)
    if window is not None:
        allowed &= np.arange(n)[None, :] > np.arange(n)[:, None] - window
    grad = rng.standard_normal((heads, n, d))
    dq, dk, dv = attend_backward(q, k, v, grad.astype(np.float32), scale=scale, window=window, softcap=softcap)
    directions = [rng.standard_normal((heads, n, d)) for _ in range(3)]
    size = max(float(np.abs(derivative * u).sum()) for derivative, u in zip((dq, dk, dv), directions, strict=True))
    for index, (name, derivative) in enumerate({"q": dq, "k": dk, "v": dv}.items()):

        def forward(x: np.ndarray, index: int = index) -> np.ndarray:
            args = [q, k, v]
            args[index] = x
            return scaled_dot_product_attention(*args, scale=scale, mask=allowed, softcap=softcap)[0]

        u = directions[index]
        expected = directional(forward, [q, k, v][index], grad, u)
        bound = 64 * n * d * float(np.finfo(np.float32).eps)  # of the largest of the three: one token's ∂/∂q and
        assert abs(float((derivative * u).sum()) - expected) <= bound * size, name  # ∂/∂k are 0 less float32's rounding
