"""Copula proposals of MetaSchedule candidates for a new task, learned from other tasks' measured records.

Source records are grouped by design-space signature (:func:`.anchors.rows_by_space`); each group gets
a :class:`.copula.ConditionalCopula` over task descriptor + decision vector. For a target task, every design
space whose signature has a copula is sampled (draws split in proportion to the group's kept source rows),
samples are repaired to the target's loop extents, deduplicated, ordered and validated by replay +
post-processing (:meth:`.encoding.SpaceEncoding.replay`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import tvm
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.search_strategy.copula.anchors import anchor_decisions, rows_by_space
from tvm_transfer.search_strategy.copula.budget import BudgetEstimate, estimate_budget
from tvm_transfer.search_strategy.copula.copula import CENTRED_ORDERS, ConditionalCopula, check_order, ranked
from tvm_transfer.search_strategy.copula.encoding import SpaceEncoding, space_encodings
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


class TraceCopulaSampler:
    """Fit copulas on source records; propose valid, distinct candidates for a target task.

    Parameters
    ----------
    quantile:
        Share of each source task's measured records kept (best first). The defaults (quantile 0.1,
        Gaussian-KDE marginals, ``"density"`` order) are the settings chosen on VTA (see
        :class:`tvm_transfer.vta.copula.VtaCopulaSampler`); on CPU their draws alone beat the paper's
        (quantile 0.3, truncated Gaussian, sampling order) in the first evaluation on matmul and conv2d
        (``docs/copula_search.md``).
    distribution:
        Marginal distribution of the copula columns (see :data:`.copula.DISTRIBUTIONS`).
    order:
        One of :data:`.copula.ORDERS`. ``"density"`` (default): the repaired conditional centre first,
        then the distinct draws by conditional copula density; ``"centre"``: the centre first, then by
        frequency; ``"frequency"``: the repaired candidates the copula generates most often first (its
        modes); ``"sample"``: first generated first (the paper's order).
    draws:
        Copula rows drawn per proposed candidate.
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
        check_order(order)
        self.quantile, self.distribution, self.order, self.draws = quantile, distribution, order, draws
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
            copula = ConditionalCopula(self.quantile, self.distribution)
            try:
                copula.fit(frame, descriptors, values)
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

    def _draw(self, encodings: Sequence[SpaceEncoding], descriptor: dict, n: int, seed: int) -> list[tuple]:
        """``n`` repaired draws split over the spaces, as (signature, decisions-json) in draw order."""
        total = sum(self.weights_[e.signature] for e in encodings)
        out: list[tuple] = []
        for i, encoding in enumerate(encodings):
            share = max(1, round(n * self.weights_[encoding.signature] / total))
            copula = self.copulas_[encoding.signature]
            frame = copula.sample(descriptor, share, seed=seed + i)
            if list(frame.columns) != encoding.columns:
                raise ValueError("source and target design spaces encode to different columns")
            for row in frame.to_numpy():
                decisions = encoding.repair(row)
                out.append((encoding.signature, repr(decisions), decisions))
        return out

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
        by_signature = {e.signature: e for e in encodings}
        drawn = self._draw(encodings, descriptor, max(count * self.draws, 64), seed)
        kept_rows = {e.signature: self.copulas_[e.signature].kept_rows_ for e in encodings}
        anchors = anchor_decisions(encodings, kept_rows, descriptor) if self.anchors else []
        unique: dict[tuple, list] = {}
        for sig, key, decisions in anchors + drawn:
            unique.setdefault((sig, key), decisions)
        centre = None
        if self.order in CENTRED_ORDERS:
            # The centre of the space with the most kept source rows (the one that gets most draws).
            space = max(encodings, key=lambda e: self.weights_[e.signature])
            row = self.copulas_[space.signature].centre(descriptor).to_numpy()[0]
            decisions = space.repair(row)
            centre = (space.signature, repr(decisions))
            unique.setdefault(centre, decisions)

        def density(keys: list[tuple]) -> list[float]:
            """Conditional copula log density of each (signature, decisions) key, per space."""
            scores = [0.0] * len(keys)
            for sig, encoding in by_signature.items():
                at = [i for i, (s, _) in enumerate(keys) if s == sig]
                if not at:
                    continue
                vectors = [encoding.encode(unique[keys[i]]) for i in at]
                frame = pd.DataFrame(vectors, columns=encoding.columns)
                for i, value in zip(at, self.copulas_[sig].log_density(descriptor, frame), strict=True):
                    scores[i] = float(value)
            return scores

        anchor_counts = Counter((sig, key) for sig, key, _ in anchors)  # insertion-ordered: anchor order
        keys = ((sig, key) for sig, key, _ in drawn)
        sequence = list(anchor_counts.items()) + [
            (key, times)
            for key, times in ranked(keys, self.order, centre, density)
            if key not in anchor_counts
        ]
        proposals: list[Proposal] = []
        for (sig, key), times in sequence:
            if len(proposals) >= count:
                break
            schedule = by_signature[sig].replay(unique[(sig, key)])
            if schedule is not None:
                proposals.append(Proposal(schedule, unique[(sig, key)], sig, times))
        return proposals

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
        drawn = self._draw(encodings, descriptor, min(size, max_draws), seed)
        return estimate_budget(size, len({(sig, key) for sig, key, _ in drawn}), success_bar=success_bar)
