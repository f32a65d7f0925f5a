"""ML2Tuner's multi-level tuner over a VTA knob space.

Per round V (validity on visible features) and P (throughput on visible features) steer the annealing
(predicted-invalid configurations score lowest), the ``short_list`` best proposals are *compiled* (cheap:
:func:`vta_ext.compile_only`, no timing simulation) which reveals compile errors and the hidden features;
A (throughput on visible + hidden features) and V_h (validity on visible + hidden features, an addition to
the paper that learns run-time failures such as accumulator hazards from the micro-op structure) re-rank
the compiled ones, and the top ``batch_size`` are profiled. All models are refitted every round on
everything observed, compile failures included.

Warm start (transfer across layers): ``ML2Tuner(prior=...)`` pools earlier runs of other layers into every
fit (:mod:`tvm_transfer.vta.ml2tuner.prior`), so even the first round is model-driven; with
:data:`WARM_START_OPTIONS` the models rank within layers and compiling also refines around the best.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tenset_tools.frame import normalised_throughput
from tvm_transfer.common.estimators import AdvancedModel, PerformanceModel, ValidityModel
from tvm_transfer.vta.ml2tuner.annealing import anneal, memoize, space_digits, space_indices
from tvm_transfer.vta.ml2tuner.base import KnobTuner
from tvm_transfer.vta.ml2tuner.prior import TransferPrior
from tvm_transfer.vta.ml2tuner.runs import TunerInputError, TuneRun
from vta_ext.features import HIDDEN_FEATURE_NAMES, VISIBLE_FEATURE_NAMES

#: ML2Tuner options for a run warm-started from other layers (``prior=...``), chosen on development seeds
#: 10 and 11 of benchmarks/ml2tuner.py (see docs/ml2tuner.md): rank within layers, 4 profiles per round
#: until 16, own rows weigh 4 prior rows, compile the neighbours of the 2 best profiled configurations.
WARM_START_OPTIONS = {"target": "rank", "initial_batch_size": 4, "own_weight": 4.0, "local_search": 2}
_N_HIDDEN = len(HIDDEN_FEATURE_NAMES)


class ML2Tuner(KnobTuner):
    """The multi-level tuner: V filters, P ranks the annealing proposals, the short list is compiled, A and
    V_h re-rank it, the top is profiled.

    From scratch (no ``prior``, the paper's setting) the first round profiles random configurations that
    compile. With a ``prior`` (earlier runs of other layers, :class:`TransferPrior`) V, P, A and V_h are
    fitted every round on the prior's rows pooled with the run's own, so the first round is model-driven
    too; the run's own rows weigh ``own_weight`` times a prior row.

    Parameters
    ----------
    batch_size:
        Profiles per round.
    short_list:
        Configurations compiled per round, as a multiple of ``batch_size``.
    target_recall:
        Recall of valid configurations V's threshold aims at (see :class:`ValidityModel`).
    use_hidden_validity:
        Also filter the compiled short list with V_h (validity on visible + hidden features).
    seed, sa_parallel, sa_steps:
        Seed of the run; annealing walkers and steps per round.
    prior:
        None, a :class:`TransferPrior`, or earlier :class:`TuneRun` objects / ml2tuner-log paths to build
        one from (:class:`PriorError` if unusable). Do not include runs of the layer being tuned on the
        same hardware if the run is meant to measure transfer.
    own_weight:
        Sample weight of the run's own rows in the pooled fits (prior rows weigh 1).
    initial_batch_size:
        Profiles per round until ``batch_size`` profiles are made (default: ``batch_size``): small first
        rounds let the models adapt to the new layer sooner, which matters most when starting from a prior.
    target:
        What P and A learn: ``"normalised"`` (regression of best latency so far / latency: the paper's
        throughput), ``"log_latency"`` (regression of -log2 latency in seconds) or ``"rank"`` (AutoTVM's
        pairwise ranking loss with one query group per layer: the run's own rows and each prior run form
        their own group, so only orders *within* a layer are learnt). ``"rank"`` suits a prior: pooled
        regression targets clash, as the run's own rows are normalised by a best-so-far that is not the
        layer's best, and absolute latencies differ between layers far more than between configurations.
    local_search:
        Each round also compile every single-knob neighbour of the ``local_search`` best profiled
        configurations, and let A rank them together with the short list and every configuration compiled
        in earlier rounds but not yet profiled (0, the paper's setting: A ranks this round's short list
        only). Compiling is cheap; this lets A, which ranks well within a layer, refine around the best.
    """

    TARGETS = ("normalised", "log_latency", "rank")

    method = "ml2tuner"

    def __init__(
        self,
        batch_size: int = 16,
        short_list: int = 4,
        target_recall: float = 0.98,
        use_hidden_validity: bool = True,
        seed: int = 0,
        sa_parallel: int = 128,
        sa_steps: int = 80,
        prior: TransferPrior | Sequence[TuneRun | str | Path] | None = None,
        own_weight: float = 1.0,
        initial_batch_size: int | None = None,
        target: str = "normalised",
        local_search: int = 0,
    ) -> None:
        super().__init__(batch_size, seed, sa_parallel, sa_steps)
        if short_list < 1:
            raise TunerInputError(
                f"short_list must be at least 1 (a multiple of batch_size), got {short_list}"
            )
        if not (math.isfinite(own_weight) and own_weight > 0):
            raise TunerInputError(f"own_weight must be a positive number, got {own_weight}")
        if initial_batch_size is not None and initial_batch_size < 1:
            raise TunerInputError(f"initial_batch_size must be at least 1, got {initial_batch_size}")
        if target not in self.TARGETS:
            raise TunerInputError(f"unknown target {target!r}; choose from {', '.join(self.TARGETS)}")
        self.target = target
        if local_search < 0:
            raise TunerInputError(f"local_search must be 0 or more, got {local_search}")
        self.local_search = local_search
        self.short_list, self.target_recall = short_list, target_recall
        self.use_hidden_validity = use_hidden_validity
        self.own_weight, self.initial_batch_size = own_weight, initial_batch_size
        if prior is None or isinstance(prior, TransferPrior):
            self.prior = prior
        else:
            self.prior = TransferPrior.from_runs(prior)

    @property
    def _penalty(self) -> float:
        """Subtracted from the score of predicted-invalid configurations: more than the spread of valid
        scores (normalised throughputs lie in [0, 1]; ranking scores and log latencies are unbounded)."""
        return 10.0 if self.target == "normalised" else 1e3

    def _batch(self) -> int:
        if self.initial_batch_size is not None and self.run.n_profiles < self.batch_size:
            return min(self.initial_batch_size, self.batch_size - self.run.n_profiles)
        return self.batch_size

    def _pool(self, own: np.ndarray, prior_rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """The run's own rows stacked on ``prior_rows`` (rows of the prior), and the sample weights; the own
        rows and ``None`` when there are no prior rows."""
        if prior_rows is None or not len(prior_rows):
            return own, None
        weights = np.concatenate([np.full(len(own), self.own_weight), np.ones(len(prior_rows))])
        return (np.concatenate([own, prior_rows]) if len(own) else prior_rows), weights

    def _compile(self, indices: list[int], round_: int) -> list[int]:
        """Compile the not yet compiled ones; returns those that compiled."""
        ok = []
        for index in indices:
            if index not in self.compiled:
                result = self.measurer.compile(index)
                event = self._event("compile", index, result, result.ok, math.nan, round_)
                self.run.events.append(event)
                self.compiled[int(index)] = event
            if self.compiled[index].valid:
                ok.append(index)
        return ok

    def _validity_data(self) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
        """Every configuration whose validity is known: profiled ones and compile failures."""
        known = {i: (e.valid, e.error_kind) for i, e in self.compiled.items() if not e.valid}
        known.update({i: (e.valid, e.error_kind) for i, e in self.profiled.items()})
        indices = np.array(list(known), dtype=np.int64)
        return indices, np.array([known[i][0] for i in indices]), [known[i][1] for i in indices]

    def _hidden(self, indices: list[int] | np.ndarray) -> np.ndarray:
        hidden = np.array([self.compiled[int(i)].hidden_features for i in indices], dtype=np.float32)
        return np.hstack([self.measurer.visible(indices), hidden])

    def _round(self, round_: int, n: int) -> None:
        visited = set(self.profiled)
        if round_ == 0 and self.prior is None:
            # No model yet: compile random configurations and profile the first n that compile.
            ok: list[int] = []
            tried: set[int] = set()
            while len(ok) < n and len(visited | tried) < len(self.measurer.space):
                picks = self._random_unvisited(n, visited | tried)
                tried.update(picks)
                ok += self._compile(picks, round_)
            self._profile(ok[:n], round_)
            return
        v, p, a = self._fit_models(round_)

        def score(points: np.ndarray) -> np.ndarray:
            features = self.measurer.visible(points)
            base = p.predict(features) if p is not None else np.zeros(len(points))
            # Predicted-invalid configurations rank below every predicted-valid one.
            return np.where(v.predict(features), base, base - self._penalty)

        exclude = visited | {i for i, e in self.compiled.items() if not e.valid}
        proposals = anneal(
            self.measurer.radices,
            memoize(score),
            # Compiling is cheap: a small round still compiles a full short list and profiles its top.
            self.short_list * max(n, self.batch_size),
            exclude,
            self.rng,
            self._starts(),
            self.sa_parallel,
            self.sa_steps,
        )
        kept = v.predict(self.measurer.visible(proposals)) if proposals else np.zeros(0, dtype=bool)
        proposals = [i for i, keep in zip(proposals, kept, strict=True) if keep] or proposals
        compiled = self._compile(proposals, round_)
        if self.local_search:
            compiled += self._compile(self._neighbours(self._starts()[: self.local_search], exclude), round_)
            compiled += [i for i, e in self.compiled.items() if e.valid]
        if len(compiled) < n:  # too few survivors: top up with random compiled configurations
            compiled += self._compile(self._random_unvisited(2 * n, exclude | set(proposals)), round_)
        compiled = [i for i in dict.fromkeys(compiled) if i not in visited]
        if not compiled:
            self._profile(self._random_unvisited(n, visited), round_)
            return
        ranking = a.predict(self._hidden(compiled)) if a is not None else np.zeros(len(compiled))
        if self.use_hidden_validity:
            ranking = ranking - self._penalty * ~self._hidden_validity(compiled)
        order = np.argsort(-ranking, kind="stable")
        self._profile([compiled[j] for j in order[:n]], round_)

    def _neighbours(self, centres: list[int], exclude: set[int]) -> list[int]:
        """Every configuration one knob away from one of ``centres``, not in ``exclude``."""
        radices = self.measurer.radices
        out: dict[int, None] = {}
        for digits in space_digits(np.array(centres, dtype=np.int64), radices):
            for column in np.flatnonzero(radices > 1):
                for value in range(radices[column]):
                    if value != digits[column]:
                        moved = digits.copy()
                        moved[column] = value
                        out[int(space_indices(moved[None, :], radices)[0])] = None
        return [i for i in out if i not in exclude]

    def _fit_models(self, round_: int) -> tuple[ValidityModel, PerformanceModel | None, AdvancedModel | None]:
        """V on every known validity, P and A on every valid profile: the run's own, pooled with the
        prior's rows when there is a prior."""
        known, valid, kinds = self._validity_data()
        prior = self.prior
        x, w = self.measurer.visible(known), None
        if prior is not None:  # every prior row's validity is known
            x, w = self._pool(x, prior.visible)
            valid, kinds = np.concatenate([valid, prior.valid]), kinds + list(prior.error_kind)
        v = ValidityModel(target_recall=self.target_recall, seed=self.seed + round_)
        v.fit(x, valid, kinds, sample_weight=w)
        good = [i for i, e in self.profiled.items() if e.valid]
        if prior is None and not good:
            return v, None, None
        latency = np.array([self.profiled[i].latency for i in good])
        if self.target == "log_latency":
            target = -np.log2(latency)
            if prior is not None:
                target = np.concatenate([target, -np.log2(prior.latency[prior.valid])])
        else:
            target = normalised_throughput(latency, np.zeros(len(latency)))
            if prior is not None:
                target = np.concatenate([target, prior.throughput[prior.valid]])
        visible = self.measurer.visible(good) if good else np.zeros((0, len(VISIBLE_FEATURE_NAMES)))
        hidden = self._hidden(good) if good else np.zeros((0, len(VISIBLE_FEATURE_NAMES) + _N_HIDDEN))
        prior_visible = prior.visible[prior.valid] if prior is not None else None
        prior_hidden = np.hstack([prior.visible, prior.hidden])[prior.valid] if prior is not None else None
        xp, wp = self._pool(visible, prior_visible)
        xa, _ = self._pool(hidden, prior_hidden)
        options, groups = {}, None
        if self.target == "rank":
            options = {"objective": "rank:pairwise"}
            # Group -1: the run's own rows; prior rows keep their source run as group.
            groups = np.full(len(good), -1, dtype=np.int64)
            if prior is not None:
                groups = np.concatenate([groups, prior.source[prior.valid]])
        p = PerformanceModel(seed=self.seed + round_, **options).fit(xp, target, wp, groups)
        a = AdvancedModel(seed=self.seed + round_, **options).fit(xa, target, wp, groups)
        return v, p, a

    def _hidden_validity(self, candidates: list[int]) -> np.ndarray:
        """V_h: run-time validity of compiled configurations from visible + hidden features."""
        rows = list(self.profiled)
        labels = np.array([self.profiled[i].valid for i in rows], dtype=bool)
        own = self._hidden(rows) if rows else np.zeros((0, len(VISIBLE_FEATURE_NAMES) + _N_HIDDEN))
        w = None
        if self.prior is not None:
            # Prior rows that compiled: their run-time validity is known and their hidden features too.
            compiled = np.isfinite(self.prior.hidden).all(axis=1)
            prior_hidden = np.hstack([self.prior.visible, self.prior.hidden])
            own, w = self._pool(own, prior_hidden[compiled])
            if w is not None:
                labels = np.concatenate([labels, self.prior.valid[compiled]])
        if labels.all() or not labels.any():
            return np.full(len(candidates), bool(labels.all()) if len(labels) else True)
        vh = ValidityModel(target_recall=self.target_recall, seed=self.seed + 7)
        vh.fit(own, labels, sample_weight=w)
        return vh.predict(self._hidden(candidates))
