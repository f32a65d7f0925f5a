"""Tile geometry of VTA's conv2d and dense schedules: what one output tile loads, computes and stores.

A *group* is one iteration of the schedule's outer tile loops; it holds one tile per virtual thread
(``nvt = oc_nthread * h_nthread``), which the compiler interleaves. Within a tile the reduction over input
channel blocks runs in ``steps`` steps of ``tile_ci`` blocks. Addresses are in elements of the scratchpad
or DRAM buffer concerned; the ``fill_*`` methods are vectorised over arrays of (group, thread, step, sub)
indices and return DRAM-side fields plus the SRAM offset inside the thread's region.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vta_ext.errors import InvalidConfigError
from vta_ext.hw import HwConfig
from vta_ext.isa import F
from vta_ext.knobs import KnobSpace
from vta_ext.workloads import Conv2D, Dense, VtaWorkload, check_layout

Loop = tuple[int, int, int, int]
"""(extent, dst factor, src factor, wgt factor) of one loop around a micro-op."""

Fields = dict[F, np.ndarray | int]


@dataclass(frozen=True)
class Tiling:
    """What the compiler needs from a schedule, independent of the operator."""

    nvt: int  # virtual threads: tiles in flight per group
    oc_nthread: int  # threads with their own weight region (h-threads of one oc-thread share weights)
    steps: int  # reduction steps per tile
    n_groups: int
    inp_tile: int  # scratchpad elements per thread region
    wgt_tile: int
    acc_tile: int  # output accumulators per tile; the bias (co_i elements) follows them
    co_i: int  # output-channel blocks per tile
    inp_loads_per_step: int
    stores_per_tile: int
    gemm_loops: tuple[Loop, ...]  # outermost first
    acc_loops: tuple[Loop, ...]  # loops over a tile's accumulators; src factors index the bias

    def wgt_thread(self, v: np.ndarray) -> np.ndarray:
        """Weight region of virtual thread ``v`` (threads are numbered ``oc * h_nthread + h``)."""
        return v // (self.nvt // self.oc_nthread)

    def loads_weights(self, v: int) -> bool:
        """The first h-thread of each oc-thread loads the weights its h-threads share."""
        return v % (self.nvt // self.oc_nthread) == 0

    def last_weight_reader(self, v: int) -> bool:
        return v % (self.nvt // self.oc_nthread) == self.nvt // self.oc_nthread - 1


@dataclass(frozen=True)
class ConvTiling(Tiling):
    wl: Conv2D | None = None
    hw: HwConfig | None = None
    knobs: tuple[int, int, int, int, int, int] = (1, 1, 1, 1, 1, 1)  # h_i, w_i, ci_i, co_i, oc_nt, h_nt

    def _tile_origin(self, g: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, ...]:
        wl, hw = self.wl, self.hw
        h_i, w_i, _, co_i, oc_nt, h_nt = self.knobs
        shape = (
            wl.batch // hw.BATCH,
            wl.out_height // (h_i * h_nt),
            wl.out_channels // (hw.BLOCK_OUT * co_i * oc_nt),
            wl.out_width // w_i,
        )
        b, hg, cg, wg = np.unravel_index(g, shape)
        ct, ht = np.divmod(v, h_nt)
        return b, (hg * h_nt + ht) * h_i, (cg * oc_nt + ct) * co_i, wg * w_i

    def fill_inp(self, g: np.ndarray, v: np.ndarray, k: np.ndarray, s: np.ndarray) -> Fields:
        """One 2-D load per input-channel block: the tile's rows with their halo, zero-padded at borders."""
        wl, hw = self.wl, self.hw
        h_i, w_i, ci_i, _, _, _ = self.knobs
        b, h0, _, w0 = self._tile_origin(g, v)
        size_y = (h_i - 1) * wl.stride + wl.kernel
        size_x = (w_i - 1) * wl.stride + wl.kernel
        row0, col0 = h0 * wl.stride - wl.pad, w0 * wl.stride - wl.pad
        ypad0, xpad0 = np.clip(-row0, 0, size_y), np.clip(-col0, 0, size_x)
        ypad1 = np.clip(row0 + size_y - wl.height, 0, size_y)
        xpad1 = np.clip(col0 + size_x - wl.width, 0, size_x)
        channel = k * ci_i + s
        ci_blocks = wl.in_channels // hw.BLOCK_IN
        dram = ((b * ci_blocks + channel) * wl.height + np.maximum(row0, 0)) * wl.width + np.maximum(col0, 0)
        return {
            F.SRAM_BASE: s * size_y * size_x,
            F.DRAM_BASE: dram,
            F.Y_SIZE: size_y - ypad0 - ypad1,
            F.X_SIZE: size_x - xpad0 - xpad1,
            F.X_STRIDE: wl.width,
            F.Y_PAD0: ypad0,
            F.Y_PAD1: ypad1,
            F.X_PAD0: xpad0,
            F.X_PAD1: xpad1,
        }

    def fill_wgt(self, g: np.ndarray, v: np.ndarray, k: np.ndarray) -> Fields:
        """One 2-D load: ``co_i`` rows of ``ci_i * K * K`` consecutive weight elements."""
        ci_i, kk = self.knobs[2], self.wl.kernel**2
        ci_blocks = self.wl.in_channels // self.hw.BLOCK_IN
        _, _, co0, _ = self._tile_origin(g, v)
        return {
            F.SRAM_BASE: 0,
            F.DRAM_BASE: (co0 * ci_blocks + k * ci_i) * kk,
            F.Y_SIZE: self.co_i,
            F.X_SIZE: ci_i * kk,
            F.X_STRIDE: ci_blocks * kk,
        }

    def fill_bias(self, g: np.ndarray, v: np.ndarray) -> Fields:
        return _bias_fields(self._tile_origin(g, v)[2], self.co_i)

    def fill_store(self, g: np.ndarray, v: np.ndarray, s: np.ndarray) -> Fields:
        """One 2-D store per output-channel block of the tile."""
        wl, hw = self.wl, self.hw
        h_i, w_i = self.knobs[:2]
        b, h0, co0, w0 = self._tile_origin(g, v)
        co_blocks = wl.out_channels // hw.BLOCK_OUT
        dram = ((b * co_blocks + co0 + s) * wl.out_height + h0) * wl.out_width + w0
        return {
            F.SRAM_BASE: s * h_i * w_i,
            F.DRAM_BASE: dram,
            F.Y_SIZE: h_i,
            F.X_SIZE: w_i,
            F.X_STRIDE: wl.out_width,
        }


