"""A guard around a pretrained cost model: when its predictions do not rank a task's own measurements,
the search's scores shift to a model learning online from this run only.

A pretrained model is a bet that what it learnt elsewhere ranks the new task's candidates. The guard checks
that bet on every measured batch. Before a batch is measured the search chose it with the current scores;
after it is measured, :meth:`GuardedCostModel.update` asks the pretrained model for its predictions of the
batch (the model changes only in ``update``, so these are the predictions it made when the batch was
chosen) and computes their Spearman rank correlation with the measured throughputs (1 / latency; failed
candidates count as 0). The task's running correlation is one Spearman correlation over the pooled
(prediction, throughput) pairs of its first ``window`` batches, once they hold ``min_measured``
candidates (fewer rank too noisily to decide: a batch is the search's top picks, a narrow slice of the
task); from it the weight of the pretrained model is

    w = clip((rho - threshold) / margin, 0, 1)

so at or below ``threshold`` the online model alone ranks the candidates, from ``threshold + margin`` up
the pretrained model alone does, linearly in between. A task with no such batch yet takes the weight of
the correlation pooled over every task seen so far (a model misleading on one task of a new machine is
likely misleading on the next), or 1 before any measurement. Scores are blended by rank,
``w * rank(pretrained) + (1 - w) * rank(online)`` (ranks scaled to (0, 1]), for models whose scores are
on different scales; ``blend="linear"`` blends the scores themselves, ``w * pretrained + (1 - w) *
online``, for models that both predict the task's normalised throughput (ours do). Only a linear blend
scores a candidate the same whatever else is scored with it, which the evolutionary search assumes: the
batch it measures is the best-scored of all its generations, each generation scored in its own call.
Both models keep learning from every batch (``adapt_pretrained=False`` leaves the pretrained one as it
is). Every decision is kept in :attr:`GuardedCostModel.decisions_`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np
from scipy.stats import rankdata, spearmanr
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.utils import shash2hex

from tvm_transfer.common.params import HyperParameters
from tvm_transfer.runner import runner_seconds

__all__ = ["GuardDecision", "GuardedCostModel", "pretrained_weight"]


def pretrained_weight(correlation: float, threshold: float, margin: float) -> float:
    """The pretrained model's share of the blended ranking for a running rank ``correlation``:
    ``clip((correlation - threshold) / margin, 0, 1)``."""
    return float(min(max((correlation - threshold) / margin, 0.0), 1.0))


@dataclass(frozen=True)
class GuardDecision:
    """What the guard concluded after one measured batch of ``task`` (its structural hash):
    ``correlation`` of the batch alone (NaN when undefined: too few candidates, or all predictions or all
    throughputs equal), the task's ``running`` (pooled) correlation, and the pretrained model's ``weight``
    from then on; ``batch`` counts the task's batches from 1, ``candidates`` the batch's size, ``valid``
    its successfully measured candidates."""

    task: str
    batch: int
    candidates: int
    valid: int
    correlation: float
    running: float
    weight: float


@derived_object
class GuardedCostModel(PyCostModel, HyperParameters):
    """A MetaSchedule cost model blending a ``pretrained`` model with an ``online`` one, weighted by how well
    the pretrained model ranks each task's measurements (see the module docstring).

    Parameters
    ----------
    pretrained:
        Any MetaSchedule cost model, e.g. a pack's model (:meth:`TransferPack.model
        <tvm_transfer.transfer.pack.TransferPack.model>`) or ``load_cost_model(file)``.
    online:
        The model learning from this run only; ``None``: TVM's ``XGBModel(num_warmup_samples=0)`` (a new
        one per guard, in :attr:`online_`).
    threshold, margin:
        Rank correlation at or below which the online model alone ranks, and how far above it the
        pretrained model takes over completely (dimensionless).
    window:
        Batches of a task that decide its weight; later batches are still recorded but no longer move
        it, because late in a search the candidates are near-identical and their ranking is mostly noise.
    min_batch:
        Fewest measured candidates for a batch's own correlation (:attr:`GuardDecision.correlation`).
    min_measured:
        Fewest pooled candidates for a running correlation, of a task or over every task, to be defined:
        until a task's first batches hold that many, its weight is the pooled one (1 while that is
        undefined too).
    adapt_pretrained:
        Also ``update`` the pretrained model with every batch (fine-tuning it online). Off by default: a
        model holding a large corpus refits on all of it after every batch, and the guard's correlation
        is cleanest for a model that does not change during the run.
    blend:
        ``"rank"`` or ``"linear"``: how the two models' scores are blended while both have a share.
    """

    choices: ClassVar[dict[str, tuple]] = {"blend": ("rank", "linear")}
    #: The models the decisions so far were made with: changing one mid-run would mix two guards.
    fixed_once_fitted: ClassVar[tuple[str, ...]] = ("pretrained", "online")

    def __init__(
        self,
        pretrained: ms.CostModel,
        online: ms.CostModel | None = None,
        *,
        threshold: float = 0.2,
        margin: float = 0.3,
        window: int = 3,
        min_batch: int = 4,
        min_measured: int = 16,
        adapt_pretrained: bool = False,
        blend: str = "rank",
    ) -> None:
        super().__init__()
        self._keep_hyper_parameters(locals())
        self.online_ = self._new_online()
        self.decisions_: list[GuardDecision] = []
        self._pairs: dict[str, tuple[list[float], list[float]]] = {}
        self._counts: dict[str, int] = {}

    def _check_params(self, params: dict) -> None:
        super()._check_params(params)
        if not params["margin"] > 0:
            raise ValueError(f"margin must be > 0 (a rank correlation difference), got {params['margin']}")
        if params["window"] < 1:
            raise ValueError(f"window must be at least 1 batch, got {params['window']}")
        if params["min_batch"] < 2:
            raise ValueError(f"min_batch must be at least 2 candidates, got {params['min_batch']}")
        if params["min_measured"] < params["min_batch"]:
            raise ValueError(
                f"min_measured ({params['min_measured']}) must be at least min_batch ({params['min_batch']})"
            )
        if not -1.0 <= params["threshold"] < 1.0:
            raise ValueError(f"threshold must be a rank correlation in [-1, 1), got {params['threshold']}")

    def set_params(self, **params: Any) -> Self:
        """Change hyper-parameters (see :class:`~tvm_transfer.common.params.HyperParameters`); a new
        ``online`` model replaces :attr:`online_`. The two models are fixed once a batch was judged."""
        super().set_params(**params)
        if "online" in params:
            self.online_ = self._new_online()
        return self

    def _new_online(self) -> ms.CostModel:
        return self.online if self.online is not None else _tvm_xgb_nowarmup()

    # ---- the decision ----------------------------------------------------------------------------------
    def running_correlation(self, task: str | None = None) -> float:
        """The running correlation of ``task`` (a structural hash), or pooled over every task (each task's
        throughputs scaled by its best, so that tasks of different speeds compare); NaN while undefined."""
        if task is not None:
            predicted, throughput = self._pairs.get(task, ([], []))
            return self._correlation(np.asarray(predicted), np.asarray(throughput), self.min_measured)
        predicted, throughput = [], []
        for p, t in self._pairs.values():
            predicted += list(rankdata(p) / len(p))
            best = max(t)
            throughput += [v / best if best > 0 else 0.0 for v in t]
        return self._correlation(np.asarray(predicted), np.asarray(throughput), self.min_measured)

    def weight(self, task: str) -> float:
        """The pretrained model's share of the ranking of ``task``'s candidates now."""
        return self._weight(self.running_correlation(task))

    def _weight(self, running: float) -> float:
        """The weight for a task of running correlation ``running`` (NaN: the pooled one decides)."""
        if math.isnan(running):
            running = self.running_correlation()
        if math.isnan(running):
            return 1.0
        return pretrained_weight(running, self.threshold, self.margin)

    # ---- PyCostModel -----------------------------------------------------------------------------------
    def predict(self, context: ms.TuneContext, candidates: list[ms.MeasureCandidate]) -> np.ndarray:
        """Blended scores (higher is better): see the module docstring."""
        if not candidates:
            return np.zeros(0)
        weight = self.weight(shash2hex(context.mod))
        if weight >= 1.0:
            return _scores(self.pretrained, context, candidates)
        if weight <= 0.0:
            return _scores(self.online_, context, candidates)
        rows = self._shared_rows(context, candidates)
        online = _scores(self.online_, context, candidates, rows)
        pretrained = _scores(self.pretrained, context, candidates, rows)
        if self.blend == "linear":
            return weight * pretrained + (1.0 - weight) * online
        n = len(candidates)
        return weight * rankdata(pretrained) / n + (1.0 - weight) * rankdata(online) / n

    def update(
        self,
        context: ms.TuneContext,
        candidates: list[ms.MeasureCandidate],
        results: list[ms.runner.RunnerResult],
    ) -> None:
        """Score the pretrained model on the measured batch, update the task's weight, then let both
        models learn from the batch."""
        if not candidates:
            return
        task = shash2hex(context.mod)
        rows = self._shared_rows(context, candidates)
        predicted = _scores(self.pretrained, context, candidates, rows)
        seconds = np.array([runner_seconds(r) for r in results], dtype=np.float64)
        throughput = np.where(
            np.isfinite(seconds) & (seconds > 0), 1.0 / np.where(seconds > 0, seconds, 1), 0
        )
        correlation = self._correlation(predicted, throughput, self.min_batch)
        count = self._counts.get(task, 0)
        if count < self.window:
            pairs = self._pairs.setdefault(task, ([], []))
            pairs[0].extend(predicted.tolist())
            pairs[1].extend(throughput.tolist())
        self._counts[task] = self._counts.get(task, 0) + 1
        running = self.running_correlation(task)
        self.decisions_.append(
            GuardDecision(
                task=task,
                batch=self._counts[task],
                candidates=len(candidates),
                valid=int(np.count_nonzero(throughput)),
                correlation=correlation,
                running=running,
                weight=self._weight(running),
            )
        )
        for model in (self.online_, self.pretrained) if self.adapt_pretrained else (self.online_,):
            if rows is None:
                model.update(context, candidates, results)
            else:
                model.update_rows(context, rows, results)

    def _shared_rows(
        self, context: ms.TuneContext, candidates: list[ms.MeasureCandidate]
    ) -> np.ndarray | None:
        """The candidates' feature rows when the pretrained and the online model compute the same ones
        (extracting them once serves both), else ``None``."""
        key = _shared_features_key(self.pretrained)
        if key is None or key != _shared_features_key(self.online_):
            return None
        return self.pretrained.features(context, candidates)

    @staticmethod
    def _correlation(predicted: np.ndarray, throughput: np.ndarray, minimum: int) -> float:
        if len(predicted) < minimum or np.ptp(predicted) == 0 or np.ptp(throughput) == 0:
            return math.nan
        return float(spearmanr(predicted, throughput).statistic)

    def load(self, path: str) -> None:
        raise NotImplementedError("a GuardedCostModel is not saved: save its pretrained or online model")

    def save(self, path: str) -> None:
        raise NotImplementedError("a GuardedCostModel is not saved: save its pretrained or online model")

    def _is_fitted(self) -> bool:
        return bool(self.decisions_)


def _shared_features_key(model: ms.CostModel) -> tuple | None:
    """``model.shared_features_key()`` of our learned models; ``None`` for any other cost model."""
    key = getattr(model, "shared_features_key", None)
    return key() if callable(key) else None


def _scores(
    model: ms.CostModel,
    context: ms.TuneContext,
    candidates: list[ms.MeasureCandidate],
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """``model``'s predictions of ``candidates``, from their already extracted feature ``rows`` if given."""
    scores = model.predict(context, candidates) if rows is None else model.predict_rows(rows)
    return np.asarray(scores, dtype=np.float64)


def _tvm_xgb_nowarmup() -> ms.CostModel:
    from tvm_transfer.cost_model import make_cost_model

    return make_cost_model("tvm-xgb-nowarmup")
