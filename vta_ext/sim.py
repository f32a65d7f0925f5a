"""Functional simulator: executes a VTA program on NumPy scratchpads, bit for bit.

Scratchpads hold ``int8`` inp[INP_DEPTH, BATCH, BLOCK_IN], ``int8`` wgt[WGT_DEPTH, BLOCK_OUT, BLOCK_IN],
``int32`` acc[ACC_DEPTH, BATCH, BLOCK_OUT] and the micro-ops uop[UOP_DEPTH, 3]; DRAM is one array per
buffer, addressed in elements. Instructions run in a legal order of the token protocol
(:func:`vta_ext.tokens.execution_order`), each module running ahead as far as its tokens allow, so a
missing write-after-read token shows up as a wrong result. GEMM and ALU expand their
``iter_out x iter_in x micro-op`` loops into index arrays and execute them with NumPy; the micro-ops come
from the micro-op scratchpad, i.e. from what LOAD UOP instructions put there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vta_ext.compiler import Program
from vta_ext.errors import InvalidConfigError
from vta_ext.isa import AluOp, F, Mem, Op
from vta_ext.runtime import verify
from vta_ext.tokens import execution_order, token_graph
from vta_ext.workloads import pack_activations, pack_bias, pack_weights, unpack_activations

COUNTERS = (
    "inp_load_nbytes",
    "wgt_load_nbytes",
    "acc_load_nbytes",
    "uop_load_nbytes",
    "out_store_nbytes",
    "gemm_counter",
    "alu_counter",
)


@dataclass(frozen=True)
class SimResult:
    """VTA's profiler counters (bytes and micro-op executions) and, unless counters-only, the output."""

    counters: dict[str, int]
    output: np.ndarray | None


def profile(program: Program) -> dict[str, int]:
    """The counters of VTA's simulator profiler, computed from the instruction stream (padding is not
    counted as loaded bytes; reset GEMMs are not counted)."""
    hw, insns = program.hw, program.insns
    op, mem = insns[:, F.OPCODE], insns[:, F.MEM_TYPE]
    elems = insns[:, F.Y_SIZE] * insns[:, F.X_SIZE]
    execs = insns[:, F.ITER_OUT] * insns[:, F.ITER_IN] * (insns[:, F.UOP_END] - insns[:, F.UOP_BGN])
    counters = {
        f"{m.name.lower()}_load_nbytes": int(elems[(op == Op.LOAD) & (mem == m)].sum())
        * hw.elem_bytes(m.name)
        for m in (Mem.INP, Mem.WGT, Mem.ACC, Mem.UOP)
    }
    counters["out_store_nbytes"] = int(elems[op == Op.STORE].sum()) * hw.elem_bytes("OUT")
    counters["gemm_counter"] = int(execs[(op == Op.GEMM) & (insns[:, F.RESET] == 0)].sum())
    counters["alu_counter"] = int(execs[op == Op.ALU].sum())
    return {name: counters[name] for name in COUNTERS}


def run(program: Program, inputs: dict[str, np.ndarray] | None = None) -> SimResult:
    """Run ``program``. With ``inputs`` (unpacked ``data``, ``weight``, ``bias`` as made by
    :func:`vta_ext.workloads.random_inputs`) execute it and return the unpacked int8 output; without,
    run the token protocol only (VTA's skip-exec profiling mode). Raises runtime-stage errors."""
    verify(program)
    order = execution_order(token_graph(program.insns))
    output = None
    if inputs is not None:
        machine = _Machine(program, inputs)
        for i in order:
            machine.execute(program.insns[i])
        shape = program.workload.shapes()[2]
        output = unpack_activations(machine.dram["OUT"], shape, program.hw.BATCH)
    return SimResult(profile(program), output)


def _oob(what: str, index: np.ndarray, limit: int) -> None:
    if len(index) and (index.min() < 0 or index.max() >= limit):
        raise InvalidConfigError("runtime", "sram_oob", int(index.max()) + 1, limit, what, "elements")


