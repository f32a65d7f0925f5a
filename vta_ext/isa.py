"""VTA's instruction set: opcodes, field layouts (whose widths follow the hardware config), encoding.

A program keeps its instructions as one ``int64`` array with a column per field (:class:`F`), so that
compilers, checkers and simulators work on whole columns; :func:`encode` / :func:`decode` give the
bit-exact ``INSN_BITS``-wide words for the stream VTA's fetch module would read. Fields are packed from
the least significant bit in the order listed by :func:`insn_layout`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Protocol

import numpy as np

from vta_ext.errors import InvalidConfigError


class IsaWidths(Protocol):
    """What the ISA reads of a hardware configuration (:class:`vta_ext.hw.HwConfig`, which validates
    itself with :func:`check_encodable` and so sits above this module)."""

    @property
    def INSN_BITS(self) -> int: ...

    @property
    def UOP_BITS(self) -> int: ...

    @property
    def LOOP_ITER_BITS(self) -> int: ...

    def log_depth(self, buffer: str) -> int: ...


class Op(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class Mem(IntEnum):
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4


class AluOp(IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


class Module(IntEnum):
    LOAD = 0
    COMPUTE = 1
    STORE = 2


class F(IntEnum):
    """Columns of a program's instruction array (the union of all instruction formats' fields)."""

    OPCODE = 0
    POP_PREV = 1
    POP_NEXT = 2
    PUSH_PREV = 3
    PUSH_NEXT = 4
    MEM_TYPE = 5
    SRAM_BASE = 6
    DRAM_BASE = 7
    Y_SIZE = 8
    X_SIZE = 9
    X_STRIDE = 10
    Y_PAD0 = 11
    Y_PAD1 = 12
    X_PAD0 = 13
    X_PAD1 = 14
    RESET = 15
    UOP_BGN = 16
    UOP_END = 17
    ITER_OUT = 18
    ITER_IN = 19
    DST_OUT = 20
    DST_IN = 21
    SRC_OUT = 22
    SRC_IN = 23
    WGT_OUT = 24
    WGT_IN = 25
    ALU_OP = 26
    USE_IMM = 27
    IMM = 28


N_FIELDS = len(F)
IMM_BITS = 16
MEM_SRAM_BITS = 16  # sram_base, y_size, x_size, x_stride are 16-bit in VTA's memory instruction
MEM_DRAM_BITS = 32
MEM_PAD_BITS = 4

_HEADER = (
    ("opcode", F.OPCODE, 3),
    ("pop_prev_dep", F.POP_PREV, 1),
    ("pop_next_dep", F.POP_NEXT, 1),
    ("push_prev_dep", F.PUSH_PREV, 1),
    ("push_next_dep", F.PUSH_NEXT, 1),
)


def insn_layout(opcode: Op, hw: IsaWidths) -> list[tuple[str, F, int]]:
    """(field name, column, bits) of one instruction format, least significant field first."""
    if opcode in (Op.LOAD, Op.STORE):
        body = [
            ("memory_type", F.MEM_TYPE, 3),
            ("sram_base", F.SRAM_BASE, MEM_SRAM_BITS),
            ("dram_base", F.DRAM_BASE, MEM_DRAM_BITS),
            ("y_size", F.Y_SIZE, MEM_SRAM_BITS),
            ("x_size", F.X_SIZE, MEM_SRAM_BITS),
            ("x_stride", F.X_STRIDE, MEM_SRAM_BITS),
            ("y_pad_0", F.Y_PAD0, MEM_PAD_BITS),
            ("y_pad_1", F.Y_PAD1, MEM_PAD_BITS),
            ("x_pad_0", F.X_PAD0, MEM_PAD_BITS),
            ("x_pad_1", F.X_PAD1, MEM_PAD_BITS),
        ]
    elif opcode in (Op.GEMM, Op.ALU):
        uop, it, acc = hw.log_depth("UOP"), hw.LOOP_ITER_BITS, hw.log_depth("ACC")
        # ALU reads its second operand from the accumulator, GEMM from the input scratchpad.
        src = acc if opcode == Op.ALU else hw.log_depth("INP")
        body = [
            ("reset_reg", F.RESET, 1),
            ("uop_bgn", F.UOP_BGN, uop),
            ("uop_end", F.UOP_END, uop + 1),
            ("iter_out", F.ITER_OUT, it),
            ("iter_in", F.ITER_IN, it),
            ("dst_factor_out", F.DST_OUT, acc),
            ("dst_factor_in", F.DST_IN, acc),
            ("src_factor_out", F.SRC_OUT, src),
            ("src_factor_in", F.SRC_IN, src),
        ]
        if opcode == Op.GEMM:
            wgt = hw.log_depth("WGT")
            body += [("wgt_factor_out", F.WGT_OUT, wgt), ("wgt_factor_in", F.WGT_IN, wgt)]
        else:
            body += [("alu_opcode", F.ALU_OP, 3), ("use_imm", F.USE_IMM, 1), ("imm", F.IMM, IMM_BITS)]
    else:
        body = []
    return list(_HEADER) + body


def uop_layout(hw: IsaWidths) -> list[tuple[str, int]]:
    """(field name, bits) of a micro-op: accumulator, input-or-accumulator and weight indices."""
    acc, inp, wgt = hw.log_depth("ACC"), hw.log_depth("INP"), hw.log_depth("WGT")
    return [("dst_idx", acc), ("src_idx", max(acc, inp)), ("wgt_idx", wgt)]


def _first_overflow(fields: list[tuple[str, int]], width: int) -> tuple[str, int] | None:
    """The first field that ends beyond ``width`` bits, with the total bits the format needs."""
    end, total = 0, sum(bits for _, bits in fields)
    for name, bits in fields:
        end += bits
        if end > width:
            return name, total
    return None


def check_encodable(hw: IsaWidths) -> None:
    """Raise ``isa_field_overflow`` (stage ``hw``) if an instruction or micro-op cannot address the
    configured scratchpads within ``INSN_BITS`` / ``UOP_BITS``."""
    for opcode in (Op.LOAD, Op.GEMM, Op.ALU):
        layout = insn_layout(opcode, hw)
        over = _first_overflow([(name, bits) for name, _, bits in layout], hw.INSN_BITS)
        if over:
            raise InvalidConfigError(
                "hw",
                "isa_field_overflow",
                over[1],
                hw.INSN_BITS,
                f"{opcode.name}.{over[0]}",
                "bits",
                "raise INSN_BITS",
            )
    over = _first_overflow(uop_layout(hw), hw.UOP_BITS)
    if over:
        raise InvalidConfigError(
            "hw", "isa_field_overflow", over[1], hw.UOP_BITS, f"uop.{over[0]}", "bits", "raise UOP_BITS"
        )
    for name in ("INP", "WGT", "ACC", "UOP"):
        if hw.log_depth(name) > MEM_SRAM_BITS:
            raise InvalidConfigError(
                "hw",
                "isa_field_overflow",
                hw.log_depth(name),
                MEM_SRAM_BITS,
                "LOAD.sram_base",
                "bits",
                f"{name} scratchpad too deep",
            )


def check_fields(insns: np.ndarray, hw: IsaWidths) -> None:
    """Raise ``isa_field_overflow`` (stage ``compile``) naming the first field of the first instruction
    format whose value does not fit; vectorised over the program."""
    opcodes = insns[:, F.OPCODE]
    for opcode in (Op.LOAD, Op.STORE, Op.GEMM, Op.ALU):
        rows = insns[opcodes == opcode]
        if len(rows) == 0:
            continue
        for name, col, bits in insn_layout(opcode, hw):
            column = rows[:, col]
            if col == F.IMM:  # the only signed field
                low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
            else:
                low, high = 0, (1 << bits) - 1
            worst = int(column.max()) if column.max() > high else int(column.min())
            if not low <= worst <= high:
                raise InvalidConfigError(
                    "compile",
                    "isa_field_overflow",
                    worst,
                    high,
                    f"{opcode.name}.{name}",
                    "",
                    f"field of {bits} bits",
                )


def encode(row: np.ndarray, hw: IsaWidths) -> int:
    """The ``INSN_BITS``-wide instruction word of one program row (fields must already fit)."""
    word, shift = 0, 0
    for _, col, bits in insn_layout(Op(int(row[F.OPCODE])), hw):
        word |= (int(row[col]) & ((1 << bits) - 1)) << shift
        shift += bits
    return word


def decode(word: int, hw: IsaWidths) -> np.ndarray:
    """Inverse of :func:`encode`: a program row with unused fields zero."""
    row = np.zeros(N_FIELDS, dtype=np.int64)
    row[F.OPCODE] = word & 0b111
    shift = 0
    for _, col, bits in insn_layout(Op(int(row[F.OPCODE])), hw):
        value = (word >> shift) & ((1 << bits) - 1)
        if col == F.IMM and value >> (bits - 1):
            value -= 1 << bits
        row[col] = value
        shift += bits
    return row


def encode_uop(dst: int, src: int, wgt: int, hw: IsaWidths) -> int:
    """The ``UOP_BITS``-wide micro-op word."""
    word, shift = 0, 0
    for value, (_, bits) in zip((dst, src, wgt), uop_layout(hw), strict=True):
        if not 0 <= value < (1 << bits):
            raise InvalidConfigError("compile", "isa_field_overflow", value, (1 << bits) - 1, "uop")
        word |= value << shift
        shift += bits
    return word


def decode_uop(word: int, hw: IsaWidths) -> tuple[int, int, int]:
    out, shift = [], 0
    for _, bits in uop_layout(hw):
        out.append((word >> shift) & ((1 << bits) - 1))
        shift += bits
    return out[0], out[1], out[2]


def module_of(insns: np.ndarray) -> np.ndarray:
    """Which module executes each instruction: LOAD INP/WGT go to load, LOAD UOP/ACC, GEMM, ALU and
    FINISH to compute, STORE to store (as VTA's runtime routes them)."""
    op, mem = insns[:, F.OPCODE], insns[:, F.MEM_TYPE]
    module = np.full(len(insns), Module.COMPUTE, dtype=np.int64)
    module[(op == Op.LOAD) & ((mem == Mem.INP) | (mem == Mem.WGT))] = Module.LOAD
    module[op == Op.STORE] = Module.STORE
    return module
