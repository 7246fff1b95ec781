"""The pieces transformer layers are made of, shared by every family whichever file its weights came from:
norms, activations, rotary position embeddings (two layouts) and grouped key/value heads."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine.core import Array
from ..engine.threads import run_blocks


def layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    """A variance that overflows float32 gives NaN rows, not a silent 0 (see :func:`overflowed`)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = overflowed(((x - mean) ** 2).mean(axis=-1, keepdims=True))
    result: Array = (x - mean) / np.sqrt(var + eps) * weight + bias
    return result


def layer_norm_backward(x: Array, weight: Array, eps: float, grad: Array) -> Array:
    """∂/∂x of :func:`layer_norm` given ∂/∂ its output: the normalised row's gradient, less its mean and its
    projection on the normalised row (the bias adds nothing)."""
    mean = x.mean(axis=-1, keepdims=True)
    inverse = 1 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    normed = (x - mean) * inverse
    g = grad * weight
    result: Array = inverse * (g - g.mean(axis=-1, keepdims=True) - normed * (g * normed).mean(axis=-1, keepdims=True))
    return result


def rms_norm(x: Array, weight: Array, eps: float) -> Array:
    """A mean square that overflows float32 gives NaN rows, not a silent 0 (see :func:`overflowed`)."""
    normed: Array = x / np.sqrt(overflowed(np.mean(x * x, axis=-1, keepdims=True)) + eps) * weight
    return normed


def rms_norm_backward(x: Array, weight: Array, eps: float, grad: Array) -> Array:
    """∂/∂x of :func:`rms_norm` given ∂/∂ its output: r·g·w − x·r³·mean(x·g·w), r = 1/√(mean(x²) + ε)."""
    inverse = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    g = grad * weight
    result: Array = inverse * g - x * (inverse**3 * np.mean(x * g, axis=-1, keepdims=True))
    return result


def overflow_checked() -> np.errstate:
    """NumPy's overflow warnings off for a forward pass: it checks each layer's output and attention with
    np.isfinite and refuses in one line naming the layer, so the warnings would only add noise on stderr."""
    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def overflowed(spread: Array) -> Array:
    """A norm's per-row statistic, NaN where it is infinite: x / sqrt(inf) would be 0, a finite row of
    overflowed values passed on as data, where NaN reaches the forward pass's check of the layer."""
    return np.where(np.isfinite(spread), spread, np.float32(np.nan))


