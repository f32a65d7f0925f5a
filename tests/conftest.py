"""Shared fixtures: the host target and small real tuning budgets."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import tvm

from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.target import host_target
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.workloads import Workload, make_workload

logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    """Undo what ``tvm_transfer.cli.main`` does to the root logger: ``logging.basicConfig`` binds a handler
    to the ``sys.stderr`` of the moment (under ``capsys`` a stream closed when the test ends, on which
    every later log line failed with "I/O operation on closed file") and sets its level to INFO."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


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
