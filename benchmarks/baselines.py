"""Baseline cost models side by side: best latency vs trials, tuning wall time and its breakdown.

Contenders, on the same tasks, target, seed and search settings in one process run: TVM's XGBModel
(default, which scores at random for its first 100 samples), TVM's XGBModel with ``num_warmup_samples=0``,
TVM's RandomModel, and our XGBoost, LightGBM and MLP cost models.

    python -m benchmarks.baselines --quick   # 1 task x 16 trials per contender (a few minutes)
    python -m benchmarks.baselines           # 3 tasks x 64 trials per contender

Writes benchmarks/results/baselines/baselines.{json,md,png}.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from benchmarks.common import git_commit, machine_info, report_path, write_report
from tvm_transfer.target import host_target, target_id
from tvm_transfer.tuning.operator import TuneResult, tune_workload
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.workloads import make_workload

CONTENDERS = ("tvm-xgb", "tvm-xgb-nowarmup", "tvm-random", "xgboost", "lightgbm", "mlp")
TASKS = {
    "conv2d": (1, 14, 14, 256, 256, 3, 1, 1),  # ResNet-18 stage 3, 3x3
    "dense": (64, 1024, 1024),  # a BERT-style projection, batch of 64 tokens
    "depthwise_conv2d": (1, 56, 56, 128, 3, 1, 1),  # MobileNet-style, memory-bound
}
# Profiler scopes grouped into the phases of a trial.
PHASES = {
    "search": ("EvoSearch/SampleInitPopulation", "EvoSearch/Evolve/Mutation", "EvoSearch/Evolve/Misc",
               "EvoSearch/PickBestFromDatabase", "EvoSearch/PickWithEpsGreedy"),
    "cost model": ("EvoSearch/Evolve/PredictNormalizedScore", "MeasureCallback/UpdateCostModel"),
    "build": ("SendToBuilder",),
    "run": ("SendToRunner", "JoinRunnerFutures"),
}  # fmt: skip


def phases(profile: dict[str, float]) -> dict[str, float]:
    """Seconds per phase of :data:`PHASES`, plus the rest of the wall time as ``other``."""
    out = {phase: sum(profile.get(scope, 0.0) for scope in scopes) for phase, scopes in PHASES.items()}
    out["other"] = max(profile.get("Total", 0.0) - sum(out.values()), 0.0)
    return out


def best_at(curve: list[float], trials: int) -> float:
    return float(curve[min(trials, len(curve)) - 1]) if curve else float("inf")


def run(task: str, shape: tuple[int, ...], model: str, options: TuneOptions) -> TuneResult:
    with tempfile.TemporaryDirectory(prefix=f"bench-{task}-{model}-") as work_dir:
        return tune_workload(
            make_workload(task, shape),
            work_dir,
            options=options,
            plan=TuningPlan(cost_model=model),
            reference=False,
        )


def summarise(results: dict, references: dict, trials: int) -> tuple[list[dict], str]:
    rows, lines = [], []
    checkpoints = sorted({max(trials // 4, 1), trials // 2, trials})
    head = " | ".join(f"best@{c} (x best)" for c in checkpoints)
    lines.append(
        f"| task | model | {head} | GFLOPS | vs PyTorch | wall s | s/trial | search | model | build | run |"
    )
    lines.append("|" + "---|" * (10 + len(checkpoints)))
    for task, by_model in results.items():
        best_known = min(r.best_seconds for r in by_model.values())
        for model, r in by_model.items():
            share = phases(r.profile)
            row = {
                "task": task,
                "model": model,
                "best_seconds": r.best_seconds,
                "best_at": {c: best_at(r.curve, c) for c in checkpoints},
                "ratio_to_best_known": r.best_seconds / best_known,
                "gflops": r.gflops,
                "speed_vs_pytorch": references[task] / r.best_seconds,
                "wall_seconds": r.tuning_seconds,
                "seconds_per_trial": r.tuning_seconds / max(r.new_trials, 1),
                "phases_seconds": share,
                "curve": r.curve,
                "profile": r.profile,
            }
            rows.append(row)
            cells = " | ".join(
                f"{row['best_at'][c] * 1e3:.3f} ms ({row['best_at'][c] / best_known:.2f})"
                for c in checkpoints
            )
            lines.append(
                f"| {task} | {model} | {cells} | {r.gflops:.1f} | {row['speed_vs_pytorch']:.2f}x | "
                f"{r.tuning_seconds:.0f} | {row['seconds_per_trial']:.2f} | {share['search']:.0f} | "
                f"{share['cost model']:.0f} | {share['build']:.0f} | {share['run']:.0f} |"
            )
    return rows, "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, (task, by_model) in zip(axes[0], results.items(), strict=True):
        for model, r in by_model.items():
            ax.plot(np.arange(1, len(r.curve) + 1), np.asarray(r.curve) * 1e3, label=model)
        ax.set(title=task, xlabel="trials", ylabel="best latency (ms)", yscale="log")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 task x 16 trials per contender")
    parser.add_argument("--trials", type=int, help="trials per task and contender (default 64; quick 16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    args = parser.parse_args()
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    # before any (tracked) result file is rewritten, which would mark the tree dirty
    commit, commit_label = git_commit(), git_commit(short=True)
    trials = args.trials or (16 if args.quick else 64)
    tasks = dict(list(TASKS.items())[:1]) if args.quick else TASKS
    options = TuneOptions(
        trials=trials, trials_per_iter=16 if trials >= 32 else 8, seed=args.seed, progress=False
    )

    # PyTorch's OpenMP threads slow down many-fold when another process holds a core, so the reference is
    # timed before and after each task's runs and the faster of the two is kept.
    references = {task: make_workload(task, shape).reference_seconds() for task, shape in tasks.items()}
    results: dict[str, dict[str, TuneResult]] = {task: {} for task in tasks}
    for task, shape in tasks.items():
        for model in args.models:
            results[task][model] = result = run(task, shape, model, options)
            best_ms, wall = result.best_seconds * 1e3, result.tuning_seconds
            print(f"{task:<18} {model:<18} best {best_ms:.4f} ms in {wall:.0f} s", flush=True)
        references[task] = min(references[task], make_workload(task, shape).reference_seconds())
    rows, table = summarise(results, references, trials)
    name = "baselines" if args.seed == 0 else f"baselines_seed{args.seed}"
    plot(results, report_path("baselines", name, ".png", quick=args.quick))
    machine = machine_info()
    header = (
        f"# Baseline cost models, {trials} trials per task\n\n"
        f"Machine: {machine['cpu']}, {machine['cores']} cores; target {target_id(host_target())}; "
        f"commit {commit_label}; seed {args.seed}; population {options.population_size}, "
        f"{options.trials_per_iter} candidates per batch. best@N: best latency after N trials (ratio to the "
        f"best any contender found). Phase columns are seconds from MetaSchedule's profiler.\n\n"
    )
    report = {
        "machine": machine,
        "target": str(host_target()),
        "commit": commit,
        "seed": args.seed,
        "settings": {"trials": trials, "tasks": tasks, "options": vars(options), "contenders": args.models},
        "pytorch_reference_seconds": references,
        "rows": rows,
    }
    write_report("baselines", name, report, header + table + "\n", quick=args.quick)


if __name__ == "__main__":
    main()
