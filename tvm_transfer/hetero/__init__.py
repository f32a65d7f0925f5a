"""Heterogeneous transfer (ModelX, Dey, Islam et al., HPDC 2025): adapt a frozen source performance model
to a target whose features differ in names and count.

- :class:`SourceModel`: the PyTorch MLP regressor ``M_S``, trained on the source and then frozen;
- :class:`ModelX`: alignment network ``M_A`` trained through ``M_S`` plus residual model ``M_R``;
- baselines of the same shape: :class:`ZeroShot`, :class:`LinearProbe`, :class:`FineTune`,
  :class:`TargetOnly`;
- transfer difficulty: :func:`grassmann_distance` of two data sets and :func:`transfer_distance` of a
  source/target pair in the source model's latent space;
- :func:`feature_view` / :func:`labelled_rows`: named feature spaces of a dataset; :func:`scores`: error
  and ranking metrics on held-out records;
- :func:`load_model`: any saved model of this package (source or adapted);
- :mod:`tvm_transfer.hetero.tuning` (imported on its own, it loads MetaSchedule): any of these estimators
  as the cost model of a tuning run, a VTA knob tuner (``ModelKnobTuner``) or a MetaSchedule cost model
  (``HeteroCostModel``).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from tvm_transfer.hetero.archive import read_model
from tvm_transfer.hetero.baselines import FineTune, LinearProbe, TargetOnly, ZeroShot
from tvm_transfer.hetero.distance import (
    common_space,
    grassmann_distance,
    principal_angles,
    principal_basis,
    transfer_distance,
)
from tvm_transfer.hetero.errors import (
    FeatureWidthError,
    ModelFileMismatchError,
    NotFittedError,
    TooFewSamplesError,
)
from tvm_transfer.hetero.evaluation import sample_rows, scores
from tvm_transfer.hetero.modelx import MODES, ModelX
from tvm_transfer.hetero.residual import RESIDUAL_KINDS
from tvm_transfer.hetero.source import SourceModel
from tvm_transfer.hetero.views import VIEWS, feature_view, labelled_rows

__all__ = [
    "MODES",
    "RESIDUAL_KINDS",
    "VIEWS",
    "FeatureWidthError",
    "FineTune",
    "LinearProbe",
    "ModelFileMismatchError",
    "ModelX",
    "NotFittedError",
    "SourceModel",
    "TargetOnly",
    "TooFewSamplesError",
    "ZeroShot",
    "common_space",
    "feature_view",
    "grassmann_distance",
    "labelled_rows",
    "load_model",
    "principal_angles",
    "principal_basis",
    "sample_rows",
    "scores",
    "transfer_distance",
]


def load_model(path: str | Path | IO[bytes]) -> SourceModel | ModelX:
    """A :class:`SourceModel` or :class:`ModelX` saved by its ``save``, whichever the file holds."""
    meta, _, _ = read_model(path, ("SourceModel", "ModelX"))
    return SourceModel.load(path) if meta["model"] == "SourceModel" else ModelX.load(path)
