"""Collect a TenSet-style dataset on this machine: tune the tasks of real networks on several CPU targets.

The budget (measurements) is spread evenly over the (network, target) pairs. Each pair keeps its own
MetaSchedule work dir (``<work_dir>/<network>__<mcpu>-<cores>c``) with a sidecar naming the network and
the task weights, so re-running the same command measures only what is missing. The tuning loop is
:func:`tvm_transfer.tuning.network.tune_network`; at the end every work dir is converted to one Parquet
file with :func:`tenset_tools.metaschedule.convert_databases`.

Measurements run locally (the runner's programs limited to the target's core count) or, with ``rpc``,
on devices registered with a TVM RPC tracker under a device key (``ms.runner.RPCRunner``).

:func:`add_store_features` fills the per-store feature rows of records collected before the dataset
schema had them, by replaying each record's trace on its task extracted again from its network.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import tvm
from tqdm.auto import tqdm
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import shash2hex

from tenset_tools.ansor import LoadStats
from tenset_tools.features import KernelFeatureExtractor, pool_per_store
from tenset_tools.features.context import feature_context
from tenset_tools.flops import estimate_flops
from tenset_tools.metaschedule import (
    convert_databases,
    find_databases,
)
from tvm_transfer.networks import model_slug
from tvm_transfer.runner import evaluator_config, shared_builder, shared_local_runner
from tvm_transfer.target import host_core_count, host_cpu_name, host_target, target_of_id
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.run import NetworkRun, RunConfig, extract_network_tasks
from tvm_transfer.tuning.session import Measurement, TuneOptions
from tvm_transfer.tuning.workdir import WorkDir, count_records


@dataclass(frozen=True)
class CpuTarget:
    """A CPU target as hardware: LLVM CPU name (vector ISA) and number of cores."""

    mcpu: str
    num_cores: int

    @property
    def name(self) -> str:
        """``MCPU-CORESc``, the suffix of the target's work dirs."""
        return f"{self.mcpu}-{self.num_cores}c"

    def target(self) -> tvm.target.Target:
        """The LLVM target of this CPU and core count."""
        return host_target(mcpu=self.mcpu, num_cores=self.num_cores)


def parse_targets(spec: str) -> list[CpuTarget]:
    """Parse ``"mcpu:cores,mcpu:cores,..."`` (e.g. ``"znver4:2,x86-64-v3:1"``); the mcpu ``host`` is this
    machine's CPU (as LLVM names it)."""
    targets = []
    for item in spec.split(","):
        mcpu, sep, cores = item.strip().partition(":")
        if not mcpu or not sep or not cores.isdigit() or int(cores) < 1:
            raise ValueError(f"target {item!r} is not MCPU:CORES (e.g. x86-64-v3:2, host:2)")
        targets.append(CpuTarget(host_cpu_name() if mcpu == "host" else mcpu, int(cores)))
    return targets


def default_targets() -> list[CpuTarget]:
    """The host CPU with all its cores, and AVX2-only ``x86-64-v3`` on one core."""
    return [CpuTarget(host_cpu_name(), host_core_count()), CpuTarget("x86-64-v3", 1)]


@dataclass(frozen=True)
class Job:
    """One (network, target) pair of a collection and its share of the budget (measurements)."""

    network: str
    target: CpuTarget
    work_dir: Path
    trials: int

    def measured(self) -> int:
        """Records already in the work dir's database (corrupt lines included: this only plans work)."""
        return count_records(self.work_dir)


def plan(networks: Sequence[str], targets: Sequence[CpuTarget], budget: int, work_dir: Path) -> list[Job]:
    """Spread ``budget`` measurements evenly over every (network, target) pair (the first pairs take
    the remainder)."""
    pairs = [(network, target) for network in networks for target in targets]
    share, remainder = divmod(budget, len(pairs))
    return [
        Job(network, target, work_dir / f"{model_slug(network)}__{target.name}", share + (i < remainder))
        for i, (network, target) in enumerate(pairs)
    ]


