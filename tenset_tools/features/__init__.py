"""Features of tensor programs and hardware, defined once; every dataset, model and tool uses these.

- :mod:`~tenset_tools.features.kernel`: MetaSchedule's per-store program features and their pooled vector;
- :mod:`~tenset_tools.features.trace`: the per-instruction encoding of a MetaSchedule schedule trace;
- :mod:`~tenset_tools.features.hardware`: the eight Ansor/TenSet hardware parameters of a TVM target.

(The per-step encoding of legacy Ansor records is in :mod:`tenset_tools.ansor`.)
"""

from tenset_tools.features.hardware import (
    HW_FEATURE_NAMES,
    UnsupportedTargetError,
    hardware_features,
    hardware_params,
    target_id,
)
from tenset_tools.features.kernel import PER_STORE_WIDTH, POOLED_WIDTH, KernelFeatureExtractor, pool_per_store
from tenset_tools.features.lowered import (
    LOWERED_FEATURE_NAMES,
    LoweringError,
    candidate_lowered_features,
    lowered_features,
)
from tenset_tools.features.trace import TRACE_ROW_WIDTH, candidate_trace_json, encode_trace, encode_traces

__all__ = [
    "HW_FEATURE_NAMES",
    "LOWERED_FEATURE_NAMES",
    "PER_STORE_WIDTH",
    "POOLED_WIDTH",
    "TRACE_ROW_WIDTH",
    "KernelFeatureExtractor",
    "LoweringError",
    "UnsupportedTargetError",
    "candidate_lowered_features",
    "candidate_trace_json",
    "encode_trace",
    "encode_traces",
    "hardware_features",
    "hardware_params",
    "lowered_features",
    "pool_per_store",
    "target_id",
]
