"""The CPU multi-level cost model (validity head + advanced head on lowered-IR features) in MetaSchedule:
its lowered features, its use inside ``tune_tir``, and learning from the failures MetaSchedule reports."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from ms_helpers import sample_candidates, tiny_tune_tir, tune_context
from tvm.s_tir import meta_schedule as ms

from tenset_tools.features import LOWERED_FEATURE_NAMES
from tvm_transfer.callbacks import FailureLog
from tvm_transfer.common.estimators import PerformanceModel, ValidityModel
from tvm_transfer.cost_model import CostModelFileError, load_cost_model, make_cost_model
from tvm_transfer.cost_model.multilevel import INVALID_SCORE, MultiLevelCostModel
from tvm_transfer.runner import TimedRunner, local_runner, runner_seconds
from tvm_transfer.workloads import make_workload


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


def _result(seconds: float | None, error: str | None = None) -> ms.runner.RunnerResult:
    return ms.runner.RunnerResult(run_secs=None if seconds is None else [seconds], error_msg=error)


def test_metaschedule_failure_costs_train_the_validity_head(target, matmul, tmp_path):
    """Runner errors and 1e10-second records (MetaSchedule's failure cost in its database) are failures."""
    context = tune_context(matmul, target)
    candidates = sample_candidates(context, 12)
    model = MultiLevelCostModel(seed=0)
    rows = model.features(context, candidates)
    size = rows[:, -1 - len(LOWERED_FEATURE_NAMES) + LOWERED_FEATURE_NAMES.index("unrolled_size")]
    slow = size > np.median(size)  # a rule the lowered features can express, standing for "times out"
    results = [
        _result(1e10) if bad and i % 2 else _result(None, "LocalRunner: Timeout") if bad else _result(1e-4)
        for i, bad in enumerate(slow)
    ]
    assert np.isinf(runner_seconds(_result(1e10))) and runner_seconds(_result(1e-4)) == pytest.approx(1e-4)
    model.update(context, candidates, results)
    assert model.num_samples == 12
    assert np.isinf(np.asarray(model._costs)[slow]).all()  # the 1e10 records are failures, not slow runs
    assert np.isfinite(np.asarray(model._costs)[~slow]).all()
    scores = model.predict(context, candidates)
    # Six rows of each class: V runs on its fallback threshold and must already reject the failures.
    assert (scores[slow] == INVALID_SCORE).mean() >= 0.8
    assert (scores[~slow] > INVALID_SCORE).all()
    assert model.rejected_keys <= model.scored_keys and len(model.scored_keys) == 12
    path = tmp_path / "multilevel.zip"
    model.save(str(path))
    restored = load_cost_model(str(path))
    assert restored.fallback_threshold == 0.5
    assert np.allclose(restored.predict_features(rows), scores)


def test_hyper_parameters_are_checked_alike_by_the_constructor_and_set_params():
    with pytest.raises(ValueError, match="fallback_threshold"):
        MultiLevelCostModel(fallback_threshold=1.5)
    model = MultiLevelCostModel()
    with pytest.raises(ValueError, match="fallback_threshold"):
        model.set_params(fallback_threshold=1.5)
    assert model.fallback_threshold == 0.5
    validity = ValidityModel()
    for bad in ({"target_recall": 0.0}, {"n_folds": 1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ValidityModel(**bad)
        with pytest.raises(ValueError, match=next(iter(bad))):
            validity.set_params(**bad)
    assert (validity.target_recall, validity.n_folds) == (0.98, 3)
    with pytest.raises(ValueError, match="unknown objective 'rank:ndcg'"):
        PerformanceModel().set_params(objective="rank:ndcg")


@pytest.mark.slow
def test_runner_timeouts_of_a_real_run_reach_the_model(target, tmp_path):
    """A real tuning run with a tight runner timeout: every timed-out candidate is a failure the model
    learned from, and the model keeps scoring (and rejecting) candidates."""
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    workload = make_workload("matmul", (512, 512, 512))  # random schedules: ~3 ms .. ~0.5 s
    model = make_cost_model("multilevel", seed=0)
    evolution = ms.search_strategy.EvolutionarySearch(population_size=32, init_min_unmeasured=16)
    database = tiny_tune_tir(
        workload,
        target,
        tmp_path,
        model,
        trials=24,
        strategy=evolution,
        seed=0,
        timeout_sec=0.3,
        num_threads=2,
    )
    stored = [float(r.run_secs[0]) for r in database.get_all_tuning_records()]
    failed = sum(s >= 1e9 for s in stored)
    assert 0 < failed < len(stored), f"expected some timeouts under 0.3 s, got {failed} of {len(stored)}"
    assert model.num_samples == len(stored)
    assert int(np.isinf(model._costs).sum()) == failed
    assert model.rejected_keys <= model.scored_keys and len(model.scored_keys) > len(stored)


def test_failure_log_names_each_outcome():
    log = FailureLog()
    built = [ms.builder.BuilderResult(path, None) for path in ("/ok", "/slow", "/crash")]
    built.append(ms.builder.BuilderResult(None, "first line\nLLVM error: bad"))
    ran = [_result(1e-3), _result(None, "LocalRunner: Timeout"), _result(None, "segfault"), _result(None)]
    log._inst.apply(None, 0, [], built, ran)  # the Python callback, without a task scheduler
    assert [r["kind"] for r in log.rows] == ["ok", "timeout", "run", "build"]
    assert log.rows[0]["seconds"] == pytest.approx(1e-3) and np.isinf(log.rows[1]["seconds"])
    assert log.rows[3]["error"] == "LLVM error: bad" and log.rows[3]["artifact"] is None
    assert isinstance(TimedRunner(local_runner()).walls, dict)
