"""How ``compile`` re-picks its schedules, compared on development networks only.

A task's best record is one timing among hundreds; the re-pick (:mod:`tvm_transfer.tuning.repick`) re-times
the heaviest tasks' top records before the build and keeps the fastest, in one of several ways
(:data:`~tvm_transfer.tuning.repick.REPICK_MODES`): warm as the tuner timed them, with cold caches (in a
network whose weights outgrow the last-level cache each layer's weights arrive from memory), inside the
network itself, or not at all. Here every development network, tuned by the default (transfer) to
``--trials``, is built once per mode per timing run from the same work dir (each re-pick made afresh: its
own noise is part of what is judged), and the builds are timed in the same interleaved rounds. The first
mode of ``--modes`` is the reference the others are compared with, run by run; a mode's spread over the
timing runs (slowest / fastest) says how much one build can be trusted. The development networks are
those of the transfer studies, whose weights fit a large cache, and BERT-small's encoder and Wide
ResNet-50-2, whose weights are larger (:data:`~benchmarks.corpus.DEV_LARGE_WEIGHTS`).

Each network's work dir is tuned here first when it has fewer than ``--trials`` measured records (resumes).
Each timing run is saved as it ends; a stopped run resumes.

    nice -n 19 python -m benchmarks.repick_modes --modes warm,none,network --report-name repick_network_dev \
        > work/logs/repick_modes.log 2>&1 &
    nice -n 19 python -m benchmarks.repick_modes --modes warm,cold --report-name repick_caches_dev
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path

import numpy as np

from benchmarks.common import StolenCpu, git_commit, machine_info, report_path, write_report
from benchmarks.corpus import DEV_LARGE_WEIGHTS, DEV_NETWORKS
from benchmarks.transfer_common import time_work_dirs
from tvm_transfer.networks import constant_bytes, load_model, model_slug, relax_module
from tvm_transfer.target import host_target, last_level_cache_bytes, target_id
from tvm_transfer.tuning.repick import REPICK_MODES
from tvm_transfer.tuning.rounds import read_rounds

NETWORKS = (*DEV_NETWORKS, *DEV_LARGE_WEIGHTS)


def _tuned(network: str, work_dir: Path, trials: int) -> None:
    """``work_dir`` tuned for this machine by the default (transfer on) to ``trials`` measured records, as
    ``tune-network`` tunes it."""
    from tvm_transfer.cli import main as cli

    rounds = read_rounds(work_dir)
    if rounds and rounds[-1]["trials"] >= trials:
        return
    print(f"== {network}: tuning to {trials} trials in {work_dir}", flush=True)
    if cli(["tune-network", network, "--work-dir", str(work_dir), "--trials", str(trials)]) != 0:
        raise SystemExit(f"tuning {network} failed")


def _timing_run(network: str, work_dir: Path, target, rounds: int, modes: list[str]) -> dict:
    """One timing run: ``work_dir`` built once per re-pick mode, timed side by side."""
    with StolenCpu() as stolen:
        latency = time_work_dirs(
            network,
            {mode: work_dir for mode in modes},
            target,
            rounds,
            references=False,
            repick_mode=dict(zip(modes, modes, strict=True)),
        )
    return {
        "network": network,
        "cpu_stolen": stolen.share,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "latency": latency,
    }


def summarize(report: dict) -> dict:
    """Per network: its weights (MB), whether they exceed the last-level cache, and per mode its median
    latency over the timing runs (ms), its spread (slowest / fastest run) and, for every mode but the
    first, its latency over the first mode's per run and the median of those."""
    reference, *others = report["modes"]
    summary = {}
    for network, weights in report["weights_bytes"].items():
        runs = [r for r in report["runs"] if r["network"] == network]
        if not runs:
            continue
        ms = {mode: [r["latency"][mode]["ms"] for r in runs] for mode in report["modes"]}
        ratios = {mode: [a / b for a, b in zip(ms[mode], ms[reference], strict=True)] for mode in others}
        summary[network] = {
            "weights_mb": weights / 2**20,
            "runs": len(runs),
            "outgrows_cache": _outgrows(weights, report["last_level_cache_bytes"]),
            "median_ms": {mode: float(np.median(v)) for mode, v in ms.items()},
            "spread": {mode: max(v) / min(v) for mode, v in ms.items()},
            "over_reference": ratios,
            "median_over_reference": {mode: float(np.median(v)) for mode, v in ratios.items()},
        }
    return summary


def _outgrows(weights: int, cache: int | None) -> str:
    """Whether ``weights`` bytes exceed a last-level cache of ``cache`` bytes: ``yes``, ``no`` or
    ``unknown`` (no cache size)."""
    return "unknown" if cache is None else "yes" if weights > cache else "no"


