"""Batch norm folded into the convolution's weights, or left as its epilogue: the same schedules timed both
ways. Chosen on development networks only.

TVM's import puts batch norm in inference form: subtract the mean, divide by the standard deviation, scale
and shift, all fused into the convolution before it as its epilogue. ONNX Runtime instead folds the scale
into the convolution's weights and the rest into a bias, which leaves an epilogue of one addition (TVM's
``FoldBatchnormToConv2D``; :func:`tvm_transfer.networks.import_passes` with ``fold_batch_norm``). Folding
changes the task of every batch-norm convolution, so that the schedules the default pack holds for such
tasks would no longer match them: it has to be worth that.

Each development network with batch norm is tuned by TVM alone (resumes). Then the best records (``--top``)
of each batch-norm convolution are replayed, with the same decisions, on its task with batch norm as the
epilogue and on its task with batch norm folded (the two share their design spaces, whose signatures leave
inlining out: :func:`~tvm_transfer.search_strategy.copula.encoding.trace_signature`), and

1. every pair is timed side by side (:func:`~tvm_transfer.tuning.retime.retime`);
2. the network is built both ways, each batch-norm convolution from the pair whose epilogue schedule
   timed fastest, every other task from the tuned records, and the two builds are timed with ONNX Runtime
   in interleaved rounds, ``--runs`` times.

    nice -n 19 python -m benchmarks.batch_norm_folding > work/batch_norm_folding.log 2>&1 &
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import warnings
from pathlib import Path

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from benchmarks.common import git_commit, target_context, timing_runs, tuned_alone, write_report
from tvm_transfer.networks import (
    LoadedModel,
    imported_module,
    load_model,
    model_slug,
)
from tvm_transfer.search_strategy.copula.encoding import space_encodings, trace_decisions, trace_signature
from tvm_transfer.target import host_target
from tvm_transfer.tuning.retime import retime
from tvm_transfer.tuning.run import extract_network_tasks
from tvm_transfer.tuning.session import top_records
from tvm_transfer.tuning.task_selection import task_work
from tvm_transfer.tuning.workdir import open_database

NAME = "batch_norm_folding_dev"
#: The development networks with batch norm (of :data:`benchmarks.corpus.DEV_NETWORKS`).
NETWORKS = ("torchvision:mnasnet1_0",)
BUILDS = ("epilogue", "folded")
#: The operators of batch norm in inference form, which folding removes from a convolution's epilogue.
_NORMALISATION = {"subtract", "divide", "multiply"}


def folded_model(network: str) -> LoadedModel:
    """``network`` loaded, its Relax module imported with batch norm folded into the convolutions'
    weights (what :func:`~tvm_transfer.networks.relax_module` then returns for it)."""
    model = load_model(network)
    model.relax = imported_module(model, fold_batch_norm=True)
    return model


def operator_key(task: ms.ExtractedTask) -> tuple:
    """What a batch-norm convolution and its folded form share: the fused operators without batch norm's
    own, and the shapes of the input, the weights and the output."""
    operators = [re.sub(r"\d+", "", part) for part in task.task_name.split("_")]
    shapes = [tuple(int(x) for x in a.shape) for a in ms.arg_info.ArgInfo.from_entry_func(task.dispatched[0])]
    return (tuple(op for op in operators if op not in _NORMALISATION), shapes[0], shapes[1], shapes[-1])


def _is_batch_norm_convolution(task: ms.ExtractedTask) -> bool:
    return "conv2d" in task.task_name and "divide" in task.task_name


def _encodings(mod: tvm.IRModule, target: tvm.target.Target) -> dict:
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", num_threads=1)
    return space_encodings(mod, context.generate_design_space(), context.space_generator.postprocs)


def _pairs(epilogue: ms.ExtractedTask, folded: ms.ExtractedTask, records: list, target) -> list[tuple]:
    """The ``records`` of ``epilogue`` replayed with their decisions on both tasks: ``(epilogue module,
    folded module)`` per record that replays on both."""
    spaces = {
        build: _encodings(task.dispatched[0], target)
        for build, task in zip(BUILDS, (epilogue, folded), strict=True)
    }
    pairs = []
    for record in records:
        signature, decisions = trace_signature(record.trace), trace_decisions(record.trace)
        schedules = [spaces[build].get(signature) for build in BUILDS]
        replayed = [space.replay(decisions) if space else None for space in schedules]
        if all(sch is not None for sch in replayed):
            pairs.append(tuple(replayed))
    return pairs


def _matched_tasks(
    plain: LoadedModel, folded_network: LoadedModel, target
) -> tuple[list, list[tuple[int, ms.ExtractedTask]]]:
    """The tasks of ``plain`` (the network as imported), and per batch-norm convolution its index and its
    task in ``folded_network``."""
    tasks = extract_network_tasks(plain, target)
    folded = {}
    for task in extract_network_tasks(folded_network, target):
        folded.setdefault(operator_key(task), task)
    matched = [
        (index, folded[operator_key(task)])
        for index, task in enumerate(tasks)
        if _is_batch_norm_convolution(task) and operator_key(task) in folded
    ]
    missing = sum(_is_batch_norm_convolution(t) for t in tasks) - len(matched)
    if missing:
        raise SystemExit(f"{missing} batch-norm convolutions of {plain.name} have no folded task")
    return tasks, matched


def _record(sch, mod: tvm.IRModule, seconds: float, target, database) -> ms.database.TuningRecord:
    args = ms.arg_info.ArgInfo.from_entry_func(mod)
    return ms.database.TuningRecord(sch.trace, database.commit_workload(mod), [seconds], target, args)


def _measure_pairs(
    plain: LoadedModel, folded_network: LoadedModel, work_dir: Path, target, top: int, rounds: int
) -> tuple[list[dict], dict]:
    """Every batch-norm convolution's pairs timed side by side: per task its name, folded name, share of
    the network's work and the pairs' seconds; and per build the database of each task's chosen pair."""
    tasks, matched = _matched_tasks(plain, folded_network, target)
    database = open_database(work_dir)
    shares = {w.index: w.share for w in task_work(tasks)}
    mods, pairs_of = {}, {}
    for index, folded in matched:
        task = tasks[index]
        records = top_records(database, task.dispatched[0], top)
        pairs_of[index] = _pairs(task, folded, records, target)
        for rank, pair in enumerate(pairs_of[index]):
            for build, sch in zip(BUILDS, pair, strict=True):
                mods[f"{index}#{rank}#{build}"] = sch.mod
    seconds = retime(mods, target, rounds, num_threads=int(target.attrs["num-cores"]))
    chosen = {build: ms.database.MemoryDatabase() for build in BUILDS}
    rows = []
    for index, folded in matched:
        timed = [[seconds[f"{index}#{rank}#{b}"] for b in BUILDS] for rank in range(len(pairs_of[index]))]
        rows.append(
            {
                "task": tasks[index].task_name,
                "folded_task": folded.task_name,
                "share": shares[index],
                "records": top,
                "seconds": timed,
            }
        )
        if not timed or not math.isfinite(min(t[0] for t in timed)):
            continue
        best = min(range(len(timed)), key=lambda rank: timed[rank][0])
        tasks_of = (tasks[index], folded)
        for build, task, sch, secs in zip(BUILDS, tasks_of, pairs_of[index][best], timed[best], strict=True):
            chosen[build].commit_tuning_record(_record(sch, task.dispatched[0], secs, target, chosen[build]))
    merged = {build: ms.database.OrderedUnionDatabase(chosen[build], database) for build in BUILDS}
    return rows, merged


