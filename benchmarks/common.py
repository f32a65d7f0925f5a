"""What every benchmark records: the machine, the commit, and where the results go
(``benchmarks/results/<system>/<name>.{json,md,png}``)."""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scipy.stats import gmean

from tenset_tools.atomic import atomic_write_text

if TYPE_CHECKING:
    import tvm

log = logging.getLogger(__name__)

RESULTS = Path(__file__).parent / "results"
_PROC_STAT = Path("/proc/stat")


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive ``values`` (ratios, latencies): the mean of ratios that is symmetric in
    faster and slower."""
    return float(gmean(values))


def machine_info() -> dict:
    """CPU model, usable cores and Python version of this machine."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": model or platform.processor(), "cores": cores, "python": platform.python_version()}


def target_context(target: tvm.target.Target) -> dict:
    """What a report records about where it ran: the TVM target (its string and the target id records are
    keyed by) and :func:`machine_info`."""
    from tvm_transfer.target import target_id  # lazily: benchmarks without TVM import this module too

    return {"target": str(target), "target_id": target_id(target), "machine": machine_info()}


class StolenCpu:
    """Context manager: after the block, ``share`` is the fraction (0-1) of this machine's CPU time that
    the hypervisor gave other guests while the block ran; ``None`` where the kernel does not count it.
    On a shared host a timing run with a large share ran slow; a benchmark records it beside its times."""

    def __init__(self) -> None:
        self.share: float | None = None
        self._start: tuple[int, int] | None = None

    def __enter__(self) -> StolenCpu:
        self._start = _steal_and_total_ticks()
        return self

    def __exit__(self, *exc_info: object) -> None:
        end = _steal_and_total_ticks()
        if self._start is not None and end is not None and end[1] > self._start[1]:
            self.share = (end[0] - self._start[0]) / (end[1] - self._start[1])


def _steal_and_total_ticks() -> tuple[int, int] | None:
    """Stolen and total CPU ticks of all CPUs since boot (``/proc/stat``), or ``None`` without them."""
    try:
        first = _PROC_STAT.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal (guest time is already counted in user and nice)
    if len(first) < 9 or first[0] != "cpu":
        return None
    ticks = [int(field) for field in first[1:9]]
    return ticks[7], sum(ticks)


def checkout_commit(directory: Path) -> str:
    """The HEAD commit of the git checkout holding ``directory``, with ``-dirty`` when tracked files have
    uncommitted changes (``unknown`` outside a checkout)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=directory)
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD") or "unknown"
    return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


# Read once, when the benchmark's code is loaded: a run of hours must record the code it ran, not the
# commit checked out when it finishes, nor "-dirty" for the report files it rewrote itself.
_LOADED_COMMIT = checkout_commit(Path(__file__).parent)


def git_commit(short: bool = False) -> str:
    """The commit whose code this benchmark process runs (read when it started; ``-dirty`` when tracked
    files had uncommitted changes then); ``short`` abbreviates the hash to 12 digits (the suffix stays)."""
    commit = _LOADED_COMMIT.removesuffix("-dirty")
    return commit[: 12 if short else None] + _LOADED_COMMIT[len(commit) :]


def report_path(system: str, name: str, suffix: str, quick: bool = False) -> Path:
    """``results/<system>/<name><suffix>`` (the folder is created), e.g. ``("copula", "copula_vta", ".png")``.

    Quick (smoke) runs get ``<name>_quick<suffix>``, which git ignores, so that they never overwrite the
    full results that the documentation quotes.
    """
    folder = RESULTS / system
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}{'_quick' if quick else ''}{suffix}"


def write_report(system: str, name: str, report: dict, markdown: str, quick: bool = False) -> None:
    """Write ``results/<system>/<name>.json`` and ``.md`` (see :func:`report_path`) and print the Markdown."""
    atomic_write_text(
        report_path(system, name, ".json", quick), json.dumps(report, indent=2, default=float) + "\n"
    )
    atomic_write_text(report_path(system, name, ".md", quick), markdown)
    print(markdown)


def network_axes(networks: list[str], width: float = 4.4, height: float = 3.7):
    """A matplotlib figure with one panel per network, side by side (headless): ``(figure, axes)``, each
    panel titled with its network."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(networks), figsize=(width * len(networks), height), squeeze=False)
    for ax, network in zip(axes[0], networks, strict=True):
        ax.set_title(network, fontsize=9)
    return fig, list(axes[0])


