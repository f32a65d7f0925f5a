"""The guard around a pretrained cost model, with real models on real measurements: a model that ranks a
task's measurements keeps the search, one trained on inverted labels hands it to the online model."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy.stats import rankdata
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import shash2hex

from tenset_tools import SHIPPED_DATASET
from tenset_tools.frame import group_keys, throughput_labels
from tenset_tools.schema import add_normalised_throughput, read_dataset
from tvm_transfer.cost_model import make_cost_model
from tvm_transfer.features import KernelFeatureExtractor
from tvm_transfer.transfer.guard import GuardedCostModel, pretrained_weight
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.run import NetworkRun, RunConfig, extract_network_tasks
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.tuning.workdir import open_database


def _fitted(frame: pd.DataFrame, inverted: bool):
    """XGBoost fit on ``frame``; ``inverted``: the best records labelled worst and the reverse. Smaller
    than the default booster (50 rounds of depth 6), so that a thousand records fit in seconds."""
    model = make_cost_model("xgboost", seed=0, num_rounds=50, max_depth=6)
    labels = throughput_labels(frame)
    if inverted:
        labels = np.where(labels > 0, 1.01 - labels, 0.0)
    return model.fit_features(model.frame_features(frame), labels, group_keys(frame))


def _misleading(corpus: pd.DataFrame):
    """A real model fit on the shipped dataset and ``corpus`` with inverted labels."""
    shipped = add_normalised_throughput(read_dataset(SHIPPED_DATASET))
    return _fitted(pd.concat([shipped, add_normalised_throughput(corpus)], ignore_index=True), inverted=True)


def _replay(guard: GuardedCostModel, work_dir, target) -> list[ms.TuneContext]:
    """Feed a real run's measurements to ``guard``, one batch per task, as the task scheduler would."""
    by_task: dict = {}
    for record in open_database(work_dir).get_all_tuning_records():
        by_task.setdefault(record.workload.mod, []).append(record)
    contexts = []
    for mod, records in by_task.items():
        context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", num_threads=1)
        results = [ms.runner.RunnerResult(run_secs=list(r.run_secs), error_msg=None) for r in records]
        guard.update(context, [r.as_measure_candidate() for r in records], results)
        contexts.append((context, [r.as_measure_candidate() for r in records]))
    return contexts


def test_the_weight_is_a_clipped_linear_function_of_the_correlation():
    assert pretrained_weight(0.2, 0.2, 0.3) == 0.0 and pretrained_weight(-0.9, 0.2, 0.3) == 0.0
    assert pretrained_weight(0.35, 0.2, 0.3) == pytest.approx(0.5)
    assert pretrained_weight(0.5, 0.2, 0.3) == 1.0 and pretrained_weight(0.9, 0.2, 0.3) == 1.0
    with pytest.raises(ValueError, match="margin must be > 0"):
        GuardedCostModel(make_cost_model("xgboost"), margin=0.0)


def test_set_params_is_checked_as_the_constructor_is_and_refuses_before_changing_anything():
    guard = GuardedCostModel(make_cost_model("xgboost"))
    with pytest.raises(ValueError, match="margin must be > 0"):
        guard.set_params(blend="linear", margin=0.0)
    with pytest.raises(ValueError, match=r"min_measured \(4\) must be at least min_batch \(8\)"):
        guard.set_params(min_batch=8, min_measured=4)
    assert (guard.blend, guard.margin, guard.min_batch, guard.min_measured) == ("rank", 0.3, 4, 16)
    guard.set_params(min_batch=8, min_measured=32, blend="linear")
    assert (guard.blend, guard.min_batch, guard.min_measured) == ("linear", 8, 32)


def test_a_new_online_model_is_the_one_that_learns_and_neither_model_changes_once_a_batch_was_judged(
    pack, tuned_mlp, target
):
    work_dir, _ = tuned_mlp
    guard = GuardedCostModel(pack.model())
    online = make_cost_model("xgboost")
    guard.set_params(online=online)
    assert guard.online_ is online
    _replay(guard, work_dir, target)
    assert online.num_samples == len(open_database(work_dir).get_all_tuning_records())
    for name in ("online", "pretrained"):
        with pytest.raises(ValueError, match=f"cannot change \\['{name}'\\]"):
            guard.set_params(**{name: make_cost_model("xgboost")})
    assert guard.online_ is online
    guard.set_params(margin=0.5)  # only the models are fixed


def test_the_guard_weighs_real_models_on_a_real_runs_measurements(pack, tuned_mlp, target):
    work_dir, _ = tuned_mlp
    measured = len(open_database(work_dir).get_all_tuning_records())
    # The fixture's run measured 4 candidates per task. The model trained on these measurements ranks them
    # all together, though not always the 4 of the sub-microsecond output layer, whose order is timing
    # noise: judge it on the run's candidates pooled.
    good = GuardedCostModel(pack.model(), min_measured=measured)
    contexts = _replay(good, work_dir, target)
    assert len(good.decisions_) == 3
    assert good.running_correlation() > 0.5 and good.decisions_[-1].weight == 1.0

    # The model trained on inverted labels loses every task's ranking on that task's own 4 candidates.
    bad = GuardedCostModel(_misleading(pack.corpus()), min_measured=4)
    _replay(bad, work_dir, target)
    assert all(d.correlation <= bad.threshold and d.weight == 0.0 for d in bad.decisions_)
    assert bad.running_correlation() < 0.0
    # With no weight left, the online model alone ranks the candidates.
    context, candidates = contexts[0]
    assert np.array_equal(bad.predict(context, candidates), bad.online_.predict(context, candidates))