def rpc_runner(address: str, device_key: str, session_timeout_sec: int = 60) -> ms.runner.RPCRunner:
    """A runner that measures on devices registered as ``device_key`` with the tracker at ``HOST:PORT``."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--rpc {address!r} is not HOST:PORT")
    config = ms.runner.RPCConfig(
        tracker_host=host,
        tracker_port=int(port),
        tracker_key=device_key,
        session_timeout_sec=session_timeout_sec,
    )
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator_config(), max_workers=1)


def run_job(
    job: Job,
    options: TuneOptions,
    cost_model: str,
    measure: Measurement,
    all_tasks: bool = False,
) -> int:
    """Tune one (network, target) pair up to its share; returns the number of new measurements.

    Writes the sidecar first (network name, every task's weight) so that an interrupted run converts
    with its weights. Without ``all_tasks``, tasks of zero FLOPs (reshape, transpose, slicing) are
    skipped (and tasks whose FLOPs TVM cannot estimate): their schedules barely vary, and MetaSchedule's
    scheduler would give each a batch.
    """
    work_dir = WorkDir(job.work_dir)
    config = RunConfig.make(
        job.network,
        work_dir,
        target=job.target.target(),
        options=dataclasses.replace(options, trials=job.trials),
        plan=TuningPlan(cost_model=cost_model),
    )
    tasks = extract_network_tasks(config.model, config.target)
    work_dir.name_tasks(job.network, tasks)
    selected = tasks if all_tasks else [t for t in tasks if estimate_flops(t.dispatched[0]) > 0]
    with work_dir.lock():
        result = tune_network(NetworkRun(config, tasks=selected), measure=measure)
    return result.new_trials


@dataclass
class CollectResult:
    """What a collection did: the jobs, the measurements this run made, and the load stats of the
    conversion (``None`` without an output file)."""

    jobs: list[Job]
    new_measurements: int
    stats: LoadStats | None


def collect(
    networks: Sequence[str],
    targets: Sequence[CpuTarget],
    budget: int,
    work_dir: str | Path,
    out_file: str | Path | None = None,
    *,
    options: TuneOptions | None = None,
    cost_model: str = "tvm-random",
    rpc: tuple[str, str] | None = None,
    all_tasks: bool = False,
    progress: bool = True,
) -> CollectResult:
    """Measure up to ``budget`` candidates over ``networks`` x ``targets`` (resuming what ``work_dir``
    holds), then convert all work dirs to ``out_file``.

    ``cost_model`` guides the search (default ``tvm-random``: TenSet-like random sampling plus mutations
    of the best measured programs, and no model cost per trial). ``rpc`` = ``(HOST:PORT, device key)``
    measures through a TVM RPC tracker instead of locally.
    """
    options = options or TuneOptions(trials_per_iter=8, population_size=64)
    jobs = plan(networks, targets, budget, Path(work_dir))
    missing = {job: max(job.trials - job.measured(), 0) for job in jobs}
    builder = shared_builder()
    bar = tqdm(total=sum(missing.values()), unit="measurement", desc="collect", disable=not progress)
    new = 0
    try:
        for job in jobs:
            if not missing[job]:
                continue
            bar.set_description(f"collect {job.network} on {job.target.name}")
            runner = rpc_runner(*rpc) if rpc else shared_local_runner(num_threads=job.target.num_cores)
            try:
                new += run_job(job, options, cost_model, Measurement(builder, runner, bar), all_tasks)
            finally:
                if rpc:  # its worker processes would otherwise outlive this call (and the process)
                    runner.pool.shutdown()
    finally:
        bar.close()
    measured = [job.work_dir for job in jobs if find_databases(job.work_dir)]
    stats = convert_databases(measured, out_file) if out_file and measured else None
    return CollectResult(jobs, new, stats)


@dataclass
class StoreFeatureReport:
    """What :func:`add_store_features` did: records filled, and records left without per-store rows
    (``unreplayable``: the trace fails on its task, or their task is not among the network's;
    ``mismatched``: the rows pool to other values than the record's ``kernel_features``)."""

    filled: int = 0
    unreplayable: int = 0
    mismatched: int = 0


def add_store_features(
    frame: pd.DataFrame, num_threads: int = 1, progress: bool = True
) -> tuple[pd.DataFrame, StoreFeatureReport]:
    """A copy of a dataset frame collected from networks of :func:`tvm_transfer.networks.load_model`
    (``tenset-tools collect``) with ``store_features`` filled where it is missing, for files written
    before the schema had that column (version 1) whose work dirs are gone.

    Each (network, target) pair's tasks are extracted again for the record's target (``llvm/MCPU/CORES``),
    each record's trace is replayed on its task and lowered, and the per-store rows are kept only where
    they pool to the record's ``kernel_features`` (a check that the replay is the measured program).
    Records that cannot be replayed or do not check out stay without rows and are counted in the report.
    """
    result = frame.copy()
    if "store_features" not in result:
        result["store_features"] = None
    stores = list(result["store_features"])
    report = StoreFeatureReport()
    missing = result[result["store_features"].isna() & (result["candidate_kind"] == "ms_trace")]
    bar = tqdm(total=len(missing), unit="record", desc="store features", disable=not progress)
    extractor = KernelFeatureExtractor()
    for (network, tid), records in missing.groupby(["network", "target_id"], sort=False):
        target = target_of_id(tid)
        # Records from before weights were marked layout-free have the unmarked tasks: look up both.
        tasks = {
            shash2hex(t.dispatched[0]): t.dispatched[0]
            for layout_free in (True, False)
            for t in extract_network_tasks(network, target, layout_free)
        }
        for key, group in records.groupby("workload_key", sort=False):
            mod = tasks.get(json.loads(key)[0])
            rows = _replayed_store_rows(mod, group, target, extractor, num_threads) if mod else {}
            for position, kernel in zip(group.index, group["kernel_features"], strict=True):
                matrix = rows.get(position)
                if matrix is None:
                    report.unreplayable += 1
                elif not np.allclose(pool_per_store([matrix])[0], kernel, rtol=1e-5, atol=1e-5):
                    report.mismatched += 1
                else:
                    stores[result.index.get_loc(position)] = matrix
                    report.filled += 1
            bar.update(len(group))
    bar.close()
    result["store_features"] = stores
    return result, report


def _replayed_store_rows(
    mod: tvm.IRModule,
    records: pd.DataFrame,
    target: tvm.target.Target,
    extractor: KernelFeatureExtractor,
    num_threads: int,
) -> dict:
    """Per-store rows of each record (frame index -> matrix) whose trace replays on ``mod``."""
    args_info = ms.arg_info.ArgInfo.from_entry_func(mod, remove_preproc=True)
    candidates, positions = [], []
    for position, candidate in zip(records.index, records["candidate"], strict=True):
        schedule = tvm.s_tir.Schedule(mod)
        try:
            tvm.s_tir.schedule.Trace.apply_json_to_schedule(json.loads(candidate), schedule)
        except Exception:  # JSON or TVM errors alike: the record cannot be replayed
            continue
        candidates.append(ms.MeasureCandidate(schedule, args_info))
        positions.append(position)
    if not candidates:
        return {}
    context = feature_context(mod, target, num_threads)
    return dict(zip(positions, extractor.per_store(context, candidates), strict=True))
