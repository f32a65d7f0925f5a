"""Numeric encoding of MetaSchedule design-space decisions, its repair, and replay to a valid schedule.

A design space (one of ``TuneContext.generate_design_space()``) is a trace whose sampling instructions
(``SamplePerfectTile``, ``SampleCategorical``, ``SampleComputeLocation``) carry decisions. A candidate is
fully described by those decisions, so this module maps them to a flat vector:

* ``SamplePerfectTile`` of ``n`` factors -> ``log2`` of the ``n - 1`` inner factors (the outermost factor is
  implied: the factors multiply to the loop extent);
* ``SampleCategorical`` -> the chosen candidate's index;
* ``SampleComputeLocation`` -> the location index (``-1`` root, ``-2`` inline, else a loop of the consumer).

Columns are named ``s<k>_tile<j>`` (tile ``k``'s factor ``j``, 1 = second outermost) and ``s<k>_x``.

:meth:`SpaceEncoding.repair` turns any real vector (e.g. a copula sample for another shape) into valid
decisions for *this* space's loop extents: tiles by the repair rule of
:mod:`tvm_transfer.search_strategy.replay`, categories rounded and clipped. :meth:`SpaceEncoding.replay`
applies decisions, checks that replay did not silently change them (TVM repairs invalid tile and location
decisions without telling; compute locations are left to that snapping, which picks the nearest valid
location), and runs the space's post-processors.

Traces of measured records (any shape of the same operator kind) are matched to a space by their
*signature*: the kinds, attributes and dataflow of the instructions before ``EnterPostproc``, which do not
depend on the shape (inputs are symbolic and decisions are excluded), without the inlining of injective
blocks (:data:`INLINING_KINDS`), after dead-code removal and with block names unnumbered. So an operator's
spaces match those of the same main computation fused with another epilogue, in another network. The JSON
parsing of traces follows ``tenset_tools.features.trace``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import InstructionKind, Trace

from tenset_tools.features.trace import int_values
from tvm_transfer.search_strategy.replay import divisors, postprocess, repair_tile_log2, tile_log2

__all__ = [
    "INLINING_KINDS",
    "SAMPLING_KINDS",
    "SamplingSite",
    "SpaceEncoding",
    "decision_columns",
    "decision_vector",
    "json_decisions",
    "json_signature",
    "space_encodings",
    "trace_decisions",
    "trace_signature",
]

SAMPLING_KINDS = ("SamplePerfectTile", "SampleCategorical", "SampleComputeLocation")
#: Instructions that fold an injective block (bias, batch norm, activation; on CPU also a transpose or
#: reshape the main block reads) into its neighbour. They name the fused blocks, not the loops the decisions
#: tile, so signatures leave them out: a convolution ending in SiLU shares the design space of one ending
#: in ReLU.
INLINING_KINDS = ("ComputeInline", "ReverseComputeInline")
Decision = Any  # list[int] for tiles, int otherwise
_NUMBERING = re.compile(r"_?\d+(?=_|$)")  # a number ending a word: `lv239_red`, `T_add1`, not `conv2d`


def _pre_postproc(trace_json: Sequence[Any]) -> list:
    instructions = list(trace_json[0])
    for i, inst in enumerate(instructions):
        if str(inst[0]) == "EnterPostproc":
            return instructions[:i]
    return instructions


def _plain(value: Any) -> Any:
    """An instruction attribute in the plain JSON a database line stores: TVM immediates as numbers,
    booleans as 0 or 1."""
    if type(value).__name__ in ("IntImm", "FloatImm"):  # by name, as tenset_tools.features.trace does
        value = value.value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@functools.cache
def _is_pure(kind: str) -> bool:
    return bool(InstructionKind.get(kind).is_pure)


def _names(inputs: Any) -> Iterator[str]:
    """The random-variable names among a JSON instruction's inputs (nested lists included)."""
    if isinstance(inputs, list | tuple):
        for value in inputs:
            yield from _names(value)
    elif isinstance(inputs, str):
        yield inputs


