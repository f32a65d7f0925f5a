"""The conditional copula on synthetic data with a known dependence on the task descriptor."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tvm_transfer.search_strategy.copula.copula import ORDERS, ConditionalCopula, best_quantile, ranked


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


def test_centre_is_the_conditional_median():
    model = ConditionalCopula(quantile=0.3).fit(_frame(), ["size", "size_copy", "hw"], ["x", "y", "k"])
    for size in (4.5, 6.0, 7.5):
        descriptor = {"size": size, "size_copy": size, "hw": 3.0}
        centre = model.centre(descriptor)
        assert list(centre.columns) == ["x", "y", "k"] and len(centre) == 1
        assert centre["k"].iloc[0] == 2.0  # constant column
        draws = model.sample(descriptor, 2000, seed=3)
        # each value column's conditional median, without the sampling noise
        assert centre["x"].iloc[0] == pytest.approx(draws["x"].median(), abs=0.15)
        assert centre["y"].iloc[0] == pytest.approx(draws["y"].median(), abs=0.15)
        assert centre["x"].iloc[0] == pytest.approx(size, abs=0.5)


def test_log_density_prefers_typical_values():
    model = ConditionalCopula(quantile=0.3).fit(_frame(), ["size", "size_copy", "hw"], ["x", "y", "k"])
    descriptor = {"size": 6.0, "size_copy": 6.0, "hw": 3.0}
    centre = model.centre(descriptor)
    values = pd.DataFrame({"x": [6.0, 7.0, 9.0, 6.0], "y": [centre["y"].iloc[0]] * 3 + [3.0], "k": 2.0})
    density = model.log_density(descriptor, values)
    assert density[0] > density[1] > density[2]  # farther from the conditional centre in x
    assert density[0] > density[3]  # or in y
    assert model.log_density(descriptor, centre) >= density.max()
    with pytest.raises(ValueError, match="lack columns"):
        model.log_density(descriptor, values[["x"]])


def test_max_r2_drops_collinear_descriptors():
    frame = _frame()
    frame["size_lin"] = 2 * frame["size"] + 1  # linear in size, but not a duplicate
    columns = ["size", "size_lin", "hw"]
    assert ConditionalCopula().fit(frame, columns, ["x"]).conditioned_columns_ == ["size", "size_lin"]
    model = ConditionalCopula(max_r2=0.999).fit(frame, columns, ["x"])
    assert model.conditioned_columns_ == ["size"]
    near = model.sample({"size": 7.5, "size_lin": 16.0, "hw": 3.0}, 400, seed=1)["x"].mean()
    assert near == pytest.approx(7.5, abs=0.5)
    with pytest.raises(ValueError, match="max_r2"):
        ConditionalCopula(max_r2=0.0)


def test_ranked_orders():
    draws = ["b", "a", "a", "c", "c", "c"]
    assert ranked(draws, "sample") == [("b", 1), ("a", 2), ("c", 3)]
    assert ranked(draws, "frequency") == [("c", 3), ("a", 2), ("b", 1)]
    assert ranked(draws, "centre", centre="z") == [("z", 0), ("c", 3), ("a", 2), ("b", 1)]
    assert ranked(draws, "centre", centre="a")[:2] == [("a", 2), ("c", 3)]
    scores = {"a": -1.0, "b": 0.0, "c": -5.0}
    order = ranked(draws, "density", centre="a", density=lambda keys: [scores[k] for k in keys])
    assert order == [("a", 2), ("b", 1), ("c", 3)]
    assert set(ORDERS) == {"frequency", "sample", "centre", "density"}
    with pytest.raises(ValueError, match="centre"):
        ranked(draws, "density", density=lambda keys: [0.0] * len(keys))
    with pytest.raises(ValueError, match="unknown order"):
        ranked(draws, "best")
