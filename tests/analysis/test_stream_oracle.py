"""The lens, direct logit attribution and the routes against transformers (fixtures/make_stream_cases.py: float64,
hooks on every layer) on the tiny checkpoint of every family, SmolLM2 (the IOI prompt) and Gemma 3 270M: the lens
within 1e-3 in log-probability, each logit part within 1e-4 of the largest (and of 1), every share within 1e-4."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
from paths import FIXTURES

from attnviz.analysis.dla import direct_logit_attribution
from attnviz.analysis.flow import AttentionBlock, ffn_shares
from attnviz.analysis.lens import logit_lens
from attnviz.analysis.residual import each_layer
from attnviz.models.stream import LayerParts, Record

spec = importlib.util.spec_from_file_location("test_gradients", FIXTURES.parent / "analysis" / "test_gradients.py")
assert spec is not None and spec.loader is not None
gradients = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gradients)
STREAM = FIXTURES / "stream"
NAMES = sorted(p.stem for p in STREAM.glob("*.npz"))
LENS, SHARES = 1e-3, 1e-4


@pytest.fixture(scope="module")
def loaded() -> dict[str, Any]:
    return {}


def case(name: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    if name not in loaded:
        loaded[name] = gradients.model_of(name, tmp_path_factory.mktemp(name))
    model, z = loaded[name], np.load(STREAM / f"{name}.npz")
    assert list(model.encode(str(z["text"])).ids) == z["ids"].tolist()
    return model, z


def test_every_family_has_its_oracle() -> None:
    assert set(NAMES) == set(gradients.cases.CASES)


@pytest.mark.parametrize("name", NAMES)
def test_the_lens_is_transformers(name: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> None:
    model, z = case(name, loaded, tmp_path_factory)
    result = logit_lens(model, str(z["text"]), mid=True)
    assert np.abs(result.rows.log_prob - z["lens:rows"]).max() <= LENS
    assert result.mid is not None and np.abs(result.mid.log_prob - z["lens:mid"]).max() <= LENS


@pytest.mark.parametrize("name", NAMES)
def test_direct_logit_attribution_is_transformers(
    name: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, z = case(name, loaded, tmp_path_factory)
    word = gradients.target_word(model, int(z["dla:target"]))
    if word is None:
        pytest.skip("the target's text is not that one token again")
    result = direct_logit_attribution(model, str(z["text"]), word)
    ours = np.array([result.embedding, *result.heads.ravel(), *result.mlps, result.biases])
    theirs = np.array([float(z["dla:embedding"]), *z["dla:heads"].ravel(), *z["dla:mlps"], float(z["dla:biases"])])
    scale = max(1.0, float(np.abs(theirs).max()))
    assert np.abs(ours - theirs).max() <= SHARES * scale
    assert abs(result.raw_logit - float(z["dla:raw_logit"])) <= SHARES * scale


@pytest.mark.parametrize("name", NAMES)
def test_the_routes_are_transformers(
    name: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, z = case(name, loaded, tmp_path_factory)
    heads, residual, ffn = [], [], []

    def take(parts: LayerParts) -> None:
        _, resid, each, _ = AttentionBlock(model, parts).shares(per_head=True)
        heads.append(each)
        residual.append(resid)
        ffn.append(ffn_shares(parts))

    each_layer(model, tuple(z["ids"].tolist()), Record(routes=True), take)
    assert np.abs(np.stack(heads) - z["flow:heads"]).max() <= SHARES
    assert np.abs(np.stack(residual) - z["flow:residual"]).max() <= SHARES
    assert np.abs(np.stack(ffn) - z["flow:ffn"]).max() <= SHARES
