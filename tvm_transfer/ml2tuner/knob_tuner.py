"""Tuners over a vta_ext knob space: the AutoTVM-like baseline and ML2Tuner's multi-level tuner.

Both spend a budget of *profiles* (a profile = :func:`vta_ext.measure`, which compiles, runs and times a
configuration); a profile of an invalid configuration is a wasted profile. Per round:

- :class:`BaselineTuner` (TVM's "TVM-like approach", AutoTVM's XGBTuner): an XGBoost ranking model on the
  knob values, refitted on every profile so far (invalid ones as throughput 0); simulated annealing over
  the space proposes the configurations the model ranks best; the top ``batch_size`` unvisited ones (a
  share ``epsilon`` replaced by random ones) are profiled.
- :class:`ML2Tuner`: V (validity on visible features) and P (throughput on visible features) steer the
  annealing (predicted-invalid configurations score lowest), the ``short_list`` best proposals are
  *compiled* (cheap: :func:`vta_ext.compile_only`, no timing simulation) which reveals compile errors
  and the hidden features; A (throughput on visible + hidden features) and V_h (validity on visible +
  hidden features, an addition to the paper that learns run-time failures such as accumulator hazards
  from the micro-op structure) re-rank the compiled ones, and the top ``batch_size`` are profiled. All
  models are refitted every round on everything observed, compile failures included.

Runs are recorded as :class:`Event` rows and can be written as JSON lines; a log can be replayed into a
result cache (:func:`load_log`) so that a resumed run with the same seed re-takes its decisions without
re-measuring.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tvm_transfer.ml2tuner.models import AdvancedModel, PerformanceModel, ValidityModel
from vta_ext.features import KNOB_NAMES, VISIBLE_FEATURE_NAMES, visible_features
from vta_ext.hw import HwConfig
from vta_ext.knobs import Knobs, KnobSpace
from vta_ext.measure import CompileResult, MeasureResult, compile_only, measure
from vta_ext.workloads import Workload

METHODS = ("baseline", "ml2tuner")
_KNOB_COLUMNS = [VISIBLE_FEATURE_NAMES.index(name) for name in KNOB_NAMES]
_COMPILE_STAGES = ("compile", "hw")


class TunerInputError(ValueError):
    """A tuner was given an unusable budget, batch size or option."""


# ---- measuring ----------------------------------------------------------------------------------------


class VtaMeasurer:
    """Compiles and profiles configurations of one workload on one VTA config, by index into its space,
    and counts both. ``cache`` (index -> :class:`MeasureResult`) may be shared between measurers of the
    same workload and hardware: simulated results are deterministic, so a cached result is the result a
    fresh measurement would give (benchmarks fill it once exhaustively). Counts are per measurer."""

    def __init__(
        self, workload: Workload, hw: HwConfig, cache: dict[int, MeasureResult] | None = None
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

    def compile(self, index: int) -> CompileResult:
        """Compile only (counted in ``n_compiles``): the compile error or the hidden features."""
        self.n_compiles += 1
        cached = self.cache.get(int(index))
        if cached is not None:
            ok = cached.error_stage not in _COMPILE_STAGES
            return CompileResult(
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


# ---- run records --------------------------------------------------------------------------------------


@dataclass
class Event:
    """One compile or profile; ``latency`` in seconds (NaN unless a valid profile); rounds count from 0."""

    kind: str  # "compile" | "profile"
    index: int
    knobs: Knobs
    valid: bool
    error_kind: str | None
    error_stage: str | None
    latency: float
    round: int
    hidden_features: list[float] | None = None


@dataclass
class TuneRun:
    """Everything a tuning run did, in order."""

    method: str
    workload: str
    hw_id: str
    seed: int
    budget: int
    events: list[Event] = field(default_factory=list)

    @property
    def profiles(self) -> list[Event]:
        return [e for e in self.events if e.kind == "profile"]

    @property
    def latencies(self) -> list[float]:
        """Profile latencies in order (seconds; NaN for invalid ones), for ``tenset_tools.metrics``."""
        return [e.latency if e.valid else math.nan for e in self.profiles]

    @property
    def n_profiles(self) -> int:
        return len(self.profiles)

    @property
    def n_invalid_profiles(self) -> int:
        return sum(not e.valid for e in self.profiles)

    @property
    def n_compiles(self) -> int:
        return sum(e.kind == "compile" for e in self.events)

    @property
    def n_compile_failures(self) -> int:
        return sum(e.kind == "compile" and not e.valid for e in self.events)

    @property
    def best(self) -> Event | None:
        valid = [e for e in self.profiles if e.valid]
        return min(valid, key=lambda e: e.latency) if valid else None

    @property
    def best_latency(self) -> float:
        return self.best.latency if self.best else math.nan

    def write_log(self, path: str | Path) -> None:
        """JSON lines: a header, then one event per line."""
        with open(path, "w") as f:
            header = {k: v for k, v in asdict(self).items() if k != "events"}
            f.write(json.dumps({"format": "ml2tuner-log", "version": 1, **header}) + "\n")
            for event in self.events:
                f.write(json.dumps(asdict(event), default=float) + "\n")


def load_log(path: str | Path) -> tuple[dict, dict[int, MeasureResult]]:
    """Header and a result cache (index -> :class:`MeasureResult`) from a log's profiles, to pass to
    :class:`VtaMeasurer` when resuming a run."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines or lines[0].get("format") != "ml2tuner-log" or lines[0].get("version") != 1:
        raise TunerInputError(f"{path}: not an ml2tuner-log version 1 file")
    cache = {}
    for row in lines[1:]:
        if row["kind"] != "profile":
            continue
        cache[int(row["index"])] = MeasureResult(
            valid=row["valid"],
            error_kind=row["error_kind"],
            error_stage=row["error_stage"],
            error=row["error_kind"],
            cycles=None,
            latency=float(row["latency"]),
            latencies=[float(row["latency"])] if row["valid"] else [],
            visible_features=[],
            hidden_features=row["hidden_features"],
        )
    return lines[0], cache


