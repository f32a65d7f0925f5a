"""The one error type for configurations that VTA cannot build or run."""

from __future__ import annotations

STAGES = ("hw", "compile", "runtime")

KINDS = (
    "isa_field_overflow",  # a value (or a whole instruction) does not fit its ISA field
    "sram_overflow",  # a tile (times its virtual threads) exceeds an inp/wgt/acc scratchpad
    "uop_overflow",  # one micro-op kernel is longer than the micro-op scratchpad
    "acc_hazard",  # a GEMM micro-op writes the accumulator row one of the two previous micro-ops wrote
    "vthread_split",  # the outer tile count is not divisible by the virtual-thread count
    "layout",  # the workload cannot be packed for this hardware (channels or batch not divisible)
    "deadlock",  # the dependency-token protocol cannot make progress
    "sram_oob",  # an instruction reads or writes outside a scratchpad or a DRAM buffer
    "bad_dependency",  # a module uses a token queue it is not connected to
)


class InvalidConfigError(Exception):
    """A configuration that fails on VTA, the way it fails there.

    ``stage`` is where VTA reports it (``hw``: the hardware description itself, ``compile``: TVM lowering,
    ``runtime``: the VTA runtime or simulator aborts); ``kind`` is one of :data:`KINDS`; ``what`` names
    the buffer, ISA field or token queue; ``needed`` and ``available`` are in the unit given by ``unit``.
    """

    def __init__(
        self,
        stage: str,
        kind: str,
        needed: int,
        available: int,
        what: str = "",
        unit: str = "",
        detail: str = "",
    ) -> None:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        if kind not in KINDS:
            raise ValueError(f"unknown error kind {kind!r}")
        self.stage = stage
        self.kind = kind
        self.needed = int(needed)
        self.available = int(available)
        self.what = what
        self.unit = unit
        unit_text = f" {unit}" if unit else ""
        message = (
            f"[{stage}] {kind} in {what or '?'}: needs {needed}{unit_text}, available {available}{unit_text}"
        )
        super().__init__(f"{message} ({detail})" if detail else message)