def _markdown(report: dict) -> str:
    cache = report["last_level_cache_bytes"]
    reference, *others = report["modes"]
    lines = [
        f"# Re-pick modes: {', '.join(report['modes'])} (development networks)\n",
        f"{report['machine']['cpu']} ({report['machine']['cores']} cores), target `{report['target']}`, "
        f"last-level cache {f'{cache / 2**20:.0f} MB' if cache else 'unknown'}, commit {report['commit']}. "
        f"Each network tuned by the default to {report['trials']} trials, then built once per re-pick mode "
        f"(each re-pick made afresh) and timed side by side in {report['rounds']} interleaved rounds per "
        f"timing run. Ratios are to `{reference}`, run by run; spread is a mode's slowest timing run over "
        "its fastest.\n",
        "| network | weights MB | weights > cache | runs | "
        + " | ".join(f"{mode} ms, median (spread)" for mode in report["modes"])
        + "".join(f" | {mode} / {reference} per run | median" for mode in others)
        + " |",
        "|---|---|---|---|" + "---|" * (len(report["modes"]) + 2 * len(others)),
    ]
    for network, row in summarize(report).items():
        cells = [f"{row['median_ms'][mode]:.2f} ({row['spread'][mode]:.3f})" for mode in report["modes"]]
        for mode in others:
            cells.append(", ".join(f"{r:.3f}" for r in row["over_reference"][mode]))
            cells.append(f"{row['median_over_reference'][mode]:.3f}")
        lines.append(
            f"| {network} | {row['weights_mb']:.1f} | {row['outgrows_cache']} | {row['runs']} | "
            + " | ".join(cells)
            + " |"
        )
    stolen = [r["cpu_stolen"] for r in report["runs"] if r["cpu_stolen"] is not None]
    if stolen:
        lines.append(f"\nCPU stolen by the hypervisor {min(stolen):.0%}-{max(stolen):.0%} per timing run.")
    return "\n".join(lines) + "\n"


def _modes(text: str) -> list[str]:
    modes = text.split(",")
    unknown = [m for m in modes if m not in REPICK_MODES]
    if unknown or len(modes) < 2 or len(set(modes)) < len(modes):
        raise argparse.ArgumentTypeError(
            f"give two or more different modes of {', '.join(REPICK_MODES)}, comma-separated; got {text!r}"
        )
    return modes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=4, help="timing runs per network (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per timing run (default 5)")
    parser.add_argument("--trials", type=int, default=200, help="tuning budget per network (default 200)")
    parser.add_argument(
        "--modes",
        type=_modes,
        required=True,
        help="re-pick modes compared, comma-separated, the reference first (e.g. warm,none,network)",
    )
    parser.add_argument(
        "--networks",
        type=lambda text: text.split(","),
        default=list(NETWORKS),
        help=f"the development networks timed, comma-separated (default: {','.join(NETWORKS)})",
    )
    parser.add_argument("--report-name", required=True, help="the report's name under results/transfer")
    parser.add_argument(
        "--work-root", default="work/bench_transfer/repick-modes", help="root of the networks' work dirs"
    )
    args = parser.parse_args(argv)
    if not set(args.networks) <= set(NETWORKS):
        parser.error(f"--networks: only the development networks {', '.join(NETWORKS)}")
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    target = host_target()
    root = Path(args.work_root) / str(target.attrs["mcpu"])
    path = report_path("transfer", args.report_name, ".json")
    report = json.loads(path.read_text()) if path.is_file() else {"runs": []}
    if report["runs"] and report["target_id"] != target_id(target):
        raise SystemExit(f"{path} was timed on {report['target_id']}: move it away to start over here")
    settings = (args.trials, args.rounds, args.modes)
    if report["runs"] and (report["trials"], report["rounds"], report.get("modes")) != settings:
        raise SystemExit(
            f"{path} was timed at {report['trials']} trials, {report['rounds']} rounds, modes "
            f"{report.get('modes')}: pass those to resume, or move it away to start over"
        )
    report.update(
        {
            "networks": list(NETWORKS),
            "modes": args.modes,
            "trials": args.trials,
            "rounds": args.rounds,
            "target": str(target),
            "target_id": target_id(target),
            "last_level_cache_bytes": last_level_cache_bytes(),
            "weights_bytes": {n: constant_bytes(relax_module(load_model(n))) for n in NETWORKS},
            "machine": machine_info(),
            "commit": git_commit(short=True),
        }
    )
    for network in args.networks:
        work_dir = root / model_slug(network)
        _tuned(network, work_dir, args.trials)
        done = [r for r in report["runs"] if r["network"] == network]
        for index in range(len(done), args.runs):
            print(f"== {network}: timing run {index + 1} of {args.runs}", flush=True)
            report["runs"].append(_timing_run(network, work_dir, target, args.rounds, args.modes))
            write_report("transfer", args.report_name, report, _markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