def summarize(report: dict) -> dict:
    """Per network: per batch-norm convolution the median over its pairs of folded / epilogue seconds and
    the ratio of the fastest of each; the share-weighted geometric mean of the per-task medians; and the
    network's folded / epilogue latency per timing run and its median."""
    summary = {}
    for network, entry in report["networks"].items():
        tasks = []
        for row in entry["tasks"]:
            pairs = [(e, f) for e, f in row["seconds"] if math.isfinite(e) and math.isfinite(f)]
            if not pairs:
                continue
            tasks.append(
                {
                    "task": row["task"],
                    "share": row["share"],
                    "pairs": len(pairs),
                    "median_ratio": float(np.median([f / e for e, f in pairs])),
                    "fastest_ratio": min(f for _, f in pairs) / min(e for e, _ in pairs),
                    "fastest_epilogue_us": min(e for e, _ in pairs) * 1e6,
                }
            )
        share = sum(t["share"] for t in tasks)
        weighted = (
            math.exp(sum(t["share"] * math.log(t["median_ratio"]) for t in tasks) / share) if share else None
        )
        network_ratios = [run["ms"]["folded"] / run["ms"]["epilogue"] for run in entry["runs"]]
        summary[network] = {
            "tasks": tasks,
            "share": share,
            "weighted_median_ratio": weighted,
            "network_ratios": network_ratios,
            "median_network_ratio": float(np.median(network_ratios)) if network_ratios else None,
        }
    return summary