def _live(instructions: Sequence[Any]) -> list:
    """``instructions`` without the pure ones (lookups, samples) whose outputs no later instruction uses,
    as ``Trace.simplified`` drops them: one backward pass, since an input only names earlier outputs."""
    used: set[str] = set()
    kept = []
    for instruction in reversed(instructions):
        kind, inputs, _attrs, outputs = instruction
        if _is_pure(str(kind)) and used.isdisjoint(map(str, outputs)):
            continue
        kept.append(instruction)
        used.update(_names(inputs))
    return kept[::-1]


def _attributes(kind: str, attrs: Any) -> str:
    """An instruction's attributes as a signature keeps them: a block lookup's name without the numbers
    that end its words (``lv239_red`` and ``lv12_red`` both read ``lv_red``, ``T_add1`` reads ``T_add``).
    Such a number only keeps a name unique within a module (Relax names some blocks after the variable
    they compute); the block's place in the dataflow tells blocks apart."""
    attrs = _plain(attrs)
    if kind == "GetSBlock":
        attrs = [_NUMBERING.sub("", str(attrs[0])), *attrs[1:]]
    return str(attrs)


def json_signature(trace_json: Sequence[Any]) -> str:
    """:func:`trace_signature` of a trace's JSON (``Trace.as_json()``, or a database line's trace), read
    without replaying the trace on its module."""
    instructions = _live([i for i in _pre_postproc(trace_json) if str(i[0]) not in INLINING_KINDS])
    made_by: dict[str, str] = {}  # random variable -> "<instruction>.<output>" that made it
    entries = []
    for position, (kind, inputs, attrs, outputs) in enumerate(instructions):
        sources = [made_by[name] for name in _names(inputs) if name in made_by]
        entries.append([str(kind), _attributes(str(kind), attrs), sources])
        made_by.update({str(name): f"{position}.{k}" for k, name in enumerate(outputs)})
    return json.dumps(entries)


def trace_signature(trace: Trace) -> str:
    """Shape-independent identity of the design space a trace was sampled from: the kinds, attributes and
    dataflow (which earlier instruction's output each input is) of the instructions before
    ``EnterPostproc``; inlining and dead instructions left out, block names without their numbering."""
    # Dataflow distinguishes spaces that differ only in an input: MetaSchedule's write-cache spaces fuse
    # the consumer at tile level 1 or 2 with the same instructions, differing in the loop ReverseComputeAt
    # takes.
    # Dead instructions left out: MetaSchedule stores records simplified (e.g. without an unused
    # GetConsumers) while a fresh design space, and a schedule replayed from it, still has them.
    return json_signature(trace.as_json())


def json_decisions(trace_json: Sequence[Any]) -> list[Decision]:
    """:func:`trace_decisions` of a trace's JSON (``Trace.as_json()``, or a database line's trace)."""
    instructions = _pre_postproc(trace_json)
    decision_of = {int(index): decision for index, decision in trace_json[1]}
    out = []
    for i, (kind, _inputs, _attrs, _outputs) in enumerate(instructions):
        if str(kind) not in SAMPLING_KINDS:
            if str(kind).startswith("Sample"):
                raise ValueError(f"unsupported sampling instruction {kind}")
            continue
        decision = decision_of.get(i)
        if str(kind) == "SamplePerfectTile":
            out.append(int_values(decision))
        else:
            out.append(int(decision) if decision is not None else None)
    return out


def trace_decisions(trace: Trace) -> list[Decision]:
    """Decisions of a trace's sampling instructions, in trace order (tiles as lists of ints)."""
    return json_decisions(trace.as_json())


