"""Where a compiled network's time goes: every function the Relax VM calls, timed inside the network run.

Each function is timed twice. *In the network* means as the network calls it, with the caches as the
functions before it left them: a layer's weights usually come from memory. *Warm* means called again
back to back, right before that call, as MetaSchedule's runner times a task on its own. The tuned
record's measured latency is listed beside them when the function is a tuned task. A network that runs
far slower than the sum of its tuned records shows here which functions lose the time: a function much
slower in the network than warm is limited by memory traffic the runner never sees; a function without
a record runs TVM's default lowering.

The times come from the VM's instrument hook (``VirtualMachine.set_instrument``). Every call's time
includes the hook's own overhead, a few microseconds. Each call keeps its fastest time over the runs.
The network's latency is timed without the hook.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from tenset_tools.metaschedule import mean_run_seconds

__all__ = [
    "VM_BUILTINS",
    "FunctionTime",
    "NetworkProfile",
    "function_times",
    "profile_vm",
    "task_functions",
    "tuned_latencies",
]

#: The name under which the VM's own calls (allocation, shape checks, reshape views) are summed.
VM_BUILTINS = "(VM builtins)"
_BUILTIN_PREFIXES = ("vm.", "relax.")


@dataclass(frozen=True)
class FunctionTime:
    """One function of a network run, in seconds per network call.

    ``network_seconds``: the sum over its calls of each call's fastest time in the network.
    ``warm_seconds``: the same sum for the calls timed back to back (``None`` for :data:`VM_BUILTINS`,
    never timed warm: they allocate). ``tuned_seconds``: the tuned record's mean latency times
    ``calls``, or ``None`` when the function has no record."""

    name: str
    calls: int
    network_seconds: float
    warm_seconds: float | None = None
    tuned_seconds: float | None = None


@dataclass
class NetworkProfile:
    """A network run, function by function. ``latency_seconds``: the fastest call of the network without
    the instrument hook. ``functions``: the functions by time in the network, slowest first."""

    latency_seconds: float
    functions: list[FunctionTime] = field(default_factory=list)

    @property
    def function_seconds(self) -> float:
        """The sum of every function's time in the network (seconds)."""
        return sum(f.network_seconds for f in self.functions)

    @property
    def tuned_sum_seconds(self) -> float:
        """The sum of the tuned records' latencies over the functions that have one (seconds)."""
        return sum(f.tuned_seconds for f in self.functions if f.tuned_seconds is not None)

    def table(self, top: int = 15) -> str:
        """The ``top`` slowest functions and the totals, as a text table (times in ms)."""
        lines = [
            f"{'function':<56} {'calls':>5} {'network':>9} {'warm':>9} {'tuned':>9} {'share':>6}",
        ]
        total = self.function_seconds or 1.0
        for f in self.functions[:top]:
            lines.append(
                f"{_short(f.name):<56} {f.calls:>5} {_ms(f.network_seconds):>9} {_ms(f.warm_seconds):>9} "
                f"{_ms(f.tuned_seconds):>9} {100 * f.network_seconds / total:5.1f}%"
            )
        if len(self.functions) > top:
            rest = self.functions[top:]
            lines.append(
                f"{f'({len(rest)} more functions)':<56} {sum(f.calls for f in rest):>5} "
                f"{_ms(sum(f.network_seconds for f in rest)):>9}"
            )
        tuned = [f for f in self.functions if f.tuned_seconds is not None]
        kernels = [f for f in self.functions if f.name != VM_BUILTINS]
        warm = sum(f.warm_seconds for f in kernels)
        lines += [
            f"network latency {_ms(self.latency_seconds)} ms; its functions {_ms(self.function_seconds)} ms "
            f"in the network, {_ms(warm)} ms warm",
            f"{len(tuned)} of {len(kernels)} functions tuned: {_ms(self.tuned_sum_seconds)} ms by "
            f"their records, {_ms(sum(f.network_seconds for f in tuned))} ms in the network",
        ]
        return "\n".join(lines)


def profile_vm(
    call: Callable[[], object],
    set_instrument: Callable[[Callable | None], None],
    *,
    tuned_seconds: Mapping[str, float] | None = None,
    runs: int = 5,
    warm_calls: int = 3,
) -> NetworkProfile:
    """Profile one network function of a Relax VM (see the module docstring).

    ``call`` runs the network once (e.g. ``lambda: vm["main"](*inputs)``); ``set_instrument`` is the VM's
    ``set_instrument``. ``tuned_seconds``: each tuned function's measured latency by name (seconds), as
    :func:`tuned_latencies` gives it. ``runs``: network runs timed with the hook (each call keeps its
    fastest) and without it; ``warm_calls``: back-to-back calls before each call of the warm run, the
    fastest kept. Call it in the thread pool the network is timed with
    (:func:`tvm_transfer.runtimes.tvm_threads`). Raises ``ValueError`` for ``runs`` or ``warm_calls``
    below 1."""
    if runs < 1 or warm_calls < 1:
        raise ValueError(f"runs and warm_calls must be at least 1, got {runs} and {warm_calls}")
    call()  # the pooled allocator's first allocations, page faults of the weights
    latency = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        call()
        latency = min(latency, time.perf_counter() - start)
    network = _instrumented_runs(call, set_instrument, runs)
    warm = _warm_run(call, set_instrument, warm_calls)
    if [name for name, _ in warm] != [name for name, _ in network]:
        raise RuntimeError("the network called other functions in its warm run: not profiled")
    return NetworkProfile(latency, _by_function(network, warm, tuned_seconds or {}))


