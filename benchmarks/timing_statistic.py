"""Which statistic of the interleaved timing rounds the network benchmarks judge by: the mean per call of the
fastest round, or the fastest single call. Chosen on development networks only.

The same schedules (each development network's arms as the task-order study left them) are built afresh
and timed in several independent timing runs, alternately on the machine as it is and beside a process
that takes one core in bursts at the benchmark's own priority: the slow periods of a shared host, whose
bursts slow some calls and not others, made on demand. A statistic fit to judge by gives about the same
latency in a loaded run as in the quiet ones, and above all the same ratio of each arm to TVM alone
(``no-transfer``) from run to run: that ratio is what the network benchmarks judge. Both come out per
network, arm and statistic. Each timing run is saved as it ends; a stopped run resumes.

    nice -n 19 python -m benchmarks.timing_statistic > work/timing_statistic.log 2>&1 &
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import multiprocessing
import random
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchmarks.common import StolenCpu, geomean, git_commit, report_path, target_context, write_report
from benchmarks.corpus import DEV_NETWORKS
from benchmarks.transfer_common import time_work_dirs
from tvm_transfer.networks import model_slug
from tvm_transfer.target import host_target, target_id

NAME = "timing_statistic_dev"
BASELINE = "no-transfer"
#: Lengths of the busy core's bursts and of the pauses between them (seconds, drawn uniformly).
BURST_SECONDS = (0.01, 0.2)
#: The statistics compared: key in :func:`~benchmarks.transfer_common.time_work_dirs`'s result -> name.
STATISTICS = {"ms": "fastest round's mean", "fastest_call_ms": "fastest call"}
#: What :func:`summarize` gives per arm and statistic, beside the quiet runs' median.
MEASURES = ("loaded_over_quiet", "spread", "ratio_spread")


def _spin_in_bursts(stop: multiprocessing.synchronize.Event, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        until = time.perf_counter() + rng.uniform(*BURST_SECONDS)
        while time.perf_counter() < until:
            pass
        stop.wait(rng.uniform(*BURST_SECONDS))


@contextlib.contextmanager
def busy_core(busy: bool = True, seed: int = 0) -> Iterator[None]:
    """While the block runs (when ``busy``), one process that spins on a core in bursts and pauses of
    :data:`BURST_SECONDS` (drawn from ``seed``), about half the time; it inherits our niceness."""
    if not busy:
        yield
        return
    # Spawned, not forked: this process runs TVM's and PyTorch's thread pools.
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    spinner = context.Process(target=_spin_in_bursts, args=(stop, seed), daemon=True)
    spinner.start()
    try:
        yield
    finally:
        stop.set()
        spinner.join()


def _timing_run(
    network: str, work_dirs: dict[str, Path], target, rounds: int, loaded: bool, seed: int
) -> dict:
    """One timing run of ``work_dirs`` (beside a busy core when ``loaded``): ms per arm and statistic."""
    with StolenCpu() as stolen, busy_core(loaded, seed):
        latency = time_work_dirs(network, work_dirs, target, rounds, references=False, repick_mode="none")
    return {
        "network": network,
        "loaded": loaded,
        "cpu_stolen": stolen.share,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "latency": {arm: {key: latency[arm][key] for key in STATISTICS} for arm in work_dirs},
    }


def summarize(runs: list[dict]) -> dict:
    """Per arm (``network/arm``) and statistic: the quiet runs' median (ms), the loaded runs' median over
    it, the spread of all runs (slowest over fastest) and, for arms other than :data:`BASELINE`, the spread
    of their ratio to it over the runs (largest over smallest); then, per statistic, the geometric means
    of each over the arms. ``runs`` holds quiet and loaded timing runs of every arm."""
    arms = sorted({f"{r['network']}/{arm}" for r in runs for arm in r["latency"]})
    per_arm: dict[str, dict] = {}
    for label in arms:
        network, arm = label.split("/", 1)
        mine = [r for r in runs if r["network"] == network]
        per_arm[label] = {}
        for key in STATISTICS:
            quiet = [r["latency"][arm][key] for r in mine if not r["loaded"]]
            loaded = [r["latency"][arm][key] for r in mine if r["loaded"]]
            per_arm[label][key] = {
                "quiet_ms": float(np.median(quiet)),
                "loaded_over_quiet": float(np.median(loaded) / np.median(quiet)),
                "spread": float(max(quiet + loaded) / min(quiet + loaded)),
            }
            if arm != BASELINE:
                ratios = [r["latency"][arm][key] / r["latency"][BASELINE][key] for r in mine]
                per_arm[label][key]["ratio_spread"] = float(max(ratios) / min(ratios))
    overall = {
        key: {
            measure: geomean([stats[key][measure] for stats in per_arm.values() if measure in stats[key]])
            for measure in MEASURES
        }
        for key in STATISTICS
    }
    return {"arms": per_arm, "overall": overall}


def _cell(stats: dict) -> str:
    """``quiet ms, loaded / quiet, spread, ratio spread`` of one arm and statistic (``-``: not given)."""
    values = [f"{stats['quiet_ms']:.2f}" if "quiet_ms" in stats else "-"]
    values += [f"{stats[m]:.3f}" if m in stats else "-" for m in MEASURES]
    return ", ".join(values)


def _markdown(report: dict) -> str:
    summary = summarize(report["runs"]) if report["runs"] else None
    lines = [
        "# Timing statistic (development networks)\n",
        f"{report['machine']['cpu']} ({report['machine']['cores']} cores), target `{report['target']}`, "
        f"commit {report['commit']}. The task-order study's arms of {', '.join(report['networks'])}, each "
        f"built afresh and timed in {report['rounds']} interleaved rounds per timing run; the runs alternate "
        "quiet and loaded (beside a process taking one core in bursts). Per statistic: the quiet runs' "
        "median (ms), the loaded runs' median over it, the spread of all runs (slowest / fastest) and the "
        f"spread of the arm's ratio to {BASELINE} over the runs (largest / smallest).\n",
    ]
    if summary is None:
        return "\n".join(lines)
    columns = " | ".join(
        f"{name}: quiet ms, loaded / quiet, spread, ratio spread" for name in STATISTICS.values()
    )
    lines += [f"| arm | {columns} |", "|---|" + "---|" * len(STATISTICS)]
    for label, stats in summary["arms"].items():
        lines.append(f"| {label} | " + " | ".join(_cell(stats[key]) for key in STATISTICS) + " |")
    overall = " | ".join(_cell(summary["overall"][key]) for key in STATISTICS)
    lines.append(f"| geometric mean | {overall} |")
    stolen = [r["cpu_stolen"] for r in report["runs"] if r["cpu_stolen"] is not None]
    lines.append(
        f"\n{len(report['runs'])} timing runs"
        + (f"; CPU stolen by the hypervisor {min(stolen):.0%}-{max(stolen):.0%} per run." if stolen else ".")
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs", type=int, default=6, help="timing runs per network, half of them loaded (default 6)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per timing run (default 5)")
    parser.add_argument(
        "--work-root",
        default="work/bench_transfer/task-order",
        help="root of the task-order study's work dirs (default: its own)",
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    target = host_target()
    root = Path(args.work_root) / str(target.attrs.get("mcpu", "host"))
    path = report_path("transfer", NAME, ".json")
    report = json.loads(path.read_text()) if path.is_file() else {"runs": []}
    if report["runs"] and report["target_id"] != target_id(target):
        raise SystemExit(f"{path} was timed on {report['target_id']}: move it away to start over here")
    report.update(
        {
            "networks": list(DEV_NETWORKS),
            "rounds": args.rounds,
            **target_context(target),
            "commit": git_commit(short=True),
        }
    )
    for network in DEV_NETWORKS:
        folder = root / model_slug(network)
        work_dirs = {d.name: d for d in sorted(folder.iterdir()) if d.is_dir()} if folder.is_dir() else {}
        if not work_dirs:
            raise SystemExit(
                f"no work dirs in {folder}: run `benchmarks.transfer_networks --task-order` first"
            )
        done = [r for r in report["runs"] if r["network"] == network]
        for index in range(len(done), args.runs):
            loaded = index % 2 == 1
            print(f"== {network}: timing run {index + 1} of {args.runs} ({'loaded' if loaded else 'quiet'})")
            run = _timing_run(network, work_dirs, target, args.rounds, loaded, seed=index)
            report["runs"].append(run)
            write_report("transfer", NAME, report, _markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