class _Machine:
    """Scratchpads and DRAM of one run."""

    def __init__(self, program: Program, inputs: dict[str, np.ndarray]) -> None:
        hw = self.hw = program.hw
        self.program = program
        b, bi, bo = hw.BATCH, hw.BLOCK_IN, hw.BLOCK_OUT
        self.dram = {
            "INP": pack_activations(inputs["data"], b, bi),
            "WGT": pack_weights(inputs["weight"], bo, bi),
            "ACC": pack_bias(inputs["bias"], hw),
            "OUT": np.zeros((program.dram_elems["OUT"], b, bo), dtype=np.int8),
            "UOP": program.uops,
        }
        self.sram = {
            "INP": np.zeros((hw.depth("INP"), b, bi), dtype=np.int8),
            "WGT": np.zeros((hw.depth("WGT"), bo, bi), dtype=np.int8),
            "ACC": np.zeros((hw.depth("ACC"), b, bo), dtype=np.int32),
            "UOP": np.zeros((hw.depth("UOP"), 3), dtype=np.int64),
        }

    def execute(self, insn: np.ndarray) -> None:
        op = insn[F.OPCODE]
        if op == Op.LOAD and insn[F.X_SIZE] > 0:
            self._load(insn)
        elif op == Op.STORE and insn[F.X_SIZE] > 0:
            self._store(insn)
        elif op == Op.GEMM:
            self._gemm(insn)
        elif op == Op.ALU:
            self._alu(insn)

    def _dram_index(self, insn: np.ndarray, buffer: str) -> np.ndarray:
        rows = np.arange(insn[F.Y_SIZE])[:, None] * insn[F.X_STRIDE]
        index = (insn[F.DRAM_BASE] + rows + np.arange(insn[F.X_SIZE])).ravel()
        _oob(f"{buffer} DRAM", index, len(self.dram[buffer]))
        return index

    def _load(self, insn: np.ndarray) -> None:
        """2-D strided copy into a scratchpad, surrounded by zero padding."""
        buffer = Mem(int(insn[F.MEM_TYPE])).name
        sram = self.sram[buffer]
        y, x, y0, x0 = insn[F.Y_SIZE], insn[F.X_SIZE], insn[F.Y_PAD0], insn[F.X_PAD0]
        rows, cols = y0 + y + insn[F.Y_PAD1], x0 + x + insn[F.X_PAD1]
        data = self.dram[buffer][self._dram_index(insn, buffer)]
        block = np.zeros((rows, cols, *sram.shape[1:]), dtype=sram.dtype)
        block[y0 : y0 + y, x0 : x0 + x] = data.reshape(y, x, *sram.shape[1:])
        base = insn[F.SRAM_BASE]
        _oob(f"{buffer} scratchpad", np.array([base, base + rows * cols - 1]), len(sram))
        sram[base : base + rows * cols] = block.reshape(-1, *sram.shape[1:])

    def _store(self, insn: np.ndarray) -> None:
        """Accumulators to DRAM, truncated to int8 (two's complement wrap-around, no saturation)."""
        count, base = insn[F.Y_SIZE] * insn[F.X_SIZE], insn[F.SRAM_BASE]
        _oob("ACC scratchpad", np.array([base, base + count - 1]), len(self.sram["ACC"]))
        self.dram["OUT"][self._dram_index(insn, "OUT")] = self.sram["ACC"][base : base + count].astype(
            np.int8
        )

    def _indices(self, insn: np.ndarray, columns: tuple[F, F]) -> list[np.ndarray]:
        """Per micro-op execution (iter_out, iter_in, micro-op order): dst, src and wgt indices."""
        uops = self.sram["UOP"][insn[F.UOP_BGN] : insn[F.UOP_END]]
        i = np.arange(insn[F.ITER_OUT])[:, None, None]
        j = np.arange(insn[F.ITER_IN])[None, :, None]
        out = []
        for k, (f_out, f_in) in enumerate(((F.DST_OUT, F.DST_IN), (F.SRC_OUT, F.SRC_IN), columns)):
            out.append((uops[None, None, :, k] + i * insn[f_out] + j * insn[f_in]).ravel())
        return out

    def _gemm(self, insn: np.ndarray) -> None:
        dst, src, wgt = self._indices(insn, (F.WGT_OUT, F.WGT_IN))
        _oob("ACC scratchpad", dst, len(self.sram["ACC"]))
        if insn[F.RESET]:
            self.sram["ACC"][dst] = 0
            return
        _oob("INP scratchpad", src, len(self.sram["INP"]))
        _oob("WGT scratchpad", wgt, len(self.sram["WGT"]))
        # float32 products and sums of int8 values stay exact below 2**24, far above one GEMM block's sum.
        x = self.sram["INP"][src].astype(np.float32)
        w = self.sram["WGT"][wgt].astype(np.float32)
        np.add.at(self.sram["ACC"], dst, np.matmul(x, w.transpose(0, 2, 1)).astype(np.int32))

    def _alu(self, insn: np.ndarray) -> None:
        acc = self.sram["ACC"]
        dst, src, _ = self._indices(insn, (F.DST_OUT, F.DST_IN))
        _oob("ACC scratchpad", dst, len(acc))
        use_imm = bool(insn[F.USE_IMM])
        if not use_imm:
            _oob("ACC scratchpad", src, len(acc))
        op, imm = AluOp(int(insn[F.ALU_OP])), np.int32(insn[F.IMM])
        independent = len(np.unique(dst)) == len(dst) and (use_imm or not np.isin(src, dst).any())
        if independent:
            acc[dst] = _alu_apply(op, acc[dst], imm if use_imm else acc[src])
            return
        for d, s in zip(dst.tolist(), src.tolist(), strict=True):  # reads see earlier writes
            acc[d] = _alu_apply(op, acc[d], imm if use_imm else acc[s])


def _alu_apply(op: AluOp, a: np.ndarray, b: np.ndarray | np.int32) -> np.ndarray:
    """Lane-wise int32 ALU op; SHR by a negative amount shifts left; ADD and MUL wrap around."""
    if op == AluOp.MIN:
        return np.minimum(a, b)
    if op == AluOp.MAX:
        return np.maximum(a, b)
    if op == AluOp.ADD:
        return a + b
    if op == AluOp.MUL:
        return a * b
    b = np.broadcast_to(b, a.shape)
    return np.where(b >= 0, a >> np.maximum(b, 0), a << np.maximum(-b, 0)).astype(np.int32)
