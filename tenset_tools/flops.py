"""Floating-point operation counts of TIR programs: the one place that asks TVM for them.

Policy for every caller: a program TVM's estimator cannot count is reported as ``nan`` (unknown), never as
``0.0``, which means a program without arithmetic (reshape, transpose, slicing). Callers that rank or filter
tasks by work treat ``nan`` as no known work: comparisons with ``nan`` are false, so ``flops > 0`` skips
such tasks.
"""

from __future__ import annotations

import math

import tvm


def estimate_flops(mod: tvm.IRModule) -> float:
    """FLOPs of one call of ``mod`` (TVM's static estimate; 0.0 for pure data movement), ``nan`` when the
    estimator gives up on the program's loop structure."""
    try:
        return float(tvm.s_tir.analysis.estimate_tir_flops(mod))
    except Exception:  # TVM's FFI raises the estimator's refusals as several error types
        return math.nan
