import numpy as np
import pandas as pd
import pytest
from tenset_helpers import make_record

from tenset_tools.schema import add_normalised_throughput, records_to_table
from tenset_tools.split import by_target, by_task, split, within_task


@pytest.fixture
def frame() -> pd.DataFrame:
    records = []
    for t, task in enumerate(["t0", "t1", "t2", "t3", "t4"]):
        for target, scale in (("cpu-a", 1.0), ("cpu-b", 2.0)):
            for i in range(10 + 2 * t):
                records.append(make_record(task, target, scale * (1 + i) * 1e-3))
            records.append(make_record(task, target, None))
    return add_normalised_throughput(records_to_table(records).to_pandas())


def _keys(part: pd.DataFrame) -> list:
    return sorted(zip(part["task_id"], part["target_id"], part["latency"].fillna(-1), strict=True))


def test_within_task_splits_each_group_by_ratio(frame):
    train, test = within_task(frame, train_ratio=0.75, seed=3)
    assert len(train) + len(test) == len(frame)
    sizes = frame.groupby(["task_id", "target_id"]).size()
    train_sizes = train.groupby(["task_id", "target_id"]).size()
    assert (train_sizes == np.floor(0.75 * sizes)).all()
    # Normalisation is recomputed per side: each side's best valid record of a group scores 1.
    for part in (train, test):
        best = part[part["valid"]].groupby(["task_id", "target_id"])["norm_throughput"].max()
        assert (best == 1.0).all()
    assert (test["norm_throughput"] <= 1.0).all()


def test_splits_are_reproducible_and_seed_dependent(frame):
    first, again, other = within_task(frame, seed=1), within_task(frame, seed=1), within_task(frame, seed=2)
    assert _keys(first.test) == _keys(again.test)
    assert _keys(first.test) != _keys(other.test)
    assert _keys(by_task(frame, seed=5).test) == _keys(by_task(frame, seed=5).test)


def test_by_task_keeps_tasks_whole(frame):
    train, test = by_task(frame, train_ratio=0.6, seed=0)
    assert not set(train["task_id"]) & set(test["task_id"])
    assert set(train["task_id"]) | set(test["task_id"]) == set(frame["task_id"])
    assert len(train) <= 0.6 * len(frame) or train["task_id"].nunique() == 1
    # Whole (task, target) groups move, so normalisation equals the full frame's.
    merged = pd.concat([train, test]).sort_values(["task_id", "target_id", "latency"])
    expected = frame.sort_values(["task_id", "target_id", "latency"])
    assert merged["norm_throughput"].tolist() == expected["norm_throughput"].tolist()


def test_by_target_keeps_best_latencies(frame):
    train, test = by_target(frame, test_targets=["cpu-b"])
    assert set(train["target_id"]) == {"cpu-a"} and set(test["target_id"]) == {"cpu-b"}
    full_b = frame[frame["target_id"] == "cpu-b"].sort_values(["task_id", "latency"])
    test_sorted = test.sort_values(["task_id", "latency"])
    assert test_sorted["norm_throughput"].tolist() == full_b["norm_throughput"].tolist()
    assert test[test["valid"]].groupby("task_id")["norm_throughput"].max().eq(1.0).all()
    drawn = by_target(frame, train_ratio=0.5, seed=0)
    assert drawn.train["target_id"].nunique() == 1 and drawn.test["target_id"].nunique() == 1


def test_bad_arguments(frame):
    with pytest.raises(ValueError, match="cpu-z"):
        by_target(frame, test_targets=["cpu-z"])
    with pytest.raises(ValueError, match="train_ratio"):
        within_task(frame, train_ratio=1.0)
    with pytest.raises(ValueError, match="unknown split scheme"):
        split(frame, "random")
    with pytest.raises(ValueError, match="at least 2"):
        by_task(frame[frame["task_id"] == "t0"])
    assert len(split(frame, "by_task", train_ratio=0.5, seed=0).train) > 0
