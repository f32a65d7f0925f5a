"""What the knob tuners share: the round loop over a profile budget, the run log, random picks and
annealing starts.

A tuner spends a budget of *profiles* (a profile = :func:`vta_ext.measure`, which compiles, runs and times
a configuration); a profile of an invalid configuration is a wasted profile. Runs are recorded as
:class:`~tvm_transfer.vta.ml2tuner.runs.Event` rows and can be written as JSON lines; a log can be replayed
into a result cache (:func:`~tvm_transfer.vta.ml2tuner.runs.load_log`) so that a resumed run with the same
seed re-takes its decisions without re-measuring.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from tvm_transfer.vta.ml2tuner.annealing import anneal, memoize
from tvm_transfer.vta.ml2tuner.measurer import VtaMeasurer
from tvm_transfer.vta.ml2tuner.runs import Event, TunerInputError, TuneRun, workload_spec


class KnobTuner:
    """Base of the knob tuners: subclasses choose each round's profiles in ``_round``."""

    method = ""

    def __init__(self, batch_size: int, seed: int, sa_parallel: int, sa_steps: int) -> None:
        if batch_size < 1:
            raise TunerInputError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size, self.seed = batch_size, seed
        self.sa_parallel, self.sa_steps = sa_parallel, sa_steps

    def tune(
        self,
        measurer: VtaMeasurer,
        budget: int,
        progress: Callable[[int], None] | None = None,
        log: str | Path | None = None,
    ) -> TuneRun:
        """Spend ``budget`` profiles (fewer if the space runs out); ``progress(n)`` is called after every
        ``n`` profiles; the events are written to ``log`` (JSON lines) when given."""
        if budget < 1:
            raise TunerInputError(f"budget must be at least 1 profile, got {budget}")
        self.measurer, self.rng = measurer, np.random.default_rng(self.seed)
        self.run = TuneRun(
            self.method,
            measurer.workload.name,
            measurer.hw.short_id(),
            self.seed,
            budget,
            workload_spec=workload_spec(measurer.workload),
            hw_spec=measurer.hw.to_dict(),
        )
        self.profiled: dict[int, Event] = {}
        self.compiled: dict[int, Event] = {}
        self.progress = progress
        round_ = 0
        size = len(measurer.space)
        while self.run.n_profiles < budget and len(self.profiled) < size:
            self._round(round_, min(self._batch(), budget - self.run.n_profiles))
            round_ += 1
        if log is not None:
            self.run.write_log(log)
        return self.run

    def _round(self, round_: int, n: int) -> None:
        raise NotImplementedError

    def _batch(self) -> int:
        """Profiles of the next round."""
        return self.batch_size

    def _event(self, kind: str, index: int, result, valid: bool, latency: float, round_: int) -> Event:
        """The log entry of one compile or profile (``result``: a compile or measure result)."""
        knobs = self.measurer.knobs(index)
        return Event(
            kind, int(index), knobs, valid, result.error_kind, result.error_stage, latency, round_,
            result.hidden_features,
        )  # fmt: skip

    def _profile(self, indices: list[int], round_: int) -> None:
        for index in indices:
            result = self.measurer.profile(index)
            event = self._event("profile", index, result, result.valid, result.latency, round_)
            self.run.events.append(event)
            self.profiled[int(index)] = event
        if self.progress:
            self.progress(len(indices))

    def _random_unvisited(self, n: int, exclude: set[int]) -> list[int]:
        size = len(self.measurer.space)
        if size - len(exclude) <= 4 * n:
            rest = np.setdiff1d(np.arange(size), np.fromiter(exclude, dtype=np.int64, count=len(exclude)))
            return self.rng.permutation(rest)[:n].tolist()
        picks: list[int] = []
        while len(picks) < n:
            i = int(self.rng.integers(size))
            if i not in exclude and i not in picks:
                picks.append(i)
        return picks

    def _annealed_picks(
        self, score: Callable[[np.ndarray], np.ndarray], n: int, epsilon: float, visited: set[int]
    ) -> list[int]:
        """An epsilon-greedy batch of ``n`` configurations: simulated annealing under ``score`` (higher is
        better) proposes the best unvisited ones, a binomial(``n``, ``epsilon``) share is random."""
        n_random = int(self.rng.binomial(n, epsilon))
        best = anneal(
            self.measurer.radices,
            memoize(score),
            n - n_random,
            visited,
            self.rng,
            self._starts(),
            self.sa_parallel,
            self.sa_steps,
        )
        return best + self._random_unvisited(n - len(best), visited | set(best))

    def _starts(self) -> list[int]:
        """Annealing starts: the best profiled configurations (AutoTVM restarts from its best points)."""
        valid = sorted((e for e in self.profiled.values() if e.valid), key=lambda e: e.latency)
        return [e.index for e in valid[: self.sa_parallel // 4]]
