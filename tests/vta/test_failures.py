"""Every failure kind, triggered on purpose, with its stage, name and needed-vs-available amounts."""

import dataclasses

import numpy as np
import pytest

from vta_ext import sim
from vta_ext.compiler import compile_program
from vta_ext.errors import InvalidConfigError
from vta_ext.hw import HwConfig
from vta_ext.isa import F, Mem, Op
from vta_ext.measure import measure
from vta_ext.runtime import verify
from vta_ext.tokens import token_graph
from vta_ext.workloads import RESNET18, Conv2D, random_inputs, reference

HW = HwConfig()
C2, C11 = RESNET18["C2"], RESNET18["C11"]


def conv_knobs(h, w, ci, co, oc=1, hn=1):
    return dict(tile_b=1, tile_h=h, tile_w=w, tile_ci=ci, tile_co=co, oc_nthread=oc, h_nthread=hn)


def _error(workload, knobs, hw=HW):
    with pytest.raises(InvalidConfigError) as info:
        verify(compile_program(workload, knobs, hw))
    return info.value


@pytest.mark.parametrize(
    ("workload", "knobs", "buffer", "needed"),
    [
        (C2, conv_knobs(14, 56, 4, 1), "local.inp_buffer", 4 * 16 * 58 * 16),
        (C11, conv_knobs(1, 1, 32, 32), "local.wgt_buffer", 32 * 32 * 9 * 256),
        (C2, conv_knobs(28, 56, 1, 2), "local.acc_buffer", (2 * 28 * 56 + 2) * 64),
    ],
)
def test_sram_overflow_names_the_buffer(workload, knobs, buffer, needed):
    error = _error(workload, knobs)
    assert (error.stage, error.kind, error.what, error.needed) == ("compile", "sram_overflow", buffer, needed)
    assert f"needs {needed} bytes" in str(error)
    assert f"available {error.available} bytes" in str(error)


def test_virtual_threads_double_the_regions():
    knobs = conv_knobs(7, 56, 1, 1, oc=1, hn=1)
    verify(compile_program(C2, knobs, HW))
    error = _error(C2, {**knobs, "tile_w": 56, "tile_h": 14, "oc_nthread": 2, "tile_co": 2})
    assert error.kind == "sram_overflow"


def test_vthread_split():
    error = _error(C2, conv_knobs(4, 56, 1, 4, oc=2))
    assert (error.stage, error.kind, error.what, error.needed, error.available) == (
        "compile",
        "vthread_split",
        "oc_nthread",
        2,
        1,
    )


def test_uop_overflow_is_a_runtime_failure():
    small_uop = HW.replace(LOG_UOP_BUFF_SIZE=8)  # 64 micro-ops
    error = _error(C2, conv_knobs(4, 8, 2, 2), small_uop)  # GEMM kernel of 9 * 2 * 4 = 72 micro-ops
    assert (error.stage, error.kind, error.needed, error.available) == ("runtime", "uop_overflow", 72, 64)


def test_acc_hazard_for_3x3_with_one_output_row_per_kernel():
    error = _error(C2, conv_knobs(1, 8, 2, 1))
    assert (error.stage, error.kind, error.what) == ("runtime", "acc_hazard", "acc_buffer")
    assert error.needed == 3 and error.available in (1, 2)
    verify(compile_program(C2, conv_knobs(1, 8, 2, 4), HW))  # four channel blocks separate the writes


def test_pad_beyond_15_overflows_the_pad_field():
    wl = Conv2D("pad16", 1, 8, 8, 16, 16, 3, 16, 1)
    error = _error(wl, conv_knobs(wl.out_height, wl.out_width // 2, 1, 1))
    assert (error.stage, error.kind, error.what, error.needed, error.available) == (
        "compile",
        "isa_field_overflow",
        "LOAD.y_pad_0",
        16,
        15,
    )


def test_loop_extent_beyond_iter_field():
    narrow = HW.replace(LOOP_ITER_BITS=4)
    error = _error(C2, conv_knobs(4, 28, 1, 4), narrow)
    assert error.kind == "isa_field_overflow" and "iter_" in error.what and error.available == 15


def test_layout_mismatch():
    error = _error(Conv2D("odd", 1, 8, 8, 24, 16, 3, 1, 1), conv_knobs(8, 8, 1, 1))
    assert (error.kind, error.what) == ("layout", "in_channels")


def _program():
    return compile_program(C2, conv_knobs(14, 14, 2, 2, oc=2, hn=2), HW)


def test_missing_token_deadlocks_instead_of_hanging():
    program = _program()
    insns = program.insns.copy()
    pushes = np.flatnonzero(insns[:, F.PUSH_PREV] & (insns[:, F.OPCODE] == Op.STORE))
    insns[pushes[len(pushes) // 2], F.PUSH_PREV] = 0  # one store forgets to free its accumulator region
    with pytest.raises(InvalidConfigError) as info:
        sim.run(dataclasses.replace(program, insns=insns))
    assert (info.value.stage, info.value.kind) == ("runtime", "deadlock")
    assert "compute" in info.value.what


def test_out_of_bounds_transfer():
    program = _program()
    insns = program.insns.copy()
    first_inp_load = np.flatnonzero((insns[:, F.OPCODE] == Op.LOAD) & (insns[:, F.MEM_TYPE] == Mem.INP))[0]
    insns[first_inp_load, F.SRAM_BASE] = HW.depth("INP") - 1
    with pytest.raises(InvalidConfigError) as info:
        sim.run(dataclasses.replace(program, insns=insns))
    assert (info.value.kind, info.value.what, info.value.available) == (
        "sram_oob",
        "INP scratchpad",
        HW.depth("INP"),
    )


def test_flag_on_an_unconnected_queue():
    program = _program()
    insns = program.insns.copy()
    insns[np.flatnonzero(insns[:, F.OPCODE] == Op.STORE)[0], F.PUSH_NEXT] = 1
    with pytest.raises(InvalidConfigError, match="bad_dependency"):
        token_graph(insns)


def test_tokens_balance_and_are_needed():
    program = _program()
    graph = token_graph(program.insns)
    assert graph.pushes == graph.pops and min(graph.pushes.values()) > 0
    # Without its write-after-read waits the load module overwrites tiles still being computed on.
    wl = Conv2D("small", 1, 8, 8, 64, 32, 3, 1, 1)
    program = compile_program(wl, conv_knobs(4, 8, 1, 2), HW)
    inputs = random_inputs(wl, 0)
    assert np.array_equal(sim.run(program, inputs).output, reference(wl, **inputs))
    insns = program.insns.copy()
    insns[insns[:, F.OPCODE] == Op.LOAD, F.POP_NEXT] = 0
    racy = sim.run(dataclasses.replace(program, insns=insns), inputs).output
    assert not np.array_equal(racy, reference(wl, **inputs))


def test_measure_reports_failures_with_features():
    compile_fail = measure(C2, conv_knobs(14, 56, 4, 1), HW)
    assert (compile_fail.valid, compile_fail.error_kind, compile_fail.error_stage) == (
        False,
        "sram_overflow",
        "compile",
    )
    assert (
        compile_fail.hidden_features is None
        and np.isnan(compile_fail.latency)
        and compile_fail.latencies == []
    )
    runtime_fail = measure(C2, conv_knobs(1, 8, 2, 1), HW)
    assert (runtime_fail.error_kind, runtime_fail.error_stage) == ("acc_hazard", "runtime")
    assert runtime_fail.hidden_features is not None and runtime_fail.counters["gemm_counter"] > 0
