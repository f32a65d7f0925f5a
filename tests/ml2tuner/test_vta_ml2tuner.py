"""ML2Tuner on vta_ext: compile-only, V/P/A on held-out configurations, the two tuners, logs, CLI, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from archive_helpers import archive_blobs, write_archive_blobs

from tvm_transfer.cli import main as cli_main
from tvm_transfer.common.estimators import (
    AdvancedModel,
    FeatureShapeError,
    NotFittedError,
    PerformanceModel,
    ValidityModel,
)
from tvm_transfer.cost_model import CostModelFileError
from tvm_transfer.vta.ml2tuner import (
    TunerInputError,
    VtaMeasurer,
    load_log,
    make_tuner,
)
from tvm_transfer.vta.ml2tuner.evaluation import LayerData, rmse_ratio, validity_scores
from vta_ext import RESNET18, compile_only, measure, preset

HW = preset("default")
RECALL_BAR = 0.9  # V must keep at least 90% of the valid held-out configurations
RMSE_BAR = 0.9  # A's held-out RMSE must be below 0.9 x P's (the paper reports 0.919)


@pytest.fixture(scope="module")
def c9_cache() -> dict:
    """Every configuration of C9 (480) measured once; tuners share it (results are deterministic)."""
    cache: dict = {}
    VtaMeasurer(RESNET18["C9"], HW, cache).exhaustive()
    return cache


@pytest.fixture(scope="module")
def c9(c9_cache) -> LayerData:
    return LayerData.from_measurer(VtaMeasurer(RESNET18["C9"], HW, c9_cache))


def test_compile_only_matches_measure_and_is_cheaper_than_a_profile(c9_cache):
    space_size = len(c9_cache)
    for index in range(0, space_size, 23):
        knobs = VtaMeasurer(RESNET18["C9"], HW).knobs(index)
        compiled, measured = compile_only(RESNET18["C9"], knobs, HW), measure(RESNET18["C9"], knobs, HW)
        assert compiled.ok == (measured.error_stage != "compile")
        if compiled.ok:
            assert compiled.hidden_features == measured.hidden_features
        else:
            assert compiled.error_kind == measured.error_kind and compiled.hidden_features is None


def test_validity_model_recall_on_held_out_configurations(c9):
    """V on 30% of C9 and C10 (960 configurations, 65% invalid), scored on the other 70%."""
    c10 = LayerData.from_measurer(VtaMeasurer(RESNET18["C10"], HW))
    scores = validity_scores([c9, c10], train_fraction=0.3, seed=0)
    assert scores["recall"] >= RECALL_BAR, scores
    # It must also filter: far better precision than keeping everything (35% of these are valid).
    assert scores["precision"] > 0.65 and scores["invalid_filtered"] > 0.7, scores
    assert scores["kind_accuracy"] > 0.8, scores


def test_advanced_model_beats_performance_model_on_held_out_configurations():
    """C5 (the layer with the most valid configurations), 600 random configurations, 5 splits."""
    measurer = VtaMeasurer(RESNET18["C5"], HW)
    indices = np.random.default_rng(0).choice(len(measurer.space), 600, replace=False).tolist()
    data = LayerData.from_measurer(measurer, indices)
    ratios = [rmse_ratio([data], train_fraction=0.5, seed=seed)["ratio"] for seed in range(5)]
    assert np.mean(ratios) < RMSE_BAR, ratios


def test_ml2tuner_wastes_fewer_invalid_profiles_than_the_baseline(c9_cache):
    runs = {
        method: make_tuner(method, seed=0).tune(VtaMeasurer(RESNET18["C9"], HW, c9_cache), budget=48)
        for method in ("baseline", "ml2tuner")
    }
    base, ml2 = runs["baseline"], runs["ml2tuner"]
    assert base.n_profiles == ml2.n_profiles == 48
    assert base.n_compiles == 0 and ml2.n_compiles > ml2.n_profiles  # ML2Tuner compiles its short lists
    assert ml2.n_invalid_profiles <= base.n_invalid_profiles / 3, (
        base.n_invalid_profiles,
        ml2.n_invalid_profiles,
    )
    assert ml2.best_latency <= base.best_latency * 1.05
    # Compile failures are found without a profile: none of the profiled ones failed to compile.
    assert all(e.error_stage != "compile" for e in ml2.profiles)


def test_log_resume_replays_without_measuring(c9_cache, tmp_path, monkeypatch):
    log = tmp_path / "run.jsonl"
    first = make_tuner("ml2tuner", seed=3).tune(VtaMeasurer(RESNET18["C9"], HW, dict(c9_cache)), 32, log=log)
    header, cache = load_log(log)
    assert header["method"] == "ml2tuner" and len(cache) == 32

    def no_measure(*args, **kwargs):
        raise AssertionError("a resumed run must not measure logged configurations again")

    monkeypatch.setattr("tvm_transfer.vta.ml2tuner.measurer.measure", no_measure)
    again = make_tuner("ml2tuner", seed=3).tune(VtaMeasurer(RESNET18["C9"], HW, cache), 32)
    assert [e.index for e in again.profiles] == [e.index for e in first.profiles]
    assert again.best_latency == first.best_latency


def test_models_save_load_and_refuse_other_formats(tmp_path, c9):
    x, y = c9.visible[c9.valid], c9.throughput
    p = PerformanceModel(num_rounds=20).fit(x, y)
    p.save(tmp_path / "p.zip")
    assert np.allclose(PerformanceModel.load(tmp_path / "p.zip").predict(x), p.predict(x))
    v = ValidityModel(num_rounds=20).fit(c9.visible, c9.valid, c9.error_kind)
    v.save(tmp_path / "v.zip")
    restored = ValidityModel.load(tmp_path / "v.zip")
    assert restored.threshold_ == v.threshold_
    assert restored.predict_error_kind(c9.visible[:20]) == v.predict_error_kind(c9.visible[:20])
    with pytest.raises(CostModelFileError, match="holds a ValidityModel"):
        AdvancedModel.load(tmp_path / "v.zip")
    blobs = archive_blobs(tmp_path / "p.zip")
    meta = json.loads(blobs["meta.json"])
    meta["format_version"] = 99
    blobs["meta.json"] = json.dumps(meta)
    write_archive_blobs(tmp_path / "old.zip", blobs)
    with pytest.raises(CostModelFileError, match="version 99"):
        PerformanceModel.load(tmp_path / "old.zip")
    (tmp_path / "junk.zip").write_text("not a zip")
    with pytest.raises(CostModelFileError, match="not readable"):
        ValidityModel.load(tmp_path / "junk.zip")


def test_bad_input_raises_named_errors(c9):
    with pytest.raises(NotFittedError):
        PerformanceModel().predict(c9.visible)
    p = PerformanceModel(num_rounds=5).fit(c9.visible[c9.valid], c9.throughput)
    with pytest.raises(FeatureShapeError, match="fitted on"):
        p.predict(c9.visible[:, :5])
    with pytest.raises(FeatureShapeError, match="NaN"):
        PerformanceModel().fit(c9.visible[c9.valid], np.full(c9.valid.sum(), np.nan))
    with pytest.raises(FeatureShapeError, match="labels"):
        ValidityModel().fit(c9.visible, c9.valid[:3])
    with pytest.raises(ValueError, match="objective"):
        PerformanceModel(objective="mae")
    with pytest.raises(TunerInputError, match="budget"):
        make_tuner("baseline").tune(VtaMeasurer(RESNET18["C9"], HW), budget=0)
    with pytest.raises(TunerInputError, match="unknown method"):
        make_tuner("random")


def test_cli_ml2tune_prints_a_table(capsys, tmp_path):
    out_json = tmp_path / "rows.json"
    code = cli_main(
        ["ml2tune", "--layers", "C10", "--method", "both", "--budget", "24", "--batch-size", "8", "--quiet",
         "--json", str(out_json)]
    )  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0
    assert "| C10 | baseline | 0 | 24 |" in text and "| C10 | ml2tuner | 0 | 24 |" in text
    rows = json.loads(out_json.read_text())
    assert {r["method"] for r in rows} == {"baseline", "ml2tuner"} and all(r["best_ms"] > 0 for r in rows)
    with pytest.raises(SystemExit):
        cli_main(["ml2tune", "--layers", "C99"])
