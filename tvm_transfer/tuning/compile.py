"""Compiling a network with its tuned schedules, checked against PyTorch (or ONNX Runtime for an ONNX
model) and timed side by side with the runtimes users compare against."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from tvm_transfer.networks import relax_module
from tvm_transfer.runner import network_threads
from tvm_transfer.runtimes import (
    RUNTIMES,
    ComparedModel,
    RuntimeResult,
    compare_runtimes,
    format_results,
    tvm_threads,
)
from tvm_transfer.tuning.build import LoadedNetwork, build_network
from tvm_transfer.tuning.network_profile import NetworkProfile, profile_vm, tuned_latencies
from tvm_transfer.tuning.repick import DEFAULT_REPICK, Repick, repick, resolve_repick_mode
from tvm_transfer.tuning.run import NetworkRun, RunConfig

#: The comparison runtimes timed by default beside TVM (keys of :data:`tvm_transfer.runtimes.RUNTIMES`).
DEFAULT_RUNTIMES = tuple(RUNTIMES)


@dataclass
class CompileResult:
    """A network built with a tuned database: each runtime's latency (seconds, fastest of interleaved
    rounds) and error against the reference output, TVM's first."""

    name: str
    target: str
    threads: int
    results: list[RuntimeResult]
    tuned_tasks: tuple[int, int]  # tasks with a tuned schedule, all tasks
    build_seconds: float
    layout_free: bool = True
    profile: NetworkProfile | None = None
    repicked: list[Repick] | None = None  # None: built from the best records as measured
    repick_mode: str = "none"  # how the schedules were re-picked (tvm_transfer.tuning.repick.REPICK_MODES)

    @property
    def tvm(self) -> RuntimeResult:
        """TVM's row."""
        return self.results[0]

    @property
    def max_abs_error(self) -> float | None:
        """TVM's largest absolute difference from the reference output: ``inf`` when TVM failed, ``None``
        when there was nothing to compare with (no PyTorch module and no ONNX Runtime)."""
        return self.tvm.max_abs_error if self.tvm.ok else float("inf")

    def table(self) -> str:
        """A plain-text table: per runtime its latency, its time relative to TVM's, and its error."""
        heading = (
            f"{self.name} on {self.target}, {self.threads} thread(s); {self.tuned_tasks[0]} of "
            f"{self.tuned_tasks[1]} tasks tuned, built in {self.build_seconds:.1f} s"
        )
        lines = [heading, format_results(self.results, relative_to="TVM")]
        if self.repicked:
            changed = [r for r in self.repicked if r.rank > 0]
            moves = [f"{r.task} {r.best_record_seconds * 1e3:.4g} -> {r.seconds * 1e3:.4g}" for r in changed]
            how = "in the network" if self.repick_mode == "network" else f"together, {self.repick_mode}"
            lines.append(
                f"re-picked the schedules of the {len(self.repicked)} heaviest tasks by re-timing their top "
                f"records {how}: {len(changed)} changed (ms)" + "".join(f"; {move}" for move in moves)
            )
        if self.profile is not None:
            lines += ["", "TVM, function by function (ms per network call):", self.profile.table()]
        return "\n".join(lines)


def compile_network(
    run: RunConfig | NetworkRun,
    *,
    runtimes: Sequence[str] = DEFAULT_RUNTIMES,
    rounds: int = 5,
    profile: bool = False,
    repick_mode: str = DEFAULT_REPICK,
) -> CompileResult:
    """Build a network run's model (a :class:`~tvm_transfer.tuning.run.RunConfig`, prepared here, or a
    :class:`~tvm_transfer.tuning.run.NetworkRun` already prepared, e.g. the one that tuned it) with the
    schedules in its work dir, check its output, and time it against ``runtimes`` (any of
    :data:`DEFAULT_RUNTIMES`) on the same inputs and as many threads as the target has cores, in
    ``rounds`` interleaved rounds (the fastest round of each is kept).

    A run prepared here applies its plan's transfer pack first (the caller holds the work dir's lock).
    With ``profile``, the result also says where TVM's time goes, function by function
    (:func:`~tvm_transfer.tuning.network_profile.profile_vm`). ``repick_mode`` (one of
    :data:`~tvm_transfer.tuning.repick.REPICK_MODES`) says how the heaviest tasks' schedules are chosen
    among their top records, re-timed together, rather than as the one record timed fastest once
    (:func:`~tvm_transfer.tuning.repick.repick`; ``none``: the best records as measured; ``auto`` is resolved
    for this network and machine, :func:`~tvm_transfer.tuning.repick.resolve_repick_mode`, and the result
    holds the mode it stood for). Raises :class:`~tvm_transfer.tuning.workdir.WorkDirMismatchError` (a
    ``ValueError``) when the work dir was tuned with other settings or for another target."""
    run = run if isinstance(run, NetworkRun) else NetworkRun(run)
    config, tasks = run.config, run.tasks
    model, target, layout_free = config.model, config.target, config.layout_free
    threads = network_threads(target)
    mod = relax_module(model)
    database = config.work_dir.database()
    found = sum(database.query_tuning_record(t.dispatched[0], target, "main") is not None for t in tasks)
    repick_mode = resolve_repick_mode(repick_mode, mod)
    database, repicked = repick(repick_mode, database, tasks, target, mod, model.inputs, layout_free)
    # Building runs TVM code (the weight pre-packing): the thread pool must be sized before that.
    with tvm_threads(threads):
        start = time.perf_counter()
        executable = build_network(mod, database, target, layout_free)
        build_seconds = time.perf_counter() - start
        network = LoadedNetwork(executable, model.inputs)
        results = compare_runtimes(
            ComparedModel(model.name, model.inputs, model.torch_module, model.onnx_path, threads),
            {"TVM": network.outputs},
            runtimes=runtimes,
            rounds=rounds,
        )
        network_profile = None
        if profile:
            network_profile = profile_vm(
                network,
                network.vm.set_instrument,
                tuned_seconds=tuned_latencies(run.fused_module, database, target),
            )
    return CompileResult(
        name=model.name,
        target=str(target),
        threads=threads,
        results=results,
        tuned_tasks=(found, len(tasks)),
        build_seconds=build_seconds,
        layout_free=layout_free,
        profile=network_profile,
        repicked=repicked,
        repick_mode=repick_mode,
    )
