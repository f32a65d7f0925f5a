"""A model-free tuner of VTA knobs (random or grid order) that writes records in the shared schema."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from tenset_tools import schema
from vta_ext.features import VTA_HW_FEATURE_NAMES, hw_features
from vta_ext.hw import HwConfig
from vta_ext.knobs import Knobs, KnobSpace
from vta_ext.measure import MeasureResult, measure
from vta_ext.workloads import VtaWorkload, flops

SWEEP_METHODS = ("random", "grid")
SOURCE = "vta_ext"


@dataclass(frozen=True)
class KnobSearchResult:
    """All records of a run (schema dicts), the best valid knobs and latency (seconds), and counts."""

    records: list[dict]
    best_knobs: Knobs | None
    best_latency: float  # NaN when nothing valid was found
    n_valid: int
    n_invalid: int


def target_id(hw: HwConfig) -> str:
    """The dataset target id of a VTA config, e.g. ``vta/<bitstream>-<short id>``."""
    return f"vta/{hw.bitstream}-{hw.short_id()}"


def to_record(
    workload: VtaWorkload, knobs: Knobs, hw: HwConfig, result: MeasureResult, network: str | None = None
) -> dict:
    """One record of the dataset schema (``tenset_tools.schema``); kernel features are the visible ones."""
    target = target_id(hw)
    return {
        "task_id": f"{target}/{workload.key}",
        "workload_key": workload.key,
        "op_kind": workload.op_kind,
        "flops": flops(workload),
        "target_id": target,
        "hw_features": hw_features(hw),
        "candidate_kind": "vta_knobs",
        "candidate": json.dumps(knobs, sort_keys=True),
        "kernel_features": result.visible_features,
        "sequence_features": None,
        "hidden_features": result.hidden_features,
        "valid": result.valid,
        "error_kind": result.error_kind,
        "latencies": result.latencies,
        "latency": result.latency,
        "norm_throughput": math.nan,
        "source": SOURCE,
        "network": network,
        "weight": 1.0,
    }


def candidates(space: KnobSpace, method: str, budget: int, seed: int) -> list[Knobs]:
    """``random``: ``budget`` distinct uniform draws; ``grid``: the first ``budget`` points in space order."""
    if method == "random":
        return space.sample(budget, np.random.default_rng(seed))
    if method == "grid":
        return [space.point(i) for i in range(min(budget, len(space)))]
    raise ValueError(f"unknown method {method!r}; choose from {SWEEP_METHODS}")


def tune(
    workload: VtaWorkload,
    hw: HwConfig,
    method: str = "random",
    budget: int = 64,
    seed: int = 0,
    network: str | None = None,
    progress: bool = True,
) -> KnobSearchResult:
    """Measure ``budget`` candidates of ``workload``'s knob space on ``hw`` (latencies in seconds)."""
    space = KnobSpace(workload, hw)
    records, best_knobs, best = [], None, math.inf
    for knobs in tqdm(
        candidates(space, method, budget, seed), desc=f"tune {workload.name}", disable=not progress
    ):
        result = measure(workload, knobs, hw)
        records.append(to_record(workload, knobs, hw, result, network))
        if result.valid and result.latency < best:
            best_knobs, best = knobs, result.latency
    n_valid = sum(r["valid"] for r in records)
    best_latency = best if best_knobs else math.nan
    return KnobSearchResult(records, best_knobs, best_latency, n_valid, len(records) - n_valid)


def write_records(records: list[dict], path: str | os.PathLike) -> None:
    """Write records as a Parquet dataset of the shared schema, with throughput normalised per task."""
    # Normalise on a frame, but write from records: the frame path would turn NaN latencies into nulls.
    frame = schema.add_normalised_throughput(schema.records_to_table(records).to_pandas())
    filled = [
        {**r, "norm_throughput": float(v)} for r, v in zip(records, frame["norm_throughput"], strict=True)
    ]
    schema.write_dataset(schema.records_to_table(filled, hw_feature_names=VTA_HW_FEATURE_NAMES), path)
