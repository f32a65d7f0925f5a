"""Replaying a schedule's decisions on a task of other loop extents: the one tile repair rule, trace replay
with repair, MetaSchedule's post-processing of the result, and the block signature (the blocks a trace
addresses) that says which tasks a trace can replay on.

Both users of transfer go through here: the copula search (:mod:`.copula.encoding` repairs sampled and
source decision vectors; the anchors replay the sources' best configurations) and schedule transfer
(:func:`replay_trace` replays a tuned task's record on a similar task).

The repair rule. A ``SamplePerfectTile`` decision is a list of ``n`` factors that must multiply to the loop
extent. For a new extent, the inner factors are chosen innermost first: each is the divisor of what is left
of the loop nearest to the wanted factor in log2 (ties: the smaller divisor), the innermost also at most the
instruction's ``max_innermost_factor``; the outermost factor takes the rest. Why this rule:

* a wanted factor that divides what is left is kept exactly, so the source's innermost (vectorised) tile
  survives whenever it fits, and a decision that already tiles its extent comes back unchanged;
* it is defined for any real wanted size, which the copula's samples are (log2 of the factors), so copula
  draws, source anchors and replayed traces share it, where a gcd rule only exists for integers;
* when the factor does not divide, the nearest tile size in log2 keeps the tile's working set closest to the
  source's; the gcd can collapse it to 1 (a 64-wide tile on a loop of 10 becomes 5 here, 1 under gcd).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tvm
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import Trace

from tvm_transfer.common.errors import failure_line

__all__ = [
    "block_signature",
    "divisors",
    "nearest_log2",
    "postprocess",
    "repair_tile",
    "repair_tile_log2",
    "replay_trace",
    "tile_log2",
]


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def nearest_log2(options: Sequence[int], wanted_log2: float) -> int:
    """The option (a positive size, e.g. a tile factor) nearest to ``wanted_log2`` in log2; ties: the
    smaller option. The snapping of the repair rule, for any set of allowed sizes."""
    return min(options, key=lambda option: (abs(math.log2(option) - wanted_log2), option))


def repair_tile_log2(inner_log2: Sequence[float], extent: int, max_innermost: int = 0) -> list[int]:
    """The perfect tiling of ``extent`` (loop iterations) whose inner factors are nearest in log2 to
    ``inner_log2`` (the ``n - 1`` inner factors' log2, outermost first); ``max_innermost`` > 0 caps the
    innermost factor. Returns all ``n`` factors, outermost first; they multiply to ``extent``."""
    remaining, inner = int(extent), []
    for j in range(len(inner_log2) - 1, -1, -1):  # innermost first
        options = divisors(remaining)
        if j == len(inner_log2) - 1 and max_innermost > 0:
            options = [d for d in options if d <= max_innermost]
        factor = nearest_log2(options, inner_log2[j])
        inner.append(factor)
        remaining //= factor
    return [remaining, *reversed(inner)]


def tile_log2(decision: Sequence[int]) -> list[float]:
    """log2 of a tile decision's inner factors (the outermost is implied by the extent)."""
    return [math.log2(max(int(f), 1)) for f in decision[1:]]


def repair_tile(decision: Sequence[int], extent: int, max_innermost: int = 0) -> list[int]:
    """:func:`repair_tile_log2` of an integer tile decision (factors, outermost first): the perfect tiling
    of ``extent`` nearest to it; a decision that already tiles ``extent`` comes back unchanged."""
    return repair_tile_log2(tile_log2(decision), extent, max_innermost)


def postprocess(sch: Schedule, postprocs: Sequence[ms.postproc.Postproc]) -> bool:
    """Run ``postprocs`` on a replayed schedule (in place); ``False`` when one rejects it or fails."""
    # Mark where post-processing starts, as MetaSchedule's own replay does: a trace without the marker
    # replays its post-processing instructions (GetLoops, Fuse, Parallel, ...) as if they were part of the
    # space. A mutator that changes an earlier decision (MutateComputeLocation) then replays them on a
    # different loop nest and trips TVM's uncaught internal check "old_outputs.size() == new_outputs.size()"
    # inside EvolveWithCostModel.
    sch.enter_postproc()
    try:
        return all(p.apply(sch) for p in postprocs)
    except Exception:  # a post-processor that raises rejects the candidate like one that returns False
        return False


def block_signature(mod: tvm.IRModule) -> tuple[tuple[str, str], ...]:
    """The top-level blocks of ``mod``'s ``main`` as (name, iteration kinds) pairs, e.g.
    ``(("matmul", "SSR"), ("T_add", "SS"))``: what a trace relies on, extents left out."""
    sch = Schedule(mod)
    kinds = {0: "S", 2: "R"}
    out = []
    for block_rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(block_rv)
        out.append((block.name_hint, "".join(kinds.get(int(iv.iter_type), "O") for iv in block.iter_vars)))
    return tuple(out)


def replay_trace(trace: Trace, mod: tvm.IRModule, context: ms.TuneContext) -> tuple[Schedule, int]:
    """Replay ``trace`` (post-processing instructions dropped) on ``mod``, repairing tile decisions to the
    new extents (:func:`repair_tile`), then run ``context``'s post-processors. Returns the schedule and the
    number of repaired tile decisions; raises ``ValueError`` when the trace does not replay, replay changed
    a tile decision, or a post-processor rejects the result."""
    sch = Schedule(mod, debug_mask="all")
    provided: list[list[int]] = []
    repaired = 0

    def provide(inst, inputs, attrs, decision):
        nonlocal repaired
        if inst.kind.name != "SamplePerfectTile":
            return decision
        extent = int(sch.get(inputs[0]).extent)
        new = repair_tile(list(decision), extent, int(attrs[1]))
        repaired += new != [int(x) for x in decision]
        provided.append(new)
        return new

    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provide)
    except Exception as error:  # TVM raises its own error types for a missing block or a bad primitive
        raise ValueError(f"trace does not replay: {failure_line(str(error))}") from error
    tiles = [inst for inst in sch.trace.insts if inst.kind.name == "SamplePerfectTile"]
    for i, (inst, wanted) in enumerate(zip(tiles, provided, strict=True)):
        got = [int(x) for x in sch.trace.get_decision(inst)]
        if got != wanted:
            raise ValueError(f"replay changed tile decision {i} from {wanted} to {got}")
    if not postprocess(sch, context.space_generator.postprocs):
        raise ValueError("a MetaSchedule post-processor rejected the replayed schedule")
    return sch, repaired
