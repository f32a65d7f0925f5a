"""Timing model: the load, compute and store modules as in-order machines coupled by token FIFOs.

Each instruction starts when its module has finished the previous one and the tokens it pops have been
pushed (a token exists from the end of the pushing instruction); FIFOs are unbounded and instruction fetch
is free. Durations in cycles, with ``bus`` the bytes the memory bus moves per cycle:

* LOAD / STORE: ``y_size * (DMA_LATENCY + ceil(x_size * elem_bytes / bus))`` plus one cycle per zero
  padding element written; a LOAD/STORE with ``x_size = 0`` (a dependency no-op) and FINISH take 1.
* GEMM: ``iter_out * iter_in * n_uops * GEMM_II + PIPE_DEPTH`` (a reset GEMM runs at II 1);
  ALU: the same with ``ALU_II``.

So the cycle count is never below the compute module's busy time (hence never below
``gemm_counter * GEMM_II``) nor below each DMA module's busy time (hence never below its bytes / bus).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vta_ext.compiler import Program
from vta_ext.isa import F, Mem, Op
from vta_ext.runtime import verify
from vta_ext.tokens import TokenGraph, execution_order, token_graph

MODULES = ("load", "compute", "store")


@dataclass(frozen=True)
class Timing:
    """Cycles of one run, its latency at the configured clock, and per-module busy and stall cycles
    (stall: waiting for a token while the previous instruction had finished)."""

    cycles: int
    latency_s: float
    busy: dict[str, int]
    stall: dict[str, int]
    bound: str  # the module with the most busy cycles
    gemm_utilisation: float  # GEMM micro-op cycles / total cycles, a fraction of the core's peak

    @property
    def summary(self) -> dict[str, float]:
        out = {
            "cycles": float(self.cycles),
            "latency_s": self.latency_s,
            "gemm_utilisation": self.gemm_utilisation,
        }
        out.update({f"{m}_busy": float(self.busy[m]) for m in MODULES})
        out.update({f"{m}_stall": float(self.stall[m]) for m in MODULES})
        return out


def durations(program: Program) -> np.ndarray:
    """Cycles of every instruction of ``program``."""
    hw, insns = program.hw, program.insns
    op, mem = insns[:, F.OPCODE], insns[:, F.MEM_TYPE]
    y, x = insns[:, F.Y_SIZE], insns[:, F.X_SIZE]
    elem = np.zeros(len(insns), dtype=np.int64)
    for m in Mem:
        elem[mem == m] = hw.elem_bytes(m.name)
    elem[op == Op.STORE] = hw.elem_bytes("OUT")
    rows = y + insns[:, F.Y_PAD0] + insns[:, F.Y_PAD1]
    cols = x + insns[:, F.X_PAD0] + insns[:, F.X_PAD1]
    beats = -(-(x * elem) // hw.bus_bytes)
    dma = y * (hw.DMA_LATENCY + beats) + rows * cols - y * x
    execs = insns[:, F.ITER_OUT] * insns[:, F.ITER_IN] * (insns[:, F.UOP_END] - insns[:, F.UOP_BGN])
    ii = np.where(op == Op.ALU, hw.ALU_II, np.where(insns[:, F.RESET] == 1, 1, hw.GEMM_II))
    compute = execs * ii + hw.PIPE_DEPTH
    is_dma = ((op == Op.LOAD) | (op == Op.STORE)) & (x > 0)
    is_compute = (op == Op.GEMM) | (op == Op.ALU)
    return np.where(is_dma, dma, np.where(is_compute, compute, 1))


def simulate(program: Program, graph: TokenGraph | None = None) -> Timing:
    """Time ``program``; raises the runtime-stage errors (including ``deadlock``) first."""
    verify(program)
    graph = graph or token_graph(program.insns)
    order = execution_order(graph)
    duration = durations(program).tolist()
    module, dep_prev, dep_next = graph.module.tolist(), graph.dep_prev.tolist(), graph.dep_next.tolist()
    end = [0] * len(duration)
    free, busy, stall = [0, 0, 0], [0, 0, 0], [0, 0, 0]
    for i in order:  # pushes precede their pops in this order, so end[] of a dependency is final
        m = module[i]
        start = free[m]
        for dep in (dep_prev[i], dep_next[i]):
            if dep >= 0 and end[dep] > start:
                start = end[dep]
        stall[m] += start - free[m]
        busy[m] += duration[i]
        free[m] = end[i] = start + duration[i]
    cycles = max(free)
    insns = program.insns
    gemm = (insns[:, F.OPCODE] == Op.GEMM) & (insns[:, F.RESET] == 0)
    execs = insns[:, F.ITER_OUT] * insns[:, F.ITER_IN] * (insns[:, F.UOP_END] - insns[:, F.UOP_BGN])
    gemm_cycles = int(execs[gemm].sum()) * program.hw.GEMM_II
    return Timing(
        cycles=cycles,
        latency_s=cycles / (program.hw.CLOCK_MHZ * 1e6),
        busy=dict(zip(MODULES, busy, strict=True)),
        stall=dict(zip(MODULES, stall, strict=True)),
        bound=MODULES[int(np.argmax(busy))],
        gemm_utilisation=gemm_cycles / cycles if cycles else 0.0,
    )
