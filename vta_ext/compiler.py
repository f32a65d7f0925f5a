"""Compiler from (workload, knobs, hw) to a VTA instruction stream.

It does what TVM's VTA passes and the VTA runtime did together: tiling (see :mod:`vta_ext.tiling`), SRAM
allocation with one region per virtual thread (double buffering), 2-D DMA with zero padding, micro-op
kernels with loop folding and a micro-op cache (:mod:`vta_ext.uops`), the ALU epilogue (``>> 8``,
``+ bias``, ``min 127``, ``max 0``) and the dependency tokens between the load, compute and store modules.

Token protocol (queues named producer->consumer): a reduction step's loads push load->compute and its GEMM
pops it; the GEMM of the last thread reading a weight region pushes compute->load, which the next load into
that region pops (write-after-read); a tile's last ALU op pushes compute->store, its first STORE pops it;
its last STORE pushes store->compute, which the next reset of that accumulator region pops. A final
handshake drains every queue before FINISH, so pushes and pops balance.

The program is built as one group's template (a few hundred rows at most), replicated over all groups with
NumPy and completed with vectorised address computations, so compiling costs milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from vta_ext.errors import InvalidConfigError
from vta_ext.hw import HwConfig
from vta_ext.isa import N_FIELDS, AluOp, F, Mem, Op, check_fields
from vta_ext.knobs import Knobs
from vta_ext.tiling import Tiling, make_tiling
from vta_ext.uops import CachePlan, Folded, KernelTable, fold, plan_cache
from vta_ext.workloads import SHIFT, Conv2D, VtaWorkload


class Kind(IntEnum):
    """Role of a template row (compiler bookkeeping, not part of the ISA)."""

    INP = 0
    WGT = 1
    BIAS = 2
    UOP = 3
    RESET = 4
    GEMM = 5
    ALU = 6
    STORE = 7


@dataclass(frozen=True)
class Program:
    """A compiled VTA program.

    ``insns`` has one row per instruction (columns :class:`vta_ext.isa.F`); ``uops`` is the DRAM micro-op
    table (dst, src, wgt); ``gemm_kernels`` are (offset, length) of the kernels GEMM instructions run (the
    runtime checks them for accumulator hazards); ``sram_elems`` and ``dram_elems`` give the scratchpad
    elements the program uses and the DRAM buffer sizes in elements, per buffer name.
    """

    workload: VtaWorkload
    knobs: Knobs
    hw: HwConfig
    tiling: Tiling
    insns: np.ndarray
    uops: np.ndarray
    kernel_lengths: tuple[int, ...]
    gemm_kernels: tuple[tuple[int, int], ...]
    sram_elems: dict[str, int]
    dram_elems: dict[str, int]


def compile_program(workload: VtaWorkload, knobs: Knobs, hw: HwConfig) -> Program:
    """Compile; raises :class:`InvalidConfigError` for compile-stage failures (``layout``,
    ``vthread_split``, ``sram_overflow``, ``isa_field_overflow``). Runtime-stage failures are found by
    :func:`vta_ext.runtime.verify`."""
    tiling = make_tiling(workload, knobs, hw)
    sram = _allocate(tiling, hw)
    kernels, template, uses, gemm_ids = _group_template(tiling)
    plans, plan_of_group = plan_cache(uses, kernels.lengths, hw.depth("UOP"), tiling.n_groups)
    variants = [_with_uop_loads(template, plan, kernels, uses) for plan in plans]
    insns, meta = _replicate(variants, plan_of_group)
    _fill_addresses(insns, meta, tiling)
    insns = np.concatenate([insns, _final_handshake(tiling)])
    check_fields(insns, hw)
    return Program(
        workload=workload,
        knobs=dict(knobs),
        hw=hw,
        tiling=tiling,
        insns=insns,
        uops=kernels.table,
        kernel_lengths=tuple(kernels.lengths),
        gemm_kernels=tuple((kernels.offsets[k], kernels.lengths[k]) for k in gemm_ids),
        sram_elems={**sram, "UOP": int(max(kernels.lengths))},
        dram_elems=_dram_sizes(workload, hw, len(kernels.table)),
    )


def _allocate(t: Tiling, hw: HwConfig) -> dict[str, int]:
    """Scratchpad elements per buffer; every virtual thread owns an inp and an acc region (the acc region
    ends with the tile's bias) and every oc-thread a wgt region."""
    need = {"INP": t.nvt * t.inp_tile, "WGT": t.oc_nthread * t.wgt_tile, "ACC": t.nvt * (t.acc_tile + t.co_i)}
    for buffer, elems in need.items():
        if elems > hw.depth(buffer):
            raise InvalidConfigError(
                "compile",
                "sram_overflow",
                elems * hw.elem_bytes(buffer),
                hw.buff_bytes(buffer),
                f"local.{buffer.lower()}_buffer",
                "bytes",
                f"allocation exceeds the bound of the {buffer} scratchpad",
            )
    return need


def _acc_base(t: Tiling, v: np.ndarray | int) -> np.ndarray | int:
    return v * (t.acc_tile + t.co_i)


def _row(
    kind: Kind, v: int, step: int, sub: int, **fields: int
) -> tuple[list[int], tuple[int, int, int, int]]:
    insn = [0] * N_FIELDS
    for name, value in fields.items():
        insn[F[name]] = value
    return insn, (kind, v, step, sub)


def _loop_fields(folded: Folded, with_wgt: bool) -> dict[str, int]:
    (do, so, wo), (di, si, wi) = folded.factors_out, folded.factors_in
    fields = dict(
        ITER_OUT=folded.iter_out, ITER_IN=folded.iter_in, DST_OUT=do, DST_IN=di, SRC_OUT=so, SRC_IN=si
    )
    if with_wgt:
        fields.update(WGT_OUT=wo, WGT_IN=wi)
    return fields


def _group_template(t: Tiling) -> tuple[KernelTable, list, list[int], list[int]]:
    """One group's rows in issue order (compute rows keep the index of their kernel use in ``sub``), the
    kernel id of each use, and the ids of the kernels GEMM runs."""
    kernels, rows, uses, gemm_ids = KernelTable(), [], [], set()

    def emit_compute(kind: Kind, v: int, step: int, folded: Folded, **fields: int) -> None:
        uses.append(kernels.add(folded.uops))
        if kind == Kind.GEMM:
            gemm_ids.add(uses[-1])
        rows.append(_row(kind, v, step, len(uses) - 1, **fields))

    acc_only = tuple((e, d, 0, 0) for e, d, _, _ in t.acc_loops)
    per_thread = []
    for v in range(t.nvt):
        acc = _acc_base(t, v)
        per_thread.append(
            (
                fold(acc_only, (acc, 0, 0)),
                fold(t.acc_loops, (acc, acc + t.acc_tile, 0)),
                fold(t.gemm_loops, (acc, v * t.inp_tile, int(t.wgt_thread(v)) * t.wgt_tile)),
            )
        )
    for v, (acc_fold, _, _) in enumerate(per_thread):
        emit_compute(
            Kind.RESET, v, 0, acc_fold, OPCODE=Op.GEMM, RESET=1, POP_NEXT=1, **_loop_fields(acc_fold, True)
        )
        rows.append(_row(Kind.BIAS, v, 0, -1, OPCODE=Op.LOAD, MEM_TYPE=Mem.ACC))
    for step in range(t.steps):
        for v, (_, _, gemm_fold) in enumerate(per_thread):
            loads = [
                _row(Kind.INP, v, step, s, OPCODE=Op.LOAD, MEM_TYPE=Mem.INP)
                for s in range(t.inp_loads_per_step)
            ]
            if t.loads_weights(v):
                loads.append(_row(Kind.WGT, v, step, 0, OPCODE=Op.LOAD, MEM_TYPE=Mem.WGT))
                loads[0][0][F.POP_NEXT] = 1
            loads[-1][0][F.PUSH_NEXT] = 1
            rows.extend(loads)
            emit_compute(
                Kind.GEMM,
                v,
                step,
                gemm_fold,
                OPCODE=Op.GEMM,
                POP_PREV=1,
                PUSH_PREV=int(t.last_weight_reader(v)),
                **_loop_fields(gemm_fold, True),
            )
    epilogue = ((AluOp.SHR, 1, SHIFT), (AluOp.ADD, 0, 0), (AluOp.MIN, 1, 127), (AluOp.MAX, 1, 0))
    for v, (acc_fold, bias_fold, _) in enumerate(per_thread):
        for i, (alu_op, use_imm, imm) in enumerate(epilogue):
            folded = acc_fold if use_imm else bias_fold
            emit_compute(
                Kind.ALU,
                v,
                0,
                folded,
                OPCODE=Op.ALU,
                ALU_OP=alu_op,
                USE_IMM=use_imm,
                IMM=imm,
                PUSH_NEXT=int(i == len(epilogue) - 1),
                **_loop_fields(folded, False),
            )
    for v in range(t.nvt):
        stores = [
            _row(Kind.STORE, v, 0, s, OPCODE=Op.STORE, MEM_TYPE=Mem.OUT) for s in range(t.stores_per_tile)
        ]
        stores[0][0][F.POP_PREV] = 1
        stores[-1][0][F.PUSH_PREV] = 1
        rows.extend(stores)
    return kernels, rows, uses, sorted(gemm_ids)


def _with_uop_loads(template: list, plan: CachePlan, kernels: KernelTable, uses: list[int]) -> tuple:
    """The template with micro-op loads inserted where the cache misses and kernel ranges filled in."""
    insns, meta = [], []
    for insn, (kind, v, step, sub) in template:
        if kind in (Kind.RESET, Kind.GEMM, Kind.ALU):
            use, kernel = sub, uses[sub]
            offset, length = plan.sram_offsets[use], kernels.lengths[kernel]
            if plan.loads[use]:
                load, load_meta = _row(
                    Kind.UOP,
                    v,
                    step,
                    0,
                    OPCODE=Op.LOAD,
                    MEM_TYPE=Mem.UOP,
                    SRAM_BASE=offset,
                    DRAM_BASE=kernels.offsets[kernel],
                    Y_SIZE=1,
                    X_SIZE=length,
                    X_STRIDE=length,
                )
                insns.append(load)
                meta.append(load_meta)
            insn = list(insn)
            insn[F.UOP_BGN], insn[F.UOP_END] = offset, offset + length
            meta.append((kind, v, step, 0))
        else:
            meta.append((kind, v, step, sub))
        insns.append(insn)
    return np.array(insns, dtype=np.int64), np.array(meta, dtype=np.int64)


def _replicate(variants: list[tuple[np.ndarray, np.ndarray]], plan_of_group: np.ndarray) -> tuple:
    """All groups' rows in order; ``meta`` columns are (kind, thread, step, sub, group)."""
    lengths = np.array([len(insns) for insns, _ in variants])[plan_of_group]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    total = int(lengths.sum())
    insns = np.empty((total, N_FIELDS), dtype=np.int64)
    meta = np.empty((total, 5), dtype=np.int64)
    for index, (v_insns, v_meta) in enumerate(variants):
        groups = np.flatnonzero(plan_of_group == index)
        positions = (starts[groups][:, None] + np.arange(len(v_insns))).ravel()
        insns[positions] = np.tile(v_insns, (len(groups), 1))
        meta[positions, :4] = np.tile(v_meta, (len(groups), 1))
        meta[positions, 4] = np.repeat(groups, len(v_insns))
    # The first group finds every region unused: nothing to wait for.
    first = meta[:, 4] == 0
    insns[first & (meta[:, 0] == Kind.RESET), F.POP_NEXT] = 0
    insns[first & np.isin(meta[:, 0], (Kind.INP, Kind.WGT)) & (meta[:, 2] == 0), F.POP_NEXT] = 0
    return insns, meta


def _fill_addresses(insns: np.ndarray, meta: np.ndarray, t: Tiling) -> None:
    """DRAM addresses, sizes, pads and SRAM bases of every DMA row, vectorised per kind."""
    kind, v, step, sub, group = meta.T

    def fill(kind_id: Kind, fields: dict, region_base: np.ndarray | int) -> None:
        rows = kind == kind_id
        for col, value in fields.items():
            insns[rows, col] = value
        insns[rows, F.SRAM_BASE] += region_base

    for kind_id in (Kind.INP, Kind.WGT, Kind.BIAS, Kind.STORE):
        rows = kind == kind_id
        g, vt, k, s = group[rows], v[rows], step[rows], sub[rows]
        if kind_id == Kind.INP:
            fill(kind_id, t.fill_inp(g, vt, k, s), vt * t.inp_tile)
        elif kind_id == Kind.WGT:
            fill(kind_id, t.fill_wgt(g, vt, k), t.wgt_thread(vt) * t.wgt_tile)
        elif kind_id == Kind.BIAS:
            fill(kind_id, t.fill_bias(g, vt), _acc_base(t, vt) + t.acc_tile)
        else:
            fill(kind_id, t.fill_store(g, vt, s), _acc_base(t, vt))


def _final_handshake(t: Tiling) -> np.ndarray:
    """Drain the tokens no later instruction pops, then FINISH: the load module pops the last
    compute->load token of each weight region and signals compute; compute pops the last store->compute
    token of each accumulator region and the load module's signal."""
    rows = []
    for i in range(t.oc_nthread):
        rows.append(
            _row(
                Kind.INP,
                0,
                0,
                0,
                OPCODE=Op.LOAD,
                MEM_TYPE=Mem.INP,
                POP_NEXT=1,
                PUSH_NEXT=int(i == t.oc_nthread - 1),
            )[0]
        )
    for i in range(t.nvt):
        rows.append(
            _row(
                Kind.UOP, 0, 0, 0, OPCODE=Op.LOAD, MEM_TYPE=Mem.UOP, POP_NEXT=1, POP_PREV=int(i == t.nvt - 1)
            )[0]
        )
    rows.append(_row(Kind.UOP, 0, 0, 0, OPCODE=Op.FINISH)[0])
    return np.array(rows, dtype=np.int64)


def _dram_sizes(workload: VtaWorkload, hw: HwConfig, n_uops: int) -> dict[str, int]:
    """Elements of each DRAM buffer: INP, WGT, ACC (bias), OUT and UOP."""
    if isinstance(workload, Conv2D):
        spatial_in = workload.height * workload.width
        spatial_out = workload.out_height * workload.out_width
        cin, cout, kk = workload.in_channels, workload.out_channels, workload.kernel**2
    else:
        spatial_in = spatial_out = kk = 1
        cin, cout = workload.in_features, workload.out_features
    nb, cib, cob = workload.batch // hw.BATCH, cin // hw.BLOCK_IN, cout // hw.BLOCK_OUT
    return {
        "INP": nb * cib * spatial_in,
        "WGT": cob * cib * kk,
        "ACC": cob,
        "OUT": nb * cob * spatial_out,
        "UOP": n_uops,
    }