def decision_columns(decisions: Sequence[Decision]) -> list[str]:
    """Column names of :func:`decision_vector` (``s<k>_tile<j>``, ``s<k>_cat`` or ``s<k>_loc``)."""
    columns: list[str] = []
    for k, decision in enumerate(decisions):
        if isinstance(decision, list | tuple):
            columns += [f"s{k}_tile{j}" for j in range(1, len(decision))]
        else:
            columns.append(f"s{k}_x")
    return columns


def decision_vector(decisions: Sequence[Decision]) -> np.ndarray:
    """Decisions as numbers: log2 of each tile's inner factors, categorical/location indices as they are."""
    out: list[float] = []
    for decision in decisions:
        if isinstance(decision, list | tuple):
            out += tile_log2(decision)
        else:
            out.append(float(decision))
    return np.array(out, dtype=float)


@dataclass(frozen=True)
class SamplingSite:
    """One sampling instruction of a space: its kind, tile arity and max innermost factor, loop extent
    (tiles) or candidate values (categorical)."""

    kind: str
    n: int = 1
    max_innermost: int = 0
    extent: int = 0
    candidates: tuple[int, ...] = ()

    @property
    def width(self) -> int:
        return self.n - 1 if self.kind == "SamplePerfectTile" else 1


class SpaceEncoding:
    """Encoding of one design space of a task (``mod``), with its post-processors for validation."""

    def __init__(self, mod: tvm.IRModule, space: Schedule, postprocs: Sequence[ms.postproc.Postproc]) -> None:
        self.mod = mod
        self.postprocs = list(postprocs)
        self.trace = space.trace
        self.signature = trace_signature(self.trace)
        self._sample_insts = [i for i in self.trace.insts if i.kind.name in SAMPLING_KINDS]
        unsupported = {i.kind.name for i in self.trace.insts if i.kind.name.startswith("Sample")} - set(
            SAMPLING_KINDS
        )
        if unsupported:
            raise ValueError(f"design space uses unsupported sampling instructions {sorted(unsupported)}")
        extents = self._loop_extents()
        sites, columns = [], []
        for k, inst in enumerate(self._sample_insts):
            kind = inst.kind.name
            if kind == "SamplePerfectTile":
                n, max_inner = int(inst.attrs[0]), int(inst.attrs[1])
                sites.append(SamplingSite(kind, n=n, max_innermost=max_inner, extent=extents[k]))
                columns += [f"s{k}_tile{j}" for j in range(1, n)]
            elif kind == "SampleCategorical":
                sites.append(SamplingSite(kind, candidates=tuple(int_values(inst.attrs[0]))))
                columns.append(f"s{k}_x")
            else:
                sites.append(SamplingSite(kind))
                columns.append(f"s{k}_x")
        self.sites: list[SamplingSite] = sites
        self.columns: list[str] = columns

    def _loop_extents(self) -> dict[int, int]:
        """Extents of the loops split by each SamplePerfectTile (known only while replaying: the loops are
        split away in the final schedule)."""
        extents: dict[int, int] = {}
        probe = Schedule(self.mod)
        counter = iter(range(len(self._sample_insts)))

        def record(inst, inputs, attrs, decision):
            if inst.kind.name in SAMPLING_KINDS:
                k = next(counter)
                if inst.kind.name == "SamplePerfectTile":
                    extents[k] = int(probe.get(inputs[0]).extent)
            return decision

        self.trace.apply_to_schedule(probe, remove_postproc=True, decision_provider=record)
        return extents

    # --- decisions <-> vectors -------------------------------------------------------------------------
    def encode(self, decisions: Sequence[Decision]) -> np.ndarray:
        """Vector (length ``len(columns)``) of decisions given in sampling-instruction order."""
        if len(decisions) != len(self.sites):
            raise ValueError(f"expected {len(self.sites)} decisions, got {len(decisions)}")
        for site, decision in zip(self.sites, decisions, strict=True):
            if site.kind == "SamplePerfectTile" and len(decision) != site.n:
                raise ValueError(
                    f"tile decision {list(decision)} has {len(decision)} factors, expected {site.n}"
                )
        return decision_vector(decisions)

    def repair(self, vector: Sequence[float]) -> list[Decision]:
        """Valid decisions nearest to a real vector: tile products equal the extents, categories in range."""
        vector = np.asarray(vector, dtype=float)
        if vector.shape != (len(self.columns),):
            raise ValueError(f"expected a vector of {len(self.columns)} values, got shape {vector.shape}")
        vector = np.where(np.isfinite(vector), vector, 0.0)
        decisions: list[Decision] = []
        pos = 0
        for site in self.sites:
            values = vector[pos : pos + site.width]
            pos += site.width
            if site.kind == "SamplePerfectTile":
                decisions.append(repair_tile_log2(values, site.extent, site.max_innermost))
            elif site.kind == "SampleCategorical":
                decisions.append(int(np.clip(round(values[0]), 0, len(site.candidates) - 1)))
            else:
                decisions.append(int(max(round(values[0]), -2)))
        return decisions

    def decisions_of(self, trace: Trace) -> list[Decision]:
        """The decisions of a trace of this space (e.g. a record's or a replayed schedule's)."""
        if trace_signature(trace) != self.signature:
            raise ValueError("trace does not come from this design space (signatures differ)")
        return trace_decisions(trace)

    # --- replay ----------------------------------------------------------------------------------------
    def with_decisions(self, decisions: Sequence[Decision]) -> Trace:
        trace = self.trace
        for inst, decision in zip(self._sample_insts, decisions, strict=True):
            trace = trace.with_decision(inst, decision, remove_postproc=True)
        return trace

    def replay(self, decisions: Sequence[Decision]) -> Schedule | None:
        """The schedule of ``decisions`` after post-processing, or ``None`` when it is invalid: replay changed
        a tile or categorical decision (compute locations may snap), or a post-processor rejected it."""
        if len(decisions) != len(self.sites):
            raise ValueError(f"expected {len(self.sites)} decisions, got {len(decisions)}")
        sch = Schedule(self.mod)
        try:
            self.with_decisions(decisions).apply_to_schedule(sch, remove_postproc=True)
        except Exception:  # invalid categorical index, failing primitive: an invalid candidate
            return None
        effective = trace_decisions(sch.trace)
        for site, wanted, got in zip(self.sites, decisions, effective, strict=True):
            if site.kind != "SampleComputeLocation" and list(np.atleast_1d(wanted)) != list(
                np.atleast_1d(got)
            ):
                return None
        if not postprocess(sch, self.postprocs):
            return None
        return sch

    def space_size(self) -> int:
        """Number of decision vectors of this space (tiles x categories; compute locations count 1 each,
        since their valid range is only known by replaying)."""
        size = 1
        for site in self.sites:
            if site.kind == "SamplePerfectTile":
                size *= _count_tilings(site.extent, site.n, site.max_innermost)
            elif site.kind == "SampleCategorical":
                size *= len(site.candidates)
        return size


def space_encodings(
    mod: tvm.IRModule, design_spaces: Sequence[Schedule], postprocs: Sequence[ms.postproc.Postproc]
) -> dict[str, SpaceEncoding]:
    """One encoding per design-space signature of ``design_spaces`` (the first space of each)."""
    found: dict[str, SpaceEncoding] = {}
    for space in design_spaces:
        encoding = SpaceEncoding(mod, space, postprocs)
        found.setdefault(encoding.signature, encoding)
    return found


def _count_tilings(extent: int, n: int, max_innermost: int) -> int:
    """Ordered factorizations of ``extent`` into ``n`` factors with the innermost <= ``max_innermost``."""

    def count(rest: int, parts: int) -> int:
        if parts == 1:
            return 1
        return sum(count(rest // d, parts - 1) for d in divisors(rest))

    return sum(
        count(extent // d, n - 1) for d in divisors(extent) if max_innermost <= 0 or d <= max_innermost
    )
