"""Whether the re-pick times its candidates warm or with cold caches. Chosen on development networks only.

A tuner times each candidate warm (runs back to back), but in a network whose weights outgrow the
last-level cache each layer's weights arrive from memory. The re-pick (:mod:`tvm_transfer.tuning.repick`)
can time its candidates either way; the rule under test times them cold exactly when the network's
weights exceed this CPU's last-level cache. Here every development network, tuned by the default
(transfer) to ``--trials``, is built twice per timing run from the same work dir, once re-picked warm and
once re-picked cold (each re-pick made afresh: its own noise is part of what is judged), and the two are
timed in the same interleaved rounds. The development networks are those of the transfer studies, whose
weights fit the cache, and BERT-small's encoder, whose weights do not
(:data:`~benchmarks.corpus.DEV_LARGE_WEIGHTS`).

Each network's work dir is tuned here first when it has fewer than ``--trials`` measured records (resumes).
Each timing run is saved as it ends; a stopped run resumes.

    nice -n 19 python -m benchmarks.repick_caches > work/repick_caches.log 2>&1 &
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
from tvm_transfer.tuning.rounds import read_rounds

NAME = "repick_caches_dev"
NETWORKS = (*DEV_NETWORKS, *DEV_LARGE_WEIGHTS)
SETTINGS = ("warm", "cold")


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


def _timing_run(network: str, work_dir: Path, target, rounds: int) -> dict:
    """One timing run: ``work_dir`` built re-picked warm and re-picked cold, timed side by side."""
    with StolenCpu() as stolen:
        latency = time_work_dirs(
            network,
            {setting: work_dir for setting in SETTINGS},
            target,
            rounds,
            references=False,
            repick_cold={"cold"},
        )
    return {
        "network": network,
        "cpu_stolen": stolen.share,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "latency": latency,
    }


def summarize(report: dict) -> dict:
    """Per network: its weights (MB), whether they exceed the last-level cache, each setting's median
    latency over the timing runs (ms), and cold over warm per run and its median."""
    summary = {}
    for network, weights in report["weights_bytes"].items():
        runs = [r for r in report["runs"] if r["network"] == network]
        if not runs:
            continue
        ms = {s: [r["latency"][s]["ms"] for r in runs] for s in SETTINGS}
        ratios = [cold / warm for warm, cold in zip(ms["warm"], ms["cold"], strict=True)]
        summary[network] = {
            "weights_mb": weights / 2**20,
            "outgrows_cache": _outgrows(weights, report["last_level_cache_bytes"]),
            **{f"{s}_ms": float(np.median(ms[s])) for s in SETTINGS},
            "cold_over_warm": ratios,
            "median_cold_over_warm": float(np.median(ratios)),
        }
    return summary


def _outgrows(weights: int, cache: int | None) -> str:
    """Whether ``weights`` bytes exceed a last-level cache of ``cache`` bytes: ``yes``, ``no`` or
    ``unknown`` (no cache size)."""
    return "unknown" if cache is None else "yes" if weights > cache else "no"


def _markdown(report: dict) -> str:
    cache = report["last_level_cache_bytes"]
    lines = [
        "# Re-pick timed warm or with cold caches (development networks)\n",
        f"{report['machine']['cpu']} ({report['machine']['cores']} cores), target `{report['target']}`, "
        f"last-level cache {f'{cache / 2**20:.0f} MB' if cache else 'unknown'}, commit {report['commit']}. "
        f"Each network tuned by the default to {report['trials']} trials, then built re-picked warm and "
        "re-picked cold (each re-pick made afresh) and timed side by side in "
        f"{report['rounds']} interleaved rounds per timing run. The rule under test re-picks cold when the "
        "network's weights exceed the last-level cache.\n",
        "| network | weights MB | weights > cache | warm ms, median | cold ms, median | cold / warm per run "
        "| median |",
        "|---|---|---|---|---|---|---|",
    ]
    for network, row in summarize(report).items():
        per_run = ", ".join(f"{r:.3f}" for r in row["cold_over_warm"])
        lines.append(
            f"| {network} | {row['weights_mb']:.1f} | {row['outgrows_cache']} | {row['warm_ms']:.2f} | "
            f"{row['cold_ms']:.2f} | {per_run} | {row['median_cold_over_warm']:.3f} |"
        )
    stolen = [r["cpu_stolen"] for r in report["runs"] if r["cpu_stolen"] is not None]
    if stolen:
        lines.append(f"\nCPU stolen by the hypervisor {min(stolen):.0%}-{max(stolen):.0%} per timing run.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=4, help="timing runs per network (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per timing run (default 5)")
    parser.add_argument("--trials", type=int, default=200, help="tuning budget per network (default 200)")
    parser.add_argument(
        "--work-root", default="work/bench_transfer/repick-caches", help="root of the networks' work dirs"
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    target = host_target()
    root = Path(args.work_root) / str(target.attrs["mcpu"])
    path = report_path("transfer", NAME, ".json")
    report = json.loads(path.read_text()) if path.is_file() else {"runs": []}
    if report["runs"] and report["target_id"] != target_id(target):
        raise SystemExit(f"{path} was timed on {report['target_id']}: move it away to start over here")
    if report["runs"] and (report["trials"], report["rounds"]) != (args.trials, args.rounds):
        raise SystemExit(
            f"{path} was timed at {report['trials']} trials, {report['rounds']} rounds: pass those to "
            "resume, or move it away to start over"
        )
    report.update(
        {
            "networks": list(NETWORKS),
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
    for network in NETWORKS:
        work_dir = root / model_slug(network)
        _tuned(network, work_dir, args.trials)
        done = [r for r in report["runs"] if r["network"] == network]
        for index in range(len(done), args.runs):
            print(f"== {network}: timing run {index + 1} of {args.runs}", flush=True)
            report["runs"].append(_timing_run(network, work_dir, target, args.rounds))
            write_report("transfer", NAME, report, _markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