def save_figure(fig: Any, system: str, name: str, quick: bool = False) -> None:
    """Lay out ``fig`` and write it to ``results/<system>/<name>.png`` (see :func:`report_path`), whole or
    not at all."""
    fig.tight_layout()
    path = report_path(system, name, ".png", quick)
    partial = path.with_suffix(".tmp.png")
    fig.savefig(partial, dpi=110)
    partial.replace(path)


def records_in_order(work_dir: Path) -> list[tuple[Any, float]]:
    """``(schedule module, mean seconds as the run measured it)`` of a MetaSchedule work dir's records, in
    measurement order (the record file is append-only); corrupt lines are skipped with a warning."""
    from tenset_tools.ansor.records import LoadStats
    from tenset_tools.metaschedule import iter_database_records, mean_run_seconds

    return [
        (record.as_measure_candidate().sch.mod, mean_run_seconds(record.run_secs))
        for _, record, _, _ in iter_database_records(work_dir, LoadStats())
    ]


def first_generation(workload: Any, target: Any, count: int, seed: int = 0) -> tuple[Any, list]:
    """A tuning context of ``workload`` on ``target`` and ``count`` schedules of its design space, as the
    evolutionary search samples its initial population (what a cost model scores first)."""
    from tvm.s_tir import meta_schedule as ms

    from tvm_transfer.search_strategy.copula.population import initial_population

    context = ms.TuneContext(
        mod=workload.ir_module(),
        target=target,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.EvolutionarySearch(population_size=count),
        task_name=workload.name,
        rand_state=seed + 1,
        num_threads=int(target.attrs.get("num-cores", 0)) or "physical",
    )
    return context, initial_population(context, count)


def tuned_alone(model: Any, work_dir: Path, trials: int, target: Any) -> None:
    """``work_dir`` tuned by TVM alone (MetaSchedule's ``XGBModel``, evolutionary search, seed 0) to
    ``trials`` for ``model`` (a loaded model, its Relax module as the study imports it); resumes, and
    returns at once when the work dir already holds ``trials``."""
    from tvm_transfer.tuning.network import tune_network
    from tvm_transfer.tuning.plan import TuningPlan
    from tvm_transfer.tuning.rounds import read_rounds
    from tvm_transfer.tuning.run import RunConfig
    from tvm_transfer.tuning.session import TuneOptions

    rounds = read_rounds(work_dir)
    if rounds and rounds[-1]["trials"] >= trials:
        return
    print(f"== {model.name}: tuning to {trials} trials in {work_dir}", flush=True)
    options = TuneOptions(trials=trials, seed=0, progress=True)
    plan = TuningPlan(cost_model="tvm-xgb")
    tune_network(RunConfig.make(model, work_dir, target=target, options=options, plan=plan))


def timing_runs(
    models: dict[str, Any], databases: dict[str, Any], target: Any, runs: int, rounds: int
) -> list:
    """Each of ``models`` (builds of one network by label; loaded models with their Relax modules) built
    with its ``databases`` entry and timed with ONNX Runtime in ``rounds`` interleaved rounds, ``runs``
    times: per run the time it finished, the CPU share the hypervisor stole, ms and max abs error by
    runtime."""
    import time

    from tvm_transfer.networks import relax_module
    from tvm_transfer.runner import network_threads
    from tvm_transfer.runtimes import ComparedModel, compare_runtimes, tvm_threads
    from tvm_transfer.tuning.build import LoadedNetwork, build_network

    first = next(iter(models.values()))
    threads = network_threads(target)
    out = []
    with tvm_threads(threads):
        calls = {
            label: LoadedNetwork(build_network(relax_module(m), databases[label], target), m.inputs).outputs
            for label, m in models.items()
        }
        compared = ComparedModel(first.name, first.inputs, first.torch_module, first.onnx_path, threads)
        for _ in range(runs):
            with StolenCpu() as stolen:
                results = compare_runtimes(compared, calls, runtimes=("onnxruntime",), rounds=rounds)
            out.append(
                {
                    "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "cpu_stolen": stolen.share,
                    "ms": {r.name: r.seconds * 1e3 if r.ok else None for r in results},
                    "max_abs_error": {r.name: r.max_abs_error for r in results},
                }
            )
    return out
