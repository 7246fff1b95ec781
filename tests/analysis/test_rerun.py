"""The exact ablation, patching and key importance run their copies layer by layer: each layer's matrices read from
the file once for every batch that reruns it, never the whole model in float32, and what they measure the same
however the batches are grouped into waves or cut into batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny_gguf import write_tiny_llama

from attnviz.analysis.ablation import ablate, key_importance
from attnviz.analysis.attribution import patch
from attnviz.models import load_model
from attnviz.models.gguf import GGUF
from attnviz.models.held import Held

TEXT = "the cat sat on the mat and the dog"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("rerun") / "tiny.gguf", layers=4)


MEASURES = {
    "zero": lambda model: ablate(model, TEXT).delta,
    "mean": lambda model: ablate(model, TEXT, "mean").delta,
    "target": lambda model: ablate(model, TEXT, target=" ").delta,
    "some heads": lambda model: ablate(model, TEXT, only=[(3, 1), (1, 0), (1, 2)]).delta,
    "patch": lambda model: patch(model, "the cat sat on the mat", "the mat sat on the cat", " ").delta,
    "keys": lambda model: key_importance(model, TEXT, 1, 7, (0, 3)).delta,
}


@pytest.mark.parametrize("measure", list(MEASURES))
@pytest.mark.parametrize("budget", ["1", "12K", "64K"])
def test_the_waves_change_nothing_and_the_batches_only_rounding(
    tiny: Path, measure: str, budget: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wave per batch, a few, or one, and a copy per batch: the same within the rounding of products of other
    heights (each batch's rows run through the layers alone whatever runs beside it; the next-token scores of a
    wave's rows are one product)."""
    model = load_model(None, None, tiny)
    together = MEASURES[measure](model)
    monkeypatch.setenv("ATTNVIZ_MEMORY", budget)
    waved = MEASURES[measure](model)
    np.testing.assert_allclose(waved, together, atol=1e-6, rtol=0)
    monkeypatch.setattr("attnviz.analysis.rerun.BATCH_BYTES", 1)
    alone = MEASURES[measure](model)
    np.testing.assert_allclose(alone, together, atol=1e-5, rtol=0)
    assert np.isfinite(together).sum() >= 2


@pytest.mark.parametrize("budget", [None, "1"])
def test_each_layer_is_dequantised_once_a_wave_and_never_two_at_once(
    tiny: Path, budget: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every matrix of a layer is dequantised once for all the batches of a wave that rerun it (once in all with
    one wave; with a wave per layer's batch, once for each wave that starts at or before it); what is held is
    one layer's tensors at a time; W_U's rows are read once a wave; the model's weights are its file's again after."""
    if budget is not None:
        monkeypatch.setenv("ATTNVIZ_MEMORY", budget)
    model = load_model(None, None, tiny)
    weights = model.weights
    assert isinstance(weights, GGUF)
    read: dict[str, int] = {}
    held: list[set[str]] = []
    scored_rows = [0]
    dequantised, hold, tensor = GGUF.dequantised, Held.hold, GGUF.tensor

    def counted(self: GGUF, info, raw):  # type: ignore[no-untyped-def]
        read[info.name] = read.get(info.name, 0) + 1
        return dequantised(self, info, raw)

    def holding(self: Held, names) -> None:  # type: ignore[no-untyped-def]
        names = list(names)
        held.append({name.split(".")[1] for name in names})
        hold(self, names)

    def rows_read(self: GGUF, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        if name == model.output_matrix() and rows is not None:
            scored_rows[0] += len(rows)
        return tensor(self, name, rows)

    monkeypatch.setattr(GGUF, "dequantised", counted)
    monkeypatch.setattr(Held, "hold", holding)
    monkeypatch.setattr(GGUF, "tensor", rows_read)
    ablate(model, TEXT)
    assert model.weights is weights
    assert all(len(layers) <= 1 for layers in held)
    vocabulary = weights.shape(model.output_matrix())[0]
    matrices = {name for name in model.expected() if name.startswith("blk.") and len(weights.shape(name)) == 2}
    assert set(read) == matrices
    waves = 1 if budget is None else model.layers  # each layer's heads are one batch here
    for name in matrices:
        layer = int(name.split(".")[1])
        assert read[name] == (1 if budget is None else layer + 1)
    assert scored_rows[0] == waves * vocabulary + len(model.encode(TEXT).ids)  # and the text's embeddings, once
