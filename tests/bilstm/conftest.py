"""Shared data of the BiLSTM tests: the shipped dataset, split by task and by target."""

from __future__ import annotations

import pytest

from tenset_tools import SHIPPED_DATASET
from tenset_tools.schema import add_normalised_throughput, read_dataset
from tenset_tools.split import by_target, by_task

#: A tiny configuration: trains in seconds on 2 cores, still learns something.
TINY = {
    "hidden": 16, "lstm_layers": 2, "heads": 2, "task_dim": 8, "epochs": 8, "patience": 4, "batch_size": 64,
    "threads": 1,
}  # fmt: skip
SOURCE, TARGET = "llvm/znver4/2", "llvm/x86-64-v3/1"


@pytest.fixture(scope="session")
def dataset():
    return add_normalised_throughput(read_dataset(SHIPPED_DATASET))


@pytest.fixture(scope="session")
def task_split(dataset):
    return by_task(dataset, train_ratio=0.7, seed=0)


@pytest.fixture(scope="session")
def target_split(dataset):
    """(source records, target records): whole targets."""
    return by_target(dataset, test_targets=[TARGET])
