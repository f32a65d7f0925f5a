"""Network tuning: every task under MetaSchedule's gradient scheduler vs FLOPs-aware selection + transfer.

Contenders, per network, with the same total trial budget, cost model, seed and search settings, in one
process run:

* ``all-tasks``: today's ``tune_network`` (every task, gradient task scheduler, which first spends one
  batch on each task);
* ``selection``: ``TaskSelection(flops_share)`` — the tasks carrying that share of weight x FLOPs, budget
  split by FLOPs (floor one batch), schedules transferred to the similar untuned tasks;
* ``selection-no-transfer``: the same selection, the other tasks on TVM's default lowering;
* ``top2``: only the two heaviest tasks tuned (budget split by FLOPs), schedules transferred to the others
  (exercises transfer on networks where the share selects every task of a structure);
* ``untuned``: no tuning at all (TVM's default lowering everywhere), as the floor.

Each contender's work dir is compiled with ``compile_network`` and the built network is timed. The
figures: compiled latency (and its ratio to ``all-tasks``), tuning wall time (including transfer), trials.

    python -m benchmarks.task_selection --quick   # bert_tiny_layer, 32 trials (a few minutes)
    python -m benchmarks.task_selection           # bert_tiny_layer + mobilenet_v2_block, 128 trials

Writes benchmarks/results/tuning/task_selection.{json,md}.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from dataclasses import asdict

from benchmarks.common import git_commit, machine_info, write_report
from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.target import host_target, target_id
from tvm_transfer.tuning.compile import compile_network
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.run import NetworkRun, RunConfig
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.tuning.task_selection import TaskSelection

CONTENDERS = ("all-tasks", "selection", "selection-no-transfer", "top2", "untuned")


def run(network: str, contender: str, options: TuneOptions, share: float, target) -> dict:
    """Tune (unless ``untuned``), compile and time one network; the figures of one contender."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{network}-{contender}-") as work_dir:
        start = time.perf_counter()
        result = None
        if contender != "untuned":
            selection = None
            if contender.startswith("selection"):
                selection = TaskSelection(flops_share=share, transfer=contender == "selection")
            elif contender == "top2":
                selection = TaskSelection(flops_share=1.0, top_tasks=2)
            run = NetworkRun(RunConfig.make(network, work_dir, target=target, options=options))
            result = tune_network(run, selection=selection)
        tuning_seconds = time.perf_counter() - start
        compiled = compile_network(RunConfig.make(network, work_dir, target=target))
    tasks = []
    if result is not None:
        status = result.status or ["tuned" if trials else "default" for *_, trials in result.tasks]
        for (name, weight, flops, best, trials), label in zip(result.tasks, status, strict=True):
            tasks.append(
                {
                    "task": name,
                    "weight": weight,
                    "flops": flops,
                    "best_s": best,
                    "trials": trials,
                    "status": label,
                }
            )
    return {
        "network": network,
        "contender": contender,
        "compiled_s": compiled.tvm_seconds,
        "torch_s": compiled.torch_seconds,
        "max_abs_error": compiled.max_abs_error,
        "tuning_s": tuning_seconds,
        "trials": result.new_trials if result else 0,
        "tasks": tasks,
        "selection": result.selection if result else {},
    }


def markdown(rows: list[dict], header: str) -> str:
    lines = [
        header,
        "",
        "| network | contender | compiled latency (ms) | vs all-tasks | tuning wall (s) | trials "
        "| tasks tuned / transferred / default | max abs error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        base = next(r for r in rows if r["network"] == row["network"] and r["contender"] == "all-tasks")
        counts = [
            sum(t["status"].startswith(k) for t in row["tasks"]) for k in ("tuned", "transferred", "default")
        ]
        split = " / ".join(map(str, counts)) if row["tasks"] else "-"
        lines.append(
            f"| {row['network']} | {row['contender']} | {row['compiled_s'] * 1e3:.4f} | "
            f"{row['compiled_s'] / base['compiled_s']:.2f}x | {row['tuning_s']:.1f} | {row['trials']} | "
            f"{split} | {row['max_abs_error']:.2g} |"
        )
    lines += ["", "Lower latency ratio is better (ratio = contender / all-tasks, same run).", ""]
    for row in rows:
        if row["contender"] not in ("selection", "top2"):
            continue
        lines += [
            f"Per task, `{row['contender']}` on {row['network']}:",
            "",
            "| task | weight | MFLOP | best ms | trials | status |",
        ]
        lines.append("|---|---|---|---|---|---|")
        for t in row["tasks"]:
            best = f"{t['best_s'] * 1e3:.4f}" if t["best_s"] != float("inf") else "-"
            lines.append(
                f"| {t['task']} | {t['weight']:g} | {t['flops'] / 1e6:.2f} | {best} | {t['trials']} | "
                f"{t['status']} |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="bert_tiny_layer, 32 trials, small population")
    parser.add_argument(
        "--networks", nargs="+", help="default: bert_tiny_layer mobilenet_v2_block (quick: bert)"
    )
    parser.add_argument("--trials", type=int, help="total trials per network and contender (128; quick 32)")
    parser.add_argument("--flops-share", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    import_tensor_intrin_fast()
    networks = args.networks or (
        ["bert_tiny_layer"] if args.quick else ["bert_tiny_layer", "mobilenet_v2_block"]
    )
    trials = args.trials or (32 if args.quick else 128)
    options = TuneOptions(
        trials=trials,
        trials_per_iter=8 if args.quick else 16,
        population_size=32 if args.quick else 128,
        seed=args.seed,
        progress=False,
    )
    target = host_target()
    if "all-tasks" not in args.contenders:
        raise SystemExit("the all-tasks contender is the reference of the ratios; keep it")
    machine = machine_info()
    commit, commit_label = git_commit(), git_commit(short=True)
    header = (
        f"# FLOPs-aware task selection + schedule transfer vs all tasks\n\n"
        f"Machine: {machine['cpu']}, {machine['cores']} cores, shared with other jobs during the run (wall "
        f"times are noisy; compare ratios within this run); target {target_id(target)}; "
        f"commit {commit_label}; "
        f"seed {args.seed}; {trials} trials per network and contender, {options.trials_per_iter} per batch, "
        f"population {options.population_size}; cost model xgboost; flops share {args.flops_share}."
    )
    report = {
        "machine": machine,
        "target": target_id(target),
        "commit": commit,
        "seed": args.seed,
        "settings": {
            "networks": networks,
            "trials": trials,
            "flops_share": args.flops_share,
            "options": asdict(options),
            "contenders": args.contenders,
        },
        "results": [],
    }
    rows = report["results"]
    for network in networks:
        for contender in args.contenders:
            print(f"{network} / {contender} ...", flush=True)
            # MetaSchedule's logger set-up leaves its package logger at DEBUG after every run.
            logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
            rows.append(run(network, contender, options, args.flops_share, target))
            print(f"  compiled {rows[-1]['compiled_s'] * 1e3:.4f} ms, tuning {rows[-1]['tuning_s']:.1f} s")
        # Written after every network, so that a long run interrupted later keeps the finished networks.
        write_report("tuning", "task_selection", report, markdown(rows, header), quick=args.quick)


if __name__ == "__main__":
    main()