# ---- search -------------------------------------------------------------------------------------------


def _indices(digits: np.ndarray, radices: np.ndarray) -> np.ndarray:
    """Mixed-radix digits (rows) -> space indices; the last knob varies fastest, as KnobSpace."""
    index = np.zeros(len(digits), dtype=np.int64)
    for column, radix in enumerate(radices):
        index = index * radix + digits[:, column]
    return index


def _digits(indices: np.ndarray, radices: np.ndarray) -> np.ndarray:
    digits = np.zeros((len(indices), len(radices)), dtype=np.int64)
    rest = np.asarray(indices, dtype=np.int64).copy()
    for column in range(len(radices) - 1, -1, -1):
        rest, digits[:, column] = np.divmod(rest, radices[column])
    return digits


def memoize(score: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """``score`` evaluated once per index (walkers revisit points; a model's prediction does not change
    within a round)."""
    known: dict[int, float] = {}

    def cached(points: np.ndarray) -> np.ndarray:
        new = np.unique([i for i in points.tolist() if i not in known]).astype(np.int64)
        if len(new):
            known.update(zip(new.tolist(), score(new).tolist(), strict=True))
        return np.array([known[i] for i in points.tolist()])

    return cached


def anneal(
    radices: np.ndarray,
    score: Callable[[np.ndarray], np.ndarray],
    n_best: int,
    exclude: set[int],
    rng: np.random.Generator,
    starts: list[int] | None = None,
    parallel: int = 128,
    steps: int = 80,
) -> list[int]:
    """Simulated annealing over a mixed-radix space (AutoTVM's proposal scheme): ``parallel`` walkers
    mutate one knob per step and accept by exp(delta / T), T falling linearly from 1 to 0; returns the
    ``n_best`` highest-scoring indices seen that are not in ``exclude``, best first."""
    size = int(np.prod(radices))
    points = rng.integers(0, size, size=parallel)
    if starts:
        points[: min(len(starts), parallel)] = starts[:parallel]
    current = score(points)
    seen: dict[int, float] = {}

    def remember(indices: np.ndarray, scores: np.ndarray) -> None:
        for i, s in zip(indices.tolist(), scores.tolist(), strict=True):
            if i not in exclude:
                seen[i] = s

    remember(points, current)
    mutable = np.flatnonzero(radices > 1)
    for step in range(steps):
        temperature = 1.0 - step / steps
        digits = _digits(points, radices)
        column = rng.choice(mutable, size=parallel)
        # A different value of the chosen knob: add 1..radix-1 modulo the radix.
        shift = rng.integers(1, radices[column])
        digits[np.arange(parallel), column] = (digits[np.arange(parallel), column] + shift) % radices[column]
        proposal = _indices(digits, radices)
        proposed = score(proposal)
        remember(proposal, proposed)
        accept = np.exp(np.minimum((proposed - current) / max(temperature, 1e-3), 0.0)) > rng.random(parallel)
        points = np.where(accept, proposal, points)
        current = np.where(accept, proposed, current)
    ranked = sorted(seen, key=lambda i: -seen[i])
    return ranked[:n_best]


# ---- tuners -------------------------------------------------------------------------------------------


def _throughput(latencies: np.ndarray) -> np.ndarray:
    """best latency / latency over the finite ones, 0 for invalid (NaN) ones."""
    finite = np.isfinite(latencies)
    if not finite.any():
        return np.zeros(len(latencies))
    return np.where(finite, np.nanmin(latencies) / np.where(finite, latencies, 1.0), 0.0)


class _Tuner:
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
        self.run = TuneRun(self.method, measurer.workload.name, measurer.hw.short_id(), self.seed, budget)
        self.profiled: dict[int, Event] = {}
        self.compiled: dict[int, Event] = {}
        self.progress = progress
        round_ = 0
        size = len(measurer.space)
        while self.run.n_profiles < budget and len(self.profiled) < size:
            self._round(round_, min(self.batch_size, budget - self.run.n_profiles))
            round_ += 1
        if log is not None:
            self.run.write_log(log)
        return self.run

    def _round(self, round_: int, n: int) -> None:
        raise NotImplementedError

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

    def _starts(self) -> list[int]:
        """Annealing starts: the best profiled configurations (AutoTVM restarts from its best points)."""
        valid = sorted((e for e in self.profiled.values() if e.valid), key=lambda e: e.latency)
        return [e.index for e in valid[: self.sa_parallel // 4]]


class BaselineTuner(_Tuner):
    """AutoTVM-like: XGBoost rank model on knob values + simulated annealing + epsilon-greedy batches.

    Parameters
    ----------
    batch_size:
        Profiles per round (the model is refitted after each round).
    epsilon:
        Share of each batch drawn at random (AutoTVM's XGBTuner explores with 0.05).
    seed, sa_parallel, sa_steps:
        Seed of the run; annealing walkers and steps per round.
    """

    method = "baseline"

    def __init__(
        self,
        batch_size: int = 16,
        epsilon: float = 0.05,
        seed: int = 0,
        sa_parallel: int = 128,
        sa_steps: int = 80,
    ) -> None:
        super().__init__(batch_size, seed, sa_parallel, sa_steps)
        self.epsilon = epsilon

    def _round(self, round_: int, n: int) -> None:
        visited = set(self.profiled)
        if round_ == 0:
            self._profile(self._random_unvisited(n, visited), round_)
            return
        indices = np.array(list(self.profiled), dtype=np.int64)
        latencies = np.array(
            [self.profiled[i].latency if self.profiled[i].valid else np.nan for i in indices]
        )
        model = PerformanceModel(objective="rank:pairwise", seed=self.seed + round_)
        model.fit(self.measurer.visible(indices)[:, _KNOB_COLUMNS], _throughput(latencies))

        def score(points: np.ndarray) -> np.ndarray:
            return model.predict(self.measurer.visible(points)[:, _KNOB_COLUMNS])

        n_random = int(self.rng.binomial(n, self.epsilon))
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
        picks = best + self._random_unvisited(n - len(best), visited | set(best))
        self._profile(picks, round_)


class ML2Tuner(_Tuner):
    """The multi-level tuner: V filters, P ranks the annealing proposals, the short list is compiled, A and
    V_h re-rank it, the top is profiled.

    Parameters
    ----------
    batch_size:
        Profiles per round.
    short_list:
        Configurations compiled per round, as a multiple of ``batch_size``.
    target_recall:
        Recall of valid configurations V's threshold aims at (see :class:`ValidityModel`).
    use_hidden_validity:
        Also filter the compiled short list with V_h (validity on visible + hidden features).
    seed, sa_parallel, sa_steps:
        Seed of the run; annealing walkers and steps per round.
    """

    method = "ml2tuner"

    def __init__(
        self,
        batch_size: int = 16,
        short_list: int = 4,
        target_recall: float = 0.98,
        use_hidden_validity: bool = True,
        seed: int = 0,
        sa_parallel: int = 128,
        sa_steps: int = 80,
    ) -> None:
        super().__init__(batch_size, seed, sa_parallel, sa_steps)
        if short_list < 1:
            raise TunerInputError(
                f"short_list must be at least 1 (a multiple of batch_size), got {short_list}"
            )
        self.short_list, self.target_recall = short_list, target_recall
        self.use_hidden_validity = use_hidden_validity

    def _compile(self, indices: list[int], round_: int) -> list[int]:
        """Compile the not yet compiled ones; returns those that compiled."""
        ok = []
        for index in indices:
            if index not in self.compiled:
                result = self.measurer.compile(index)
                event = self._event("compile", index, result, result.ok, math.nan, round_)
                self.run.events.append(event)
                self.compiled[int(index)] = event
            if self.compiled[index].valid:
                ok.append(index)
        return ok

    def _validity_data(self) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
        """Every configuration whose validity is known: profiled ones and compile failures."""
        known = {i: (e.valid, e.error_kind) for i, e in self.compiled.items() if not e.valid}
        known.update({i: (e.valid, e.error_kind) for i, e in self.profiled.items()})
        indices = np.array(list(known), dtype=np.int64)
        return indices, np.array([known[i][0] for i in indices]), [known[i][1] for i in indices]

    def _hidden(self, indices: list[int] | np.ndarray) -> np.ndarray:
        hidden = np.array([self.compiled[int(i)].hidden_features for i in indices], dtype=np.float32)
        return np.hstack([self.measurer.visible(indices), hidden])

    def _round(self, round_: int, n: int) -> None:
        visited = set(self.profiled)
        if round_ == 0:
            # No model yet: compile random configurations and profile the first n that compile.
            ok: list[int] = []
            tried: set[int] = set()
            while len(ok) < n and len(visited | tried) < len(self.measurer.space):
                picks = self._random_unvisited(n, visited | tried)
                tried.update(picks)
                ok += self._compile(picks, round_)
            self._profile(ok[:n], round_)
            return
        known, valid, kinds = self._validity_data()
        v = ValidityModel(target_recall=self.target_recall, seed=self.seed + round_)
        v.fit(self.measurer.visible(known), valid, kinds)
        good = [i for i, e in self.profiled.items() if e.valid]
        latencies = np.array([self.profiled[i].latency for i in good])
        p = a = None
        if good:
            p = PerformanceModel(seed=self.seed + round_).fit(
                self.measurer.visible(good), _throughput(latencies)
            )
            a = AdvancedModel(seed=self.seed + round_).fit(self._hidden(good), _throughput(latencies))

        def score(points: np.ndarray) -> np.ndarray:
            features = self.measurer.visible(points)
            base = p.predict(features) if p is not None else np.zeros(len(points))
            # Predicted-invalid configurations rank below every predicted-valid one.
            return np.where(v.predict(features), base, base - 10.0)

        exclude = visited | {i for i, e in self.compiled.items() if not e.valid}
        proposals = anneal(
            self.measurer.radices,
            memoize(score),
            self.short_list * n,
            exclude,
            self.rng,
            self._starts(),
            self.sa_parallel,
            self.sa_steps,
        )
        kept = v.predict(self.measurer.visible(proposals)) if proposals else np.zeros(0, dtype=bool)
        proposals = [i for i, keep in zip(proposals, kept, strict=True) if keep] or proposals
        compiled = self._compile(proposals, round_)
        if len(compiled) < n:  # too few survivors: top up with random compiled configurations
            compiled += self._compile(self._random_unvisited(2 * n, exclude | set(proposals)), round_)
        compiled = [i for i in dict.fromkeys(compiled) if i not in visited]
        if not compiled:
            self._profile(self._random_unvisited(n, visited), round_)
            return
        ranking = a.predict(self._hidden(compiled)) if a is not None else np.zeros(len(compiled))
        if self.use_hidden_validity:
            ranking = ranking - 10.0 * ~self._hidden_validity(compiled)
        order = np.argsort(-ranking, kind="stable")
        self._profile([compiled[j] for j in order[:n]], round_)

    def _hidden_validity(self, candidates: list[int]) -> np.ndarray:
        """V_h: run-time validity of compiled configurations from visible + hidden features."""
        rows = list(self.profiled)
        labels = np.array([self.profiled[i].valid for i in rows])
        if labels.all() or not labels.any():
            return np.full(len(candidates), bool(labels.all()) if len(labels) else True)
        vh = ValidityModel(target_recall=self.target_recall, seed=self.seed + 7)
        vh.fit(self._hidden(rows), labels)
        return vh.predict(self._hidden(candidates))


def make_tuner(method: str, **options) -> _Tuner:
    """``baseline`` or ``ml2tuner`` with the given constructor options."""
    if method == "baseline":
        return BaselineTuner(**options)
    if method == "ml2tuner":
        return ML2Tuner(**options)
    raise TunerInputError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
