"""ModelX on synthetic problems whose relation to the source is known: alignment recovers a permutation
plus scaling across renamed, missing and extra columns; the residual model corrects a systematic offset."""

from __future__ import annotations

import numpy as np
from hetero_synthetic import TARGET_OF, permuted_target_rows, source_rows

from tvm_transfer.hetero import FineTune, LinearProbe, ModelX, TargetOnly, ZeroShot


def mse(model, frame, labels) -> float:
    return float(np.mean((model.predict(frame) - labels) ** 2))


def test_alignment_beats_zero_shot_and_target_only_on_held_out_rows(source_model):
    errors = {"aligned": [], "zero-shot": [], "target-only xgboost": [], "target-only mlp": []}
    for seed in range(3):
        rng = np.random.default_rng(seed)
        few, few_labels = permuted_target_rows(40, rng)
        held_out, held_out_labels = permuted_target_rows(500, rng)
        models = {
            "aligned": ModelX(source_model, mode="align", seed=seed).fit(few, few_labels),
            "zero-shot": ZeroShot(source_model).fit(few),
            "target-only xgboost": TargetOnly(seed=seed).fit(few, few_labels),
            "target-only mlp": TargetOnly(kind="mlp", seed=seed).fit(few, few_labels),
        }
        for name, model in models.items():
            errors[name].append(mse(model, held_out, held_out_labels))
    median = {name: float(np.median(values)) for name, values in errors.items()}
    # The label's variance on the target is ~1.3. On 10 draws of 40 rows the aligned model's error was
    # 0.03-0.15 in nine and 0.54 in one (a local minimum the restarts did not leave); the baselines were
    # 1.2-1.4 (zero-shot) and 0.55-1.4 (target-only). The median of three draws is compared.
    assert median["aligned"] < 0.5 * min(v for k, v in median.items() if k != "aligned"), median


def test_alignment_moves_the_renamed_columns_onto_their_source_features(source_model):
    rng = np.random.default_rng(3)
    few, few_labels = permuted_target_rows(60, rng)
    model = ModelX(source_model, mode="align").fit(few, few_labels)
    report = model.column_report()
    assert report["matched"] == ["f0", "f4"]
    assert report["source_only"] == ["f1", "f2", "f3", "f5", "f6", "f7"]
    assert set(report["target_only"]) == {"t3", "t5", "t1", "t2", "extra_noise", "extra_uniform"}
    # The learned map should send the renamed column that carries f3 (the most important renamed,
    # monotone feature) mostly into source feature f3.
    weight = model.aligner_.linear.weight.detach().numpy()  # (source, target)
    t3 = model.feature_names_in_.index(TARGET_OF[3][0])
    assert int(np.argmax(np.abs(weight[:, t3]))) == 3


def test_residual_model_corrects_a_systematic_offset(source_model):
    rng = np.random.default_rng(5)
    few, few_labels = source_rows(30, rng)
    held_out, held_out_labels = source_rows(500, rng)
    offset = 1.5
    zero_shot = mse(ZeroShot(source_model).fit(few), held_out, held_out_labels + offset)
    residual = ModelX(source_model, mode="residual").fit(few, few_labels + offset)
    both = ModelX(source_model, mode="both", epochs=300, align_restarts=1).fit(few, few_labels + offset)
    assert zero_shot > offset**2 * 0.9
    assert mse(residual, held_out, held_out_labels + offset) < 0.1 * zero_shot
    assert mse(both, held_out, held_out_labels + offset) < 0.1 * zero_shot


def test_the_baselines_fit_and_predict_target_columns(source_model):
    rng = np.random.default_rng(7)
    few, few_labels = permuted_target_rows(40, rng)
    held_out, held_out_labels = permuted_target_rows(200, rng)
    for model in (LinearProbe(source_model), FineTune(source_model)):
        predictions = model.fit(few, few_labels).predict(held_out)
        assert predictions.shape == (200,) and np.isfinite(predictions).all()
    # Fine-tuning the whole network starts from the zero-shot map and must improve on it here.
    assert mse(FineTune(source_model).fit(few, few_labels), held_out, held_out_labels) < mse(
        ZeroShot(source_model).fit(few), held_out, held_out_labels
    )
