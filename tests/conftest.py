"""Shared fixtures: the host target and small real tuning budgets."""

from __future__ import annotations

import logging

import pytest
import tvm

from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.target import host_target
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.workloads import Workload, make_workload

logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def target() -> tvm.target.Target:
    import_tensor_intrin_fast()
    return host_target()


@pytest.fixture(scope="session")
def small_options() -> TuneOptions:
    """Two batches of 8 candidates from a population of 32: ~15 s per run on 2 cores."""
    return TuneOptions(trials=16, trials_per_iter=8, population_size=32, progress=False)


@pytest.fixture(scope="session")
def matmul() -> Workload:
    return make_workload("matmul", (64, 64, 64))