def erf(x: Array) -> Array:
    """erf to 1.5e-7 (Abramowitz & Stegun 7.1.26), vectorised: below float32's own rounding at these sizes."""
    t = 1 / (1 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    result: Array = np.sign(x) * (1 - poly * np.exp(-x * x))
    return result


def gelu(x: Array) -> Array:
    """The exact GELU, x·Φ(x) (BERT's and GPT-2's 'gelu')."""
    result: Array = x * 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
    return result


def gelu_backward(x: Array) -> Array:
    """d gelu / dx = Φ(x) + x·φ(x)."""
    density = np.exp(-0.5 * x * x) / np.float32(math.sqrt(2 * math.pi))
    result: Array = 0.5 * (1.0 + erf(x / math.sqrt(2.0))) + x * density
    return result


def gelu_tanh(x: Array) -> Array:
    """GELU with the tanh approximation (gelu_new, gelu_pytorch_tanh)."""
    inner = np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
    result: Array = np.float32(0.5) * x * (1 + np.tanh(inner))
    return result


def gelu_tanh_backward(x: Array) -> Array:
    """d gelu_tanh / dx: ½(1 + tanh u) + ½x(1 − tanh² u)·u′, u = √(2/π)(x + 0.044715x³)."""
    root = np.float32(math.sqrt(2 / math.pi))
    tanh = np.tanh(root * (x + np.float32(0.044715) * x * x * x))
    slope = root * (1 + np.float32(3 * 0.044715) * x * x)
    result: Array = np.float32(0.5) * (1 + tanh) + np.float32(0.5) * x * (1 - tanh * tanh) * slope
    return result


def silu(x: Array) -> Array:
    """x / (1 + exp(−x)), in one array: a long text's (n, feed-forward width) is made once, not four times."""
    result: Array = np.negative(x)
    np.exp(result, out=result)
    result += 1
    np.divide(x, result, out=result)
    return result


def silu_backward(x: Array) -> Array:
    """d silu / dx = σ(x)(1 + x(1 − σ(x)))."""
    sigmoid = 1 / (1 + np.exp(-x))
    result: Array = sigmoid * (1 + x * (1 - sigmoid))
    return result


GATED_BYTES = 2**18  # float32 bytes of the rows of a gated product made at a time: a block stays in cache


def gated(activation: Callable[[Array], Array], gate: Array, up: Array) -> Array:
    """activation(gate) · up, a new array made a block of rows at a time among the threads: a long text's (n, the
    feed-forward's width) is the largest array a layer makes elementwise, the one step not already shared."""
    out = np.empty(gate.shape, np.result_type(gate, up))
    step = max(1, GATED_BYTES // (4 * max(gate.shape[-1], 1)))

    def block(start: int) -> None:
        part = out[start : start + step]
        part[...] = activation(gate[start : start + step])
        np.multiply(part, up[start : start + step], out=part)

    run_blocks(block, range(0, len(gate), step))
    return out


ACTIVATIONS = {"gelu": gelu, "gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh, "silu": silu, "swish": silu}
SLOPES = {gelu: gelu_backward, gelu_tanh: gelu_tanh_backward, silu: silu_backward}
"""Each activation's derivative, for the backward pass (:mod:`attnviz.analysis.gradients`)."""


@dataclass(frozen=True)
class Rope:
    """A layer's rotary position embedding: base, rotated dimensions, and the frequency scaling of long-context
    checkpoints ("linear": positions divided by ``factor``; "llama3": low frequencies slowed, Llama 3.1's).

    LongRoPE (Phi-3's): each frequency divided by its own factor, the ``long`` ones in a sequence longer than
    ``original`` tokens and ``divisors`` (the short ones) otherwise, as transformers picks them by the sequence's
    length; cos and sin are scaled by ``attention``."""

    base: float
    dims: int
    kind: str = "default"
    factor: float = 1.0
    low: float = 1.0  # llama3: low_freq_factor
    high: float = 4.0  # llama3: high_freq_factor
    original: int = 8192  # llama3, LongRoPE: original_max_position_embeddings
    divisors: tuple[float, ...] | None = None  # a GGUF's rope_freqs.weight: each frequency divided by its own
    long: tuple[float, ...] | None = None  # LongRoPE: the divisors of a sequence longer than ``original``
    attention: float = 1.0  # cos and sin scaled by it (LongRoPE's attention factor, rope.scaling.attn_factor)

    def frequencies(self, length: int = 0) -> Array:
        """The inverse frequencies of a sequence of ``length`` tokens (which matters only to LongRoPE)."""
        inverse = self.base ** (-np.arange(0, self.dims, 2) / self.dims)
        if self.kind == "linear":
            inverse = inverse / self.factor
        elif self.kind == "llama3":
            # transformers' _compute_llama3_parameters: wavelengths past original / low slowed by factor, those
            # under original / high kept, those between mixed. With high <= low there is no between (at most
            # the one wavelength original / low, where transformers divides 0 by 0): nothing is mixed.
            wavelength = 2 * math.pi / inverse
            slow = inverse / self.factor
            if self.high > self.low:
                smooth = (self.original / wavelength - self.low) / (self.high - self.low)
                mixed = (1 - smooth) * slow + smooth * inverse
            else:
                mixed = inverse
            inverse = np.where(
                wavelength > self.original / self.low,
                slow,
                np.where(wavelength < self.original / self.high, inverse, mixed),
            )
        divisors = self.long if self.long is not None and length > self.original else self.divisors
        if divisors is not None:  # frequency factors: Llama 3's rope_freqs.weight, LongRoPE's short or long ones
            inverse = inverse / np.asarray(divisors, dtype=np.float64)
        return inverse

    def switches(self, length: int) -> bool:
        """Whether a sequence of ``length`` tokens growing by one changes every position's frequencies (LongRoPE's
        long factors take over): the keys written so far must then be rotated again."""
        return self.long is not None and length == self.original

    def angles(self, n: int, start: int = 0) -> tuple[Array, Array]:
        """cos and sin (n, dims/2) of positions ``start`` … in a sequence of ``start + n`` tokens."""
        angles = np.arange(start, start + n)[:, None] * self.frequencies(start + n)
        return np.cos(angles) * self.attention, np.sin(angles) * self.attention

    def pairs(self, x: Array, start: int = 0) -> Array:
        """(heads, n, d) rotated as GGUF lays out Llama's Q and K: adjacent pairs (2i, 2i+1). Written into one new
        array (no copy of x, no temporary but one), with cos and sin made once for every layer."""
        cos, sin = _angles(self, x.shape[1], start, x.dtype)
        even, odd = x[..., 0 : self.dims : 2], x[..., 1 : self.dims : 2]
        rotated = np.empty_like(x)
        rotated[..., self.dims :] = x[..., self.dims :]
        first, second = rotated[..., 0 : self.dims : 2], rotated[..., 1 : self.dims : 2]
        other = odd * sin
        np.multiply(even, cos, out=first)
        first -= other
        np.multiply(odd, cos, out=other)
        np.multiply(even, sin, out=second)
        second += other
        return rotated

    def pairs_backward(self, grad: Array, start: int = 0) -> Array:
        """∂/∂x of :meth:`pairs` given ∂/∂ its output: each pair turned back (the rotation's transpose)."""
        cos, sin = (a.astype(grad.dtype) for a in self.angles(grad.shape[1], start))
        even, odd = grad[..., 0 : self.dims : 2], grad[..., 1 : self.dims : 2]
        turned = grad.copy()
        turned[..., 0 : self.dims : 2] = even * cos + odd * sin
        turned[..., 1 : self.dims : 2] = odd * cos - even * sin
        return turned

    def halves(self, x: Array, start: int = 0) -> Array:
        """(heads, n, d) rotated in Hugging Face's layout: dimension i pairs with i + dims/2."""
        cos, sin = (a.astype(x.dtype) for a in self.angles(x.shape[1], start))
        half = self.dims // 2
        first, second, rest = x[..., :half], x[..., half : self.dims], x[..., self.dims :]
        return np.concatenate([first * cos - second * sin, second * cos + first * sin, rest], axis=-1)

    def halves_backward(self, grad: Array, start: int = 0) -> Array:
        """∂/∂x of :meth:`halves` given ∂/∂ its output: each pair (i, i + dims/2) turned back."""
        cos, sin = (a.astype(grad.dtype) for a in self.angles(grad.shape[1], start))
        half = self.dims // 2
        first, second, rest = grad[..., :half], grad[..., half : self.dims], grad[..., self.dims :]
        return np.concatenate([first * cos + second * sin, second * cos - first * sin, rest], axis=-1)


@functools.lru_cache(maxsize=8)
def _angles(rope: Rope, n: int, start: int, kind: np.dtype[Any]) -> tuple[Array, Array]:
    """cos and sin of :meth:`Rope.angles` in the type of the values they turn: every layer of one rope turns by the
    same numbers, made once."""
    cos, sin = (a.astype(kind) for a in rope.angles(n, start))
    cos.flags.writeable = sin.flags.writeable = False
    return cos, sin


NO_ROPE = Rope(1.0, 0)  # a layer without position embedding (SmolLM3's NoPE layers): it rotates no dimension


def shared_heads(k: Array, v: Array, heads: int) -> tuple[Array, Array]:
    """Grouped-query attention: key/value head j serves query heads j·g … j·g + g − 1 (g = heads / kv heads)."""
    group = heads // k.shape[0]
    return np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)


def shared_heads_backward(grad: Array, kv_heads: int) -> Array:
    """∂/∂ the key/value heads of :func:`shared_heads` given ∂/∂ its repeated ones: each summed over its group."""
    heads, n, d = grad.shape
    summed: Array = grad.reshape(kv_heads, heads // kv_heads, n, d).sum(axis=1)
    return summed
