"""ModelX in tuning: an adapted model as the cost model of short tuning runs on the target, against the
same run with the target-only model and with the zero-shot source model.

Measure: the profiles (measurements) each run needs to reach the best the platform's default tuner
finds with its full budget (the *bar*), per held-out layer or task and seed; a run that never reaches it
counts as not reached. Every model is refitted after every batch on its adaptation rows plus the run's
own measurements (labels: normalised throughput, failures 0).

**VTA** (simulated, ``vta_ext``; :class:`tvm_transfer.hetero.tuning.ModelKnobTuner`, batches of 16,
budget 128; bar: :class:`~tvm_transfer.vta.ml2tuner.BaselineTuner`, AutoTVM's XGBTuner, 128 profiles):

- *platforms*: source = the CPU per-store-feature records (``kernel`` view, 328 columns) of the conv2d,
  matmul and dense tasks of every CPU dataset of ``benchmarks.modelx`` except the ``resnet_block``
  network (ResNet-18's own convolutions); target = the stock VTA, visible features (35 columns, no name in
  common);
- *accelerators*: source = the stock VTA's visible features of random configurations of the development
  layers; target = the extended VTA (``evta``), the same 35 names with other hardware values.

Layers: the adaptation pool is 200 random configurations of each *development* layer C2-C6 measured on the
target (1000 rows); each seed draws ``--fraction`` (5%) of it as the adaptation sample. C9 was used to
time the contenders and to smoke-test (not reported). The *held-out* layers C7, C8, C10, C11 are tuned:
neither the source model nor any adaptation row saw them.

**CPU** (MetaSchedule, ``tune_workload``, evolutionary search, batches of 8, ``--cpu-trials`` trials on the
target ``llvm/x86-64-v3/2``; bar: the package's default cost model ``xgboost`` with the same budget):
source = ``llvm/znver4/2`` records, per-store features (``kernel``); target = ``llvm/x86-64-v3/2`` records
described by pooled schedule traces (``trace`` view, computed from each MetaSchedule candidate,
:class:`~tvm_transfer.hetero.tuning.HeteroCostModel`); adaptation sample = ``--fraction`` of those
records (all of other tasks). Held-out tasks: matmul 128x128x128 and 256x256x256, in no dataset. CPU
timings on a shared 2-core machine are noisy: profiles to reach the bar are also given within 5% of it.

Contenders: ``modelx`` = ``ModelX(mode="align", epochs=300, align_restarts=2)`` (the platforms pair's
best few-shot variant in ``benchmarks.modelx``; ``both`` costs 5x more per refit; fewer steps than the
defaults because it is refitted after every batch), ``target-only`` = ``TargetOnly`` (XGBoost on
the adaptation rows and the run's own), ``zero-shot`` = ``ZeroShot`` (the source model through the
by-name mapping; with no shared name it is one constant, so the search is unguided).

Usage: ``python -m benchmarks.modelx_tuning [--quick] [--seeds 0 1 2 3 4] [--cpu-seeds 0 1 2]
[--skip-cpu] [--report-name NAME]``. Writes ``benchmarks/results/modelx/modelx_tuning[_quick].{json,md}``
(``NAME`` instead of ``modelx_tuning``). The replication on other seeds::

    python -m benchmarks.modelx_tuning --skip-cpu --seeds 5 6 7 8 9 --report-name modelx_tuning_seeds5-9
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time

import numpy as np
import pandas as pd

from benchmarks.common import git_commit, machine_info, write_report
from benchmarks.modelx import cpu_records
from tenset_tools.frame import group_keys, normalised_throughput
from tvm_transfer.hetero import ModelX, SourceModel, TargetOnly, ZeroShot, labelled_rows
from tvm_transfer.hetero.tuning import HeteroCostModel, ModelKnobTuner, visible_frame
from tvm_transfer.target import target_of_id
from tvm_transfer.tuning.operator import tune_workload
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.vta.ml2tuner import BaselineTuner, VtaMeasurer
from vta_ext.hw import HwConfig, preset
from vta_ext.workloads import RESNET18

DEV_LAYERS = ("C2", "C3", "C4", "C5", "C6")
HELD_OUT_LAYERS = ("C7", "C8", "C10", "C11")
POOL_PER_LAYER = 200
VTA_BUDGET = 128
CPU_TARGET = "llvm/x86-64-v3/2"
CPU_SOURCE = "llvm/znver4/2"
CPU_TASKS = (("matmul", (128, 128, 128)), ("matmul", (256, 256, 256)))
CONTENDERS = ("modelx", "target-only", "zero-shot")
TOLERANCES = (0.0, 0.05)
#: ModelX is refitted after every batch: fewer alignment steps and restarts than its defaults (1000, 4),
#: 6.7x cheaper per refit; on a 2-core shared machine the defaults took minutes per 128-profile run.
MODELX_TUNING = {"epochs": 300, "align_restarts": 2}


def contender(name: str, source: SourceModel, seed: int):
    """A fresh estimator of the contender ``name``."""
    if name == "modelx":
        return ModelX(source, mode="align", seed=seed, **MODELX_TUNING)
    if name == "target-only":
        return TargetOnly(seed=seed)
    return ZeroShot(source)


def profiles_to_reach(latencies: list[float], bar: float, tolerance: float = 0.0) -> int | None:
    """1-based count of measurements after which the running best is within ``tolerance`` of ``bar``
    (seconds), or None if never."""
    for k, latency in enumerate(latencies, 1):
        if latency <= bar * (1 + tolerance):
            return k
    return None


def vta_pool(hw: HwConfig, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """Visible features and normalised throughput (per layer; invalid 0) of ``POOL_PER_LAYER`` random
    configurations of each development layer on ``hw``."""
    rng = np.random.default_rng(seed)
    frames, labels = [], []
    for layer in DEV_LAYERS:
        measurer = VtaMeasurer(RESNET18[layer], hw)
        picks = rng.choice(len(measurer.space), POOL_PER_LAYER, replace=False)
        results = [measurer.profile(i) for i in picks]
        latency = np.array([r.latency if r.valid else np.inf for r in results])
        frames.append(visible_frame(measurer, picks))
        labels.append(normalised_throughput(latency, np.zeros(len(latency))))
    return pd.concat(frames, ignore_index=True), np.concatenate(labels)


def vta_scenarios() -> dict[str, dict]:
    cpu = cpu_records()
    platforms_rows = cpu[
        cpu["op_kind"].isin(["conv2d", "matmul", "dense"]) & (cpu["network"] != "resnet_block")
    ]
    Xc, yc, _ = labelled_rows(platforms_rows, "kernel")
    Xv, yv = vta_pool(HwConfig(), seed=100)
    started = time.perf_counter()
    sources = {"platforms": SourceModel(seed=0).fit(Xc, yc), "accelerators": SourceModel(seed=0).fit(Xv, yv)}
    print(f"source models fitted ({time.perf_counter() - started:.0f} s)", flush=True)
    return {
        "platforms": {
            "source": sources["platforms"],
            "source_rows": len(Xc),
            "hw": HwConfig(),
            "pool": (Xv, yv),
        },
        "accelerators": {
            "source": sources["accelerators"],
            "source_rows": len(Xv),
            "hw": preset("evta"),
            "pool": vta_pool(preset("evta"), seed=200),
        },
    }


def profile_latencies(run) -> list[float]:
    """Running best latency (seconds) after each profile of a knob-tuner run."""
    latency = [e.latency if e.valid else np.inf for e in run.events if e.kind == "profile"]
    return list(np.minimum.accumulate(latency))


def run_vta(seeds: list[int], fraction: float, layers: tuple[str, ...]) -> dict:
    rows = []
    for name, spec in vta_scenarios().items():
        pool_X, pool_y = spec["pool"]
        n_few = max(4, round(fraction * len(pool_X)))
        for seed in seeds:
            few = np.random.default_rng(seed).permutation(len(pool_X))[:n_few]
            prior = (pool_X.iloc[few].reset_index(drop=True), pool_y[few])
            for layer in layers:
                cache: dict = {}
                started = time.perf_counter()
                baseline = BaselineTuner(seed=seed).tune(
                    VtaMeasurer(RESNET18[layer], spec["hw"], cache), VTA_BUDGET
                )
                baseline_seconds = time.perf_counter() - started
                bar_curve = profile_latencies(baseline)
                bar = bar_curve[-1]
                row = {"scenario": name, "layer": layer, "seed": seed, "adaptation_rows": n_few, "bar": bar}
                row["baseline"] = _summary(baseline, bar_curve, bar, baseline_seconds)
                for method in CONTENDERS:
                    started = time.perf_counter()
                    tuner = ModelKnobTuner(
                        contender(method, spec["source"], seed), prior, seed=seed, name=method
                    )
                    run = tuner.tune(VtaMeasurer(RESNET18[layer], spec["hw"], cache), VTA_BUDGET)
                    row[method] = _summary(run, profile_latencies(run), bar, time.perf_counter() - started)
                rows.append(row)
                reached = {m: (row[m]["to_bar"], round(row[m]["seconds"])) for m in ("baseline", *CONTENDERS)}
                print(f"vta {name} {layer} seed {seed}: profiles to the bar, seconds {reached}", flush=True)
    return {"rows": rows}


def _summary(run, curve: list[float], bar: float, seconds: float) -> dict:
    return {
        "to_bar": profiles_to_reach(curve, bar),
        "best_over_bar": curve[-1] / bar,
        "invalid_profiles": run.n_invalid_profiles,
        "seconds": seconds,
        "curve": curve,
    }


def run_cpu(seeds: list[int], fraction: float, trials: int, tasks) -> dict:
    from tvm_transfer.workloads import make_workload

    cpu = cpu_records()
    Xs, ys, _ = labelled_rows(cpu[cpu["target_id"] == CPU_SOURCE], "kernel")
    source = SourceModel(seed=0).fit(Xs, ys)
    Xt, yt, records = labelled_rows(cpu[cpu["target_id"] == CPU_TARGET], "trace")
    target = target_of_id(CPU_TARGET)
    n_few = max(4, round(fraction * len(Xt)))
    rows = []
    for seed in seeds:
        few = np.random.default_rng(seed).permutation(len(Xt))[:n_few]
        for t, (kind, shape) in enumerate(tasks):
            workload = make_workload(kind, shape)
            names = ["baseline", *CONTENDERS]
            shift = (t + seed) % len(names)  # rotate the order, so no contender always runs first
            curves, seconds = {}, {}
            for name in names[shift:] + names[:shift]:
                if name == "baseline":
                    cost_model = "xgboost"
                else:
                    cost_model = HeteroCostModel(contender(name, source, seed), seed=seed).fit_rows(
                        Xt.iloc[few], yt[few], group_keys(records.iloc[few])
                    )
                started = time.perf_counter()
                with tempfile.TemporaryDirectory() as work_dir:
                    result = tune_workload(
                        workload,
                        work_dir,
                        plan=TuningPlan(cost_model=cost_model),
                        target=target,
                        options=TuneOptions(trials=trials, trials_per_iter=8, seed=seed, progress=False),
                        reference=False,
                    )
                curves[name], seconds[name] = [float(c) for c in result.curve], time.perf_counter() - started
            bar = curves["baseline"][-1]
            row = {"task": workload.name, "seed": seed, "adaptation_rows": n_few, "bar": bar}
            for name in names:
                row[name] = {
                    **{f"to_bar_{tol:.2f}": profiles_to_reach(curves[name], bar, tol) for tol in TOLERANCES},
                    "best_over_bar": curves[name][-1] / bar,
                    "seconds": seconds[name],
                    "curve": curves[name],
                }
            rows.append(row)
            print(
                f"cpu {workload.name} seed {seed}: {[(n, row[n]['to_bar_0.05']) for n in names]}", flush=True
            )
    return {"rows": rows, "source_rows": len(Xs), "target_records": len(Xt)}


def _count(values: list[int | None], budget: int) -> str:
    reached = sorted(v for v in values if v is not None)
    misses = len(values) - len(reached)
    # Median with a miss counted as beyond the budget.
    ordered = reached + [budget + 1] * misses
    median = float(np.median(ordered)) if ordered else float("nan")
    shown = f"{median:.0f}" if median <= budget else f">{budget}"
    return f"{shown} ({len(reached)}/{len(values)})"


def markdown(report: dict) -> str:
    lines = [
        "# ModelX in tuning: profiles to reach the default tuner's best",
        "",
        f"Commit `{report['commit']}`, {report['machine']['cpu']} ({report['machine']['cores']} cores), "
        f"{report['seconds']:.0f} s. Cells: median profiles to reach the bar (a miss counts as beyond the "
        "budget) and (runs that reached it / runs). Adaptation rows: "
        f"{report['fraction']:.0%} of the target pool.",
    ]
    if "vta" in report:
        rows = report["vta"]["rows"]
        lines += [
            "",
            f"## VTA: held-out layers {', '.join(report['vta_layers'])}, seeds {report['seeds']}, budget "
            f"{VTA_BUDGET}",
            "",
            "Bar: BaselineTuner (AutoTVM-like), 128 profiles. Best / bar: mean over runs of the run's final "
            "best latency over the bar (1 = reached).",
            "",
            "| scenario | tuner | profiles to the bar | best / bar | invalid profiles | seconds per run |",
            "|---|---|---|---|---|---|",
        ]
        for scenario in dict.fromkeys(r["scenario"] for r in rows):
            part = [r for r in rows if r["scenario"] == scenario]
            for method in ("baseline", *CONTENDERS):
                cells = [r[method] for r in part]
                lines.append(
                    f"| {scenario} | {method} | {_count([c['to_bar'] for c in cells], VTA_BUDGET)} | "
                    f"{np.mean([c['best_over_bar'] for c in cells]):.3f} | "
                    f"{np.mean([c['invalid_profiles'] for c in cells]):.1f} | "
                    f"{np.mean([c['seconds'] for c in cells]):.1f} |"
                )
        lines += ["", "Per layer (profiles to the bar, per seed):", ""]
        lines.append("| scenario | layer | " + " | ".join(("baseline", *CONTENDERS)) + " |")
        lines.append("|---|---|" + "---|" * (1 + len(CONTENDERS)))
        for scenario in dict.fromkeys(r["scenario"] for r in rows):
            for layer in report["vta_layers"]:
                part = [r for r in rows if r["scenario"] == scenario and r["layer"] == layer]
                cells = [
                    ", ".join("-" if r[m]["to_bar"] is None else str(r[m]["to_bar"]) for r in part)
                    for m in ("baseline", *CONTENDERS)
                ]
                lines.append(f"| {scenario} | {layer} | " + " | ".join(cells) + " |")
    if "cpu" in report:
        rows = report["cpu"]["rows"]
        trials = report["cpu_trials"]
        lines += [
            "",
            f"## CPU: {CPU_TARGET}, held-out tasks {', '.join(dict.fromkeys(r['task'] for r in rows))}, "
            f"seeds {report['cpu_seeds']}, {trials} trials",
            "",
            "Bar: the package's default cost model (`xgboost`) with the same budget. Timings as the runs "
            "measured them (one timing per candidate).",
            "",
            "| task | tuner | profiles to the bar | within 5% of it | best / bar | seconds per run |",
            "|---|---|---|---|---|---|",
        ]
        for task in dict.fromkeys(r["task"] for r in rows):
            part = [r for r in rows if r["task"] == task]
            for method in ("baseline", *CONTENDERS):
                cells = [r[method] for r in part]
                lines.append(
                    f"| {task} | {method} | {_count([c['to_bar_0.00'] for c in cells], trials)} | "
                    f"{_count([c['to_bar_0.05'] for c in cells], trials)} | "
                    f"{np.mean([c['best_over_bar'] for c in cells]):.3f} | "
                    f"{np.mean([c['seconds'] for c in cells]):.0f} |"
                )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, one layer, one CPU task of 16 trials")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="VTA seeds")
    parser.add_argument("--cpu-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cpu-trials", type=int, default=64)
    parser.add_argument("--fraction", type=float, default=0.05, help="adaptation share of the target pool")
    parser.add_argument("--skip-cpu", action="store_true")
    parser.add_argument("--skip-vta", action="store_true")
    parser.add_argument("--report-name", default="modelx_tuning", help="results/modelx/<name>.{json,md}")
    args = parser.parse_args(argv)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    seeds = args.seeds[:1] if args.quick else args.seeds
    cpu_seeds = args.cpu_seeds[:1] if args.quick else args.cpu_seeds
    cpu_trials = 16 if args.quick else args.cpu_trials
    layers = HELD_OUT_LAYERS[:1] if args.quick else HELD_OUT_LAYERS
    started = time.perf_counter()
    report: dict = {
        "machine": machine_info(),
        "commit": git_commit(short=True),
        "fraction": args.fraction,
        "seeds": seeds,
        "vta_layers": list(layers),
        "development_layers": list(DEV_LAYERS),
        "cpu_seeds": cpu_seeds,
        "cpu_trials": cpu_trials,
    }
    if not args.skip_vta:
        report["vta"] = run_vta(seeds, args.fraction, layers)
    if not args.skip_cpu:
        tasks = CPU_TASKS[:1] if args.quick else CPU_TASKS
        report["cpu"] = run_cpu(cpu_seeds, args.fraction, cpu_trials, tasks)
    report["seconds"] = time.perf_counter() - started
    write_report("modelx", args.report_name, report, markdown(report), quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
