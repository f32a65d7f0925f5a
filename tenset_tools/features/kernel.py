"""Kernel features of scheduled candidates: MetaSchedule's per-store features, and a pooled vector.

``PerStoreFeature`` is the TVM 0.27 port of Ansor's 164-value per-``BufferStore`` features (arithmetic
counts, loop annotations, buffer access patterns, arithmetic intensity curve, allocation); a candidate
yields one row per store, so models that need a fixed width use :func:`pool_per_store`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm.s_tir import meta_schedule as ms

#: Width of one per-store feature row (``PerStoreFeature`` without workload features).
PER_STORE_WIDTH = 164
#: Width of the pooled vector: the sum and the maximum of the per-store rows.
POOLED_WIDTH = 2 * PER_STORE_WIDTH


class KernelFeatureExtractor:
    """Per-store and pooled kernel features of MetaSchedule candidates.

    Parameters
    ----------
    buffers_per_store:
        How many buffers each store row describes (Ansor's default: 5).
    cache_line_bytes:
        Cache line size used for the reuse features, in bytes.
    """

    def __init__(self, buffers_per_store: int = 5, cache_line_bytes: int = 64) -> None:
        self.buffers_per_store = buffers_per_store
        self.cache_line_bytes = cache_line_bytes
        self._extractor = ms.feature_extractor.PerStoreFeature(
            buffers_per_store=buffers_per_store, cache_line_bytes=cache_line_bytes
        )

    @property
    def per_store_width(self) -> int:
        return int(self._extractor.feature_vector_length)

    def per_store(
        self, context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate]
    ) -> list[np.ndarray]:
        """One ``(n_stores, 164)`` float32 matrix per candidate (``n_stores`` may be 0)."""
        return [t.numpy() for t in self._extractor.extract_from(context, list(candidates))]

    def pooled(self, context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate]) -> np.ndarray:
        """A ``(n_candidates, 328)`` float32 matrix: :func:`pool_per_store` of each candidate."""
        return pool_per_store(self.per_store(context, candidates), self.per_store_width)


def pool_per_store(matrices: Sequence[np.ndarray], width: int = PER_STORE_WIDTH) -> np.ndarray:
    """Concatenate the sum and the element-wise maximum of each per-store matrix (zeros if it has no row).

    The sum keeps the additive cost of all stores (what XGBModel's pack-sum learns), the maximum keeps the
    dominant store visible when many small ones are present.
    """
    pooled = np.zeros((len(matrices), 2 * width), dtype=np.float32)
    for i, rows in enumerate(matrices):
        if rows.shape[0]:
            pooled[i, :width] = rows.sum(axis=0)
            pooled[i, width:] = rows.max(axis=0)
    return pooled
