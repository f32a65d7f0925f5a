"""Per-step sequence encoding of an Ansor schedule (the idea of TLP's features, Zhai et al. ASPLOS'23).

Each transform step becomes one row of :data:`STEP_WIDTH` float32 values: a one-hot of the step kind over
the 14 kinds of :data:`STEP_KINDS`, then the step's arguments flattened in order (nested lists such as
split lengths or reorder orders are spliced in), padded with zeros to :data:`ARG_SLOTS`. Arguments past
:data:`ARG_SLOTS` are dropped: only reorder/fuse steps of deep GPU tilings are that long (a 5-level conv
tiling reorders 29 iterators), and their first 18 entries keep the outer loop order.

Strings become small integer codes: the memory scope of cache-read/write (``SCOPES``, unknown 0), and a
pragma ``"name$value"`` becomes two values, the pragma code (``PRAGMAS``, unknown 0) and its integer value.
Missing split lengths (``null``) become 0. Values are raw (extents, factors, indices); scale them in the
learner, e.g. ``log1p``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ARG_SLOTS", "PRAGMAS", "SCOPES", "STEP_KINDS", "STEP_WIDTH", "encode_steps", "encode_steps_batch"]

STEP_KINDS = ("AN", "FU", "PR", "RE", "SP", "FSP", "FFSP", "SA", "CA", "CI", "CR", "CHR", "CHW", "RF")
ARG_SLOTS = 18
STEP_WIDTH = len(STEP_KINDS) + ARG_SLOTS

SCOPES = (
    "global",
    "shared",
    "local",
    "warp",
    "shared.dyn",
    "wmma.matrix_a",
    "wmma.matrix_b",
    "wmma.accumulator",
)
PRAGMAS = ("auto_unroll_max_step", "unroll_explicit", "debug_skip_region")

_KIND_INDEX = {kind: i for i, kind in enumerate(STEP_KINDS)}
_SCOPE_CODE = {scope: i + 1 for i, scope in enumerate(SCOPES)}
_PRAGMA_CODE = {name: i + 1 for i, name in enumerate(PRAGMAS)}


def _string_values(text: str) -> list[int]:
    if "$" in text:
        name, _, value = text.partition("$")
        return [_PRAGMA_CODE.get(name, 0), int(value) if value.lstrip("-").isdigit() else 0]
    return [_SCOPE_CODE.get(text, 0)]


def _as_float32(values: list) -> np.ndarray:
    # numpy turns the null of an unknown split length into NaN; checking lists for None up front costs more.
    array = np.asarray(values, dtype=np.float32)
    array[np.isnan(array)] = 0.0
    return array


def _collect(step_lists: list[list]) -> tuple[list[int], list[int], np.ndarray]:
    """Kind index and argument count of every step, and all arguments (flattened: lists spliced in,
    strings coded, null as 0) as one float32 array."""
    kinds: list[int] = []
    counts: list[int] = []
    values: list = []
    # The hot loop of a conversion (20-40 steps per record): inline, with bound methods hoisted; a
    # function call per step would cost a third more.
    kind_index, add_kind, add_count = _KIND_INDEX, kinds.append, counts.append
    add_value, add_values = values.append, values.extend
    for steps in step_lists:
        for step in steps:
            add_kind(kind_index[step[0]])
            start = len(values)
            for arg in step[1:]:
                if arg.__class__ is int:
                    add_value(arg)
                elif arg.__class__ is list:
                    add_values(arg)
                elif arg.__class__ is str:
                    add_values(_string_values(arg))
                else:
                    add_value(arg if isinstance(arg, float) else 0)  # null (unknown length) -> 0
            kept = len(values) - start
            if kept > ARG_SLOTS:
                del values[start + ARG_SLOTS :]
                kept = ARG_SLOTS
            add_count(kept)
    return kinds, counts, _as_float32(values)


def encode_steps_batch(step_lists: list[list]) -> tuple[np.ndarray, np.ndarray]:
    """Encode many schedules at once.

    Returns ``(rows, steps_per_schedule)``: ``rows`` is ``(total_steps, STEP_WIDTH)`` float32, the rows of
    all schedules in order. Raises ``KeyError`` for an unknown step kind.
    """
    kinds, counts, values = _collect(step_lists)
    steps_per_schedule = np.fromiter(
        (len(steps) for steps in step_lists), dtype=np.int64, count=len(step_lists)
    )
    total = len(kinds)
    rows = np.zeros((total, STEP_WIDTH), dtype=np.float32)
    if total:
        step_of_value = np.repeat(np.arange(total), counts)
        # Column of each value: its position within its step, after the one-hot block.
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        columns = len(STEP_KINDS) + np.arange(len(values)) - starts
        rows[np.arange(total), kinds] = 1.0
        rows[step_of_value, columns] = values
    return rows, steps_per_schedule


def encode_steps(steps: list) -> np.ndarray:
    """Encode one schedule's steps as a ``(len(steps), STEP_WIDTH)`` float32 array."""
    return encode_steps_batch([steps])[0]
