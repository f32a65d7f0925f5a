"""Transfer across layers: earlier tuning runs of *other* workloads (or hardware) as a prior for ML2Tuner.

ML2Tuner's V, P and A are fitted on every configuration a run has observed. A :class:`TransferPrior` adds
the rows of earlier runs — any tuner's, on any vta_ext workload and hardware config — to those fits: the
visible features already describe the workload and the hardware, and throughput is normalised per source
run (the run's best latency / latency), so layers of different sizes share one target scale. With a prior,
ML2Tuner's first round is steered by the models like every later one instead of being random.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tvm_transfer.vta.ml2tuner.runs import TunerInputError, TuneRun, read_log
from vta_ext.features import HIDDEN_FEATURE_NAMES, VISIBLE_FEATURE_NAMES, visible_features


class PriorError(TunerInputError):
    """A prior for warm-starting is unusable: not a run or log, no recorded workload/hardware, no rows."""


@dataclass(frozen=True)
class TransferPrior:
    """Rows observed by earlier runs: one per configuration whose validity they learnt.

    ``visible`` (n x VISIBLE_FEATURE_NAMES), ``hidden`` (n x HIDDEN_FEATURE_NAMES, NaN rows where the
    configuration did not compile), ``valid``, ``error_kind``, ``latency`` (seconds; NaN where invalid),
    ``throughput`` (the source run's best latency / latency, in (0, 1]; NaN where invalid) and ``source``
    (index into ``sources``, one label per run: ``workload@hw_id method seed``).
    """

    visible: np.ndarray
    hidden: np.ndarray
    valid: np.ndarray
    error_kind: tuple[str | None, ...]
    latency: np.ndarray
    throughput: np.ndarray
    source: np.ndarray
    sources: tuple[str, ...]

    def __post_init__(self) -> None:
        n = len(self.valid)
        if n == 0:
            raise PriorError("the prior holds no observed configuration")
        shapes = {
            "visible": (self.visible.shape, (n, len(VISIBLE_FEATURE_NAMES))),
            "hidden": (self.hidden.shape, (n, len(HIDDEN_FEATURE_NAMES))),
            "latency": (self.latency.shape, (n,)),
            "throughput": (self.throughput.shape, (n,)),
            "source": (self.source.shape, (n,)),
        }
        for name, (got, want) in shapes.items():
            if got != want:
                raise PriorError(f"prior {name} has shape {got}, expected {want}")
        if len(self.error_kind) != n:
            raise PriorError(f"prior error_kind has {len(self.error_kind)} entries for {n} rows")
        if not np.isfinite(self.visible).all():
            raise PriorError("prior visible features contain NaN or inf")
        for name in ("latency", "throughput"):
            values = getattr(self, name)
            ok = np.isfinite(values)
            if (ok != self.valid).any() or (values[ok] <= 0).any():
                raise PriorError(f"prior {name} must be positive exactly on the valid rows")
        if (self.valid & ~np.isfinite(self.hidden).all(axis=1)).any():
            raise PriorError("every valid prior row needs its hidden features")

    def __len__(self) -> int:
        return len(self.valid)

    @classmethod
    def from_runs(cls, runs: Sequence[TuneRun | str | Path]) -> TransferPrior:
        """Pool :class:`TuneRun` objects and/or ml2tuner-log files. Per run and configuration, a profile's
        outcome wins over a compile's; compile failures count as invalid rows; configurations that only
        compiled (never profiled) are left out, since their run-time validity is unknown."""
        if isinstance(runs, (str, Path, TuneRun)):
            runs = [runs]
        if not runs:
            raise PriorError("no prior runs given")
        width = len(HIDDEN_FEATURE_NAMES)
        visible, hidden, valid, kinds, latency, throughput, source, sources = [], [], [], [], [], [], [], []
        for item in runs:
            run = _as_run(item)
            try:
                workload, hw = run.workload_and_hw()
            except TunerInputError as err:
                raise PriorError(f"prior {_name(item)}: {err}") from err
            rows = {}
            for event in run.events:
                # A profile's outcome wins; a compile failure counts unless the index was profiled.
                if event.kind == "profile" or (not event.valid and event.index not in rows):
                    rows[event.index] = event
            best = run.best_latency
            for event in rows.values():
                features = event.hidden_features
                if features is not None and len(features) != width:
                    raise PriorError(
                        f"prior {_name(item)}: {len(features)} hidden features in a row, expected {width}"
                    )
                ok = event.kind == "profile" and event.valid
                if ok and not (np.isfinite(event.latency) and event.latency > 0 and features is not None):
                    raise PriorError(f"prior {_name(item)}: valid profile without latency or hidden features")
                visible.append(visible_features(workload, event.knobs, hw))
                hidden.append(features if features is not None else [np.nan] * width)
                valid.append(ok)
                kinds.append(None if ok else event.error_kind)
                latency.append(event.latency if ok else np.nan)
                throughput.append(best / event.latency if ok else np.nan)
                source.append(len(sources))
            sources.append(f"{run.workload}@{run.hw_id} {run.method} seed {run.seed}")
        return cls(
            np.array(visible, dtype=np.float32).reshape(len(valid), len(VISIBLE_FEATURE_NAMES)),
            np.array(hidden, dtype=np.float32).reshape(len(valid), width),
            np.array(valid, dtype=bool),
            tuple(kinds),
            np.array(latency, dtype=np.float64),
            np.array(throughput, dtype=np.float64),
            np.array(source, dtype=np.int64),
            tuple(sources),
        )


def _name(item: object) -> str:
    return str(item) if isinstance(item, (str, Path)) else f"run of {getattr(item, 'workload', '?')}"


def _as_run(item: object) -> TuneRun:
    if isinstance(item, TuneRun):
        return item
    if isinstance(item, (str, Path)):
        try:
            return read_log(item)
        except TunerInputError as err:
            raise PriorError(f"prior {item}: {err}") from err
    raise PriorError(f"a prior must be a TuneRun or an ml2tuner-log path, got {type(item).__name__}")
