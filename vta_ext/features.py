"""Feature vectors for learning: hardware, visible (workload + knobs + hardware) and hidden (compilation).

Hidden features are what only compiling reveals (ML2Tuner's "hidden features"): the instruction mix, DMA
traffic per buffer, micro-op kernels and cache misses, scratchpad use, tokens and arithmetic intensity.
They come from the program and the skip-exec profiler counters, without executing any data. Sizes and
counts enter as log2(1 + value) so that features of layers of very different sizes are comparable.
"""

from __future__ import annotations

import numpy as np

from vta_ext.compiler import Program
from vta_ext.hw import HwConfig
from vta_ext.isa import AluOp, F, Mem, Module, Op, module_of
from vta_ext.knobs import Knobs
from vta_ext.tokens import TokenGraph
from vta_ext.workloads import Conv2D, VtaWorkload

VTA_HW_FEATURE_NAMES = [
    "log_batch",
    "log_block_in",
    "log_block_out",
    "log_uop_buff",
    "log_inp_buff",
    "log_wgt_buff",
    "log_acc_buff",
    "log_bus_width",
    "clock_mhz",
    "gemm_ii",
    "alu_ii",
    "dma_latency",
    "pipe_depth",
    "insn_bits",
    "uop_bits",
    "loop_iter_bits",
]

WORKLOAD_FEATURE_NAMES = [
    "is_conv",
    "batch",
    "height",
    "width",
    "in_channels",
    "out_channels",
    "kernel",
    "pad",
    "stride",
    "out_height",
    "out_width",
    "macs",
]
KNOB_NAMES = ["tile_b", "tile_h", "tile_w", "tile_ci", "tile_co", "oc_nthread", "h_nthread"]
VISIBLE_FEATURE_NAMES = WORKLOAD_FEATURE_NAMES + KNOB_NAMES + VTA_HW_FEATURE_NAMES

_INSN_KINDS = [
    "load_inp",
    "load_wgt",
    "load_uop",
    "load_acc",
    "gemm_reset",
    "gemm",
    "alu_min",
    "alu_max",
    "alu_add",
    "alu_shr",
    "alu_mul",
    "store",
    "dep_nop",
    "finish",
]
HIDDEN_FEATURE_NAMES = (
    [f"n_{k}" for k in _INSN_KINDS]
    + ["n_insns", "n_load_module", "n_compute_module", "n_store_module"]
    + [
        "inp_load_nbytes",
        "wgt_load_nbytes",
        "acc_load_nbytes",
        "uop_load_nbytes",
        "out_store_nbytes",
        "inp_pad_nbytes",
        "dma_rows",
        "inp_mean_xfer_bytes",
        "wgt_mean_xfer_bytes",
        "out_mean_xfer_bytes",
        "max_xfer_bytes",
    ]
    + [
        "gemm_counter",
        "alu_counter",
        "n_kernels",
        "kernel_uops_total",
        "kernel_uops_max",
        "uop_cache_misses",
        "mean_iter_out",
        "mean_iter_in",
        "mean_gemm_uops",
    ]
    + ["inp_sram_frac", "wgt_sram_frac", "acc_sram_frac", "uop_sram_frac", "virtual_threads"]
    + ["tokens_l2g", "tokens_g2l", "tokens_g2s", "tokens_s2g", "arithmetic_intensity"]
)

_FRACTIONS = {"inp_sram_frac", "wgt_sram_frac", "acc_sram_frac", "uop_sram_frac", "arithmetic_intensity"}


def _log(value: float) -> float:
    return float(np.log2(1.0 + value))


def hw_features(hw: HwConfig) -> list[float]:
    values = [
        hw.LOG_BATCH,
        np.log2(hw.BLOCK_IN),
        np.log2(hw.BLOCK_OUT),
        hw.LOG_UOP_BUFF_SIZE,
        hw.LOG_INP_BUFF_SIZE,
        hw.LOG_WGT_BUFF_SIZE,
        hw.LOG_ACC_BUFF_SIZE,
        hw.LOG_BUS_WIDTH,
        hw.CLOCK_MHZ,
        hw.GEMM_II,
        hw.ALU_II,
        hw.DMA_LATENCY,
        hw.PIPE_DEPTH,
        hw.INSN_BITS,
        hw.UOP_BITS,
        hw.LOOP_ITER_BITS,
    ]
    return [float(v) for v in values]


