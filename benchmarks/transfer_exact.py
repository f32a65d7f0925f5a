"""An exact-match network compiles to its tuned latency with 0 trials: every network a transfer pack was
built from, tuned on the target, is compiled in a fresh work dir from the pack alone and timed against the
run it was packed from, in the same interleaved rounds (fastest kept). The tuned run is rebuilt from the
pack's corpus, which holds every record of it, so the benchmark runs wherever the target does: on a
portable target (``--target llvm/x86-64-v3/2``) on any CPU that has its instructions. A network packed
from several runs on the target is timed against the one with the most records (the pack keeps the best
records of all of them, so it can only be faster).

    python -m benchmarks.transfer_exact                 # the shipped pack, this machine's target
    python -m benchmarks.transfer_exact --target llvm/x86-64-v3/2 --networks torchvision:resnet18@nhwc \
        --report-name transfer_exact_x86-64-v3
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import warnings
from pathlib import Path

import pandas as pd
import tvm
from tvm.s_tir import meta_schedule as ms

from benchmarks.common import git_commit, machine_info, write_report
from benchmarks.transfer_common import time_work_dirs
from tenset_tools.metaschedule import task_id_of_mod
from tvm_transfer.networks import load_model, model_slug, split_model_names
from tvm_transfer.target import host_target, target_id, target_of_id
from tvm_transfer.transfer import DEFAULT_PACK
from tvm_transfer.transfer.pack import TransferPack
from tvm_transfer.transfer.policy import TransferPolicy
from tvm_transfer.tuning.run import NetworkRun, RunConfig, extract_network_tasks
from tvm_transfer.tuning.session import top_records
from tvm_transfer.tuning.workdir import open_database

TUNED, FROM_PACK = "tuned run", "pack, 0 trials"


def _row(network: str, run: pd.DataFrame, pack: TransferPack, work_root: Path, target, rounds: int) -> dict:
    """Apply ``pack`` to ``network`` in a fresh work dir and time it against ``run`` (the corpus rows of
    its tuned run on ``target``), rebuilt in another."""
    slug = model_slug(network)
    model = load_model(network)
    tasks = extract_network_tasks(model, target)
    tuned = _rebuilt_run(run, tasks, target, work_root / "tuned" / slug)
    fresh = work_root / "from-pack" / slug
    shutil.rmtree(fresh, ignore_errors=True)
    config = RunConfig.make(model, fresh, target=target, plan=TransferPolicy.build_plan(pack))
    applied = NetworkRun(config, tasks=tasks).applied
    # As packed, not re-picked: the pack holds each task's best record as its run measured it.
    latency = time_work_dirs(
        network, {TUNED: tuned, FROM_PACK: fresh}, target, rounds, references=False, repick_mode="none"
    )
    return {
        "network": network,
        "source": run["source"].iloc[0],
        "source_records": len(run),
        "tasks": len(tasks),
        "applied": len(applied),
        "same_schedules": _same_schedules(tuned, fresh, tasks),
        "tuned_ms": latency[TUNED]["ms"],
        "from_pack_ms": latency[FROM_PACK]["ms"],
        "from_pack_max_abs_error": latency[FROM_PACK]["max_abs_error"],
    }


def _same_schedules(tuned: Path, from_pack: Path, tasks: list[ms.ExtractedTask]) -> int:
    """How many of ``tasks`` run the same schedule from both work dirs: the pack applies the tuned run's best
    record of a task unless another run of the target measured a faster one."""
    best = [_best_trace(open_database(work_dir), _pairs(tasks)) for work_dir in (tuned, from_pack)]
    return sum(1 for key, trace in best[1].items() if best[0].get(key) == trace)


def _pairs(tasks: list[ms.ExtractedTask]) -> list[tuple[str, tvm.IRModule]]:
    return [(task.task_name, task.dispatched[0]) for task in tasks]


def _best_trace(database: ms.database.Database, pairs: list[tuple[str, tvm.IRModule]]) -> dict[str, str]:
    """Per task name, the trace of ``database``'s best measured record of that task, as text."""
    best = {}
    for name, mod in pairs:
        top = top_records(database, mod, 1)
        if top:
            best[name] = str(top[0].trace)
    return best


def _rebuilt_run(run: pd.DataFrame, tasks: list[ms.ExtractedTask], target, work_dir: Path) -> Path:
    """``run``'s measured records written to a fresh MetaSchedule database in ``work_dir``, each under the
    workload of its task among ``tasks``. Raises ``SystemExit`` when a record's task is not among them."""
    shutil.rmtree(work_dir, ignore_errors=True)
    database = open_database(work_dir)
    workloads = {task_id_of_mod(mod): mod for _, mod in _pairs(tasks)}
    missing = sorted(set(run["task_id"]) - set(workloads))
    if missing:
        raise SystemExit(f"{run['source'].iloc[0]}: tasks {missing} are not the network's tasks here")
    for row in run.itertuples():
        workload = database.commit_workload(workloads[row.task_id])
        args_info = [["TENSOR", dtype, shape] for dtype, shape in json.loads(row.workload_key)[1:]]
        entry = [json.loads(row.candidate), list(row.latencies), target.export(), args_info]
        database.commit_tuning_record(ms.database.TuningRecord.from_json(entry, workload))
    return work_dir


def _tuned_runs(pack: TransferPack, tid: str) -> dict[str, pd.DataFrame]:
    """Per network of the pack's corpus, the measured records of its run with the most records on target
    ``tid`` (one source work dir)."""
    corpus = pack.corpus(
        ["network", "target_id", "source", "task_id", "workload_key", "candidate", "latencies", "valid"]
    )
    corpus = corpus[(corpus["target_id"] == tid) & corpus["network"].notna()]
    runs = {}
    for network, rows in corpus.groupby("network"):
        source = rows["source"].value_counts().index[0]
        runs[network] = rows[(rows["source"] == source) & rows["valid"]]
    return dict(sorted(runs.items()))


def _markdown(report: dict) -> str:
    lines = [
        "# Exact match: a network of the pack compiled with 0 trials",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores; target "
        f"`{report['target_id']}`; pack `{report['pack']}`. Latency of the compiled network (ms, fastest of "
        f"{report['rounds']} interleaved rounds); the tuned run is the work dir the pack was built from, "
        "rebuilt from the pack's corpus.",
        "",
        "| network | tasks | from pack | same schedule as the tuned run | tuned run (records) | tuned ms "
        "| pack, 0 trials ms | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        tuned, packed = row["tuned_ms"], row["from_pack_ms"]
        ratio = f"{packed / tuned:.3f}" if tuned and packed else "failed"
        lines.append(
            f"| {row['network']} | {row['tasks']} | {row['applied']} | {row['same_schedules']} | "
            f"{row['source_records']} | "
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
    parser.add_argument(
        "--target",
        help="target id of the pack to compile for, e.g. llvm/x86-64-v3/2 (default: this machine's)",
    )
    parser.add_argument(
        "--report-name", default="transfer_exact", help="the report's name under results/transfer"
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    pack = TransferPack.open(args.pack)
    target = target_of_id(args.target) if args.target else host_target()
    if target_id(target) not in pack.targets:
        raise SystemExit(f"{pack.path} holds no records of target {target_id(target)}")
    rows = []
    runs = _tuned_runs(pack, target_id(target))
    wanted = split_model_names(args.networks) if args.networks else list(runs)
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
    write_report("transfer", args.report_name, report, _markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