def _markdown(report: dict) -> str:
    lines = [
        "# Batch norm folded into the convolution or left as its epilogue (development networks)\n",
        f"{report['machine']['cpu']} ({report['machine']['cores']} cores), target `{report['target']}`, "
        f"commit {report['commit']}. Each network tuned by TVM alone to {report['trials']} trials; the "
        f"{report['top']} best records of every batch-norm convolution replayed with the same decisions "
        "with batch norm as the convolution's epilogue (as imported) and folded into its weights, every "
        f"pair timed side by side ({report['rounds']} interleaved rounds, fastest kept); then the network "
        "built both ways (each batch-norm convolution from the pair whose epilogue schedule timed "
        f"fastest) and timed with ONNX Runtime in {report['rounds']} interleaved rounds per timing run.\n",
    ]
    for network, row in summarize(report).items():
        entry = report["networks"][network]
        lines += [
            f"## {network}\n",
            "| batch-norm convolution | share of the work | pairs | folded / epilogue, median | fastest "
            "/ fastest | fastest epilogue us |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| `{t['task']}` | {t['share']:.1%} | {t['pairs']} | {t['median_ratio']:.3f} | "
            f"{t['fastest_ratio']:.3f} | {t['fastest_epilogue_us']:.1f} |"
            for t in row["tasks"]
        ]
        if row["weighted_median_ratio"] is not None:
            lines.append(
                f"\nOver the {len(row['tasks'])} batch-norm convolutions ({row['share']:.1%} of the work), "
                f"weighted by their share: folded / epilogue {row['weighted_median_ratio']:.3f}.\n"
            )
        lines += [
            "| timing run | epilogue ms | folded ms | ONNX Runtime ms | folded / epilogue | max abs error "
            "(epilogue, folded) | CPU stolen |",
            "|---|---|---|---|---|---|---|",
        ]
        for k, run in enumerate(entry["runs"]):
            ms_ = run["ms"]
            error = run["max_abs_error"]
            stolen = "-" if run["cpu_stolen"] is None else f"{run['cpu_stolen']:.0%}"
            lines.append(
                f"| {k + 1} | {ms_['epilogue']:.3f} | {ms_['folded']:.3f} | {ms_['ONNX Runtime']:.3f} | "
                f"{ms_['folded'] / ms_['epilogue']:.3f} | {error['epilogue']:.1e}, {error['folded']:.1e} | "
                f"{stolen} |"
            )
        if row["median_network_ratio"] is not None:
            lines.append(
                f"\nNetwork, folded / epilogue, median over the runs: {row['median_network_ratio']:.3f}."
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=200, help="TVM alone's tuning budget (default 200)")
    parser.add_argument("--top", type=int, default=4, help="best records replayed per task (default 4)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    parser.add_argument("--runs", type=int, default=3, help="timing runs of the networks (default 3)")
    parser.add_argument(
        "--work-root",
        default="work/bench_transfer/batch-norm-folding",
        help="root of the networks' work dirs",
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    target = host_target()
    root = Path(args.work_root) / str(target.attrs["mcpu"])
    report = {
        "trials": args.trials,
        "top": args.top,
        "rounds": args.rounds,
        **target_context(target),
        "commit": git_commit(short=True),
        "networks": {},
    }
    for network in NETWORKS:
        work_dir = root / model_slug(network)
        tuned_alone(load_model(network), work_dir, args.trials, target)
        print(f"== {network}: timing the pairs", flush=True)
        plain, folded = load_model(network), folded_model(network)
        rows, databases = _measure_pairs(plain, folded, work_dir, target, args.top, args.rounds)
        print(f"== {network}: timing the networks", flush=True)
        models = dict(zip(BUILDS, (plain, folded), strict=True))
        runs = timing_runs(models, databases, target, args.runs, args.rounds)
        report["networks"][network] = {"work_dir": str(work_dir), "tasks": rows, "runs": runs}
        write_report("networks", NAME, report, _markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
