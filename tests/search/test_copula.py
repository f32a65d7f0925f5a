"""The conditional copula on synthetic data with a known dependence on the task descriptor."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tvm_transfer.search.copula import ConditionalCopula, best_quantile


def _frame(seed: int = 0) -> pd.DataFrame:
    """Five tasks of size s; good configurations have x near s (cost |x - s|), y is noise, hw constant."""
    rng = np.random.default_rng(seed)
    rows = []
    for task, size in enumerate([4.0, 5.0, 6.0, 7.0, 8.0]):
        for _ in range(60):
            x = size + rng.normal(0, 1.5)
            rows.append({"task": task, "size": size, "size_copy": size, "hw": 3.0, "x": x,
                         "y": rng.normal(), "k": 2.0, "cost": abs(x - size) + 0.01})  # fmt: skip
    return pd.DataFrame(rows)


def test_best_quantile_keeps_each_tasks_best_share():
    frame = _frame()
    kept = best_quantile(frame, 0.3)
    assert set(kept["task"]) == set(frame["task"])
    for task, rows in frame.groupby("task"):
        threshold = np.sort(rows["cost"])[int(0.3 * (len(rows) - 1))]
        assert (kept[kept["task"] == task]["cost"] <= threshold).all()
        assert len(kept[kept["task"] == task]) == int(0.3 * (len(rows) - 1)) + 1


def test_best_quantile_drops_failures_and_checks_input():
    frame = _frame()
    frame.loc[:5, "cost"] = np.inf
    assert np.isfinite(best_quantile(frame, 1.0)["cost"]).all()
    with pytest.raises(ValueError, match="quantile"):
        best_quantile(frame, 0.0)
    with pytest.raises(ValueError, match="'latency'"):
        best_quantile(frame, 0.3, cost="latency")


def test_conditional_samples_follow_the_condition():
    model = ConditionalCopula(quantile=0.3).fit(_frame(), ["size", "size_copy", "hw"], ["x", "y", "k"])
    means = [
        model.sample({"size": s, "size_copy": s, "hw": 3.0}, 400, seed=1)["x"].mean() for s in (4.5, 6, 7.5)
    ]
    assert means[0] < means[1] < means[2]
    assert means[0] == pytest.approx(4.5, abs=0.5) and means[2] == pytest.approx(7.5, abs=0.5)
    # Quantile filtering matters: the kept rows are much tighter around x = size than all rows.
    spread = model.sample({"size": 6, "size_copy": 6, "hw": 3.0}, 400, seed=2)["x"].std()
    assert spread < 1.0 < _frame()["x"].sub(_frame()["size"]).std()


def test_constant_columns_and_out_of_range_conditions():
    model = ConditionalCopula().fit(_frame(), ["size", "size_copy", "hw"], ["x", "y", "k"])
    assert model.constants_ == {"hw": 3.0, "k": 2.0}
    assert model.conditioned_columns_ == ["size"]  # duplicate and constant descriptors are not conditioned
    far = model.sample({"size": 100.0, "size_copy": 100.0, "hw": 9.0}, 200, seed=0)
    assert (far["k"] == 2.0).all()
    assert np.isfinite(far.to_numpy()).all()
    assert far["x"].mean() > 6.5  # clipped to the largest source size, not extrapolated to nonsense


def test_errors_name_the_problem():
    model = ConditionalCopula()
    with pytest.raises(RuntimeError, match="before fit"):
        model.sample({"size": 1.0}, 3)
    with pytest.raises(ValueError, match="lacks columns"):
        model.fit(_frame(), ["size"], ["z"])
    model.fit(_frame(), ["size"], ["x"])
    with pytest.raises(ValueError, match="descriptor lacks"):
        model.sample({"hw": 1.0}, 3)
    with pytest.raises(ValueError, match="distribution"):
        ConditionalCopula(distribution="cauchy")
