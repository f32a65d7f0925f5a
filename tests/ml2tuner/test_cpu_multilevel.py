"""The multi-level CPU cost model (validity head + advanced head on lowered-IR features) in MetaSchedule."""

from __future__ import annotations

import numpy as np
import pytest
from ms_helpers import sample_candidates, tiny_tune_tir, tune_context

from tenset_tools.features import LOWERED_FEATURE_NAMES
from tvm_transfer.cost_model import CostModelFileError, load_cost_model, make_cost_model
from tvm_transfer.cost_model.multilevel import INVALID_SCORE, MultiLevelCostModel


def test_lowered_features_describe_the_candidates(target, matmul):
    context = tune_context(matmul, target)
    candidates = sample_candidates(context, 4)
    model = MultiLevelCostModel()
    rows = model.features(context, candidates)
    lowered = rows[:, -len(LOWERED_FEATURE_NAMES) - 1 : -1]
    assert (rows[:, -1] == 1).all()  # every sampled candidate lowers
    names = LOWERED_FEATURE_NAMES
    assert (lowered[:, names.index("n_stores")] > 0).all() and (
        lowered[:, names.index("max_loop_depth")] >= 1
    ).all()
    assert len({tuple(r) for r in lowered}) > 1  # different schedules, different lowered IR


def test_multilevel_runs_inside_tune_tir_and_filters_predicted_failures(target, matmul, tmp_path):
    model = make_cost_model("multilevel", seed=1)
    tiny_tune_tir(matmul, target, tmp_path, model)
    assert model.num_samples == 16
    # Validity head: rows labelled as failures (throughput 0, as MetaSchedule's 1e10 costs become) must be
    # scored below every valid prediction once the model has learned them. A fresh model, so that the
    # run's own (all valid) measurements do not contradict the probe's labels.
    model = make_cost_model("multilevel", seed=1)
    context = tune_context(matmul, target)
    candidates = sample_candidates(context, 24)
    rows = model.features(context, candidates)
    failing = rows[:, -len(LOWERED_FEATURE_NAMES) - 1 + LOWERED_FEATURE_NAMES.index("n_stores")] > np.median(
        rows[:, -len(LOWERED_FEATURE_NAMES) - 1 + LOWERED_FEATURE_NAMES.index("n_stores")]
    )
    model.fit_features(rows, np.where(failing, 0.0, 0.5), ["probe"] * len(rows))
    scores = model.predict_features(rows)
    assert (scores[failing] == INVALID_SCORE).mean() > 0.8
    assert (scores[~failing] > INVALID_SCORE).mean() > 0.8
    path = tmp_path / "multilevel.zip"
    model.save(str(path))
    restored = load_cost_model(str(path))
    assert isinstance(restored, MultiLevelCostModel)
    assert np.allclose(restored.predict_features(rows), scores)
    with pytest.raises(CostModelFileError):
        make_cost_model("xgboost").load(str(path))
