"""Timing model properties: bounds, monotonicity in bus width, determinism, overlap of virtual threads."""

import pytest

from vta_ext import sim, timing
from vta_ext.compiler import compile_program
from vta_ext.hw import HwConfig
from vta_ext.workloads import RESNET18, Conv2D

HW = HwConfig()
WL = Conv2D("C5'", 1, 14, 14, 64, 64, 3, 1, 1)


@pytest.fixture(scope="module")
def programs():
    from vta_ext.errors import InvalidConfigError
    from vta_ext.knobs import KnobSpace
    from vta_ext.runtime import verify

    out = []
    space = KnobSpace(WL, HW)
    for index in range(0, len(space), 7):
        try:
            program = compile_program(WL, space.point(index), HW)
            verify(program)
        except InvalidConfigError:
            continue
        out.append(program)
    assert len(out) >= 20
    return out


def test_cycles_respect_compute_and_dma_bounds(programs):
    for program in programs:
        t = timing.simulate(program)
        counters = sim.profile(program)
        assert t.cycles >= max(t.busy.values())
        assert t.busy["compute"] >= counters["gemm_counter"] * HW.GEMM_II
        load_bytes = counters["inp_load_nbytes"] + counters["wgt_load_nbytes"]
        assert t.busy["load"] >= load_bytes / HW.bus_bytes
        assert t.busy["store"] >= counters["out_store_nbytes"] / HW.bus_bytes
        assert t.cycles <= sum(t.busy.values())  # overlap never makes it slower than running serially
        assert 0 < t.gemm_utilisation <= 1
        assert t.latency_s == pytest.approx(t.cycles / (HW.CLOCK_MHZ * 1e6))


def test_wider_bus_is_never_slower(programs):
    for program in programs[::3]:
        cycles = [timing.simulate(_on(program, HW.replace(LOG_BUS_WIDTH=b))).cycles for b in (5, 6, 7, 8)]
        assert cycles == sorted(cycles, reverse=True)
        assert cycles[0] > cycles[-1]


def _on(program, hw):
    return compile_program(program.workload, program.knobs, hw)


def test_deterministic(programs):
    first = [timing.simulate(p) for p in programs]
    assert first == [timing.simulate(p) for p in programs]


def test_two_virtual_threads_overlap_load_and_compute():
    wl = RESNET18["C11"]
    knobs = dict(tile_b=1, tile_h=7, tile_w=7, tile_ci=1, tile_co=8, oc_nthread=1, h_nthread=1)
    single = timing.simulate(compile_program(wl, knobs, HW))
    double = timing.simulate(compile_program(wl, {**knobs, "oc_nthread": 2}, HW))
    assert single.busy["load"] > 0.5 * single.busy["compute"]  # load and compute are comparable
    assert double.cycles < single.cycles
    assert double.cycles < single.busy["load"] + single.busy["compute"]
