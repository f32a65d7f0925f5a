"""The errors of heterogeneous transfer, each named after what the user has to fix."""

from __future__ import annotations

from tvm_transfer.common.archive import CostModelFileError


class FeatureWidthError(ValueError):
    """A feature matrix does not have the columns a fitted model was fitted on (count or names)."""


class TooFewSamplesError(ValueError):
    """Fewer rows than a fit (or a subspace of the asked dimension) needs."""


class NotFittedError(RuntimeError):
    """``predict`` (or another use of the fitted state) before ``fit``."""


class ModelFileMismatchError(CostModelFileError):
    """A saved heterogeneous-transfer model is not what the caller asked for: another model class, a file
    whose checksums do not match its contents, or an adapted model of another source model."""