def test_the_guard_waits_for_min_measured_candidates_before_it_judges(pack, tuned_mlp, target):
    work_dir, _ = tuned_mlp
    measured = len(open_database(work_dir).get_all_tuning_records())
    patient = GuardedCostModel(_misleading(pack.corpus()), min_measured=measured + 1)
    _replay(patient, work_dir, target)
    # Each batch's own correlation is known, but too few candidates were measured, for any task or over
    # all of them, to take the ranking from the pretrained model.
    assert all(d.correlation < 0.0 and math.isnan(d.running) for d in patient.decisions_)
    assert all(d.weight == 1.0 for d in patient.decisions_)
    pooled = GuardedCostModel(_misleading(pack.corpus()), min_measured=measured)
    _replay(pooled, work_dir, target)
    # Once every task's candidates together are enough, the pooled correlation decides the weight of a
    # task with too few of its own.
    assert math.isnan(pooled.decisions_[-1].running) and pooled.decisions_[-1].weight == 0.0
    with pytest.raises(ValueError, match="must be at least min_batch"):
        GuardedCostModel(pack.model(), min_batch=8, min_measured=4)


def test_a_blend_extracts_the_features_once_for_both_models(pack, tuned_mlp, target, monkeypatch):
    work_dir, _ = tuned_mlp
    # As the transfer policy builds it: our XGBoost online; the weight gives each model a share.
    guard = GuardedCostModel(
        pack.model(), make_cost_model("xgboost"), threshold=-1.0, margin=2.5, min_measured=4
    )
    contexts = _replay(guard, work_dir, target)
    context, candidates = contexts[0]
    weight = guard.weight(shash2hex(context.mod))
    assert (
        0.0 < weight < 1.0 and guard.online_.shared_features_key() == guard.pretrained.shared_features_key()
    )
    n = len(candidates)
    expected = (
        weight * rankdata(guard.pretrained.predict(context, candidates)) / n
        + (1 - weight) * rankdata(guard.online_.predict(context, candidates)) / n
    )
    extractions = []
    per_store = KernelFeatureExtractor.per_store
    monkeypatch.setattr(
        KernelFeatureExtractor, "per_store", lambda self, *a: extractions.append(1) or per_store(self, *a)
    )
    assert np.array_equal(guard.predict(context, candidates), expected)
    assert len(extractions) == 1
    # A linear blend scores each candidate alone, as the search's comparison across generations needs; a
    # blend of ranks within the call does not.
    guard.set_params(blend="linear")
    pretrained = guard.pretrained.predict(context, candidates)
    online = guard.online_.predict(context, candidates)
    np.testing.assert_allclose(
        guard.predict(context, candidates), weight * pretrained + (1 - weight) * online
    )
    np.testing.assert_allclose(guard.predict(context, candidates[:1]), guard.predict(context, candidates)[:1])
    guard.set_params(blend="rank")
    assert guard.predict(context, candidates[:1])[0] == pytest.approx(1.0)  # alone, it ranks first
    extractions.clear()
    # Updating scores the pretrained model and teaches the online one from the same single extraction.
    online_rows = guard.online_.num_samples
    results = [ms.runner.RunnerResult(run_secs=[1e-3 * (i + 1)], error_msg=None) for i in range(n)]
    guard.update(context, candidates, results)
    assert len(extractions) == 1 and guard.online_.num_samples == online_rows + n
    with pytest.raises(ValueError, match="unknown blend 'mean'"):
        GuardedCostModel(guard.pretrained, blend="mean")


def test_only_models_of_the_pooled_features_take_shared_rows():
    pooled = make_cost_model("xgboost").shared_features_key()
    assert pooled is not None and make_cost_model("lightgbm").shared_features_key() == pooled
    for name in ("bilstm", "multilevel"):  # inputs of their own: sequences, hidden compilation features
        model = make_cost_model(name)
        assert model.shared_features_key() is None
        with pytest.raises(TypeError, match="computes its own inputs"):
            model.predict_rows(np.zeros((1, 336), dtype=np.float32))


@pytest.mark.slow
def test_in_a_real_tuning_run_a_misleading_model_loses_its_weight_and_a_good_one_keeps_it(target, tmp_path):
    # ~2 min on 2 cores: a 32-trial source run of mlp's largest layer, then two guarded 24-trial runs.
    options = TuneOptions(trials=32, trials_per_iter=8, population_size=32, progress=False)
    (task,) = [t for t in extract_network_tasks("mlp", target) if t.task_name == "fused_matmul_add_relu1"]
    tune_network(
        NetworkRun(RunConfig.make("mlp", tmp_path / "source", target=target, options=options), [task])
    )
    from tenset_tools.metaschedule import convert_databases

    convert_databases([tmp_path / "source"], tmp_path / "source.parquet")
    corpus = read_dataset(tmp_path / "source.parquet")
    runs = {}
    for name, model in (
        ("good", _fitted(add_normalised_throughput(corpus), inverted=False)),
        ("misleading", _misleading(corpus)),
    ):
        guard = GuardedCostModel(model)
        options = replace(options, trials=24, seed=1)
        config = RunConfig.make(
            "mlp", tmp_path / name, target=target, options=options, plan=TuningPlan(cost_model=guard)
        )
        tune_network(NetworkRun(config, tasks=[task]))
        runs[name] = guard.decisions_
    assert len(runs["good"]) == len(runs["misleading"]) == 3
    assert runs["misleading"][-1].weight == 0.0 and runs["misleading"][-1].running < 0.2
    assert runs["good"][-1].weight >= 0.5 and runs["good"][-1].running > 0.35
