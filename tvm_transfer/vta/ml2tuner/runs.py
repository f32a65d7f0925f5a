"""Records of tuning runs on vta_ext knob spaces: events, runs, and their JSON-lines logs.

A log is a header line (method, workload, hardware, seed, budget and, since this module, the workload's and
the hardware's full specifications) followed by one line per compile or profile. :func:`load_log` turns a
log into a result cache that resumes a run without re-measuring; :func:`read_log` restores the whole
:class:`TuneRun`, e.g. to warm-start a tuner of another layer (:mod:`tvm_transfer.vta.ml2tuner.prior`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tenset_tools.atomic import atomic_output
from vta_ext.hw import HwConfig
from vta_ext.knobs import Knobs
from vta_ext.measure import MeasureResult
from vta_ext.workloads import Conv2D, Dense, VtaWorkload

LOG_FORMAT, LOG_VERSION = "ml2tuner-log", 1


class TunerInputError(ValueError):
    """A tuner was given an unusable budget, batch size, option or log."""


def workload_spec(workload: VtaWorkload) -> dict:
    """A JSON-able description of ``workload`` that :func:`workload_from_spec` restores."""
    return {"op": "conv2d" if isinstance(workload, Conv2D) else "dense", **dataclasses.asdict(workload)}


def workload_from_spec(spec: dict) -> VtaWorkload:
    """The workload described by :func:`workload_spec`; raises :class:`TunerInputError` if malformed."""
    kinds = {"conv2d": Conv2D, "dense": Dense}
    spec = dict(spec)
    kind = kinds.get(spec.pop("op", None))
    if kind is None:
        raise TunerInputError(f"workload spec {spec!r}: 'op' must be one of {', '.join(kinds)}")
    try:
        return kind(**spec)
    except TypeError as err:
        raise TunerInputError(f"workload spec {spec!r}: {err}") from err


@dataclass
class Event:
    """One compile or profile; ``latency`` in seconds (NaN unless a valid profile); rounds count from 0."""

    kind: str  # "compile" | "profile"
    index: int
    knobs: Knobs
    valid: bool
    error_kind: str | None
    error_stage: str | None
    latency: float
    round: int
    hidden_features: list[float] | None = None


@dataclass
class TuneRun:
    """Everything a tuning run did, in order. ``workload_spec`` / ``hw_spec`` (see :func:`workload_spec`,
    :meth:`HwConfig.to_dict`) let another tuner reuse the run as a prior; logs written before they
    existed lack them."""

    method: str
    workload: str
    hw_id: str
    seed: int
    budget: int
    events: list[Event] = field(default_factory=list)
    workload_spec: dict | None = None
    hw_spec: dict | None = None

    @property
    def profiles(self) -> list[Event]:
        return [e for e in self.events if e.kind == "profile"]

    @property
    def latencies(self) -> list[float]:
        """Profile latencies in order (seconds; NaN for invalid ones), for ``tenset_tools.metrics``."""
        return [e.latency if e.valid else math.nan for e in self.profiles]

    @property
    def n_profiles(self) -> int:
        return len(self.profiles)

    @property
    def n_invalid_profiles(self) -> int:
        return sum(not e.valid for e in self.profiles)

    @property
    def n_compiles(self) -> int:
        return sum(e.kind == "compile" for e in self.events)

    @property
    def n_compile_failures(self) -> int:
        return sum(e.kind == "compile" and not e.valid for e in self.events)

    @property
    def best(self) -> Event | None:
        valid = [e for e in self.profiles if e.valid]
        return min(valid, key=lambda e: e.latency) if valid else None

    @property
    def best_latency(self) -> float:
        return self.best.latency if self.best else math.nan

    def workload_and_hw(self) -> tuple[VtaWorkload, HwConfig]:
        """The run's workload and hardware; :class:`TunerInputError` if the run does not record them."""
        if self.workload_spec is None or self.hw_spec is None:
            raise TunerInputError(
                f"run of {self.workload} ({self.method}, seed {self.seed}) does not record its workload and "
                "hardware specs (a log written before they were logged); re-run it to use it as a prior"
            )
        try:
            hw = HwConfig.from_dict(self.hw_spec)
        except (TypeError, ValueError) as err:
            raise TunerInputError(f"run of {self.workload}: bad hardware spec ({err})") from err
        return workload_from_spec(self.workload_spec), hw

    def write_log(self, path: str | Path) -> None:
        """JSON lines: a header, then one event per line."""
        with atomic_output(path) as temporary, open(temporary, "w") as f:
            header = {k: v for k, v in asdict(self).items() if k != "events"}
            f.write(json.dumps({"format": LOG_FORMAT, "version": LOG_VERSION, **header}) + "\n")
            for event in self.events:
                f.write(json.dumps(asdict(event), default=float) + "\n")


def _read_lines(path: str | Path) -> list[dict]:
    try:
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TunerInputError(f"{path}: not a readable ml2tuner-log ({err})") from err
    if not lines or not isinstance(lines[0], dict):
        raise TunerInputError(f"{path}: empty, not an ml2tuner-log")
    if lines[0].get("format") != LOG_FORMAT or lines[0].get("version") != LOG_VERSION:
        raise TunerInputError(f"{path}: not an {LOG_FORMAT} version {LOG_VERSION} file")
    return lines


def load_log(path: str | Path) -> tuple[dict, dict[int, MeasureResult]]:
    """Header and a result cache (index -> :class:`MeasureResult`) from a log's profiles, to pass to
    :class:`~tvm_transfer.vta.ml2tuner.VtaMeasurer` when resuming a run."""
    lines = _read_lines(path)
    cache = {}
    for row in lines[1:]:
        if row["kind"] != "profile":
            continue
        cache[int(row["index"])] = MeasureResult(
            valid=row["valid"],
            error_kind=row["error_kind"],
            error_stage=row["error_stage"],
            error=row["error_kind"],
            cycles=None,
            latency=float(row["latency"]),
            latencies=[float(row["latency"])] if row["valid"] else [],
            visible_features=[],
            hidden_features=row["hidden_features"],
        )
    return lines[0], cache


def read_log(path: str | Path) -> TuneRun:
    """The :class:`TuneRun` a log records (events included)."""
    lines = _read_lines(path)
    header = {k: v for k, v in lines[0].items() if k not in ("format", "version")}
    fields = {f.name for f in dataclasses.fields(TuneRun)} - {"events"}
    try:
        run = TuneRun(**{k: v for k, v in header.items() if k in fields})
        run.events = [Event(**row) for row in lines[1:]]
    except TypeError as err:
        raise TunerInputError(f"{path}: malformed ml2tuner-log ({err})") from err
    return run
