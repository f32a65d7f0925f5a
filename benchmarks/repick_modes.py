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

With ``--tune-caches warm,cold`` every network is also tuned a second time with the tuner timing its
candidates with cold caches (``tune-network --measure-caches cold``, its own work dir), and every mode is
built from both work dirs: arm ``MODE`` from the work dir tuned warm, ``MODE@tuned-cold`` from the one tuned
cold.

Each network's work dir is tuned here first when it has fewer than ``--trials`` measured records (resumes).
Each timing run is saved as it ends; a stopped run resumes.

    nice -n 19 python -m benchmarks.repick_modes --modes warm,none,network --report-name repick_network_dev \
        > work/logs/repick_modes.log 2>&1 &
    nice -n 19 python -m benchmarks.repick_modes --modes warm,cold --report-name repick_caches_dev
    nice -n 19 python -m benchmarks.repick_modes --modes cold --tune-caches warm,cold --networks bert_small \
        --trials 2000 --runs 8 --report-name tuning_caches_dev
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path

import numpy as np

from benchmarks.common import StolenCpu, git_commit, report_path, target_context, write_report
from benchmarks.corpus import DEV_LARGE_WEIGHTS, DEV_NETWORKS
from benchmarks.transfer_common import time_work_dirs
from tvm_transfer.networks import (
    constant_bytes,
    conv_layout_of,
    load_model,
    model_slug,
    relax_module,
    split_model_names,
)
from tvm_transfer.target import host_target, last_level_cache_bytes, target_id
from tvm_transfer.tuning.repick import REPICK_MODES
from tvm_transfer.tuning.rounds import read_rounds

NETWORKS = (*DEV_NETWORKS, *DEV_LARGE_WEIGHTS)
#: How the tuner may time its candidates here (``tune-network --measure-caches``).
TUNE_CACHES = ("warm", "cold")


def _tuned_suffix(caches: str) -> str:
    """What names an arm and a work dir tuned ``caches``: nothing for warm, ``@tuned-cold`` for cold."""
    return "" if caches == "warm" else f"@tuned-{caches}"


def arms(modes: list[str], tune_caches: list[str]) -> dict[str, tuple[str, str]]:
    """The arms timed: name -> (how its work dir was tuned, its re-pick mode); ``MODE`` for the work dir
    tuned warm, ``MODE@tuned-cold`` for the one tuned cold."""
    return {mode + _tuned_suffix(caches): (caches, mode) for caches in tune_caches for mode in modes}


def _work_dir(root: Path, network: str, caches: str) -> Path:
    return root / (model_slug(network) + _tuned_suffix(caches))


def _tuned(network: str, work_dir: Path, trials: int, caches: str) -> None:
    """``work_dir`` tuned for this machine by the default (transfer on) to ``trials`` measured records, as
    ``tune-network --measure-caches CACHES`` tunes it."""
    from tvm_transfer.cli import main as cli

    rounds = read_rounds(work_dir)
    if rounds and rounds[-1]["trials"] >= trials:
        return
    print(f"== {network}: tuning ({caches}) to {trials} trials in {work_dir}", flush=True)
    command = ["tune-network", network, "--work-dir", str(work_dir), "--trials", str(trials)]
    command += ["--conv-layout", conv_layout_of(network)]  # as named, not the commands' default
    if cli([*command, "--measure-caches", caches]) != 0:
        raise SystemExit(f"tuning {network} failed")


def _timing_run(
    network: str, work_dirs: dict[str, Path], target, rounds: int, timed: dict[str, tuple[str, str]]
) -> dict:
    """One timing run: every arm of ``timed`` (:func:`arms`) built from its work dir (by how it was tuned,
    ``work_dirs``) with its re-pick mode, timed side by side."""
    with StolenCpu() as stolen:
        latency = time_work_dirs(
            network,
            {arm: work_dirs[caches] for arm, (caches, _) in timed.items()},
            target,
            rounds,
            references=False,
            repick_mode={arm: mode for arm, (_, mode) in timed.items()},
        )
    return {
        "network": network,
        "cpu_stolen": stolen.share,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "latency": latency,
    }


def _arm_names(report: dict) -> list[str]:
    """The arms of ``report`` (:func:`arms`), the reference first; a report without ``tune_caches`` tuned
    warm only."""
    return list(arms(report["modes"], report.get("tune_caches", ["warm"])))


def summarize(report: dict) -> dict:
    """Per network: its weights (MB), whether they exceed the last-level cache, and per arm its median
    latency over the timing runs (ms), its spread (slowest / fastest run) and, for every arm but the
    first, its latency over the first arm's per run and the median of those."""
    reference, *others = names = _arm_names(report)
    summary = {}
    for network, weights in report["weights_bytes"].items():
        runs = [r for r in report["runs"] if r["network"] == network]
        if not runs:
            continue
        ms = {arm: [r["latency"][arm]["ms"] for r in runs] for arm in names}
        ratios = {arm: [a / b for a, b in zip(ms[arm], ms[reference], strict=True)] for arm in others}
        summary[network] = {
            "weights_mb": weights / 2**20,
            "runs": len(runs),
            "outgrows_cache": _outgrows(weights, report["last_level_cache_bytes"]),
            "median_ms": {arm: float(np.median(v)) for arm, v in ms.items()},
            "spread": {arm: max(v) / min(v) for arm, v in ms.items()},
            "over_reference": ratios,
            "median_over_reference": {arm: float(np.median(v)) for arm, v in ratios.items()},
        }
    return summary