def visible_features(workload: VtaWorkload, knobs: Knobs, hw: HwConfig) -> list[float]:
    """Workload shape, knob values (absent knobs count as 1) and hardware, in VISIBLE_FEATURE_NAMES order."""
    if isinstance(workload, Conv2D):
        shape = [
            1,
            workload.batch,
            workload.height,
            workload.width,
            workload.in_channels,
            workload.out_channels,
            workload.kernel,
            workload.pad,
            workload.stride,
            workload.out_height,
            workload.out_width,
        ]
    else:
        shape = [0, workload.batch, 1, 1, workload.in_features, workload.out_features, 1, 0, 1, 1, 1]
    values = [float(shape[0])] + [_log(v) for v in shape[1:]] + [_log(workload.macs)]
    values += [_log(knobs.get(name, 1)) for name in KNOB_NAMES]
    return values + hw_features(hw)


def hidden_features(program: Program, counters: dict[str, int], graph: TokenGraph) -> list[float]:
    """Compilation features of ``program`` in HIDDEN_FEATURE_NAMES order."""
    raw = _hidden_raw(program, counters, graph)
    return [raw[name] if name in _FRACTIONS else _log(raw[name]) for name in HIDDEN_FEATURE_NAMES]


def _hidden_raw(program: Program, counters: dict[str, int], graph: TokenGraph) -> dict[str, float]:
    hw, insns = program.hw, program.insns
    op, mem, x, y = insns[:, F.OPCODE], insns[:, F.MEM_TYPE], insns[:, F.X_SIZE], insns[:, F.Y_SIZE]
    is_load, is_store, is_gemm, is_alu = op == Op.LOAD, op == Op.STORE, op == Op.GEMM, op == Op.ALU
    dma = (is_load | is_store) & (x > 0)
    reset = is_gemm & (insns[:, F.RESET] == 1)
    kinds = {
        f"load_{m.name.lower()}": dma & is_load & (mem == m) for m in (Mem.INP, Mem.WGT, Mem.UOP, Mem.ACC)
    }
    kinds.update(
        gemm_reset=reset,
        gemm=is_gemm & ~reset,
        store=dma & is_store,
        dep_nop=(is_load | is_store) & (x == 0),
        finish=op == Op.FINISH,
    )
    kinds.update({f"alu_{a.name.lower()}": is_alu & (insns[:, F.ALU_OP] == a) for a in AluOp})
    raw: dict[str, float] = {f"n_{k}": float(mask.sum()) for k, mask in kinds.items()}
    module = module_of(insns)
    raw.update(
        n_insns=float(len(insns)),
        **{f"n_{m.name.lower()}_module": float((module == m).sum()) for m in Module},
    )
    raw.update({k: float(v) for k, v in counters.items()})

    def xfer_bytes(mask: np.ndarray, buffer: str) -> np.ndarray:
        return (x[mask] * y[mask] * hw.elem_bytes(buffer)).astype(float)

    pads = (insns[:, F.Y_PAD0] + insns[:, F.Y_PAD1] + y) * (
        insns[:, F.X_PAD0] + insns[:, F.X_PAD1] + x
    ) - x * y
    transfers = {
        "inp": xfer_bytes(kinds["load_inp"], "INP"),
        "wgt": xfer_bytes(kinds["load_wgt"], "WGT"),
        "out": xfer_bytes(kinds["store"], "OUT"),
    }
    raw["inp_pad_nbytes"] = float(pads[kinds["load_inp"]].sum() * hw.elem_bytes("INP"))
    raw["dma_rows"] = float(y[dma].sum())
    for name, sizes in transfers.items():
        raw[f"{name}_mean_xfer_bytes"] = float(sizes.mean()) if len(sizes) else 0.0
    raw["max_xfer_bytes"] = max(float(s.max()) for s in transfers.values() if len(s))
    execs_per_pass = insns[:, F.UOP_END] - insns[:, F.UOP_BGN]
    gemm = kinds["gemm"]
    raw.update(
        n_kernels=float(len(program.kernel_lengths)),
        kernel_uops_total=float(sum(program.kernel_lengths)),
        kernel_uops_max=float(max(program.kernel_lengths)),
        uop_cache_misses=raw["n_load_uop"],
        mean_iter_out=float(insns[gemm, F.ITER_OUT].mean()),
        mean_iter_in=float(insns[gemm, F.ITER_IN].mean()),
        mean_gemm_uops=float(execs_per_pass[gemm].mean()),
    )
    for buffer, elems in program.sram_elems.items():
        raw[f"{buffer.lower()}_sram_frac"] = elems / hw.depth(buffer)
    raw["virtual_threads"] = float(program.tiling.nvt)
    raw.update({f"tokens_{q}": float(n) for q, n in graph.pushes.items()})
    dma_bytes = sum(counters[k] for k in counters if k.endswith("_nbytes"))
    raw["arithmetic_intensity"] = _log(program.workload.macs / max(dma_bytes, 1))
    return raw
