"""The compiled programs, run on the functional simulator, equal the NumPy reference bit for bit."""

import dataclasses

import numpy as np
import pytest

from vta_ext import sim
from vta_ext.compiler import compile_program
from vta_ext.isa import F, Mem, Op
from vta_ext.workloads import Conv2D, Dense, random_inputs, reference

# Scaled-down ResNet-18 layers (C2, C3, C4, C11 shapes with fewer pixels and channels) and dense layers.
SCALED = [
    Conv2D("C2'", 1, 14, 14, 32, 32, 3, 1, 1),
    Conv2D("C3'", 1, 14, 14, 32, 64, 3, 1, 2),
    Conv2D("C4'", 1, 14, 14, 32, 64, 1, 0, 2),
    Conv2D("C11'", 1, 7, 7, 64, 64, 3, 1, 1),
    Dense("dense.1'", 1, 128, 64),
    Dense("dense.4'", 4, 64, 128),
]


def _inputs(workload, seed):
    inputs = random_inputs(workload, seed)
    # Edge values of int8 must survive packing, DMA and the GEMM exactly.
    inputs["data"].flat[:2] = (-128, 127)
    inputs["weight"].flat[:2] = (127, -128)
    return inputs


def _batched(workload, batch):
    return dataclasses.replace(workload, batch=max(workload.batch, batch))


@pytest.mark.parametrize("workload", SCALED, ids=lambda w: w.name)
def test_bit_exact_over_knob_settings(workload, hw_config, valid_programs):
    workload = _batched(workload, hw_config.BATCH)
    programs = valid_programs(workload, hw_config, count=5, seed=len(workload.name))
    assert len(programs) >= 3, "too few valid settings to test"
    for seed, program in enumerate(programs):
        inputs = _inputs(workload, seed)
        expected = reference(workload, **inputs)
        assert 0 < np.count_nonzero(expected) < expected.size, "epilogue saturates: test would be weak"
        result = sim.run(program, inputs)
        assert result.output.dtype == np.int8
        assert np.array_equal(result.output, expected), program.knobs


def test_whole_small_space_is_bit_exact(valid_programs):
    """Every valid setting of one small layer's space, on the default configuration."""
    from vta_ext.hw import HwConfig

    workload, hw = Conv2D("tiny", 1, 4, 4, 32, 32, 3, 1, 1), HwConfig()
    inputs = _inputs(workload, 7)
    expected = reference(workload, **inputs)
    programs = valid_programs(workload, hw, count=10_000)
    assert len(programs) > 20
    for program in programs:
        assert np.array_equal(sim.run(program, inputs).output, expected), program.knobs


def test_counters_match_closed_forms_for_one_tile():
    from vta_ext.hw import HwConfig

    hw = HwConfig()
    wl = Conv2D("one-tile", 1, 6, 6, 32, 32, 3, 1, 1)
    knobs = dict(tile_b=1, tile_h=6, tile_w=6, tile_ci=2, tile_co=2, oc_nthread=1, h_nthread=1)
    counters = sim.run(compile_program(wl, knobs, hw)).counters
    assert counters["inp_load_nbytes"] == 32 * 6 * 6  # padding is generated on chip, not loaded
    assert counters["wgt_load_nbytes"] == 32 * 32 * 9
    assert counters["out_store_nbytes"] == 32 * 6 * 6
    assert counters["acc_load_nbytes"] == 32 * 4
    assert counters["gemm_counter"] * hw.BATCH * hw.BLOCK_IN * hw.BLOCK_OUT == wl.macs
    assert counters["alu_counter"] == 4 * 2 * 6 * 6


def test_store_truncates_and_shr_negative_shifts_left():
    """STORE wraps int32 to int8 (300 -> 44, -129 -> 127); checked on a hand-edited epilogue."""
    from vta_ext.hw import HwConfig

    hw = HwConfig()
    wl = Dense("d", 1, 16, 16)
    program = compile_program(wl, dict(tile_b=1, tile_ci=1, tile_co=1, oc_nthread=1), hw)
    insns = program.insns.copy()
    alu = np.flatnonzero(insns[:, F.OPCODE] == Op.ALU)
    shr, _, mn, mx = alu  # SHR 8, ADD bias, MIN 127, MAX 0
    insns[shr, F.IMM] = -1  # shift left by one instead of right by eight
    insns[[mn, mx], F.ALU_OP] = insns[shr, F.ALU_OP]  # and neutralise the clip: shift by 0
    insns[[mn, mx], F.IMM] = 0
    edited = dataclasses.replace(program, insns=insns)
    data = np.zeros((1, 16), dtype=np.int8)
    data[0, 0] = 1
    weight = np.zeros((16, 16), dtype=np.int8)
    bias = np.zeros(16, dtype=np.int32)
    weight[0, 0], weight[1, 0], weight[2, 0] = 75, -64, 127
    bias[1] = -1  # (-64 << 1) - 1 = -129
    bias[0] = 150  # (75 << 1) + 150 = 300
    out = sim.run(edited, {"data": data, "weight": weight, "bias": bias}).output
    assert out[0, :3].tolist() == [44, 127, (127 * 2) - 256]


def test_uop_loads_fill_the_uop_scratchpad(valid_programs):
    """Micro-ops are executed from the scratchpad: breaking the LOAD UOP breaks the result."""
    from vta_ext.hw import HwConfig

    wl = SCALED[0]
    program = valid_programs(wl, HwConfig(), count=1)[0]
    insns = program.insns.copy()
    first_gemm = np.flatnonzero((insns[:, F.OPCODE] == Op.GEMM) & (insns[:, F.RESET] == 0))[0]
    uop_loads = np.flatnonzero(
        (insns[:first_gemm, F.OPCODE] == Op.LOAD) & (insns[:first_gemm, F.MEM_TYPE] == Mem.UOP)
    )
    insns[uop_loads[-1], F.X_SIZE] = 0  # the GEMM kernel's load becomes a no-op
    inputs = _inputs(wl, 0)
    out = sim.run(dataclasses.replace(program, insns=insns), inputs).output
    assert not np.array_equal(out, reference(wl, **inputs))
