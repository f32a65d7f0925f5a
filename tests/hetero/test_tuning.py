"""Adapted models as the cost model of real tuning runs: a VTA knob tuning run on the simulator (a source
model of the stock VTA adapted to the extended one, tuning a layer that neither saw) and a MetaSchedule
run on this CPU (a per-store-feature source model adapted to trace features)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tenset_tools import SHIPPED_DATASET
from tenset_tools.frame import group_keys, normalised_throughput
from tenset_tools.schema import read_dataset
from tvm_transfer.hetero import ModelX, SourceModel, ZeroShot, labelled_rows
from tvm_transfer.hetero.tuning import HeteroCostModel, ModelKnobTuner, trace_frame, visible_frame
from tvm_transfer.hetero.views import TRACE_VIEW_NAMES
from tvm_transfer.vta.ml2tuner import TunerInputError, VtaMeasurer
from vta_ext.hw import HwConfig, preset
from vta_ext.workloads import RESNET18


def _random_rows(
    hw: HwConfig, layers: list[str], per_layer: int, seed: int
) -> tuple[pd.DataFrame, np.ndarray]:
    """Visible features and normalised throughput (per layer, invalid 0) of random configurations."""
    rng = np.random.default_rng(seed)
    frames, labels = [], []
    for layer in layers:
        measurer = VtaMeasurer(RESNET18[layer], hw)
        picks = rng.choice(len(measurer.space), per_layer, replace=False)
        latency = np.array([r.latency if r.valid else np.inf for r in map(measurer.profile, picks)])
        frames.append(visible_frame(measurer, picks))
        labels.append(normalised_throughput(latency, np.zeros(len(latency))))
    return pd.concat(frames, ignore_index=True), np.concatenate(labels)


class Reversed:
    """The control: an estimator whose scores are the negated scores of ``model``."""

    def __init__(self, model) -> None:
        self.model = model

    def fit(self, X, y):
        self.model.fit(X, y)
        return self

    def predict(self, X):
        return -self.model.predict(X)


@pytest.fixture(scope="module")
def vta_transfer():
    """Source: stock VTA, layers C2 and C5; adaptation: 24 extended-VTA rows of the same layers."""
    Xs, ys = _random_rows(HwConfig(), ["C2", "C5"], 100, seed=1)
    source = SourceModel(seed=0).fit(Xs, ys)
    return source, _random_rows(preset("evta"), ["C2", "C5"], 12, seed=2)


def _adapted(source: SourceModel) -> ModelX:
    # Fewer steps and restarts than the defaults: the test checks the wiring and the direction of the
    # effect, not the last digit of the alignment.
    return ModelX(source, mode="align", epochs=300, align_restarts=2, seed=0)


def test_adapted_model_ranks_configurations_of_a_layer_it_never_saw(vta_transfer):
    source, prior = vta_transfer
    model = _adapted(source).fit(*prior)
    X, y = _random_rows(preset("evta"), ["C8"], 100, seed=3)
    order = np.argsort(-model.predict(X))
    top, bottom = y[order[:50]].mean(), y[order[50:]].mean()
    assert top > 1.8 * bottom, (top, bottom)  # measured 0.34 vs 0.13


def test_knob_tuning_run_with_the_adapted_model_beats_its_reversed_scores(vta_transfer):
    source, prior = vta_transfer
    cache: dict = {}  # the simulator is deterministic: both runs may share results
    runs = {}
    for name, model in {"modelx": _adapted(source), "reversed": Reversed(_adapted(source))}.items():
        tuner = ModelKnobTuner(model, prior, batch_size=8, seed=0, sa_parallel=64, sa_steps=40, name=name)
        runs[name] = tuner.tune(VtaMeasurer(RESNET18["C8"], preset("evta"), cache), 32)
    adapted, control = runs["modelx"], runs["reversed"]
    assert adapted.n_profiles == 32 and adapted.method == "modelx"
    # Refitted every round: the last fit saw the 24 adaptation rows and the first 24 profiles.
    assert adapted.events[-1].round == 3
    # The adapted model steers away from configurations that fail (measured 1 of 32 vs 27 of 32) and to
    # faster ones.
    assert adapted.n_invalid_profiles <= 8 < 16 <= control.n_invalid_profiles
    assert adapted.best_latency <= control.best_latency


def test_knob_tuner_refuses_unusable_arguments(vta_transfer):
    source, (X, y) = vta_transfer
    with pytest.raises(TunerInputError, match="prior must be a pair"):
        ModelKnobTuner(ZeroShot(source), X)
    with pytest.raises(TunerInputError, match="model must have fit and predict"):
        ModelKnobTuner(object(), (X, y))
    with pytest.raises(TunerInputError, match="epsilon must lie in"):
        ModelKnobTuner(ZeroShot(source), (X, y), epsilon=1.5)


@pytest.fixture(scope="module")
def cpu_transfer():
    """Source: per-store features of the shipped znver4/2 records; target rows: the trace view of 5% of
    its x86-64-v3/1 records (none of them a 64x64x64 matmul)."""
    frame = read_dataset(SHIPPED_DATASET)
    Xs, ys, _ = labelled_rows(frame[frame["target_id"] == "llvm/znver4/2"], "kernel")
    Xt, yt, records = labelled_rows(frame[frame["target_id"] == "llvm/x86-64-v3/1"], "trace")
    few = np.random.default_rng(0).permutation(len(Xt))[: round(0.05 * len(Xt))]
    return SourceModel(seed=0).fit(Xs, ys), (Xt.iloc[few], yt[few], group_keys(records.iloc[few]))


def test_trace_features_of_candidates_have_the_view_columns(cpu_transfer, target, matmul):
    from ms_helpers import sample_candidates, tune_context

    context = tune_context(matmul, target)
    frame = trace_frame(context, sample_candidates(context, 4))
    assert list(frame.columns) == list(TRACE_VIEW_NAMES)
    assert len({tuple(r) for r in frame.to_numpy()}) > 1  # different schedules, different traces
    source, (X, y, groups) = cpu_transfer
    model = HeteroCostModel(ZeroShot(source))
    # MetaSchedule's object wrapper re-raises the NotImplementedError as a RuntimeError.
    with pytest.raises((NotImplementedError, RuntimeError), match="save the estimator itself"):
        model.fit_rows(X, y, groups).save("unused.model")


@pytest.mark.slow
def test_adapted_model_is_the_cost_model_of_a_metaschedule_run(cpu_transfer, target, matmul, tmp_path):
    from ms_helpers import sample_candidates, tiny_tune_tir, tune_context

    source, (X, y, groups) = cpu_transfer
    estimator = _adapted(source)
    model = HeteroCostModel(estimator).fit_rows(X, y, groups)
    tiny_tune_tir(matmul, target, tmp_path, model)
    assert model.num_samples == len(X) + 16  # the adaptation rows and every measured candidate
    assert estimator.fit_seconds_ > 0 and estimator.feature_names_in_ == list(TRACE_VIEW_NAMES)
    context = tune_context(matmul, target)
    scores = model.predict(context, sample_candidates(context, 8))
    assert np.isfinite(scores).all() and np.ptp(scores) > 0  # it ranks: not one constant
