"""The BiLSTM cost model on the shipped dataset: learning, determinism, losses, fine-tuning, persistence."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import torch
from archive_helpers import assert_tampered_arrays_are_named
from conftest import SOURCE, TARGET, TINY

from tenset_tools.frame import group_keys
from tenset_tools.metrics import evaluate_predictions, pairwise_accuracy
from tvm_transfer.cost_model import CostModelFileError, load_cost_model, make_cost_model
from tvm_transfer.cost_model.bilstm import inputs as bilstm_data
from tvm_transfer.cost_model.bilstm_model import BiLSTMCostModel


def _sample(frame, n, seed=0):
    return frame.sample(n=n, random_state=seed).reset_index(drop=True)


@pytest.mark.parametrize(
    ("loss", "kernel_scaling", "store_sequence"),
    [
        ("rmse", "standard", True),
        ("rmse", "standard", False),
        ("lambdarank", "standard", True),
        ("rmse", "quantile", True),
    ],
)
def test_beats_a_constant_predictor_on_held_out_tasks(loss, kernel_scaling, store_sequence, task_split):
    train, test = task_split
    settings = {"loss": loss, "kernel_scaling": kernel_scaling, "store_sequence": store_sequence, **TINY}
    model = BiLSTMCostModel(seed=0, **settings).pretrain(train)
    preds = model.predict_features(model.frame_features(test))
    labels = test["norm_throughput"].to_numpy()
    constant = pairwise_accuracy(labels, np.full(len(test), labels.mean()), group_keys(test))
    learned = evaluate_predictions(test, preds)["pairwise_accuracy"]
    assert model.last_fit["epochs"] >= 2 and np.std(preds) > 0
    assert learned > constant + 0.04, (learned, constant)


def test_same_seed_same_model_other_seed_other_model(task_split):
    train, test = task_split
    small = _sample(train, 160)
    settings = {**TINY, "epochs": 3}
    x = BiLSTMCostModel(**settings).frame_features(test.head(64))
    first = BiLSTMCostModel(seed=5, **settings).pretrain(small).predict_features(x)
    again = BiLSTMCostModel(seed=5, **settings).pretrain(small).predict_features(x)
    other = BiLSTMCostModel(seed=6, **settings).pretrain(small).predict_features(x)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


def test_score_of_a_candidate_does_not_depend_on_its_batch(task_split):
    train, test = task_split
    model = BiLSTMCostModel(**{**TINY, "epochs": 1}).pretrain(_sample(train, 64))
    x = model.frame_features(test)
    together = model.predict_features(x)
    alone = np.concatenate([model.predict_features(x[i : i + 1]) for i in range(0, len(x), 37)])
    np.testing.assert_allclose(together[::37], alone, rtol=1e-5, atol=1e-6)


# ---- transfer ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pretrained(target_split, tmp_path_factory):
    """A tiny model pretrained on the source target, saved; and a few target records to fine-tune on."""
    source, target = target_split
    assert set(source["target_id"]) == {SOURCE} and set(target["target_id"]) == {TARGET}
    model = BiLSTMCostModel(**{**TINY, "epochs": 4, "fine_tune_epochs": 6}).pretrain(source)
    path = tmp_path_factory.mktemp("bilstm") / "base.zip"
    model.save(str(path))  # a MetaSchedule CostModel: the FFI takes str paths
    few = target.groupby("task_id").head(12).reset_index(drop=True)
    return path, few, target


def _parameters(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model._net.named_parameters()}


def _changed(before: dict, after: dict, prefix: str) -> bool:
    names = [n for n in before if n.startswith(prefix)]
    assert names, prefix
    return any(not torch.equal(before[n], after[n]) for n in names)


@pytest.mark.parametrize(
    ("mode", "trained"),
    [
        ("full", {"trace.", "stores.", "kernel.", "task.", "head."}),
        ("head", {"head."}),
        ("task", {"task.", "head."}),
        ("plus", set()),
    ],
)
def test_fine_tune_modes_train_the_right_parameters(mode, trained, pretrained):
    path, few, target = pretrained
    model = load_cost_model(path)
    base = _parameters(model)
    base_preds = model.predict_features(model.frame_features(target))
    model.fine_tune(few, mode=mode)
    after = _parameters(model)
    for prefix in ("trace.", "stores.", "kernel.", "task.", "head."):
        assert _changed(base, after, prefix) == (prefix in trained), (mode, prefix)
    preds = model.predict_features(model.frame_features(target))
    assert not np.allclose(preds, base_preds)
    assert (model._residual is not None) == (mode == "plus")
    assert model.num_samples == model._pretrain_rows + len(few)


def test_task_mode_retrains_on_the_tasks_at_hand_only(pretrained):
    path, few, _ = pretrained
    tasks = sorted(few["task_id"].unique())[:2]
    model = load_cost_model(path)
    model.fine_tune(few, mode="task", tasks=tasks)
    assert model.last_fit["rows"] == int(few["task_id"].isin(tasks).sum())


def test_fine_tune_starts_from_the_base_every_time(pretrained):
    """Fine-tuning twice on the same records gives the same model (no drift across tuning updates)."""
    path, few, target = pretrained
    once = load_cost_model(path).fine_tune(few, mode="head")
    x = once.frame_features(target)
    twice = load_cost_model(path)
    twice.fine_tune(few.head(10), mode="head")
    twice.fine_tune(few.iloc[10:], mode="head")  # now holds the same target records as `once`
    np.testing.assert_allclose(twice.predict_features(x), once.predict_features(x), rtol=1e-5, atol=1e-6)


def test_fine_tune_needs_a_pretrained_model(pretrained):
    _, few, _ = pretrained
    with pytest.raises(RuntimeError, match="needs a pretrained model"):
        BiLSTMCostModel(**TINY).fine_tune(few)
    with pytest.raises(ValueError, match="unknown fine-tune mode 'partial'"):
        load_cost_model(pretrained[0]).fine_tune(few, mode="partial")


# ---- persistence --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["full", "plus"])
def test_save_load_round_trip_gives_identical_predictions(mode, pretrained, tmp_path):
    path, few, target = pretrained
    model = load_cost_model(path).fine_tune(few, mode=mode)
    saved = tmp_path / "tuned.zip"
    model.save(str(saved))
    restored = load_cost_model(saved)
    x = model.frame_features(target)
    np.testing.assert_array_equal(restored.predict_features(x), model.predict_features(x))
    assert restored.get_params() == model.get_params() and restored.pretrained
    # the base survives the round trip: fine-tuning the restored model again gives the same model
    again = load_cost_model(saved).fine_tune(few.head(1), mode=mode)
    reference = load_cost_model(path).fine_tune(few, mode=mode).fine_tune(few.head(1), mode=mode)
    np.testing.assert_allclose(again.predict_features(x), reference.predict_features(x), rtol=1e-5, atol=1e-6)


def test_quantile_kernel_scaling_is_kept_with_the_model(task_split, tmp_path):
    train, test = task_split
    settings = {**TINY, "epochs": 3, "seed": 0}
    model = BiLSTMCostModel(kernel_scaling="quantile", **settings).pretrain(_sample(train, 200))
    x = model.frame_features(test)
    scaled = bilstm_data.scaled_kernel(bilstm_data.unpack(x)[0], model._stats)
    assert np.abs(scaled).max() <= 1.0 and scaled.std() > 0.1  # rows outside the training range clip
    saved = tmp_path / "quantile.zip"
    model.save(str(saved))
    restored = load_cost_model(saved)
    assert restored.kernel_scaling == "quantile"
    np.testing.assert_array_equal(restored.predict_features(x), model.predict_features(x))
    standard = BiLSTMCostModel(kernel_scaling="standard", **settings).pretrain(_sample(train, 200))
    assert not np.allclose(standard.predict_features(x), model.predict_features(x))
    with pytest.raises(ValueError, match="cannot change \\['kernel_scaling'\\]"):
        restored.set_params(kernel_scaling="standard")


def test_make_cost_model_loads_a_pretrained_file(pretrained):
    path, _, target = pretrained
    base = load_cost_model(path)
    model = make_cost_model("bilstm", pretrained=path, fine_tune_mode="head", fine_tune_epochs=3)
    assert isinstance(model, BiLSTMCostModel) and model.pretrained
    assert model.fine_tune_mode == "head" and model.fine_tune_epochs == 3
    x = base.frame_features(target.head(20))
    np.testing.assert_array_equal(model.predict_features(x), base.predict_features(x))
    fresh = make_cost_model("bilstm", hidden=8)
    assert not fresh.pretrained and fresh.hidden == 8
    with pytest.raises(ValueError, match="cannot change \\['hidden'\\]"):
        make_cost_model("bilstm", pretrained=path, hidden=64)
    with pytest.raises(ValueError, match="unknown fine_tune_mode 'partial'"):
        make_cost_model("bilstm", pretrained=path, fine_tune_mode="partial")


def test_another_version_or_model_is_refused(pretrained, tmp_path):
    path, _, _ = pretrained
    old = tmp_path / "old.zip"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(old, "w") as dst:
        for item in src.namelist():
            data = src.read(item)
            if item == "meta.json":
                data = data.replace(b'"format_version": 3', b'"format_version": 0')
            dst.writestr(item, data)
    with pytest.raises(CostModelFileError, match=r"version 0, expected .* version 3; retrain"):
        load_cost_model(old)
    with pytest.raises(
        CostModelFileError, match="holds a BiLSTMCostModel model; load it with BiLSTMCostModel"
    ):
        make_cost_model("mlp").load(str(path))


def test_a_missing_or_misshaped_array_names_the_file_and_the_key(pretrained, tmp_path):
    assert_tampered_arrays_are_named(pretrained[0], tmp_path, "stats/h_mean", "base/head.0.bias")


def test_bad_arguments_are_clear_errors(dataset):
    with pytest.raises(ValueError, match="unknown loss 'mae'"):
        BiLSTMCostModel(loss="mae")
    with pytest.raises(ValueError, match="unknown fine_tune_mode"):
        BiLSTMCostModel(fine_tune_mode="encoder")
    with pytest.raises(ValueError, match="unknown kernel_scaling 'rank'"):
        BiLSTMCostModel(kernel_scaling="rank")
    with pytest.raises(ValueError, match="divisible by heads"):
        BiLSTMCostModel(hidden=5, heads=4).pretrain(dataset.head(20))
    no_kernel = dataset.head(20).copy()
    no_kernel["kernel_features"] = None
    with pytest.raises(ValueError, match="have no kernel_features"):
        BiLSTMCostModel().pretrain(no_kernel)
    no_stores = dataset.head(20).assign(store_features=None)
    with pytest.raises(ValueError, match=r"have no store_features; fill them .*add_store_features"):
        BiLSTMCostModel(store_sequence=True).pretrain(no_stores)
    BiLSTMCostModel(store_sequence=False, **{**TINY, "epochs": 1}).pretrain(no_stores)  # not needed
    with pytest.raises(ValueError, match="at least one non-empty frame"):
        BiLSTMCostModel().pretrain([])
