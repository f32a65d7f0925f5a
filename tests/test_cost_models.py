"""Our cost models inside real MetaSchedule runs, and their persistence."""

import json

import numpy as np
import pytest
from archive_helpers import archive_blobs, write_archive_blobs
from ms_helpers import sample_candidates, tiny_tune_tir, tune_context
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.common.boosters import group_balanced_weights
from tvm_transfer.cost_model import CostModelFileError, load_cost_model, make_cost_model
from tvm_transfer.cost_model.gbdt import LightGBMCostModel, XGBoostCostModel
from tvm_transfer.cost_model.mlp import MLPCostModel
from tvm_transfer.runner import measuring_workers

MODELS = {"xgboost": XGBoostCostModel, "lightgbm": LightGBMCostModel, "mlp": MLPCostModel}


def counting(model_class):
    """The model class, counting how often MetaSchedule calls it (behaviour unchanged)."""

    @derived_object
    class Counting(model_class._cls):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.calls = {"predict": 0, "update": 0}

        def predict(self, context, candidates):
            self.calls["predict"] += 1
            return super().predict(context, candidates)

        def update(self, context, candidates, results):
            self.calls["update"] += 1
            super().update(context, candidates, results)

    return Counting


@pytest.fixture(scope="module")
def measured(target, matmul, tmp_path_factory):
    """16 real measurements of a 64^3 matmul (candidates and runner results)."""
    context = tune_context(matmul, target)
    candidates = sample_candidates(context, 16)
    builder, runner = measuring_workers(target)
    builds = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in candidates])
    assert all(b.error_msg is None for b in builds)
    runner_inputs = [
        ms.runner.RunnerInput(b.artifact_path, "cpu", c.args_info)
        for b, c in zip(builds, candidates, strict=True)
    ]
    results = [f.result() for f in runner.run(runner_inputs)]
    assert all(r.error_msg is None for r in results)
    return context, candidates, results


@pytest.mark.parametrize("name", list(MODELS))
def test_model_is_called_by_tune_tir(name, target, matmul, tmp_path):
    model = counting(MODELS[name])()
    tiny_tune_tir(matmul, target, tmp_path, model)
    assert model.calls["update"] == 2  # once per measured batch
    assert model.calls["predict"] >= 4  # every generation of the evolutionary search
    assert model.num_samples == 16


@pytest.mark.parametrize("name", list(MODELS))
def test_predictions_change_after_update_and_follow_measurements(name, measured):
    context, candidates, results = measured
    model = make_cost_model(name)
    before = model.predict(context, candidates)
    model.update(context, candidates, results)
    after = model.predict(context, candidates)
    assert not np.allclose(before, after)
    np.testing.assert_array_equal(after, model.predict(context, candidates))  # deterministic once fitted
    throughput = 1.0 / np.array([np.mean([float(s) for s in r.run_secs]) for r in results])
    # fitted on these measurements, the ranking must follow them
    rank_corr = np.corrcoef(np.argsort(np.argsort(after)), np.argsort(np.argsort(throughput)))[0, 1]
    assert rank_corr > 0.5


@pytest.mark.parametrize("name", list(MODELS))
def test_save_load_round_trip_gives_identical_predictions(name, measured, tmp_path):
    context, candidates, results = measured
    model = make_cost_model(name, seed=3)
    model.update(context, candidates[:12], results[:12])
    path = tmp_path / f"{name}.model"
    model.save(str(path))
    restored = make_cost_model(name)
    restored.load(str(path))
    np.testing.assert_array_equal(restored.predict(context, candidates), model.predict(context, candidates))
    assert restored.num_samples == 12 and restored.seed == 3
    # the restored model keeps learning from where it was
    restored.update(context, candidates[12:], results[12:])
    assert restored.num_samples == 16