def _outgrows(weights: int, cache: int | None) -> str:
    """Whether ``weights`` bytes exceed a last-level cache of ``cache`` bytes: ``yes``, ``no`` or
    ``unknown`` (no cache size)."""
    return "unknown" if cache is None else "yes" if weights > cache else "no"


def _markdown(report: dict) -> str:
    cache = report["last_level_cache_bytes"]
    reference, *others = names = _arm_names(report)
    tuned_cold = "cold" in report.get("tune_caches", ["warm"])
    tuning = (
        ", once with the tuner timing warm and once cold (arms `MODE@tuned-cold` built from the latter)"
        if tuned_cold
        else ""
    )
    lines = [
        f"# Re-pick modes{' and tuner timings' if tuned_cold else ''}: {', '.join(names)} "
        "(development networks)\n",
        f"{report['machine']['cpu']} ({report['machine']['cores']} cores), target `{report['target']}`, "
        f"last-level cache {f'{cache / 2**20:.0f} MB' if cache else 'unknown'}, commit {report['commit']}. "
        f"Each network tuned by the default to {report['trials']} trials{tuning}, then built once per arm "
        f"(each re-pick made afresh) and timed side by side in {report['rounds']} interleaved rounds per "
        f"timing run. Ratios are to `{reference}`, run by run; spread is an arm's slowest timing run over "
        "its fastest.\n",
        "| network | weights MB | weights > cache | runs | "
        + " | ".join(f"{arm} ms, median (spread)" for arm in names)
        + "".join(f" | {arm} / {reference} per run | median" for arm in others)
        + " |",
        "|---|---|---|---|" + "---|" * (len(names) + 2 * len(others)),
    ]
    for network, row in summarize(report).items():
        cells = [f"{row['median_ms'][arm]:.2f} ({row['spread'][arm]:.3f})" for arm in names]
        for arm in others:
            cells.append(", ".join(f"{r:.3f}" for r in row["over_reference"][arm]))
            cells.append(f"{row['median_over_reference'][arm]:.3f}")
        lines.append(
            f"| {network} | {row['weights_mb']:.1f} | {row['outgrows_cache']} | {row['runs']} | "
            + " | ".join(cells)
            + " |"
        )
    stolen = [r["cpu_stolen"] for r in report["runs"] if r["cpu_stolen"] is not None]
    if stolen:
        lines.append(f"\nCPU stolen by the hypervisor {min(stolen):.0%}-{max(stolen):.0%} per timing run.")
    return "\n".join(lines) + "\n"


def _choices(allowed: tuple[str, ...]):
    """An argparse type: comma-separated different values of ``allowed``."""

    def parse(text: str) -> list[str]:
        values = text.split(",")
        if not set(values) <= set(allowed) or len(set(values)) < len(values):
            raise argparse.ArgumentTypeError(
                f"give different values of {', '.join(allowed)}, comma-separated; got {text!r}"
            )
        return values

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=4, help="timing runs per network (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per timing run (default 5)")
    parser.add_argument("--trials", type=int, default=200, help="tuning budget per network (default 200)")
    parser.add_argument(
        "--modes",
        type=_choices(REPICK_MODES),
        required=True,
        help="re-pick modes compared, comma-separated, the reference first (e.g. warm,none,network)",
    )
    parser.add_argument(
        "--tune-caches",
        type=_choices(TUNE_CACHES),
        default=["warm"],
        help="how the tuner times candidates, comma-separated: every mode is built from a work dir tuned "
        "each way (default: warm)",
    )
    parser.add_argument(
        "--networks",
        type=split_model_names,
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
    timed = arms(args.modes, args.tune_caches)
    if len(timed) < 2:
        parser.error("--modes and --tune-caches give one arm: compare two or more")
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    target = host_target()
    root = Path(args.work_root) / str(target.attrs["mcpu"])
    path = report_path("transfer", args.report_name, ".json")
    report = json.loads(path.read_text()) if path.is_file() else {"runs": []}
    if report["runs"] and report["target_id"] != target_id(target):
        raise SystemExit(f"{path} was timed on {report['target_id']}: move it away to start over here")
    settings = (args.trials, args.rounds, list(timed))
    if report["runs"] and (report["trials"], report["rounds"], _arm_names(report)) != settings:
        raise SystemExit(
            f"{path} was timed at {report['trials']} trials, {report['rounds']} rounds, arms "
            f"{', '.join(_arm_names(report))}: pass those to resume, or move it away to start over"
        )
    report.update(
        {
            "networks": list(NETWORKS),
            "modes": args.modes,
            "tune_caches": args.tune_caches,
            "trials": args.trials,
            "rounds": args.rounds,
            **target_context(target),
            "last_level_cache_bytes": last_level_cache_bytes(),
            "weights_bytes": {n: constant_bytes(relax_module(load_model(n))) for n in NETWORKS},
            "commit": git_commit(short=True),
        }
    )
    for network in args.networks:
        work_dirs = {caches: _work_dir(root, network, caches) for caches in args.tune_caches}
        for caches, work_dir in work_dirs.items():
            _tuned(network, work_dir, args.trials, caches)
        done = [r for r in report["runs"] if r["network"] == network]
        for index in range(len(done), args.runs):
            print(f"== {network}: timing run {index + 1} of {args.runs}", flush=True)
            report["runs"].append(_timing_run(network, work_dirs, target, args.rounds, timed))
            write_report("transfer", args.report_name, report, _markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
