"""Source configurations as rows per design space, and the anchors: those configurations repaired to a new
task's loop extents (:mod:`tvm_transfer.search_strategy.replay`'s rule) in the order they are worth trying.

Anchor order: every source task's best first, nearest task (squared descriptor distance) first, then every
task's second best, and so on. A source's best tiling often stays good intact at a nearby shape, which is
why :class:`.sampler.TraceCopulaSampler` proposes its copula's kept configurations this way before any draw,
and why a transfer control without a copula is the same order over all source records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from tvm_transfer.search_strategy.copula.copula import source_row
from tvm_transfer.search_strategy.copula.encoding import (
    SpaceEncoding,
    decision_columns,
    decision_vector,
)
from tvm_transfer.search_strategy.copula.sources import SourceRecord

__all__ = ["anchor_decisions", "rows_by_space"]


def rows_by_space(records: Sequence[SourceRecord]) -> dict[str, tuple[pd.DataFrame, list[str]]]:
    """Source records as one frame per design-space signature (decision columns, descriptor columns,
    ``cost`` in seconds, ``task``), with the descriptor columns every record of that space has."""
    groups: dict[str, list[dict]] = {}
    descriptor_columns: dict[str, list[str]] = {}
    for record in records:
        signature, decisions = record.signature, record.decisions
        values = dict(zip(decision_columns(decisions), decision_vector(decisions), strict=True))
        groups.setdefault(signature, []).append(
            source_row(values, record.descriptor, record.seconds, record.task)
        )
        # Fused tasks of one design space can differ in argument count (a residual input, bias): keep the
        # descriptor columns all of them have.
        shared = descriptor_columns.get(signature)
        kept = record.descriptor if shared is None else shared
        descriptor_columns[signature] = [c for c in kept if c in record.descriptor]
    return {sig: (pd.DataFrame(rows), descriptor_columns[sig]) for sig, rows in groups.items()}


def anchor_decisions(
    encodings: Sequence[SpaceEncoding], rows_of: Mapping[str, pd.DataFrame], descriptor: Mapping[str, float]
) -> list[tuple[str, str, list]]:
    """The configurations of ``rows_of[signature]`` (frames as :func:`rows_by_space`'s) repaired to each of
    ``encodings``' spaces, as (signature, decisions key, decisions) in anchor order; ``descriptor`` is the
    target task's. Raises ``ValueError`` when a space's columns are not among its rows' columns."""
    ordered: list[tuple] = []
    for encoding in encodings:
        rows = rows_of[encoding.signature]
        if not set(encoding.columns) <= set(rows.columns):
            raise ValueError("source and target design spaces encode to different columns")
        shared = [c for c in descriptor if c in rows.columns]
        distance = ((rows[shared] - pd.Series(descriptor)[shared]) ** 2).sum(axis=1)
        for row, cost, task, far in zip(
            rows[encoding.columns].to_numpy(), rows["cost"], rows["task"], distance, strict=True
        ):
            decisions = encoding.repair(row)
            ordered.append((task, cost, far, encoding.signature, repr(decisions), decisions))
    frame = pd.DataFrame(ordered, columns=["task", "cost", "far", "sig", "key", "decisions"])
    frame["rank"] = frame.groupby("task")["cost"].rank(method="first")
    frame = frame.sort_values(["rank", "far"], kind="stable")
    return list(zip(frame["sig"], frame["key"], frame["decisions"], strict=True))
