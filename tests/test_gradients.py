"""attnviz's backward pass against torch autograd (transformers, eager, float32; fixtures/make_gradient_cases.py):
the gradient of the next-token loss and of a target's log-probability at every head's output and at the first
layer's input, attribution patching's estimates, saliency and activation patching, on a tiny checkpoint of every
family and on SmolLM2.

The bound is issue 38's: 1e-4 of the largest magnitude. The two sides compute the same float32 arithmetic in
other orders; measured, they differ by at most 2e-5 of it (SmolLM2's 30 layers), the tiny ones by 1e-5."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import families
import numpy as np
import pytest
from test_checkpoints import PACKAGES
from tiny_gguf import write_tiny_llama

from attnviz.ablation import target_id, token_text
from attnviz.attribution import SALIENCY_METHODS, attribution, estimated, patch, saliency
from attnviz.errors import AttnvizError, UsageError
from attnviz.gradients import backward
from attnviz.models import load_model

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GRADIENTS = FIXTURES / "gradients"
spec = importlib.util.spec_from_file_location("make_gradient_cases", FIXTURES / "make_gradient_cases.py")
assert spec is not None and spec.loader is not None
cases = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cases)
BOUND = 1e-4
NAMES = sorted(p.stem for p in GRADIENTS.glob("*.npz"))


def relative(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.abs(np.asarray(ours, np.float64) - theirs).max() / np.abs(theirs).max())


def model_of(name: str, directory: Path) -> Any:
    """The case's checkpoint, or a skip naming what is missing."""
    where = cases.CASES[name][0]
    if where.startswith("shared:"):
        if not cases.SHARED.is_dir():
            pytest.skip("../shared/fixtures/hf-tiny is not beside the checkout")
        return load_model(None, cases.SHARED / where.removeprefix("shared:"), None)
    if importlib.util.find_spec(PACKAGES["smollm2"]) is None:
        pytest.skip("needs smollm2 (its tokenizer, or the model itself)")
    if where.startswith("family:"):
        return load_model(None, families.folder(where.removeprefix("family:"), directory / name), None)
    return load_model(where, None, None)


def target_word(model: Any, token: int) -> str | None:
    """The target as a user would write it, where its text is that one token again."""
    word = token_text(model, token)
    try:
        return word if target_id(model, word) == token else None
    except UsageError:
        return None


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return {}


