"""Micro-op kernels: loop folding into GEMM/ALU ``iter_out x iter_in`` loops and the micro-op cache.

As VTA's ``FoldUopLoop``, the two outermost loops of a micro-kernel (after dropping loops of extent 1)
become the instruction's ``iter_out``/``iter_in`` with affine index factors; the remaining loops are
unrolled into micro-ops. Kernels are deduplicated by content and cached in the micro-op scratchpad as the
runtime's ``UopQueue`` does: bump allocation, and a flush of the whole cache when a kernel does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vta_ext.tiling import Loop


@dataclass(frozen=True)
class Folded:
    """A micro-kernel after loop folding: loop extents, (dst, src, wgt) factors and the micro-ops."""

    iter_out: int
    iter_in: int
    factors_out: tuple[int, int, int]
    factors_in: tuple[int, int, int]
    uops: np.ndarray  # (n, 3) int64: dst, src, wgt indices


def fold(loops: tuple[Loop, ...], base: tuple[int, int, int]) -> Folded:
    """Fold the two outermost non-trivial loops; unroll the rest around ``base`` (dst, src, wgt)."""
    live = [loop for loop in loops if loop[0] > 1]
    folded = [*live, (1, 0, 0, 0), (1, 0, 0, 0)][:2]
    inner = live[2:]
    uops = np.array([base], dtype=np.int64)
    for extent, *factors in inner:  # outer loops first, so the last loop varies fastest
        steps = np.arange(extent, dtype=np.int64)[:, None] * np.array(factors, dtype=np.int64)
        uops = (uops[:, None, :] + steps[None, :, :]).reshape(-1, 3)
    return Folded(folded[0][0], folded[1][0], tuple(folded[0][1:]), tuple(folded[1][1:]), uops)


@dataclass
class KernelTable:
    """Distinct micro-kernels in first-use order; ``table`` is their concatenation (the DRAM uop buffer)."""

    offsets: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    _chunks: list[np.ndarray] = field(default_factory=list)
    _ids: dict[bytes, int] = field(default_factory=dict)

    def add(self, uops: np.ndarray) -> int:
        key = uops.tobytes()
        if key not in self._ids:
            self._ids[key] = len(self.lengths)
            self.offsets.append(sum(self.lengths))
            self.lengths.append(len(uops))
            self._chunks.append(uops)
        return self._ids[key]

    def uops(self, kernel: int) -> np.ndarray:
        return self._chunks[kernel]

    @property
    def table(self) -> np.ndarray:
        return np.concatenate(self._chunks) if self._chunks else np.zeros((0, 3), dtype=np.int64)


@dataclass(frozen=True)
class CachePlan:
    """Where each kernel use of one group finds its kernel, and which uses must load it first."""

    sram_offsets: tuple[int, ...]
    loads: tuple[bool, ...]


def plan_cache(
    uses: list[int], lengths: list[int], depth: int, n_groups: int
) -> tuple[list[CachePlan], np.ndarray]:
    """Simulate the micro-op cache over ``n_groups`` repetitions of the kernel-use sequence ``uses``.

    Returns the distinct per-group plans and, per group, the index of its plan. The cache state at a group
    boundary determines the rest, so the simulation stops at the first repeated state and continues the
    cycle it found. A kernel longer than ``depth`` is placed at 0; the runtime check rejects it.
    """
    resident: dict[int, int] = {}
    cursor = 0
    plans: dict[CachePlan, int] = {}
    plan_of_group: list[int] = []
    seen: dict[tuple, int] = {}
    for group in range(n_groups):
        state = (tuple(sorted(resident.items())), cursor)
        if state in seen:
            start = seen[state]
            period = group - start
            cycle = np.array(plan_of_group[start:group], dtype=np.int64)
            tail = cycle[np.arange(n_groups - group) % period]
            return list(plans), np.concatenate([np.array(plan_of_group, dtype=np.int64), tail])
        seen[state] = group
        offsets, loads = [], []
        for kernel in uses:
            hit = kernel in resident
            if not hit:
                if cursor + lengths[kernel] > depth:
                    resident.clear()
                    cursor = 0
                resident[kernel] = cursor
                cursor += lengths[kernel]
            offsets.append(resident[kernel])
            loads.append(not hit)
        plan = CachePlan(tuple(offsets), tuple(loads))
        plan_of_group.append(plans.setdefault(plan, len(plans)))
    return list(plans), np.array(plan_of_group, dtype=np.int64)
