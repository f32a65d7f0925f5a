"""Measure one configuration: compile, check, profile and time it, and collect its features."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from vta_ext.compiler import compile_program
from vta_ext.errors import InvalidConfigError
from vta_ext.features import hidden_features, visible_features
from vta_ext.hw import HwConfig
from vta_ext.knobs import Knobs, KnobSpace
from vta_ext.sim import profile
from vta_ext.timing import Timing, simulate
from vta_ext.tokens import token_graph
from vta_ext.workloads import VtaWorkload


@dataclass(frozen=True)
class MeasureResult:
    """Outcome of one measurement. Invalid configurations carry the error's stage, kind and message;
    ``hidden_features`` is None only when compilation failed. Latencies are seconds."""

    valid: bool
    error_kind: str | None
    error_stage: str | None
    error: str | None
    cycles: int | None
    latency: float  # NaN when invalid
    latencies: list[float]
    counters: dict[str, int] = field(default_factory=dict)
    timing: Timing | None = None
    visible_features: list[float] = field(default_factory=list)
    hidden_features: list[float] | None = None


@dataclass(frozen=True)
class VtaCompileResult:
    """Outcome of compiling one configuration without timing it (ML2Tuner's cheap "compile" step).

    ``ok`` is False when the compiler rejects the configuration (``error_stage`` is then ``compile`` or
    ``hw``); a configuration that compiles may still fail at run time, which only :func:`measure` reveals.
    ``hidden_features`` (HIDDEN_FEATURE_NAMES order) is None when compilation failed.
    """

    ok: bool
    error_kind: str | None
    error_stage: str | None
    error: str | None
    visible_features: list[float]
    hidden_features: list[float] | None
    counters: dict[str, int] = field(default_factory=dict)


def compile_only(workload: VtaWorkload, knobs: Knobs, hw: HwConfig) -> VtaCompileResult:
    """Compile ``knobs`` for ``workload`` on ``hw`` and profile the instruction stream (counters only),
    without the timing simulation: the hidden features, or the compile error. Raises
    :class:`~vta_ext.knobs.KnobError` for a setting outside the layer's knob space."""
    KnobSpace(workload, hw).check(knobs)
    visible = visible_features(workload, knobs, hw)
    try:
        program = compile_program(workload, knobs, hw)
        graph = token_graph(program.insns)
    except InvalidConfigError as error:
        return VtaCompileResult(False, error.kind, error.stage, str(error), visible, None)
    counters = profile(program)
    hidden = hidden_features(program, counters, graph)
    return VtaCompileResult(True, None, None, None, visible, hidden, counters)


def measure(
    workload: VtaWorkload,
    knobs: Knobs,
    hw: HwConfig,
    repeats: int = 1,
    noise: float = 0.0,
    seed: int = 0,
) -> MeasureResult:
    """Compile ``knobs`` for ``workload`` on ``hw`` and time it in counters-only mode.

    ``repeats`` latencies are returned; with ``noise`` > 0 each is the model's latency times a seeded
    log-normal factor of that sigma (imitating repeated board measurements), else all are equal. Raises
    :class:`~vta_ext.knobs.KnobError` for a setting outside the layer's knob space (not a measurement).
    """
    KnobSpace(workload, hw).check(knobs)
    visible = visible_features(workload, knobs, hw)
    try:
        program = compile_program(workload, knobs, hw)
    except InvalidConfigError as error:
        return _invalid(error, visible, None, {})
    graph = token_graph(program.insns)
    counters = profile(program)
    hidden = hidden_features(program, counters, graph)
    try:
        timing = simulate(program, graph)
    except InvalidConfigError as error:
        return _invalid(error, visible, hidden, counters)
    factors = (
        np.exp(np.random.default_rng(seed).normal(0.0, noise, size=repeats))
        if noise > 0
        else np.ones(repeats)
    )
    return MeasureResult(
        valid=True,
        error_kind=None,
        error_stage=None,
        error=None,
        cycles=timing.cycles,
        latency=timing.latency_s,
        latencies=[timing.latency_s * float(f) for f in factors],
        counters=counters,
        timing=timing,
        visible_features=visible,
        hidden_features=hidden,
    )


def _invalid(
    error: InvalidConfigError, visible: list[float], hidden: list[float] | None, counters: dict[str, int]
) -> MeasureResult:
    return MeasureResult(
        valid=False,
        error_kind=error.kind,
        error_stage=error.stage,
        error=str(error),
        cycles=None,
        latency=math.nan,
        latencies=[],
        counters=counters,
        visible_features=visible,
        hidden_features=hidden,
    )
