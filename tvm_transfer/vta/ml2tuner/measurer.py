"""Compiling and profiling configurations of a VTA knob space, by index, with counts and a shared cache."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vta_ext.features import VISIBLE_FEATURE_NAMES, visible_features
from vta_ext.hw import HwConfig
from vta_ext.knobs import Knobs, KnobSpace
from vta_ext.measure import MeasureResult, VtaCompileResult, compile_only, measure
from vta_ext.workloads import VtaWorkload

# Stages whose errors a compile alone reveals; later errors (run time) need a profile.
_COMPILE_STAGES = ("compile", "hw")


class VtaMeasurer:
    """Compiles and profiles configurations of one workload on one VTA config, by index into its space,
    and counts both. ``cache`` (index -> :class:`MeasureResult`) may be shared between measurers of the
    same workload and hardware: simulated results are deterministic, so a cached result is the result a
    fresh measurement would give (benchmarks fill it once exhaustively). Counts are per measurer."""

    def __init__(
        self, workload: VtaWorkload, hw: HwConfig, cache: dict[int, MeasureResult] | None = None
    ) -> None:
        self.workload, self.hw = workload, hw
        self.space = KnobSpace(workload, hw)
        self.cache: dict[int, MeasureResult] = {} if cache is None else cache
        self.radices = np.array([len(self.space.options[n]) for n in self.space.names], dtype=np.int64)
        self._visible: dict[int, np.ndarray] = {}
        self.n_compiles = 0
        self.n_profiles = 0

    def knobs(self, index: int) -> Knobs:
        return self.space.point(int(index))

    def visible(self, indices: np.ndarray | list[int]) -> np.ndarray:
        """Visible feature rows (VISIBLE_FEATURE_NAMES) of the given space indices."""
        rows = []
        for i in np.asarray(indices, dtype=np.int64).tolist():
            if i not in self._visible:
                self._visible[i] = np.asarray(visible_features(self.workload, self.knobs(i), self.hw))
            rows.append(self._visible[i])
        return np.array(rows, dtype=np.float32).reshape(len(rows), len(VISIBLE_FEATURE_NAMES))

    def compile(self, index: int) -> VtaCompileResult:
        """Compile only (counted in ``n_compiles``): the compile error or the hidden features."""
        self.n_compiles += 1
        cached = self.cache.get(int(index))
        if cached is not None:
            ok = cached.error_stage not in _COMPILE_STAGES
            return VtaCompileResult(
                ok,
                None if ok else cached.error_kind,
                None if ok else cached.error_stage,
                None if ok else cached.error,
                cached.visible_features,
                cached.hidden_features,
                cached.counters,
            )
        return compile_only(self.workload, self.knobs(index), self.hw)

    def profile(self, index: int) -> MeasureResult:
        """Compile, run and time (counted in ``n_profiles``)."""
        self.n_profiles += 1
        index = int(index)
        if index not in self.cache:
            self.cache[index] = measure(self.workload, self.knobs(index), self.hw)
        return self.cache[index]

    def exhaustive(self, progress: Callable[[int], None] | None = None) -> list[MeasureResult]:
        """Every configuration of the space, measured (or taken from the cache); not counted."""
        results = []
        for index in range(len(self.space)):
            if index not in self.cache:
                self.cache[index] = measure(self.workload, self.knobs(index), self.hw)
            results.append(self.cache[index])
            if progress:
                progress(1)
        return results
