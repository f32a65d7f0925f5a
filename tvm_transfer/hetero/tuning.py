"""Adapted models (ModelX and its baselines) as the cost model of a tuning run on the target.

Any estimator of this package's shape (``fit(X, y)`` on a named feature frame, ``predict(X)``; e.g.
:class:`~tvm_transfer.hetero.ModelX`, :class:`~tvm_transfer.hetero.TargetOnly`,
:class:`~tvm_transfer.hetero.ZeroShot`) steers the search, refitted after every batch of measurements on
the target rows it was adapted with (``prior``) plus the run's own measurements:

- :class:`ModelKnobTuner`: a VTA knob tuner (the AutoTVM-like loop of
  :class:`~tvm_transfer.vta.ml2tuner.BaselineTuner`: simulated annealing over the knob space under the
  model's scores, the best unvisited configurations profiled, a share ``epsilon`` at random) whose model
  sees the target's named features of each configuration (by default VTA's visible features);
- :class:`HeteroCostModel`: a MetaSchedule cost model (``ms.CostModel``) whose model sees each candidate
  through a named feature view computed from the candidate (by default the pooled schedule trace, the
  ``trace`` view of :mod:`tvm_transfer.hetero.views`).

Labels are normalised throughput: per workload, best latency / latency, failed measurements 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from tenset_tools.features.trace import candidate_trace_json, encode_trace
from tenset_tools.frame import normalised_throughput
from tvm_transfer.cost_model.base import LearnedCostModel
from tvm_transfer.hetero.inputs import named_matrix, target_vector
from tvm_transfer.hetero.views import TRACE_VIEW_NAMES, pooled_trace
from tvm_transfer.vta.ml2tuner.base import KnobTuner
from tvm_transfer.vta.ml2tuner.measurer import VtaMeasurer
from tvm_transfer.vta.ml2tuner.runs import TunerInputError
from vta_ext.features import VISIBLE_FEATURE_NAMES

#: ``(measurer, space indices) -> named feature frame``: what a knob tuner's model sees of configurations.
KnobFeatures = Callable[[VtaMeasurer, np.ndarray], pd.DataFrame]
#: ``(context, candidates) -> named feature frame``: what a MetaSchedule cost model's estimator sees.
CandidateFeatures = Callable[[ms.TuneContext, Sequence[ms.MeasureCandidate]], pd.DataFrame]


def visible_frame(measurer: VtaMeasurer, indices: np.ndarray) -> pd.DataFrame:
    """VTA's visible features (workload, knobs, hardware; the ``kernel`` view of VTA records) of the
    given space indices, named as :data:`vta_ext.features.VISIBLE_FEATURE_NAMES`."""
    return pd.DataFrame(measurer.visible(indices).astype(np.float64), columns=list(VISIBLE_FEATURE_NAMES))


def trace_frame(context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate]) -> pd.DataFrame:
    """The ``trace`` view (:data:`~tvm_transfer.hetero.views.TRACE_VIEW_NAMES`) of MetaSchedule
    candidates, computed as for dataset records: their encoded trace rows, pooled."""
    rows = [pooled_trace(encode_trace(candidate_trace_json(c))) for c in candidates]
    return pd.DataFrame(
        np.array(rows, dtype=np.float64).reshape(len(rows), len(TRACE_VIEW_NAMES)),
        columns=list(TRACE_VIEW_NAMES),
    )


def _prior_rows(prior: tuple[Any, Any] | None, who: str) -> tuple[pd.DataFrame | None, np.ndarray | None]:
    """``prior`` = ``(X, y)`` as a named frame and float labels (``None, None`` without one)."""
    if prior is None:
        return None, None
    if not (isinstance(prior, tuple | list) and len(prior) == 2):
        raise TunerInputError(
            f"{who}: prior must be a pair (X, y) of target rows and labels, got a {type(prior).__name__}"
        )
    matrix, names = named_matrix(prior[0], who)
    labels = target_vector(prior[1], matrix.shape[0], who)
    return pd.DataFrame(matrix, columns=names), labels


class ModelKnobTuner(KnobTuner):
    """A VTA knob tuner steered by any estimator of named target features (ModelX, target-only, ...).

    Every round the model is fitted on ``prior`` (target rows it is adapted with, e.g. a few random
    configurations of *other* layers of this hardware) plus every profile of the run so far, labelled by
    normalised throughput (invalid configurations 0); simulated annealing over the knob space proposes the
    configurations it scores best, and the top ``batch_size`` unvisited ones (a share ``epsilon`` replaced
    by random ones) are profiled. Without a prior the first round is random, as in the baseline.

    Parameters
    ----------
    model:
        The estimator; ``fit`` replaces its state every round, so pass a fresh one per run.
    prior:
        ``(X, y)``: named target feature rows (the columns ``features`` gives) and their normalised
        throughputs, or None.
    features:
        What the model sees of configurations (default :func:`visible_frame`).
    batch_size, epsilon, seed, sa_parallel, sa_steps:
        Profiles per round, random share of a batch, seed, annealing walkers and steps per round.
    name:
        The ``method`` recorded in the run (default ``"model"``).
    """

    def __init__(
        self,
        model: Any,
        prior: tuple[Any, Any] | None = None,
        features: KnobFeatures = visible_frame,
        batch_size: int = 16,
        epsilon: float = 0.05,
        seed: int = 0,
        sa_parallel: int = 128,
        sa_steps: int = 80,
        name: str = "model",
    ) -> None:
        super().__init__(batch_size, seed, sa_parallel, sa_steps)
        if not (hasattr(model, "fit") and hasattr(model, "predict")):
            raise TunerInputError(f"model must have fit and predict, got {type(model).__name__}")
        if not 0.0 <= epsilon <= 1.0:
            raise TunerInputError(f"epsilon must lie in [0, 1], got {epsilon}")
        self.model, self.features, self.epsilon, self.method = model, features, epsilon, name
        self.prior_X, self.prior_y = _prior_rows(prior, "ModelKnobTuner")

    def _training_rows(self) -> tuple[pd.DataFrame | None, np.ndarray]:
        """Prior rows plus the run's profiles (normalised by the run's best so far, invalid 0)."""
        indices = np.array(list(self.profiled), dtype=np.int64)
        parts, labels = [], []
        if self.prior_X is not None:
            parts.append(self.prior_X)
            labels.append(self.prior_y)
        if len(indices):
            latencies = np.array(
                [self.profiled[i].latency if self.profiled[i].valid else np.inf for i in indices.tolist()]
            )
            own = self.features(self.measurer, indices)
            parts.append(own if self.prior_X is None else own[self.prior_X.columns])
            labels.append(normalised_throughput(latencies, np.zeros(len(latencies))))
        if not parts:
            return None, np.zeros(0)
        return pd.concat(parts, ignore_index=True), np.concatenate(labels)

    def _round(self, round_: int, n: int) -> None:
        visited = set(self.profiled)
        X, y = self._training_rows()
        if X is None or len(X) < 4:
            self._profile(self._random_unvisited(n, visited), round_)
            return
        self.model.fit(X, y)

        def score(points: np.ndarray) -> np.ndarray:
            return np.asarray(self.model.predict(self.features(self.measurer, points)), dtype=np.float64)

        self._profile(self._annealed_picks(score, n, self.epsilon, visited), round_)


@derived_object
class HeteroCostModel(LearnedCostModel):
    """A MetaSchedule cost model around an estimator of named target features (ModelX, target-only, ...).

    Candidates are described by ``feature_view`` (default :func:`trace_frame`: the pooled schedule trace,
    computable from any candidate); :meth:`fit_rows` with target rows (e.g. a few records of other
    tasks on this target) adapts it before the run, and every measured batch is added and the estimator
    refitted on all rows (:class:`~tvm_transfer.cost_model.base.LearnedCostModel`'s ``update``). Before
    any row the scores are uniform random, as for the package's other models.

    Parameters
    ----------
    estimator:
        The estimator; ``fit(X, y)`` on a named frame replaces its state.
    feature_view:
        ``(context, candidates) -> named frame``, the columns the estimator is fitted on.
    seed:
        Seeds the random scores before the first fit.
    """

    def __init__(
        self, estimator: Any, feature_view: CandidateFeatures = trace_frame, *, seed: int = 0
    ) -> None:
        super().__init__(seed=seed, use_hardware_features=False)
        self.estimator, self.feature_view = estimator, feature_view
        self._columns: list[str] | None = None

    def features(self, context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate]) -> np.ndarray:
        frame = self.feature_view(context, candidates)
        if self._columns is None:
            self._columns = list(frame.columns)
        return frame[self._columns].to_numpy(dtype=np.float32)

    def fit_rows(self, X: pd.DataFrame, y: Sequence[float], groups: Sequence) -> HeteroCostModel:
        """Adapt on named target rows ``X`` (the columns ``feature_view`` gives), their normalised throughputs
        ``y`` and groups (one per task); forgets earlier rows, as ``fit_features``."""
        matrix, names = named_matrix(X, "HeteroCostModel.fit_rows")
        self._columns = names
        return self.fit_features(matrix.astype(np.float32), y, groups)

    def _frame(self, features: np.ndarray) -> pd.DataFrame:
        if self._columns is None:
            raise RuntimeError("HeteroCostModel has no feature columns yet: call fit_rows or tune first")
        return pd.DataFrame(features.astype(np.float64), columns=self._columns)

    def _fit(self, features: np.ndarray, targets: np.ndarray, groups: np.ndarray) -> None:
        self.estimator.fit(self._frame(features), targets)

    def _predict(self, features: np.ndarray) -> np.ndarray:
        return np.asarray(self.estimator.predict(self._frame(features)), dtype=np.float64)

    def save(self, path: Any) -> None:
        raise NotImplementedError(
            "HeteroCostModel.save: save the estimator itself (ModelX.save, SourceModel.save)"
        )
