"""Features, defined once and shared by every model and tool.

- kernel: MetaSchedule's per-store program features and their pooled vector;
- trace: the per-instruction encoding of a candidate's schedule trace;
- hardware: the eight Ansor/TenSet hardware parameters of a target (from :mod:`tvm_transfer.target`).
"""

from tvm_transfer.features.kernel import (
    PER_STORE_WIDTH,
    POOLED_WIDTH,
    KernelFeatureExtractor,
    pool_per_store,
)
from tvm_transfer.features.trace import (
    TRACE_ROW_WIDTH,
    candidate_trace_json,
    encode_trace,
    encode_traces,
)
from tvm_transfer.target import HW_FEATURE_NAMES, hardware_features, hardware_params

__all__ = [
    "HW_FEATURE_NAMES",
    "PER_STORE_WIDTH",
    "POOLED_WIDTH",
    "TRACE_ROW_WIDTH",
    "KernelFeatureExtractor",
    "candidate_trace_json",
    "encode_trace",
    "encode_traces",
    "hardware_features",
    "hardware_params",
    "pool_per_store",
]
