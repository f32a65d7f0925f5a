"""Copula proposals of MetaSchedule candidates for a new task, learned from other tasks' measured records.

Source records are grouped by design-space signature (:func:`.anchors.rows_by_space`); each group gets
a :class:`.copula.ConditionalCopula` over task descriptor + decision vector. For a target task, every design
space whose signature has a copula is sampled (draws split in proportion to the group's kept source rows),
samples are repaired to the target's loop extents and go through the shared loop of
:class:`.sampling.CopulaSampler` (deduplicated, ordered, validated by replay + post-processing:
:meth:`.encoding.SpaceEncoding.replay`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import tvm
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.search_strategy.copula.anchors import anchor_decisions, rows_by_space
from tvm_transfer.search_strategy.copula.budget import BudgetEstimate
from tvm_transfer.search_strategy.copula.copula import ConditionalCopula
from tvm_transfer.search_strategy.copula.encoding import SpaceEncoding, space_encodings
from tvm_transfer.search_strategy.copula.sampling import CopulaSampler, Draw
from tvm_transfer.search_strategy.copula.sources import SourceRecord, task_descriptor

log = logging.getLogger(__name__)

__all__ = ["Proposal", "TraceCopulaSampler"]


@dataclass
class Proposal:
    """A validated candidate: its post-processed schedule, decisions and the signature of its space."""

    schedule: Schedule
    decisions: list
    signature: str
    frequency: int


class TraceCopulaSampler(CopulaSampler):
    """Fit copulas on source records; propose valid, distinct candidates for a target task.

    Parameters
    ----------
    quantile, distribution, order, draws:
        As for :class:`.sampling.CopulaSampler`. The defaults (quantile 0.1, Gaussian-KDE marginals,
        ``"density"`` order) are the settings chosen on VTA (see
        :class:`tvm_transfer.vta.copula.VtaCopulaSampler`); on CPU their draws alone beat the paper's
        (quantile 0.3, truncated Gaussian, sampling order) in the first evaluation on matmul and conv2d
        (``docs/copula_search.md``).
    anchors:
        Propose the configurations the copula was fitted on (each source task's best quantile), repaired to
        the target's loop extents, before any draw, in :mod:`.anchors` order. Beyond the paper (``False``
        is its setting): the draws combine columns of different source configurations, while a source's
        best tiling often stays good intact at a nearby shape; the anchors improve the first evaluation on
        CPU matmul and conv2d, more so when measured in a pretrained model's order
        (:class:`.strategy.CopulaSearch` ``rank_pool``; ``docs/copula_search.md``).
    """

    def __init__(
        self,
        quantile: float = 0.1,
        distribution: str = "gaussian_kde",
        order: str = "density",
        draws: int = 8,
        anchors: bool = True,
    ) -> None:
        super().__init__(quantile, distribution, order, draws)
        self.anchors = anchors

    def fit(self, records: Sequence[SourceRecord]) -> TraceCopulaSampler:
        """Fit one copula per source design space with a finite measured record (replacing any earlier
        fit); returns ``self``. Raises ``ValueError`` when no space has one."""
        if not records:
            raise ValueError("no source records to fit on")
        self.copulas_: dict[str, ConditionalCopula] = {}
        self.weights_: dict[str, int] = {}
        for signature, (frame, descriptor_columns) in rows_by_space(records).items():
            values = [c for c in frame if c.startswith("s") and c[1:2].isdigit()]
            descriptors = [c for c in descriptor_columns if c in frame]
            frame = frame.dropna(subset=descriptors + values)  # tasks whose descriptor lacks a column
            if not np.isfinite(frame["cost"]).any():
                continue
            try:
                copula = self._fit_copula(frame, descriptors, values)
            except ValueError as error:
                log.info("no copula for one design space: %s", error)
                continue
            self.copulas_[signature] = copula
            self.weights_[signature] = copula.n_rows_
        if not self.copulas_:
            raise ValueError("no design space of the sources has a finite measured record to learn from")
        return self

    def encodings(
        self,
        mod: tvm.IRModule,
        design_spaces: Sequence[Schedule],
        postprocs: Sequence,
        descriptor: Mapping[str, float] | None = None,
    ) -> list[SpaceEncoding]:
        """The target's design spaces (one per signature) that some source copula covers; with the target's
        ``descriptor``, only those whose copula conditions on columns it has (a warning names the others)."""
        spaces = space_encodings(mod, design_spaces, postprocs)
        found = [encoding for signature, encoding in spaces.items() if signature in self.copulas_]
        if descriptor is None:
            return found
        usable = []
        for encoding in found:
            needed = self.copulas_[encoding.signature].descriptor_columns_
            missing = [c for c in needed if c not in descriptor]
            if missing:
                log.warning("a matching design space's sources have arguments the task lacks (%s): skipped",
                            ", ".join(missing))  # fmt: skip
            else:
                usable.append(encoding)
        return usable

    def propose(
        self,
        mod: tvm.IRModule,
        target: tvm.target.Target,
        design_spaces: Sequence[Schedule],
        postprocs: Sequence[ms.postproc.Postproc],
        count: int,
        seed: int = 0,
    ) -> list[Proposal]:
        """Up to ``count`` distinct valid candidates for the task ``mod`` on ``target``, best-guess first."""
        descriptor = task_descriptor(mod, target)
        encodings = self.encodings(mod, design_spaces, postprocs, descriptor)
        if not encodings:
            log.warning("no design space of this task matches a source design space: no copula samples")
            return []
        found = self._propose(_TraceDraws(self, encodings, descriptor), count, seed)
        return [
            Proposal(schedule, decisions, signature, times)
            for (signature, decisions), schedule, times in found
        ]

    def budget(
        self,
        mod: tvm.IRModule,
        target: tvm.target.Target,
        design_spaces: Sequence[Schedule],
        postprocs: Sequence,
        success_bar: float = 0.5,
        max_draws: int = 4096,
        seed: int = 0,
    ) -> BudgetEstimate:
        """The paper's budget rule for this task: ``|S|`` = the covered spaces' decision combinations;
        ``C`` = distinct repaired candidates among ``min(|S|, max_draws)`` conditional draws. MetaSchedule
        spaces are huge, so the draw cap makes ``C`` an underestimate (see ``docs/copula_search.md``)."""
        descriptor = task_descriptor(mod, target)
        encodings = self.encodings(mod, design_spaces, postprocs, descriptor)
        if not encodings:
            raise ValueError("no design space of this task matches a source design space")
        size = sum(e.space_size() for e in encodings)
        draws = _TraceDraws(self, encodings, descriptor)
        return self._budget(draws, size, min(size, max_draws), seed, success_bar)


class _TraceDraws:
    """A target task's covered design spaces as :class:`.sampling.TargetDraws`: candidates are
    (signature, decisions), keyed by (signature, repr of the decisions)."""

    def __init__(
        self, sampler: TraceCopulaSampler, encodings: Sequence[SpaceEncoding], descriptor: dict[str, float]
    ) -> None:
        self.sampler, self.descriptor = sampler, descriptor
        self.by_signature = {e.signature: e for e in encodings}

    def draw(self, n: int, seed: int) -> list[Draw]:
        """``n`` repaired draws split over the spaces in proportion to their kept source rows."""
        weights = self.sampler.weights_
        total = sum(weights[sig] for sig in self.by_signature)
        out: list[Draw] = []
        for i, (signature, encoding) in enumerate(self.by_signature.items()):
            share = max(1, round(n * weights[signature] / total))
            frame = self.sampler.copulas_[signature].sample(self.descriptor, share, seed=seed + i)
            if list(frame.columns) != encoding.columns:
                raise ValueError("source and target design spaces encode to different columns")
            out += [self._candidate(signature, encoding.repair(row)) for row in frame.to_numpy()]
        return out

    @staticmethod
    def _candidate(signature: str, decisions: list) -> Draw:
        return (signature, repr(decisions)), (signature, decisions)

    def centre(self) -> Draw:
        """The repaired centre of the space with the most kept source rows (the one that gets most draws)."""
        signature = max(self.by_signature, key=lambda sig: self.sampler.weights_[sig])
        row = self.sampler.copulas_[signature].centre(self.descriptor).to_numpy()[0]
        return self._candidate(signature, self.by_signature[signature].repair(row))

    def anchors(self) -> list[Draw]:
        if not self.sampler.anchors:
            return []
        encodings = list(self.by_signature.values())
        kept_rows = {sig: self.sampler.copulas_[sig].kept_rows_ for sig in self.by_signature}
        return [
            ((sig, key), (sig, decisions))
            for sig, key, decisions in anchor_decisions(encodings, kept_rows, self.descriptor)
        ]

    def log_density(self, candidates: Sequence[tuple[str, list]]) -> list[float]:
        """Conditional copula log density of each (signature, decisions), per space."""
        scores = [0.0] * len(candidates)
        for signature, encoding in self.by_signature.items():
            at = [i for i, (sig, _) in enumerate(candidates) if sig == signature]
            if not at:
                continue
            vectors = [encoding.encode(candidates[i][1]) for i in at]
            frame = pd.DataFrame(vectors, columns=encoding.columns)
            density = self.sampler.copulas_[signature].log_density(self.descriptor, frame)
            for i, value in zip(at, density, strict=True):
                scores[i] = float(value)
        return scores

    def validate(self, candidate: tuple[str, list]) -> Schedule | None:
        signature, decisions = candidate
        return self.by_signature[signature].replay(decisions)
