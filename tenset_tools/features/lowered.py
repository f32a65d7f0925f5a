"""Lowered-IR ("hidden") features of a scheduled candidate: what only lowering the schedule reveals.

The candidate's module is lowered with TVM's own ``s_tir`` pipeline (what ``tvm.tirx.build`` runs before
code generation: loops vectorised into lanes, unrolled loops expanded, parallel loops kept) and the
lowered IR is walked for: loop nest depth and extents, allocations per storage scope (bytes), vector lanes,
parallel extent, number of stores (vector and scalar) and the unrolled size. Sizes and counts enter as
log2(1 + value). Lowering is not free, so callers cache by structural hash.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.s_tir import meta_schedule as ms

LOWERED_FEATURE_NAMES = [
    "n_loops",
    "n_serial_loops",
    "n_parallel_loops",
    "n_unrolled_loops",
    "max_loop_depth",
    "loop_extent_log_sum",
    "max_loop_extent",
    "parallel_extent",
    "n_stores",
    "n_vector_stores",
    "max_vector_lanes",
    "n_ramps",
    "alloc_bytes_global",
    "alloc_bytes_local",
    "alloc_bytes_shared",
    "alloc_bytes_other",
    "n_allocs",
    "unrolled_size",
]


class LoweringError(RuntimeError):
    """A candidate's schedule could not be lowered (the builder would reject it too)."""


def lower(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """``mod`` (a scheduled TIR module) lowered by the ``s_tir`` pipeline for ``target``."""
    bound = tirx.transform.BindTarget(target.with_host(target))(mod)
    pipeline, _finalize_host, _finalize_device = tvm.tirx.get_tir_pipeline("s_tir")
    try:
        return pipeline(bound)
    except (tvm.error.TVMError, RuntimeError, ValueError) as err:  # errors raised by TVM's passes
        raise LoweringError(f"lowering failed: {str(err).splitlines()[0] if str(err) else err}") from err


def _log(value: float) -> float:
    return math.log2(1.0 + max(value, 0.0))


def _extent(loop: tirx.For) -> int:
    extent = loop.extent
    return int(extent.value) if hasattr(extent, "value") else 1


def lowered_features(lowered: tvm.IRModule) -> np.ndarray:
    """LOWERED_FEATURE_NAMES values of a lowered module (float32)."""
    loops: list[tirx.For] = []
    allocs: list = []
    stores = {"n": 0, "vector": 0, "lanes": 1, "ramps": 0, "nodes": 0}

    def on_for(node: tirx.For) -> None:
        loops.append(node)

    def on_alloc(node) -> None:
        allocs.append(node.buffer)

    def on_store(node: tirx.BufferStore) -> None:
        stores["n"] += 1
        # A vector store writes through a Ramp index (value dtypes are not all exposed in 0.27's bindings).
        stores["vector"] += any(isinstance(index, tirx.Ramp) for index in node.indices)

    def on_ramp(node: tirx.Ramp) -> None:
        stores["ramps"] += 1
        lanes = getattr(node.lanes, "value", node.lanes)
        stores["lanes"] = max(stores["lanes"], int(lanes))

    def on_stmt(node) -> None:
        stores["nodes"] += 1

    walkers = [(tirx.For, on_for), (tirx.AllocBuffer, on_alloc), (tirx.BufferStore, on_store)]
    walkers += [(tirx.Ramp, on_ramp), (tirx.Stmt, on_stmt)]
    for _, func in lowered.functions_items():
        if isinstance(func, tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, walkers)

    depth: dict[int, int] = {}

    def nest(loop: tirx.For) -> int:
        key = id(loop)
        if key not in depth:
            inner: list[tirx.For] = []
            tvm_ffi.structural_walk(loop.body, [(tirx.For, inner.append)])
            depth[key] = 1 + max((nest(i) for i in inner), default=0)
        return depth[key]

    kinds = [tirx.ForKind(int(loop.kind)).name for loop in loops]
    extents = [_extent(loop) for loop in loops]
    scopes = {"global": 0.0, "local": 0.0, "shared": 0.0, "other": 0.0}
    for buffer in allocs:
        size = math.prod(int(getattr(x, "value", 1)) for x in buffer.shape) * buffer.dtype.bits / 8
        scope = buffer.scope().split(".")[0]
        scopes[scope if scope in scopes else "other"] += size
    parallel = math.prod(e for e, k in zip(extents, kinds, strict=True) if k == "PARALLEL")
    values = [
        _log(len(loops)),
        _log(kinds.count("SERIAL")),
        _log(kinds.count("PARALLEL")),
        _log(kinds.count("UNROLLED")),
        float(max((nest(loop) for loop in loops), default=0)),
        float(sum(math.log2(max(e, 1)) for e in extents)),
        _log(max(extents, default=0)),
        _log(parallel if "PARALLEL" in kinds else 0),
        _log(stores["n"]),
        _log(stores["vector"]),
        _log(stores["lanes"]),
        _log(stores["ramps"]),
        *(_log(scopes[s]) for s in ("global", "local", "shared", "other")),
        _log(len(allocs)),
        _log(stores["nodes"]),
    ]
    return np.asarray(values, dtype=np.float32)


def candidate_lowered_features(
    target: tvm.target.Target, candidates: Sequence[ms.MeasureCandidate]
) -> tuple[np.ndarray, np.ndarray]:
    """Lowered features of MetaSchedule candidates and a mask of those that lowered (rows of the others
    are zeros: a candidate that cannot be lowered cannot be built)."""
    rows = np.zeros((len(candidates), len(LOWERED_FEATURE_NAMES)), dtype=np.float32)
    ok = np.ones(len(candidates), dtype=bool)
    for i, candidate in enumerate(candidates):
        try:
            rows[i] = lowered_features(lower(candidate.sch.mod, target))
        except LoweringError:
            ok[i] = False
    return rows, ok