@dataclass(frozen=True)
class DenseTiling(Tiling):
    wl: Dense | None = None
    hw: HwConfig | None = None
    knobs: tuple[int, int, int, int] = (1, 1, 1, 1)  # b_i, ci_i, co_i, oc_nt

    def _tile_origin(self, g: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b_i, _, co_i, oc_nt = self.knobs
        groups_co = self.wl.out_features // (self.hw.BLOCK_OUT * co_i * oc_nt)
        bg, cg = np.divmod(g, groups_co)
        return bg * b_i, (cg * oc_nt + v) * co_i

    def fill_inp(self, g: np.ndarray, v: np.ndarray, k: np.ndarray, s: np.ndarray) -> Fields:
        b_i, ci_i = self.knobs[:2]
        ci_blocks = self.wl.in_features // self.hw.BLOCK_IN
        b0, _ = self._tile_origin(g, v)
        return {
            F.SRAM_BASE: 0,
            F.DRAM_BASE: b0 * ci_blocks + k * ci_i,
            F.Y_SIZE: b_i,
            F.X_SIZE: ci_i,
            F.X_STRIDE: ci_blocks,
        }

    def fill_wgt(self, g: np.ndarray, v: np.ndarray, k: np.ndarray) -> Fields:
        ci_i = self.knobs[1]
        ci_blocks = self.wl.in_features // self.hw.BLOCK_IN
        _, co0 = self._tile_origin(g, v)
        return {
            F.SRAM_BASE: 0,
            F.DRAM_BASE: co0 * ci_blocks + k * ci_i,
            F.Y_SIZE: self.co_i,
            F.X_SIZE: ci_i,
            F.X_STRIDE: ci_blocks,
        }

    def fill_bias(self, g: np.ndarray, v: np.ndarray) -> Fields:
        return _bias_fields(self._tile_origin(g, v)[1], self.co_i)

    def fill_store(self, g: np.ndarray, v: np.ndarray, s: np.ndarray) -> Fields:
        b0, co0 = self._tile_origin(g, v)
        co_blocks = self.wl.out_features // self.hw.BLOCK_OUT
        return {
            F.SRAM_BASE: 0,
            F.DRAM_BASE: b0 * co_blocks + co0,
            F.Y_SIZE: self.knobs[0],
            F.X_SIZE: self.co_i,
            F.X_STRIDE: co_blocks,
        }


def _bias_fields(co0: np.ndarray, co_i: int) -> Fields:
    """The bias of the tile's ``co_i`` channel blocks: one row loaded into the accumulator scratchpad."""
    return {F.SRAM_BASE: 0, F.DRAM_BASE: co0, F.Y_SIZE: 1, F.X_SIZE: co_i, F.X_STRIDE: co_i}


def _require_in_space(workload: VtaWorkload, knobs: dict[str, int], hw: HwConfig) -> None:
    KnobSpace(workload, hw).check(knobs)  # raises KnobError (a ValueError) naming the knob


def _check_split(what: str, outer: int, nthread: int) -> None:
    """A virtual-thread split of an outer tile loop must be exact (VTA's template cannot guard it)."""
    if outer % nthread:
        raise InvalidConfigError(
            "compile",
            "vthread_split",
            nthread,
            outer,
            what,
            "tiles",
            "outer tile count not divisible by the thread count",
        )


def make_tiling(workload: VtaWorkload, knobs: dict[str, int], hw: HwConfig) -> Tiling:
    """The tiling of ``workload`` under ``knobs``; raises ``layout`` / ``vthread_split`` errors."""
    check_layout(workload, hw)
    _require_in_space(workload, knobs, hw)
    if isinstance(workload, Dense):
        return _dense_tiling(workload, knobs, hw)
    return _conv_tiling(workload, knobs, hw)


def _conv_tiling(wl: Conv2D, knobs: dict[str, int], hw: HwConfig) -> ConvTiling:
    h_i, w_i, ci_i, co_i = knobs["tile_h"], knobs["tile_w"], knobs["tile_ci"], knobs["tile_co"]
    oc_nt, h_nt = knobs["oc_nthread"], knobs["h_nthread"]
    co_outer = wl.out_channels // hw.BLOCK_OUT // co_i
    h_outer = wl.out_height // h_i
    _check_split("oc_nthread", co_outer, oc_nt)
    _check_split("h_nthread", h_outer, h_nt)
    k, s = wl.kernel, wl.stride
    size_y, size_x = (h_i - 1) * s + k, (w_i - 1) * s + k
    n_groups = (wl.batch // hw.BATCH) * (h_outer // h_nt) * (co_outer // oc_nt) * (wl.out_width // w_i)
    # The micro-kernel's loop order follows VTA's conv2d schedule: (ci, j, kw, kh, co, i).
    gemm_loops = (
        (ci_i, 0, size_y * size_x, k * k),
        (w_i, 1, s, 0),
        (k, 0, 1, 1),
        (k, 0, size_x, k),
        (co_i, h_i * w_i, 0, ci_i * k * k),
        (h_i, w_i, s * size_x, 0),
    )
    acc_loops = ((co_i, h_i * w_i, 1, 0), (h_i, w_i, 0, 0), (w_i, 1, 0, 0))
    return ConvTiling(
        nvt=oc_nt * h_nt,
        oc_nthread=oc_nt,
        steps=wl.in_channels // hw.BLOCK_IN // ci_i,
        n_groups=n_groups,
        inp_tile=ci_i * size_y * size_x,
        wgt_tile=co_i * ci_i * k * k,
        acc_tile=co_i * h_i * w_i,
        co_i=co_i,
        inp_loads_per_step=ci_i,
        stores_per_tile=co_i,
        gemm_loops=gemm_loops,
        acc_loops=acc_loops,
        wl=wl,
        hw=hw,
        knobs=(h_i, w_i, ci_i, co_i, oc_nt, h_nt),
    )


def _dense_tiling(wl: Dense, knobs: dict[str, int], hw: HwConfig) -> DenseTiling:
    b_i, ci_i, co_i, oc_nt = knobs["tile_b"], knobs["tile_ci"], knobs["tile_co"], knobs["oc_nthread"]
    co_outer = wl.out_features // hw.BLOCK_OUT // co_i
    _check_split("oc_nthread", co_outer, oc_nt)
    gemm_loops = ((ci_i, 0, 1, 1), (b_i, co_i, ci_i, 0), (co_i, 1, 0, ci_i))
    acc_loops = ((b_i, co_i, 0, 0), (co_i, 1, 1, 0))
    return DenseTiling(
        nvt=oc_nt,
        oc_nthread=oc_nt,
        steps=wl.in_features // hw.BLOCK_IN // ci_i,
        n_groups=(wl.batch // hw.BATCH // b_i) * (co_outer // oc_nt),
        inp_tile=b_i * ci_i,
        wgt_tile=co_i * ci_i,
        acc_tile=b_i * co_i,
        co_i=co_i,
        inp_loads_per_step=1,
        stores_per_tile=1,
        gemm_loops=gemm_loops,
        acc_loops=acc_loops,
        wl=wl,
        hw=hw,
        knobs=(b_i, ci_i, co_i, oc_nt),
    )