def function_times(
    call: Callable[[], object], set_instrument: Callable[[Callable | None], None]
) -> dict[str, FunctionTime]:
    """Every function of one network run (``call``, with the VM's ``set_instrument``) with its calls and
    their summed time in the network (``network_seconds``, seconds per network call), by name; the VM
    builtins summed as :data:`VM_BUILTINS`. Call it in the thread pool the network is timed with."""
    totals = _summed(_instrumented_runs(call, set_instrument, 1))
    return {name: FunctionTime(name, calls, seconds) for name, (calls, seconds) in totals.items()}


def task_functions(fused: tvm.IRModule) -> Iterator[tuple[tuple[str, str], tvm.IRModule]]:
    """Every function of ``fused`` (the module tasks are extracted from,
    :func:`tvm_transfer.networks.fused_for_extraction`) as the task module a tuning database keys it by,
    with the two names the compiled network may call it by: its own and, once a schedule's weight layout
    rewrite is split off (``SplitLayoutRewritePreproc``), ``<name>_prepacked``."""
    for global_var, func in fused.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            names = (global_var.name_hint, f"{global_var.name_hint}_prepacked")
            yield names, tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def tuned_latencies(
    fused: tvm.IRModule, database: ms.database.Database, target: tvm.target.Target
) -> dict[str, float]:
    """The mean measured latency (seconds) of the best record of each function of ``fused`` (the module
    tasks are extracted from, :func:`tvm_transfer.networks.fused_for_extraction`) that ``database`` holds
    for ``target``, by function name: every function of a task, not only the one it was named after."""
    latencies: dict[str, float] = {}
    for names, task in task_functions(fused):
        record = database.query_tuning_record(task, target, "main")
        seconds = mean_run_seconds(record.run_secs) if record is not None else math.inf
        if math.isfinite(seconds):
            latencies |= dict.fromkeys(names, seconds)
    return latencies


def _instrumented_runs(
    call: Callable[[], object], set_instrument: Callable, runs: int
) -> list[tuple[str, float]]:
    """Every call of one network run as (name, fastest time over ``runs`` runs), in call order."""
    calls: list[tuple[str, float]] = []
    started = [0.0]

    def hook(_func, name: str, before: bool, _ret, *_args) -> int:
        now = time.perf_counter()
        if before:
            started[0] = now
        else:
            calls.append((name, now - started[0]))
        return 0

    fastest: list[float] | None = None
    names: list[str] = []
    set_instrument(hook)
    try:
        for _ in range(runs):
            calls.clear()
            call()
            names = [name for name, _ in calls]
            seconds = [s for _, s in calls]
            fastest = seconds if fastest is None else list(np.minimum(fastest, seconds))
    finally:
        set_instrument(None)
    return list(zip(names, fastest or [], strict=True))


def _warm_run(
    call: Callable[[], object], set_instrument: Callable, warm_calls: int
) -> list[tuple[str, float]]:
    """Every call of one network run as (name, fastest of ``warm_calls`` back-to-back calls made right
    before it; NaN for a VM builtin), in call order."""
    calls: list[tuple[str, float]] = []

    def hook(func, name: str, before: bool, _ret, *args) -> int:
        if not before:
            return 0
        if name.startswith(_BUILTIN_PREFIXES):
            calls.append((name, float("nan")))
            return 0
        fastest = float("inf")
        for _ in range(warm_calls):
            start = time.perf_counter()
            func(*args)
            fastest = min(fastest, time.perf_counter() - start)
        calls.append((name, fastest))
        return 0

    set_instrument(hook)
    try:
        call()
    finally:
        set_instrument(None)
    return calls


def _by_function(
    network: Sequence[tuple[str, float]], warm: Sequence[tuple[str, float]], tuned: Mapping[str, float]
) -> list[FunctionTime]:
    """Calls summed per function (the VM builtins as one), slowest in the network first."""
    warm_totals = _summed(warm)
    functions = [
        FunctionTime(
            name=name,
            calls=calls,
            network_seconds=seconds,
            warm_seconds=None if name == VM_BUILTINS else warm_totals[name][1],
            tuned_seconds=tuned[name] * calls if name in tuned else None,
        )
        for name, (calls, seconds) in _summed(network).items()
    ]
    return sorted(functions, key=lambda f: -f.network_seconds)


def _summed(calls: Sequence[tuple[str, float]]) -> dict[str, tuple[int, float]]:
    """``(name, seconds)`` calls as ``{name: (calls, summed seconds)}``, the VM builtins as one name."""
    totals: dict[str, tuple[int, float]] = {}
    for name, seconds in calls:
        key = VM_BUILTINS if name.startswith(_BUILTIN_PREFIXES) else name
        count, total = totals.get(key, (0, 0.0))
        totals[key] = (count + 1, total + seconds)
    return totals


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.3f}"


def _short(name: str, width: int = 56) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"
