"""One fitted source model of the synthetic problem, shared by the tests of this folder."""

from __future__ import annotations

import numpy as np
import pytest
from hetero_synthetic import source_rows

from tvm_transfer.hetero import SourceModel


@pytest.fixture(scope="module")
def source_model() -> SourceModel:
    frame, labels = source_rows(1500, np.random.default_rng(100))
    return SourceModel(seed=0).fit(frame, labels)