def case(name: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    if name not in loaded:
        loaded[name] = model_of(name, tmp_path_factory.mktemp(name))
    model, z = loaded[name], np.load(GRADIENTS / f"{name}.npz")
    assert list(model.encode(str(z["text"])).ids) == z["ids"].tolist()
    return model, z


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("measure", ["loss", "log_prob"])
def test_the_gradients_at_each_head_and_at_the_input_are_torchs(
    name: str, measure: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, z = case(name, loaded, tmp_path_factory)
    ids = tuple(z["ids"].tolist())
    g = backward(model, model.embed(np.asarray(ids)), ids, None if measure == "loss" else int(z["target"]))
    assert abs(g.value - float(z[f"{measure}:value"])) <= BOUND * max(1.0, abs(float(z[f"{measure}:value"])))
    expected = z[f"{measure}:z_grad"]
    ours = g.z_grad if expected.shape == g.z_grad.shape else g.z_grad[[0, -1]]  # SmolLM2's: first and last layers
    assert relative(ours, expected) <= BOUND
    assert relative(g.input_grad, z[f"{measure}:e_grad"]) <= BOUND
    for method in ("zero", "mean"):
        assert relative(estimated(g.z, g.z_grad, method), z[f"{measure}:{method}"]) <= BOUND


@pytest.mark.parametrize("name", ["llama", "gemma3", "gpt2", "gemma2", "smollm2"])
def test_attribution_patching_and_saliency_through_the_api_are_torchs(
    name: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, z = case(name, loaded, tmp_path_factory)
    text = str(z["text"])
    word = target_word(model, int(z["target"]))
    for measure, target in (("loss", None), ("log_prob", word)):
        if measure == "log_prob" and word is None:
            continue
        for method in ("zero", "mean"):
            result = attribution(model, text, method, target)
            assert result.estimate == "attribution patching" and result.method == method
            assert relative(result.delta, z[f"{measure}:{method}"]) <= BOUND
        for kind in SALIENCY_METHODS:
            scores = saliency(model, text, kind, target, steps=int(z["steps"])).scores
            expected = z[f"{measure}:{kind.replace('-', '_')}"]
            scale = path_magnitude(model, text, target, int(z["steps"])) if kind == SALIENCY_METHODS[2] else 0.0
            assert np.abs(scores - expected).max() <= BOUND * max(np.abs(expected).max(), scale)


def path_magnitude(model: Any, text: str, target: str | None, steps: int) -> float:
    """The largest token's Σ_d mean_k |e · ∂L/∂e(α_k e)|: the size of the terms integrated gradients sums, which
    near α = 0 are far larger than at e (a norm's gradient grows as its input shrinks: 240× on SmolLM2), their
    rounding with them; the sum's error is bounded relative to its terms, not to its result."""
    ids = model.encode(text).ids
    e = model.embed(np.asarray(ids))
    chosen = None if target is None else target_id(model, target)
    terms = sum(np.abs(e * backward(model, e * np.float32((k + 0.5) / steps), ids, chosen).input_grad)
                for k in range(steps))  # fmt: skip
    return float((terms / steps).sum(axis=1).max())


@pytest.mark.parametrize("name", ["llama", "gemma3", "gpt2", "smollm2"])
def test_activation_patching_exact_and_estimated_is_torchs(
    name: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, z = case(name, loaded, tmp_path_factory)
    clean, corrupt, _ = cases.CASES[name][2]
    word = target_word(model, int(z["patch_target"]))
    assert word is not None
    exact = patch(model, clean, corrupt, word)
    assert np.abs(exact.delta - z["patch:delta"]).max() <= BOUND
    assert abs(exact.corrupt_log_prob - float(z["patch:corrupt_log_prob"])) <= BOUND
    assert abs(exact.clean_log_prob - float(z["patch:clean_log_prob"])) <= BOUND
    guess = patch(model, clean, corrupt, word, estimate=True)
    assert guess.estimate == "attribution patching"
    assert relative(guess.delta, z["patch:estimate"]) <= BOUND


@pytest.mark.parametrize(
    ("clean", "corrupt", "shown"),
    [
        ("The cat sat on the mat", "The cat sat on the big mat", "token 5: ' mat' and ' big'"),
        ("The cat sat", "The cat sat on the mat", "token 3: its end and ' on'"),
        ("A dog ran", "The cat sat on the mat", "token 0: 'A' and 'The'"),
    ],
)
def test_patching_texts_of_different_lengths_are_refused_showing_where_they_differ(
    clean: str, corrupt: str, shown: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, _ = case("llama", loaded, tmp_path_factory)
    with pytest.raises(UsageError, match="patching needs as many") as error:
        patch(model, clean, corrupt, " dog")
    assert shown in str(error.value)


@pytest.mark.parametrize("position", [0, 3, 7])
def test_a_gradient_that_overflows_is_refused_naming_the_layer(position: int, tmp_path: Path) -> None:
    """A token whose embedding is zero under an RMS norm of ε 1e-30: the forward is finite (0 / √ε is 0), its
    gradient is not (1/√ε³ overflows float32), as in torch; the error names where it overflowed: the last layer's
    output where the token is the first (its row stays zero through every layer), else the first layer's input."""
    if not cases.SHARED.is_dir():
        pytest.skip("../shared/fixtures/hf-tiny is not beside the checkout")
    folder = tmp_path / "llama"
    shutil.copytree(cases.SHARED / "llama-tiny", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"rms_norm_eps": 1e-30}))
    model = load_model(None, folder, None)
    ids = list(model.encode("the quick brown fox jumps over the lazy dog").ids)
    model.resident()
    embeddings = model.weights.tensor("token_embd.weight").copy()
    embeddings[ids[position]] = 0
    model.weights.kept["token_embd.weight"] = embeddings
    assert np.isfinite(model.through(model.embed(np.asarray(ids)))).all()
    with pytest.raises(AttnvizError, match=r"the gradient at (layer \d+'s|the last layer's) \S+ is NaN or infinite"):
        backward(model, model.embed(np.asarray(ids)), tuple(ids), None)


def test_ablate_estimate_json_table_and_figure(cli, tmp_path: Path) -> None:
    """ablate --estimate writes ablate's document with "estimate"; --compare adds the exact ablation's agreement
    (the same exact Δ ablate gives) to the JSON, the table and the figure; --compare alone is refused."""
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    tiny = str(path)
    text = "the cat sat on the mat"
    doc = json.loads(cli("ablate", "--model-file", tiny, text, "--estimate", "--json").out)
    assert doc["schema"] == "attnviz.ablation/1" and doc["estimate"] == "attribution patching"
    model = load_model(None, None, path)
    np.testing.assert_allclose(doc["delta"], attribution(model, text).delta, rtol=0, atol=1e-12)
    both = json.loads(cli("ablate", "--model-file", tiny, text, "--estimate", "--compare", "--mean", "--json").out)
    exact = json.loads(cli("ablate", "--model-file", tiny, text, "--mean", "--json").out)
    assert "estimate" not in exact and -1 <= both["compare"]["rank_correlation"] <= 1
    worst = both["compare"]["worst"][0]
    assert worst["delta"] == exact["delta"][worst["layer"]][worst["head"]]
    assert worst["estimate"] == both["delta"][worst["layer"]][worst["head"]]
    table = cli("ablate", "--model-file", tiny, text, "--estimate", "--compare").out
    assert "estimated by attribution patching" in table and "Spearman's rank correlation" in table
    run = cli("ablate", "--model-file", tiny, text, "--estimate", "--compare", "-o", str(tmp_path / "a.png"), "--audit")
    assert run.code == 0, run.err
    run = cli("ablate", "--model-file", tiny, text, "--compare")
    assert (
        run.code == 2
        and run.err.strip()
        == "attnviz: error: --compare goes with --estimate (it compares the estimate with the exact ablation)"
    )