def test_a_fine_tuned_xgboost_starts_as_its_prior_and_learns_a_correction_of_it(measured, tmp_path):
    context, candidates, results = measured
    prior = make_cost_model("xgboost", num_rounds=30)
    prior.update(context, candidates[:8], results[:8])
    before = prior.predict(context, candidates)
    tuned = prior.fine_tuned(num_rounds=10)
    np.testing.assert_array_equal(tuned.predict(context, candidates), before)
    tuned.update(context, candidates[8:], results[8:])
    assert tuned.num_samples == 8 and tuned.prior_rounds == 30  # learns from its own rows only
    np.testing.assert_array_equal(prior.predict(context, candidates), before)  # the prior is untouched
    seconds = np.array([np.mean([float(s) for s in r.run_secs]) for r in results[8:]])
    labels = seconds.min() / seconds
    error = {
        m: np.abs(model.predict(context, candidates[8:]) - labels).mean()
        for m, model in (("prior", prior), ("tuned", tuned))
    }
    assert error["tuned"] < error["prior"]
    # Saved and loaded, it predicts the same and keeps learning on top of the same prior.
    path = tmp_path / "tuned.model"
    tuned.save(str(path))
    restored = load_cost_model(str(path))
    np.testing.assert_array_equal(restored.predict(context, candidates), tuned.predict(context, candidates))
    restored.update(context, candidates[8:], results[8:])
    tuned.update(context, candidates[8:], results[8:])
    np.testing.assert_array_equal(restored.predict(context, candidates), tuned.predict(context, candidates))
    with pytest.raises(RuntimeError, match="fine_tuned needs a fitted XGBoostCostModel"):
        make_cost_model("xgboost").fine_tuned()
    # An archive whose prior does not fit its booster is refused, naming the file.
    blobs = archive_blobs(path)
    meta = json.loads(blobs["meta.json"])
    meta["params"]["prior_rounds"] = 1000
    blobs["meta.json"] = json.dumps(meta).encode()
    write_archive_blobs(tmp_path / "edited.model", blobs)
    with pytest.raises(CostModelFileError, match=r"edited\.model: model\.bin holds 40 boosting rounds"):
        load_cost_model(str(tmp_path / "edited.model"))


def test_a_ranking_xgboost_ranks_a_task_and_keeps_its_objective_when_saved_and_fine_tuned(measured, tmp_path):
    context, candidates, results = measured
    ranker = make_cost_model("xgboost", objective="rank:pairwise", num_rounds=30)
    ranker.update(context, candidates[:12], results[:12])
    throughput = 1.0 / np.array([np.mean([float(s) for s in r.run_secs]) for r in results])
    scores = ranker.predict(context, candidates[:12])
    assert np.corrcoef(np.argsort(np.argsort(scores)), np.argsort(np.argsort(throughput[:12])))[0, 1] > 0.5
    path = tmp_path / "ranker.model"
    ranker.save(str(path))
    restored = load_cost_model(str(path))
    assert restored.objective == "rank:pairwise"
    np.testing.assert_array_equal(restored.predict(context, candidates), ranker.predict(context, candidates))
    tuned = restored.fine_tuned(num_rounds=10)
    assert tuned.objective == "rank:pairwise"
    tuned.update(context, candidates[12:], results[12:])  # one workload: one ranking group
    assert not np.array_equal(tuned.predict(context, candidates), ranker.predict(context, candidates))
    with pytest.raises(ValueError, match=r"unknown objective 'rank:ndcg'; choose from"):
        make_cost_model("xgboost", objective="rank:ndcg")


def test_a_group_balanced_xgboost_weighs_every_group_the_same(tmp_path):
    weights = group_balanced_weights(np.array(["big"] * 12 + ["small"] * 3))
    np.testing.assert_allclose([weights[:12].sum(), weights[12:].sum()], [7.5, 7.5])
    assert weights.mean() == pytest.approx(1.0)
    rows = np.random.default_rng(0).random((30, 336))
    labels = np.linspace(0.1, 1.0, 30)

    def predictions(groups, balance_groups):
        model = make_cost_model("xgboost", num_rounds=20, balance_groups=balance_groups)
        return model.fit_features(rows, labels, groups).predict_features(rows)

    even, uneven = ["a"] * 15 + ["b"] * 15, ["a"] * 27 + ["b"] * 3
    # Groups of one size: every weight is 1, so the model is the plain one.
    np.testing.assert_array_equal(predictions(even, True), predictions(even, False))
    assert not np.array_equal(predictions(uneven, True), predictions(uneven, False))
    model = make_cost_model("xgboost", num_rounds=20, balance_groups=True).fit_features(rows, labels, uneven)
    model.save(str(tmp_path / "even.model"))
    restored = load_cost_model(str(tmp_path / "even.model"))
    assert restored.balance_groups and restored.fine_tuned().balance_groups
    np.testing.assert_array_equal(restored.predict_features(rows), model.predict_features(rows))
    with pytest.raises(ValueError, match="'rank:pairwise' ranks within groups already"):
        make_cost_model("xgboost", objective="rank:pairwise", balance_groups=True)
    with pytest.raises(ValueError, match="'rank:pairwise' ranks within groups already"):
        model.set_params(objective="rank:pairwise")
    assert model.objective == "reg:squarederror"  # refused before anything changed


