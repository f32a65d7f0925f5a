"""The features our models learn from: the shared definitions of :mod:`tenset_tools.features`.

- kernel: MetaSchedule's per-store program features and their pooled vector;
- trace: the per-instruction encoding of a candidate's schedule trace;
- hardware: the eight Ansor/TenSet hardware parameters of a target.

They live in the data layer so that datasets and models compute them with the same code; this module is
the plug-ins' entry point to them.
"""

from tenset_tools.features import (
    HW_FEATURE_NAMES,
    PER_STORE_WIDTH,
    POOLED_WIDTH,
    TRACE_ROW_WIDTH,
    KernelFeatureExtractor,
    candidate_trace_json,
    encode_trace,
    encode_traces,
    hardware_features,
    hardware_params,
    pool_per_store,
)

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
