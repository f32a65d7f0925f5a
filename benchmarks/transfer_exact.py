"""An exact-match network compiles to its tuned latency with 0 trials: every network a transfer pack was
built from, tuned on this machine's target, is compiled in a fresh work dir from the pack alone and timed
against the run it was packed from, in the same interleaved rounds (fastest kept). A network packed from
several runs on this target is timed against the one with the most records (the pack keeps the best
records of all of them, so it can only be faster).

    python -m benchmarks.transfer_exact                 # the shipped pack
    python -m benchmarks.transfer_exact --pack PATH --networks torchvision:resnet18,torchvision:vit_b_16
"""

from __future__ import annotations

import argparse
import logging
import shutil
import warnings
from pathlib import Path

from benchmarks.common import git_commit, machine_info, write_report
from benchmarks.transfer_common import time_work_dirs
from tenset_tools.metaschedule import sidecar_network
from tvm_transfer.networks import load_model, model_slug
from tvm_transfer.target import host_target, target_id
from tvm_transfer.transfer import DEFAULT_PACK
from tvm_transfer.transfer.pack import TransferPack
from tvm_transfer.tuning.network import apply_transfer_pack, extract_network_tasks
from tvm_transfer.tuning.session import open_database

TUNED, FROM_PACK = "tuned run", "pack, 0 trials"


def _row(
    network: str, run: tuple[Path, int], pack: TransferPack, work_root: Path, target, rounds: int
) -> dict:
    """Apply ``pack`` to ``network`` in a fresh work dir and time it against ``run`` (its tuned work dir and
    that dir's record count on ``target``)."""
    source, source_records = run
    fresh = work_root / model_slug(network)
    shutil.rmtree(fresh, ignore_errors=True)
    tasks = extract_network_tasks(load_model(network), target)
    applied = apply_transfer_pack(pack, network, tasks, fresh, target)
    # As packed, not re-picked: the pack holds each task's best record as its run measured it.
    latency = time_work_dirs(
        network, {TUNED: source, FROM_PACK: fresh}, target, rounds, references=False, repick_mode="none"
    )
    return {
        "network": network,
        "source": str(source),
        "source_records": source_records,
        "tasks": len(tasks),
        "applied": len(applied),
        "tuned_ms": latency[TUNED]["ms"],
        "from_pack_ms": latency[FROM_PACK]["ms"],
        "from_pack_max_abs_error": latency[FROM_PACK]["max_abs_error"],
    }


def _tuned_runs(pack: TransferPack, target: str) -> dict[str, tuple[Path, int]]:
    """Per network of the pack's sources, its source work dir with the most records on ``target``, and
    that count."""
    best: dict[str, tuple[int, Path]] = {}
    for source in map(Path, pack.manifest["sources"]):
        network = sidecar_network(source) if source.is_dir() else None
        if network is None:
            continue
        records = open_database(source).get_all_tuning_records()
        count = sum(1 for r in records if target_id(r.target) == target)
        if count and count > best.get(network, (0, source))[0]:
            best[network] = (count, source)
    return {network: (source, count) for network, (count, source) in sorted(best.items())}


def _markdown(report: dict) -> str:
    lines = [
        "# Exact match: a network of the pack compiled with 0 trials",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores; target "
        f"`{report['target_id']}`; pack `{report['pack']}`. Latency of the compiled network (ms, fastest of "
        f"{report['rounds']} interleaved rounds); the tuned run is the work dir the pack was built from.",
        "",
        "| network | tasks | from pack | tuned run (records) | tuned ms | pack, 0 trials ms | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        tuned, packed = row["tuned_ms"], row["from_pack_ms"]
        ratio = f"{packed / tuned:.3f}" if tuned and packed else "failed"
        lines.append(
            f"| {row['network']} | {row['tasks']} | {row['applied']} | {row['source_records']} | "
            f"{tuned or float('nan'):.3f} | {packed or float('nan'):.3f} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pack", default=str(DEFAULT_PACK), help="the transfer pack (default: the shipped one)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    parser.add_argument(
        "--work-root", default="work/bench_transfer/exact", help="root of the fresh work dirs"
    )
    parser.add_argument("--networks", help="comma-separated networks of the pack (default: all)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    pack = TransferPack.open(args.pack)
    target = host_target()
    if target_id(target) not in pack.targets:
        raise SystemExit(f"{pack.path} holds no records of this machine's target {target_id(target)}")
    rows = []
    runs = _tuned_runs(pack, target_id(target))
    wanted = args.networks.split(",") if args.networks else list(runs)
    unknown = [n for n in wanted if n not in runs]
    if unknown:
        raise SystemExit(f"{pack.path} holds no run of {', '.join(unknown)} on {target_id(target)}")
    for network in wanted:
        print(f"== {network}", flush=True)
        rows.append(_row(network, runs[network], pack, Path(args.work_root), target, args.rounds))
    report = {
        "pack": str(pack.path),
        "pack_created": pack.manifest["created"],
        "target_id": target_id(target),
        "machine": machine_info(),
        "rounds": args.rounds,
        "commit": git_commit(short=True),
        "rows": rows,
    }
    write_report("transfer", "transfer_exact", report, _markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
