"""How many failing candidates the CPU multi-level model keeps from the builder/runner.

Setting: MetaSchedule on the host CPU (LLVM) with a **tight runner timeout**. Users bound the time a
candidate may take (MetaSchedule's ``LocalRunner(timeout_sec=30)``, AutoTVM's ``LocalRunner(timeout=10)``);
on a large workload the slow schedules of the space exceed it and come back as runner errors, stored as
1e10-second costs. Each one wastes the whole timeout, plus the restart of the killed runner worker (a new
process importing TVM, seconds here). On this CPU nothing else fails in practice (the collected datasets
hold 2 failures in 1545 records, and builds succeed), so the timeout is the realistic failure. Workloads
and timeouts are scaled down together so that a run fits the time budget: the timeout is ~50-100x the best
latency of each task, as 30 s is for a kernel of ~0.3-0.6 s (e.g. a 2048^3 matmul), so that ~10-40% of
random candidates time out. Whether a candidate is that slow shows in its lowered IR (no parallel loop,
scalar stores, loop order and tile sizes), which the model's validity head sees.

Contenders (one process, same tasks, seeds, budget and search settings; their order rotates per seed so
that they share the machine's load alike):

- **multilevel**: :class:`tvm_transfer.cost_model.multilevel.MultiLevelCostModel` (validity head +
  advanced head on kernel, hardware and lowered-IR features);
- **tvm-xgb-nowarmup**: TVM's ``XGBModel`` trained from the first measured batch on;
- **tvm-random**: TVM's ``RandomModel``, whose failure rate is the reference of the setting.

Reported per task, seed and contender: candidates measured, failures (build errors, runner timeouts, other
run errors), wall seconds the runner spent on failing candidates (the timeout and the worker restart) and
on all candidates, the best latency found, and for multilevel the distinct candidates its search scored and
how many of them the validity head rejected. Summary: failures summed over runs, failures avoided by
multilevel vs XGBModel (%), geometric-mean ratio of the best latency to XGBModel's.

Usage: ``python -m benchmarks.multilevel_cpu [--quick]`` (quick: one task, one seed, 16 trials, ~5 min;
full: two tasks x two seeds x 32 trials, ~35 min on a shared 2-core machine). Writes
``benchmarks/results/ml2tuner/multilevel_cpu[_quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
from tvm.s_tir import meta_schedule as ms

from benchmarks.common import geomean, git_commit, machine_info, write_report
from tenset_tools.metrics import running_best
from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.callbacks import FailureLog
from tvm_transfer.cost_model import make_cost_model
from tvm_transfer.cost_model.multilevel import MultiLevelCostModel
from tvm_transfer.runner import measuring_workers
from tvm_transfer.target import host_core_count, host_target
from tvm_transfer.tuning.session import evolution_settings
from tvm_transfer.workloads import make_workload

CONTENDERS = ("multilevel", "tvm-xgb-nowarmup", "tvm-random")
REFERENCE = "tvm-xgb-nowarmup"

#: name -> (workload kind, shape, runner timeout in seconds). Timeouts: ~50-100x the best latency.
TASKS = {
    "matmul-512": ("matmul", (512, 512, 512), 0.4),
    "conv2d-28x128": ("conv2d", (1, 28, 28, 128, 128, 3, 1, 1), 0.35),
}


@dataclass
class RunOutcome:
    """One tuning run of one contender: per-candidate outcomes and the wall times of the runner."""

    contender: str
    rows: list[dict]
    walls: dict[str, float]
    wall_seconds: float
    scored: int | None = None
    rejected: int | None = None
    extra: dict = field(default_factory=dict)

    def summary(self) -> dict:
        kinds = [r["kind"] for r in self.rows]
        failing_wall = sum(self.walls.get(r["artifact"], 0.0) for r in self.rows if r["kind"] != "ok")
        latencies = [r["seconds"] for r in self.rows]
        return {
            "contender": self.contender,
            "measured": len(self.rows),
            "failures": sum(k != "ok" for k in kinds),
            "build_errors": kinds.count("build"),
            "timeouts": kinds.count("timeout"),
            "run_errors": kinds.count("run"),
            "runner_wall_failing_seconds": failing_wall,
            "runner_wall_seconds": sum(self.walls.values()),
            "tuning_wall_seconds": self.wall_seconds,
            "best_seconds": float(min(latencies, default=float("inf"))),
            "curve_seconds": [float(x) for x in running_best(latencies)] if latencies else [],
            "errors": sorted({r["error"] for r in self.rows if r["error"]})[:5],
            "scored_distinct": self.scored,
            "rejected_by_validity_head": self.rejected,
        }


def tune_once(workload, target, contender: str, seed: int, timeout: float, args) -> RunOutcome:
    """Tune ``workload`` with ``contender`` for ``args.trials`` trials under a runner timeout (seconds)."""
    model = make_cost_model(contender, seed=seed)
    log = FailureLog()
    start = time.perf_counter()
    builder, runner = measuring_workers(timeout_sec=timeout, num_threads=host_core_count())
    with tempfile.TemporaryDirectory() as work_dir:
        ms.tune_tir(
            mod=workload.prim_func().with_attr("global_symbol", "main"),
            target=target,
            work_dir=work_dir,
            max_trials_global=args.trials,
            num_trials_per_iter=args.per_iter,
            builder=builder,
            runner=runner,
            cost_model=model,
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), log],
            strategy=ms.search_strategy.EvolutionarySearch(**evolution_settings(args.population)),
            seed=seed,
        )
    outcome = RunOutcome(contender, log.rows, runner.walls, time.perf_counter() - start)
    if isinstance(model, MultiLevelCostModel):
        outcome.scored, outcome.rejected = len(model.scored_keys), len(model.rejected_keys)
    return outcome


def _geomean_of_finite(values: list[float]) -> float:
    """Geometric mean of the finite positive ``values`` (a failed run has no ratio); NaN when none is."""
    finite = [v for v in values if np.isfinite(v) and v > 0]
    return geomean(finite) if finite else float("nan")


def summarise(runs: list[dict]) -> dict:
    """Totals per contender over all runs, failures avoided vs XGBModel, best-latency ratios."""
    total = {}
    for contender in CONTENDERS:
        mine = [r for r in runs if r["contender"] == contender]
        total[contender] = {
            "runs": len(mine),
            "measured": sum(r["measured"] for r in mine),
            "failures": sum(r["failures"] for r in mine),
            "failure_rate": sum(r["failures"] for r in mine) / max(sum(r["measured"] for r in mine), 1),
            "runner_wall_failing_seconds": sum(r["runner_wall_failing_seconds"] for r in mine),
            "runner_wall_seconds": sum(r["runner_wall_seconds"] for r in mine),
            "tuning_wall_seconds": sum(r["tuning_wall_seconds"] for r in mine),
        }
        ratios = []
        for r in mine:
            ref = next(x for x in runs if x["contender"] == REFERENCE and x["key"] == r["key"])
            ratios.append(r["best_seconds"] / ref["best_seconds"])
        total[contender]["best_ratio_geomean_vs_xgb"] = _geomean_of_finite(ratios)
        total[contender]["best_ratio_worst_vs_xgb"] = float(max(ratios, default=float("nan")))
    xgb = total[REFERENCE]["failures"]
    for contender in CONTENDERS:
        total[contender]["failures_avoided_vs_xgb_percent"] = (
            100.0 * (xgb - total[contender]["failures"]) / xgb if xgb else float("nan")
        )
    ml = [r for r in runs if r["contender"] == "multilevel"]
    total["multilevel"]["scored_distinct"] = sum(r["scored_distinct"] or 0 for r in ml)
    total["multilevel"]["rejected_by_validity_head"] = sum(r["rejected_by_validity_head"] or 0 for r in ml)
    return total


def markdown(runs: list[dict], total: dict, args) -> str:
    lines = [
        f"# multilevel_cpu ({'quick' if args.quick else 'full'}): failing candidates under a tight runner "
        "timeout",
        "",
        f"Host CPU (LLVM, {host_core_count()} cores, shared with other jobs), {args.trials} trials per run, "
        f"batches of {args.per_iter}, population {args.population}, seeds {args.seeds}. Failures = build "
        "errors + runner timeouts + run errors; wall = runner seconds (a timeout costs the timeout and the "
        "worker restart). Best ratio = best latency / tvm-xgb-nowarmup's best in the same task and seed.",
        "",
        "| task (timeout) | seed | contender | measured | failures | timeouts | failing wall s "
        "| runner wall s | best ms | best / xgb | scored | rejected by V |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        ref = next(x for x in runs if x["contender"] == REFERENCE and x["key"] == r["key"])
        lines.append(
            f"| {r['task']} ({r['timeout']} s) | {r['seed']} | {r['contender']} | {r['measured']} | "
            f"{r['failures']} | {r['timeouts']} | {r['runner_wall_failing_seconds']:.1f} | "
            f"{r['runner_wall_seconds']:.1f} | {r['best_seconds'] * 1e3:.2f} | "
            f"{r['best_seconds'] / ref['best_seconds']:.3f} | {r['scored_distinct'] or '-'} | "
            f"{r['rejected_by_validity_head'] if r['rejected_by_validity_head'] is not None else '-'} |"
        )
    lines += [
        "",
        "## Totals over all tasks and seeds",
        "",
        "| contender | failures / measured | failure rate | avoided vs xgb | failing wall s | runner wall s "
        "| best / xgb (geomean) | worst best / xgb |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in CONTENDERS:
        t = total[c]
        lines.append(
            f"| {c} | {t['failures']} / {t['measured']} | {t['failure_rate']:.1%} | "
            f"{t['failures_avoided_vs_xgb_percent']:.1f}% | {t['runner_wall_failing_seconds']:.1f} | "
            f"{t['runner_wall_seconds']:.1f} | {t['best_ratio_geomean_vs_xgb']:.3f} | "
            f"{t['best_ratio_worst_vs_xgb']:.3f} |"
        )
    ml = total["multilevel"]
    lines += [
        "",
        f"multilevel's searches scored {ml['scored_distinct']} distinct candidates; its validity head "
        f"rejected {ml['rejected_by_validity_head']} of them (score -1, never sent to the builder). "
        "tvm-random's failure rate is the share of failing candidates in the setting itself.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tasks", default=None, help=f"comma-separated names of {sorted(TASKS)}")
    parser.add_argument("--seeds", default=None, help="comma-separated (default 0,1; quick 0)")
    parser.add_argument("--trials", type=int, default=None, help="per run (default 32; quick 16)")
    parser.add_argument("--per-iter", type=int, default=8, help="candidates measured per batch")
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=None, help="override every task's runner timeout")
    args = parser.parse_args(argv)
    names = args.tasks.split(",") if args.tasks else (["matmul-512"] if args.quick else list(TASKS))
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        parser.error(f"unknown task(s) {unknown}; choose from {sorted(TASKS)}")
    args.seeds = [int(s) for s in (args.seeds or ("0" if args.quick else "0,1")).split(",")]
    args.trials = args.trials or (16 if args.quick else 32)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    import_tensor_intrin_fast()
    target = host_target()
    start = time.perf_counter()
    runs: list[dict] = []
    for name in names:
        kind, shape, timeout = TASKS[name]
        timeout = args.timeout or timeout
        workload = make_workload(kind, shape)
        for i, seed in enumerate(args.seeds):
            order = CONTENDERS[i % 3 :] + CONTENDERS[: i % 3]  # rotate: same load for every contender
            for contender in order:
                outcome = tune_once(workload, target, contender, seed, timeout, args)
                row = {"task": name, "seed": seed, "timeout": timeout, "key": f"{name}/{seed}"}
                row.update(outcome.summary())
                runs.append(row)
                print(
                    f"{name} seed {seed} {contender}: {row['failures']}/{row['measured']} failed "
                    f"({row['runner_wall_failing_seconds']:.1f} s), "
                    f"best {row['best_seconds'] * 1e3:.2f} ms, "
                    f"rejected {row['rejected_by_validity_head']}, {row['tuning_wall_seconds']:.0f} s",
                    flush=True,
                )
    total = summarise(runs)
    report = {
        "benchmark": "multilevel_cpu",
        "mode": "quick" if args.quick else "full",
        "machine": machine_info(),
        "git_commit": git_commit(),
        "settings": {**vars(args), "tasks": {n: TASKS[n] for n in names}},
        "load_note": "2 cores shared with other jobs; contenders interleaved per seed in one process",
        "runs": runs,
        "total": total,
        "seconds": time.perf_counter() - start,
    }
    write_report("ml2tuner", "multilevel_cpu", report, markdown(runs, total, args), quick=args.quick)
    print(markdown(runs, total, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