def test_corrupt_file_is_a_clear_error(tmp_path):
    path = tmp_path / "broken.model"
    path.write_bytes(b"this is not a model")
    with pytest.raises(CostModelFileError, match=r"broken\.model.*format version 3"):
        make_cost_model("xgboost").load(str(path))


def test_other_version_and_other_model_are_refused(measured, tmp_path):
    context, candidates, results = measured
    model = make_cost_model("lightgbm")
    model.update(context, candidates, results)
    path = tmp_path / "lgbm.model"
    model.save(str(path))
    with pytest.raises(
        CostModelFileError, match="holds a LightGBMCostModel model; load it with LightGBMCostModel"
    ):
        make_cost_model("xgboost").load(str(path))
    old = tmp_path / "old.model"
    blobs = archive_blobs(path)
    blobs["meta.json"] = blobs["meta.json"].replace(b'"format_version": 3', b'"format_version": 0')
    write_archive_blobs(old, blobs)
    with pytest.raises(CostModelFileError, match=r"version 0, expected .* version 3; retrain"):
        make_cost_model("lightgbm").load(str(old))


def test_unknown_model_name():
    with pytest.raises(ValueError, match="unknown cost model 'gbm'"):
        make_cost_model("gbm")


@pytest.mark.parametrize("name", list(MODELS))
def test_feature_matrix_api_matches_the_metaschedule_path(name, measured, tmp_path):
    context, candidates, results = measured
    tuned = make_cost_model(name, seed=2)
    tuned.update(context, candidates, results)
    # The same rows through fit_features: features of the candidates, targets = normalised throughput.
    features = tuned.features(context, candidates)
    seconds = np.array([np.mean([float(s) for s in r.run_secs]) for r in results])
    fitted = make_cost_model(name, seed=2).fit_features(features, seconds.min() / seconds, ["t"] * 16)
    np.testing.assert_allclose(
        fitted.predict_features(features), tuned.predict(context, candidates), rtol=1e-5
    )
    np.testing.assert_array_equal(fitted.predict(context, candidates), fitted.predict_features(features))
    # Rows added by fit_features are saved and loaded like measurements, and update adds to them.
    path = tmp_path / "fitted.model"
    fitted.save(str(path))
    restored = load_cost_model(path)
    assert type(restored._inst) is MODELS[name]._cls and restored.num_samples == 16
    np.testing.assert_array_equal(restored.predict_features(features), fitted.predict_features(features))
    restored.update(context, candidates[:4], results[:4])
    assert restored.num_samples == 20


def test_feature_matrix_api_errors():
    model = make_cost_model("xgboost")
    with pytest.raises(RuntimeError, match="not been fitted"):
        model.predict_features(np.zeros((2, 336), np.float32))
    with pytest.raises(ValueError, match="2 feature rows, 3 targets"):
        model.fit_features(np.zeros((2, 336)), [1.0, 0.5, 0.2], ["a", "a", "a"])
    model.fit_features(np.random.default_rng(0).random((8, 336)), np.linspace(0.1, 1, 8), ["a"] * 8)
    with pytest.raises(ValueError, match="width 10"):
        model.update_features(np.zeros((2, 10)), [1.0, 0.5], ["b", "b"])


def test_fit_replaces_update_accumulates_and_params_come_from_the_signature():
    model = make_cost_model("xgboost", num_rounds=5)
    rows = np.random.default_rng(0).random((8, 336))
    model.fit_features(rows, np.linspace(0.1, 1, 8), ["a"] * 8)
    model.fit_features(rows[:4], np.linspace(0.1, 1, 4), ["b"] * 4)
    assert model.num_samples == 4
    model.update_features(rows[4:], np.linspace(0.1, 1, 4), ["b"] * 4)
    assert model.num_samples == 8
    assert model.get_params()["num_rounds"] == 5
    model.set_params(max_depth=3)
    assert model.get_params()["max_depth"] == 3
    with pytest.raises(ValueError, match=r"unknown XGBoostCostModel hyper-parameter\(s\) \['depth'\]"):
        model.set_params(depth=3)


def test_a_constructor_must_keep_every_hyper_parameter_it_names():
    from tvm_transfer.common.params import HyperParameters

    class Forgetful(HyperParameters):
        def __init__(self, depth: int = 3, rate: float = 0.1) -> None:
            self._keep_hyper_parameters({"depth": depth})  # `rate` is named but not passed on

    with pytest.raises(TypeError, match=r"Forgetful: the constructor's arguments lack \['rate'\]"):
        Forgetful()
