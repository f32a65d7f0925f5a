"""Gaussian-copula few-shot tuning of vta_ext knob spaces (the VTA counterpart of :mod:`.strategy`).

A knob setting is encoded as the log2 of every knob of ``vta_ext.features.KNOB_NAMES`` (absent knobs
count as 1, as in vta_ext's visible features), a task as its workload shape and hardware features
(``vta_ext.features`` names, prefixed ``d_``). Decoding snaps each value to the nearest option of the
target's knob space in log2 space, so every decoded setting belongs to the space (it may still be invalid on
the hardware, e.g. a tile too large for a scratchpad; measuring tells).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tvm_transfer.search_strategy.copula.budget import BudgetEstimate, estimate_budget
from tvm_transfer.search_strategy.copula.copula import CENTRED_ORDERS, ConditionalCopula, check_order, ranked
from vta_ext.compiler import compile_program
from vta_ext.errors import InvalidConfigError
from vta_ext.features import KNOB_NAMES, VTA_HW_FEATURE_NAMES, WORKLOAD_FEATURE_NAMES, visible_features
from vta_ext.hw import HwConfig
from vta_ext.knobs import Knobs, KnobSpace
from vta_ext.measure import measure
from vta_ext.workloads import VtaWorkload

__all__ = [
    "DESCRIPTOR_COLUMNS",
    "FewShotResult",
    "KnobEncoding",
    "VtaCopulaSampler",
    "VtaRecord",
    "copula_few_shot",
    "measure_records",
    "vta_descriptor",
]

DESCRIPTOR_COLUMNS = [f"d_{n}" for n in WORKLOAD_FEATURE_NAMES + VTA_HW_FEATURE_NAMES]
VALUE_COLUMNS = [f"k_{n}" for n in KNOB_NAMES]


def vta_descriptor(workload: VtaWorkload, hw: HwConfig) -> dict[str, float]:
    """The task descriptor: vta_ext's workload features (log2 shape values) and hardware features."""
    values = visible_features(workload, {}, hw)
    n_workload = len(WORKLOAD_FEATURE_NAMES)
    chosen = values[:n_workload] + values[n_workload + len(KNOB_NAMES) :]
    return dict(zip(DESCRIPTOR_COLUMNS, chosen, strict=True))


class KnobEncoding:
    """Knob settings <-> numeric vectors (log2 of each knob value) for one knob space."""

    columns = VALUE_COLUMNS

    def __init__(self, space: KnobSpace) -> None:
        self.space = space
        self._log_options = {
            name: np.log2(np.array(opts, dtype=float)) for name, opts in space.options.items()
        }

    def encode(self, knobs: Knobs) -> np.ndarray:
        return np.array([math.log2(knobs.get(name, 1)) for name in KNOB_NAMES], dtype=float)

    def decode(self, vector: Sequence[float]) -> Knobs:
        """The setting of the space nearest to ``vector`` (per knob, nearest option in log2; NaN -> 1)."""
        if len(vector) != len(KNOB_NAMES):
            raise ValueError(
                f"expected {len(KNOB_NAMES)} values ({', '.join(KNOB_NAMES)}), got {len(vector)}"
            )
        values = dict(zip(KNOB_NAMES, vector, strict=True))
        knobs = {}
        for name, logs in self._log_options.items():
            value = values[name] if np.isfinite(values[name]) else 0.0
            knobs[name] = self.space.options[name][int(np.argmin(np.abs(logs - value)))]
        return knobs


@dataclass(frozen=True)
class VtaRecord:
    """One measured knob setting of a source task; ``latency`` in seconds, NaN/inf if invalid."""

    workload: VtaWorkload
    hw: HwConfig
    knobs: Knobs
    latency: float


def measure_records(workload: VtaWorkload, hw: HwConfig, settings: Iterable[Knobs]) -> list[VtaRecord]:
    """Measure settings with ``vta_ext.measure.measure`` (counters-only timing; deterministic)."""
    return [VtaRecord(workload, hw, k, measure(workload, k, hw).latency) for k in settings]


def _frame(records: Sequence[VtaRecord]) -> pd.DataFrame:
    if not records:
        raise ValueError("no source records")
    rows = []
    for r in records:
        encoded = [math.log2(r.knobs.get(name, 1)) for name in KNOB_NAMES]
        cost = r.latency if np.isfinite(r.latency) else math.inf
        rows.append({**vta_descriptor(r.workload, r.hw), **dict(zip(VALUE_COLUMNS, encoded, strict=True)),
                     "cost": cost, "task": f"{r.workload.key}@{r.hw.short_id()}"})  # fmt: skip
    return pd.DataFrame(rows)


