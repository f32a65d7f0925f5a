"""Named feature views of a dataset frame (``tenset_tools`` schema): the feature spaces transfers go between.

- ``kernel``: the ``kernel_features`` column: MetaSchedule's pooled per-store features on CPU records
  (``store.0 .. store.327``, the extractor has no per-column names), VTA's visible features on VTA records
  (workload shape, knobs and hardware, ``vta_ext.features.VISIBLE_FEATURE_NAMES``);
- ``trace``: the ``sequence_features`` (one row per schedule instruction) pooled to one vector: how often
  each instruction kind and annotation key occurs, and the mean and maximum of each numeric slot over all
  instructions and over the tile-size (``SamplePerfectTile``) instructions;
- ``hidden``: the ``hidden_features`` column: VTA's compilation features (``HIDDEN_FEATURE_NAMES``) or a
  CPU record's lowered-IR features (``LOWERED_FEATURE_NAMES``), where filled;
- ``hardware``: the target's hardware features (TenSet's eight on CPUs, VTA's sixteen).

Views are joined with ``+`` (e.g. ``kernel+hidden``). Columns that are constant over the frame are kept:
the estimators standardise them to 0.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tenset_tools.features import HW_FEATURE_NAMES, LOWERED_FEATURE_NAMES
from tenset_tools.features.trace import ANNOTATION_KEYS, INSTRUCTION_KINDS, NUM_SLOTS, TRACE_ROW_WIDTH
from vta_ext.features import HIDDEN_FEATURE_NAMES, VISIBLE_FEATURE_NAMES, VTA_HW_FEATURE_NAMES

VIEWS = ("kernel", "trace", "hidden", "hardware")

_KINDS = [*INSTRUCTION_KINDS, "other"]
_KEYS = [*ANNOTATION_KEYS, "other"]
_SLOT_START = len(_KINDS) + len(_KEYS)
_TILE_KIND = INSTRUCTION_KINDS.index("SamplePerfectTile")
TRACE_VIEW_NAMES = (
    [f"trace.n_{k}" for k in _KINDS]
    + [f"trace.n_key_{k}" for k in _KEYS]
    + [f"trace.slot{i}_mean" for i in range(NUM_SLOTS)]
    + [f"trace.slot{i}_max" for i in range(NUM_SLOTS)]
    + [f"trace.tile_slot{i}_mean" for i in range(NUM_SLOTS)]
)


def _is_vta(frame: pd.DataFrame) -> bool:
    kinds = set(frame["candidate_kind"])
    if len(kinds) > 1 and "vta_knobs" in kinds:
        raise ValueError(
            f"the frame mixes VTA and other records ({sorted(kinds)}); select one kind of target"
        )
    return kinds == {"vta_knobs"}


def _stacked(frame: pd.DataFrame, column: str, view: str) -> np.ndarray:
    missing = frame[column].isna()
    if missing.any():
        raise ValueError(
            f"view {view!r}: {int(missing.sum())} of {len(frame)} records have no {column}; choose another "
            f"view of {', '.join(VIEWS)}"
        )
    return np.stack(frame[column].to_numpy()).astype(np.float64)


def pooled_trace(rows: np.ndarray) -> np.ndarray:
    """One trace's ``(n_instructions, TRACE_ROW_WIDTH)`` rows as the ``trace`` view's vector."""
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, TRACE_ROW_WIDTH)
    if not len(rows):
        return np.zeros(len(TRACE_VIEW_NAMES))
    slots = rows[:, _SLOT_START:]
    tiles = slots[rows[:, _TILE_KIND] > 0]
    tile_mean = tiles.mean(axis=0) if len(tiles) else np.zeros(NUM_SLOTS)
    return np.concatenate(
        [rows[:, :_SLOT_START].sum(axis=0), slots.mean(axis=0), slots.max(axis=0), tile_mean]
    )


def feature_view(frame: pd.DataFrame, view: str) -> pd.DataFrame:
    """The named feature columns of ``view`` (one of :data:`VIEWS`, or several joined by ``+``) for every
    record of ``frame``, index kept."""
    parts = []
    for name in view.split("+"):
        if name not in VIEWS:
            raise ValueError(f"unknown feature view {name!r} in {view!r}; choose from {', '.join(VIEWS)}")
        parts.append(_one_view(frame, name))
    return pd.concat(parts, axis=1)


def _one_view(frame: pd.DataFrame, view: str) -> pd.DataFrame:
    vta = _is_vta(frame)
    if view == "kernel":
        matrix = _stacked(frame, "kernel_features", view)
        names = VISIBLE_FEATURE_NAMES if vta else [f"store.{i}" for i in range(matrix.shape[1])]
    elif view == "hidden":
        matrix = _stacked(frame, "hidden_features", view)
        names = HIDDEN_FEATURE_NAMES if vta else LOWERED_FEATURE_NAMES
    elif view == "hardware":
        matrix = _stacked(frame, "hw_features", view)
        names = VTA_HW_FEATURE_NAMES if vta else HW_FEATURE_NAMES
    else:
        if frame["sequence_features"].isna().any():
            raise ValueError("view 'trace': some records have no sequence_features (VTA records have none)")
        matrix = np.stack([pooled_trace(np.stack(rows)) for rows in frame["sequence_features"]])
        names = TRACE_VIEW_NAMES
    if matrix.shape[1] != len(names):
        raise ValueError(f"view {view!r}: records have {matrix.shape[1]} values, expected {len(names)}")
    return pd.DataFrame(matrix, columns=list(names), index=frame.index)


def labelled_rows(frame: pd.DataFrame, view: str) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    """``(X, y, records)`` of the valid records of ``frame``: the named features of ``view``, the
    normalised throughput (task best latency / latency, in (0, 1]) and the records themselves (for
    the per-task ranking metrics)."""
    from tenset_tools.frame import throughput_labels

    labels = throughput_labels(frame)
    valid = frame["valid"].to_numpy(dtype=bool) & (labels > 0)
    records = frame[valid].reset_index(drop=True)
    return feature_view(records, view), labels[valid], records
