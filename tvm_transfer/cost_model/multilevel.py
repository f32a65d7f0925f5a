"""ML2Tuner's multi-level model for MetaSchedule on CPUs: a validity head and an advanced head.

Each candidate is described by the pooled per-store kernel features, the target's hardware vector and the
*lowered-IR* features of its schedule (:mod:`tenset_tools.features.lowered`: loop nest, allocations per
scope, vector / parallel extents, stores, unrolled size) — the CPU analogue of VTA's hidden compilation
features. The validity head (:class:`~tvm_transfer.common.estimators.ValidityModel`) learns online from the
run's own failures: runner errors (timeouts, crashes), which MetaSchedule passes to ``update`` with no run
times, and records carrying MetaSchedule's 1e10-second failure cost. (Build errors never reach a cost
model: MetaSchedule's ``UpdateCostModel`` drops them.) The advanced head
(:class:`~tvm_transfer.common.estimators.AdvancedModel`) learns normalised throughput, failures as 0.
Candidates the validity head rejects, and candidates that cannot even be lowered, get a score below any
valid prediction, so the search does not send them to the builder. Until the first successful measurement
the model returns random scores (as every model here).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence

import numpy as np
import pandas as pd
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import shash2hex

from tenset_tools.features.lowered import LOWERED_FEATURE_NAMES, candidate_lowered_features
from tvm_transfer.common.estimators import AdvancedModel, ValidityModel
from tvm_transfer.cost_model.base import LearnedCostModel

#: Score of candidates predicted invalid (valid predictions are normalised throughputs, around 0..1).
INVALID_SCORE = -1.0


@derived_object
class MultiLevelCostModel(LearnedCostModel):
    """V (validity) + A (throughput on kernel, hardware and lowered-IR features) as one PyCostModel.

    Parameters
    ----------
    target_recall:
        Share of valid candidates V's threshold keeps (out-of-fold estimate).
    fallback_threshold:
        V's threshold on P(valid) while too few failures have been seen to estimate one (fewer than 6 of
        either class, early in a run): 0.5 rejects the candidates V finds more likely to fail than not.
        ``ValidityModel``'s 0.2 suits its pre-trained use, but online from a handful of rows XGBoost's
        P(valid) rarely leaves the base rate, so 0.2 would reject nothing within a short run.
    use_lowered_features:
        Append the lowered-IR features (one lowering per new candidate, cached by structural hash);
        without them A sees the kernel and hardware features only.
    seed, use_hardware_features:
        As :class:`~tvm_transfer.cost_model.base.LearnedCostModel`.
    """

    def __init__(
        self,
        *,
        target_recall: float = 0.95,
        fallback_threshold: float = 0.5,
        use_lowered_features: bool = True,
        seed: int = 0,
        use_hardware_features: bool = True,
    ) -> None:
        super().__init__(seed=seed, use_hardware_features=use_hardware_features)
        self._keep_hyper_parameters(locals())
        self._lowered: dict[str, tuple[np.ndarray, bool]] = {}
        self._validity: ValidityModel | None = None
        self._advanced: AdvancedModel | None = None
        self.n_filtered = 0  # candidates scored INVALID_SCORE so far (predicted invalid or not lowerable)
        # Distinct candidates (structural hashes) the search asked this model to score, and those it rejected.
        self.scored_keys: set[str] = set()
        self.rejected_keys: set[str] = set()

    def _check_params(self, params: dict) -> None:
        super()._check_params(params)
        if not 0.0 < params["fallback_threshold"] < 1.0:
            raise ValueError(
                f"fallback_threshold is a probability in (0, 1), got {params['fallback_threshold']}"
            )

    def frame_features(self, frame: pd.DataFrame) -> np.ndarray:
        """Refused: V learns from the failures of a tuning run and A from lowered IR, which dataset frames
        do not carry."""
        raise ValueError(
            "MultiLevelCostModel learns inside a tuning run (failures and lowered IR), not from a dataset "
            "frame; train xgboost, lightgbm, mlp or bilstm on datasets"
        )

    def predict(self, context: ms.TuneContext, candidates: list[ms.MeasureCandidate]) -> np.ndarray:
        """Predicted normalised throughput; ``INVALID_SCORE`` for candidates predicted to fail; uniform
        random scores before any update."""
        # One structural hash per candidate serves the counters and the lowered-feature cache.
        keys = _structural_keys(candidates)
        self.scored_keys.update(keys)
        if not self._fitted:
            return self._rng.uniform(size=len(candidates))
        scores = self.predict_features(self._features_of(context, candidates, keys))
        self.rejected_keys.update(k for k, s in zip(keys, scores, strict=True) if s == INVALID_SCORE)
        return scores

    def features(self, context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate]) -> np.ndarray:
        """Kernel (+ hardware) features, then LOWERED_FEATURE_NAMES and a "lowered ok" column."""
        keys = _structural_keys(candidates) if self.use_lowered_features else []
        return self._features_of(context, candidates, keys)

    def _features_of(
        self, context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate], keys: list[str]
    ) -> np.ndarray:
        """:meth:`features`, given the candidates' structural hashes (the lowered-feature cache's keys)."""
        base = super().features(context, candidates)
        if not self.use_lowered_features:
            return base
        todo = [i for i, k in enumerate(keys) if k not in self._lowered]
        if todo:
            rows, ok = candidate_lowered_features(context.target, [candidates[i] for i in todo])
            for j, i in enumerate(todo):
                self._lowered[keys[i]] = (rows[j], bool(ok[j]))
        lowered = np.array([self._lowered[k][0] for k in keys], dtype=np.float32)
        ok = np.array([[self._lowered[k][1]] for k in keys], dtype=np.float32)
        return np.hstack([base, lowered.reshape(len(keys), len(LOWERED_FEATURE_NAMES)), ok])

    def _fit(self, features: np.ndarray, targets: np.ndarray, groups: np.ndarray) -> None:
        valid = targets > 0
        self._validity = ValidityModel(
            target_recall=self.target_recall, fallback_threshold=self.fallback_threshold, seed=self.seed
        ).fit(features, valid)
        # A learns failures as throughput 0, as XGBModel does with its 1e10 costs: on a CPU the failures
        # that dominate are runner timeouts, i.e. the slowest schedules, so their neighbourhood is ranked
        # low even while V is not yet sure enough to reject it.
        self._advanced = AdvancedModel(seed=self.seed).fit(features, targets)

    def _predict(self, features: np.ndarray) -> np.ndarray:
        keep = self._validity.predict(features)
        if self.use_lowered_features:
            keep &= features[:, -1] > 0  # a candidate that cannot be lowered cannot be built
        self.n_filtered += int((~keep).sum())
        return np.where(keep, self._advanced.predict(features), INVALID_SCORE)

    def _state_bytes(self) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as archive:
            for name, model in (("validity.zip", self._validity), ("advanced.zip", self._advanced)):
                member = io.BytesIO()
                model.save(member)
                archive.writestr(name, member.getvalue())
        return out.getvalue()

    def _load_state(self, blob: bytes) -> None:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            self._validity = ValidityModel.load(io.BytesIO(archive.read("validity.zip")))
            self._advanced = AdvancedModel.load(io.BytesIO(archive.read("advanced.zip")))


def _structural_keys(candidates: Sequence[ms.MeasureCandidate]) -> list[str]:
    return [shash2hex(c.sch.mod) for c in candidates]