class VtaCopulaSampler:
    """Fit a :class:`ConditionalCopula` on source records of other VTA tasks; propose settings for a new one.

    Parameters
    ----------
    quantile:
        Share of each source task's settings kept (best first). The defaults (quantile 0.1, Gaussian-KDE
        marginals, ``"density"`` order, ``max_r2`` 0.999) were chosen on VTA ResNet-18 leave-one-out with
        source seeds 0-2 and checked on held-out seeds 3-5 (order) and 6-8 (``max_r2``), see
        ``docs/copula_search.md``; the paper's settings are quantile 0.3, ``"truncated_gaussian"``,
        ``"sample"`` order.
    distribution:
        Marginal distribution of the copula columns (see :data:`.copula.DISTRIBUTIONS`).
    order:
        One of :data:`.copula.ORDERS`: ``"frequency"``: unique repaired settings most often generated first
        (the copula's modes, ties in sampling order); ``"sample"``: the paper's order, first generated
        first; ``"centre"``: the decoded conditional centre first, then by frequency; ``"density"``: the
        centre first, then by conditional copula density.
    draws:
        Copula rows drawn per proposal call, as a multiple of the number of settings asked for.
    validate:
        Drop proposals that vta_ext's compiler rejects (scratchpad overflow, virtual-thread split; the
        static checks MetaSchedule's post-processors do for CPU schedules). Compiling is cheaper than a
        measurement and is not counted as a trial; hazards found only by the timing simulation remain.
    descriptor:
        Descriptor columns to condition on (default: all of :data:`DESCRIPTOR_COLUMNS`).
    max_r2:
        Drop near-collinear descriptor columns from the conditioning (see :class:`.copula.ConditionalCopula`;
        1.0 keeps all but exact duplicates). ResNet-18's layer descriptors are strongly collinear (channels
        double where the height halves), so 0.999 conditions on height, output channels and kernel only.
        Chosen on source seeds 0-2 after the order, checked on held-out seeds 6-8.
    """

    def __init__(
        self,
        quantile: float = 0.1,
        distribution: str = "gaussian_kde",
        order: str = "density",
        draws: int = 8,
        validate: bool = True,
        descriptor: Sequence[str] | None = None,
        max_r2: float = 0.999,
    ) -> None:
        check_order(order)
        unknown = set(descriptor or ()) - set(DESCRIPTOR_COLUMNS)
        if unknown:
            raise ValueError(f"unknown descriptor columns {sorted(unknown)}; known: {DESCRIPTOR_COLUMNS}")
        self.quantile, self.distribution, self.order, self.draws = quantile, distribution, order, draws
        self.validate, self.max_r2 = validate, max_r2
        self.descriptor = list(descriptor) if descriptor else list(DESCRIPTOR_COLUMNS)

    def fit(self, records: Sequence[VtaRecord]) -> VtaCopulaSampler:
        self.copula_ = ConditionalCopula(self.quantile, self.distribution, self.max_r2).fit(
            _frame(records), self.descriptor, VALUE_COLUMNS
        )
        return self

    def _decoded(
        self, encoding: KnobEncoding, descriptor: dict[str, float], n: int, seed: int
    ) -> list[Knobs]:
        """``n`` copula draws conditioned on ``descriptor``, each snapped into ``encoding``'s space."""
        rows = self.copula_.sample(descriptor, n, seed=seed).to_numpy()
        return [encoding.decode(row) for row in rows]

    def propose(self, workload: VtaWorkload, hw: HwConfig, count: int, seed: int = 0) -> list[Knobs]:
        """Up to ``count`` distinct settings of ``workload``'s space from the conditioned copula."""
        space = KnobSpace(workload, hw)
        encoding = KnobEncoding(space)
        descriptor = vta_descriptor(workload, hw)
        decoded = self._decoded(encoding, descriptor, max(count * self.draws, 64), seed)
        names = list(space.names)
        centre = None
        if self.order in CENTRED_ORDERS:
            centre = tuple(encoding.decode(self.copula_.centre(descriptor).to_numpy()[0]).values())

        def density(keys):
            vectors = [encoding.encode(dict(zip(names, key, strict=True))) for key in keys]
            return self.copula_.log_density(descriptor, pd.DataFrame(vectors, columns=VALUE_COLUMNS))

        out: list[Knobs] = []
        for key, _ in ranked((tuple(k.values()) for k in decoded), self.order, centre, density):
            if len(out) >= count:
                break
            knobs = dict(zip(names, key, strict=True))
            if not self.validate or _compiles(workload, knobs, hw):
                out.append(knobs)
        return out

    def budget(
        self, workload: VtaWorkload, hw: HwConfig, success_bar: float = 0.5, seed: int = 0
    ) -> BudgetEstimate:
        """The paper's few-shot budget: |S| conditional draws, C unique after repair."""
        space = KnobSpace(workload, hw)
        decoded = self._decoded(KnobEncoding(space), vta_descriptor(workload, hw), len(space), seed)
        unique = {tuple(k.values()) for k in decoded}
        return estimate_budget(len(space), len(unique), success_bar=success_bar)


def _compiles(workload: VtaWorkload, knobs: Knobs, hw: HwConfig) -> bool:
    try:
        compile_program(workload, knobs, hw)
    except InvalidConfigError:
        return False
    return True


@dataclass
class FewShotResult:
    """Settings measured in order and their latencies (seconds; NaN = invalid setting)."""

    knobs: list[Knobs] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


def copula_few_shot(
    workload: VtaWorkload, hw: HwConfig, sampler: VtaCopulaSampler, budget: int, seed: int = 0
) -> FewShotResult:
    """Measure the first ``budget`` proposals of a fitted sampler, in order; if the copula yields fewer
    distinct settings, the rest are uniform random unseen settings (counted in the same budget)."""
    proposals = sampler.propose(workload, hw, budget, seed)
    if len(proposals) < budget:
        space = KnobSpace(workload, hw)
        seen = {tuple(k.values()) for k in proposals}
        rng = np.random.default_rng(seed)
        for index in rng.permutation(len(space)):
            if len(proposals) >= budget:
                break
            knobs = space.point(int(index))
            if tuple(knobs.values()) not in seen:
                proposals.append(knobs)
    result = FewShotResult()
    for knobs in proposals:
        result.knobs.append(knobs)
        result.latencies.append(measure(workload, knobs, hw).latency)
    return result
