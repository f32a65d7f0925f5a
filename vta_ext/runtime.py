"""The checks VTA's runtime makes before a program runs (``UopKernel::VerifyDep``, the micro-op queue's
capacity check) and the scratchpad/DRAM bounds its simulator asserts on every transfer."""

from __future__ import annotations

import numpy as np

from vta_ext.compiler import Program
from vta_ext.errors import InvalidConfigError
from vta_ext.isa import F, Mem, Op

HAZARD_DISTANCE = 3  # a GEMM micro-op may not write the acc row either of the two previous ones wrote


def verify(program: Program) -> None:
    """Raise ``uop_overflow``, ``acc_hazard`` or ``sram_oob`` (all stage runtime)."""
    hw = program.hw
    longest = max(program.kernel_lengths)
    if longest > hw.depth("UOP"):
        raise InvalidConfigError(
            "runtime", "uop_overflow", longest, hw.depth("UOP"), "uop_buffer", "micro-ops"
        )
    for offset, length in program.gemm_kernels:
        dst = program.uops[offset : offset + length, 0]
        for distance in range(1, HAZARD_DISTANCE):
            clash = np.flatnonzero(dst[distance:] == dst[:-distance])
            if len(clash):
                raise InvalidConfigError(
                    "runtime",
                    "acc_hazard",
                    HAZARD_DISTANCE,
                    distance,
                    "acc_buffer",
                    "micro-ops apart",
                    f"acc row {dst[clash[0]]}",
                )
    _check_transfers(program)
    _check_store_pads(program)


def _check_store_pads(program: Program) -> None:
    """STORE has pad fields in its format but the store module cannot pad."""
    stores = program.insns[program.insns[:, F.OPCODE] == Op.STORE]
    for col in (F.Y_PAD0, F.Y_PAD1, F.X_PAD0, F.X_PAD1):
        if len(stores) and stores[:, col].max() > 0:
            raise InvalidConfigError(
                "runtime",
                "isa_field_overflow",
                int(stores[:, col].max()),
                0,
                f"STORE.{col.name.lower()}",
                "elements",
                "STORE cannot pad",
            )


def _check_transfers(program: Program) -> None:
    hw, insns = program.hw, program.insns
    op, mem = insns[:, F.OPCODE], insns[:, F.MEM_TYPE]
    y, x = insns[:, F.Y_SIZE], insns[:, F.X_SIZE]
    rows = y + insns[:, F.Y_PAD0] + insns[:, F.Y_PAD1]
    cols = x + insns[:, F.X_PAD0] + insns[:, F.X_PAD1]
    sram_end = insns[:, F.SRAM_BASE] + np.where(x > 0, rows * cols, 0)
    dram_end = insns[:, F.DRAM_BASE] + np.where((x > 0) & (y > 0), (y - 1) * insns[:, F.X_STRIDE] + x, 0)
    for mem_type in Mem:
        rows_of = (op == Op.STORE) if mem_type == Mem.OUT else (op == Op.LOAD) & (mem == mem_type)
        if not rows_of.any():
            continue
        sram_name = "ACC" if mem_type == Mem.OUT else mem_type.name
        for end, limit, space in (
            (sram_end, hw.depth(sram_name), "scratchpad"),
            (dram_end, program.dram_elems[mem_type.name], "DRAM"),
        ):
            worst = int(end[rows_of].max())
            if worst > limit:
                raise InvalidConfigError(
                    "runtime", "sram_oob", worst, limit, f"{mem_type.name} {space}", "elements"
                )
