"""Network baseline: TVM's own tuner (MetaSchedule ``XGBModel``, evolutionary search, this package's fast
builder) on whole networks, compiled after growing budgets and timed side by side with PyTorch eager,
``torch.compile`` and ONNX Runtime on the same inputs and threads.

For every budget in turn (all networks at 0 trials, then all at 250, ...) each network is tuned further in
its own work dir, compiled, and timed with the three runtimes in interleaved rounds (fastest round kept).
Every finished (network, budget) point is written to the report at once, so the run resumes where it
stopped; the table says which budgets each network reached. The work dirs also keep the per-round log of
every task's best latency, from which the plot's estimated curve is drawn.

    nice -n 19 python -m benchmarks.networks > work/bench_networks.log 2>&1 &   # resumable
    python -m benchmarks.networks --quick       # resnet_block, budgets 0 and 32, two rounds
    python -m benchmarks.networks --report-only # re-draw the table and plot from the saved points
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
import warnings
from dataclasses import asdict
from pathlib import Path

from benchmarks.common import git_commit, machine_info, network_axes, report_path, save_figure, write_report
from tvm_transfer.networks import load_model, model_slug, split_model_names
from tvm_transfer.target import host_target
from tvm_transfer.tuning.compile import compile_network
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.rounds import read_rounds
from tvm_transfer.tuning.run import RunConfig
from tvm_transfer.tuning.session import TuneOptions

NETWORKS = (
    "torchvision:resnet18",
    "torchvision:mobilenet_v2",
    "torchvision:efficientnet_b0",
    "bert_base",
    "torchvision:resnet50",
)
BUDGETS = (0, 250, 500, 1000, 2000)
QUICK_NETWORKS, QUICK_BUDGETS = ("resnet_block",), (0, 32)
COST_MODEL = "tvm-xgb"  # MetaSchedule's own XGBModel
RUNTIMES = ("PyTorch eager", "torch.compile", "ONNX Runtime")


def _point(network: str, budget: int, work_root: Path, target, rounds: int) -> dict:
    """Tune ``network`` up to ``budget`` trials in its work dir, compile it and time it with every runtime."""
    model = load_model(network)
    work_dir = work_root / model_slug(network)
    start = time.perf_counter()
    tuned = None
    if budget > 0:
        options = TuneOptions(trials=budget, progress=True)
        plan = TuningPlan(cost_model=COST_MODEL)
        tuned = tune_network(RunConfig.make(model, work_dir, target=target, options=options, plan=plan))
    tune_seconds = time.perf_counter() - start
    compiled = compile_network(RunConfig.make(model, work_dir, target=target), rounds=rounds)
    return {
        "network": network,
        "budget": budget,
        "trials": sum(row[4] for row in tuned.tasks) if tuned else 0,
        "tasks": len(tuned.tasks) if tuned else compiled.tuned_tasks[1],
        "tune_seconds": tune_seconds,
        "estimated_ms": tuned.weighted_latency * 1e3
        if tuned and math.isfinite(tuned.weighted_latency)
        else None,
        "compile": asdict(compiled),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "commit": git_commit(short=True),
    }


def _latencies(point: dict) -> dict[str, float | None]:
    """Latency (ms) of every runtime of a point; ``None`` where it was not available."""
    return {r["name"]: (r["seconds"] * 1e3 if r["seconds"] else None) for r in point["compile"]["results"]}


def _markdown(report: dict) -> str:
    points = report["points"]
    lines = [
        "# Network baseline: TVM alone vs PyTorch eager, torch.compile, ONNX Runtime",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores; target "
        f"`{report['target']}`; cost model MetaSchedule `XGBModel` ({COST_MODEL}), evolutionary search "
        f"(population {report['population']}), {report['rounds']} interleaved timing rounds per point "
        "(fastest kept). Ratios are TVM latency / best non-TVM runtime latency of the same point, timed in "
        "the same rounds (below 1: TVM is faster); 'best other' is the fastest non-TVM latency of any point.",
        "",
        "| network | tasks | best other (ms) | which | "
        + " | ".join(f"{b} trials" for b in report["budgets"])
        + " |",
        "|---|---|---|---|" + "---|" * len(report["budgets"]),
    ]
    for network in report["networks"]:
        mine = {p["budget"]: p for p in points if p["network"] == network}
        if not mine:
            lines.append(
                f"| {network} | | | | " + " | ".join("not reached" for _ in report["budgets"]) + " |"
            )
            continue
        others = [
            (v, k) for p in mine.values() for k, v in _latencies(p).items() if k in RUNTIMES and v is not None
        ]
        best, which = min(others) if others else (None, "-")
        cells = []
        for budget in report["budgets"]:
            point = mine.get(budget)
            tvm_ms = _latencies(point).get("TVM") if point else None
            here = [v for k, v in _latencies(point).items() if k in RUNTIMES and v] if point else []
            if point is None:
                cells.append("not reached")
            elif tvm_ms is None or not here:
                cells.append("failed")
            else:
                cells.append(f"{tvm_ms:.2f} ms ({tvm_ms / min(here):.2f})")
        tasks = next(iter(mine.values()))["tasks"]
        best_text = f"{best:.2f}" if best is not None else "-"
        lines.append(f"| {network} | {tasks} | {best_text} | {which} | " + " | ".join(cells) + " |")
    lines += ["", "Per point (ms, fastest interleaved round):", ""]
    lines += ["| network | budget | trials | tune s | TVM | eager | torch.compile | ORT | TVM max err |"]
    lines += ["|---|---|---|---|---|---|---|---|---|"]
    for p in sorted(points, key=lambda p: (report["networks"].index(p["network"]), p["budget"])):
        lat = _latencies(p)
        cells = [f"{lat[k]:.3f}" if lat.get(k) is not None else "n/a" for k in ("TVM", *RUNTIMES)]
        error = p["compile"]["results"][0]["max_abs_error"]
        lines.append(
            f"| {p['network']} | {p['budget']} | {p['trials']} | {p['tune_seconds']:.0f} | "
            + " | ".join(cells)
            + (f" | {error:.2g} |" if error is not None else " | n/a |")
        )
    return "\n".join(lines) + "\n"


def _plot(report: dict, work_root: Path, quick: bool) -> None:
    networks = [n for n in report["networks"] if any(p["network"] == n for p in report["points"])]
    if not networks:
        return
    fig, axes = network_axes(networks, 4.2, 3.6)
    for ax, network in zip(axes, networks, strict=True):
        mine = sorted((p for p in report["points"] if p["network"] == network), key=lambda p: p["budget"])
        xs = [max(p["trials"], 1) for p in mine if _latencies(p).get("TVM")]
        ys = [_latencies(p)["TVM"] for p in mine if _latencies(p).get("TVM")]
        ax.plot(xs, ys, "o-", label="TVM compiled")
        rounds = read_rounds(work_root / model_slug(network))
        curve = [(r["trials"], r["estimated_ms"]) for r in rounds if r.get("estimated_ms")]
        if curve:
            ax.plot(*zip(*curve, strict=True), "-", alpha=0.5, label="TVM estimated (sum of task bests)")
        for name, style in zip(RUNTIMES, ("--", "-.", ":"), strict=True):
            values = [_latencies(p).get(name) for p in mine if _latencies(p).get(name)]
            if values:
                ax.axhline(min(values), linestyle=style, color="gray", label=name)
        ax.set_xscale("symlog", linthresh=50)
        ax.set_yscale("log")
        ax.set_xlabel("trials")
        ax.set_ylabel("latency (ms)")
    axes[0].legend(fontsize=7)
    save_figure(fig, "networks", "networks", quick)


def _load(quick: bool) -> dict | None:
    path = report_path("networks", "networks", ".json", quick)
    return json.loads(path.read_text()) if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one small block, budgets 0 and 32")
    parser.add_argument("--networks", help="comma-separated models (default: the five of the study)")
    parser.add_argument("--budgets", help="comma-separated trial budgets (default: 0,250,500,1000,2000)")
    parser.add_argument("--rounds", type=int, help="interleaved timing rounds (default 5; quick 2)")
    parser.add_argument("--work-root", default="work/bench_networks", help="root of the work dirs")
    parser.add_argument("--report-only", action="store_true", help="only re-draw table and plot")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    for noisy in ("onnxscript", "onnx_ir", "tvm.s_tir.meta_schedule"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    default = QUICK_NETWORKS if args.quick else NETWORKS
    networks = split_model_names(args.networks) if args.networks else list(default)
    budgets = (
        [int(b) for b in args.budgets.split(",")]
        if args.budgets
        else list(QUICK_BUDGETS if args.quick else BUDGETS)
    )
    rounds = args.rounds or (2 if args.quick else 5)
    target = host_target()
    # Work dirs hold records measured for this CPU: one root per mcpu, so that another machine resumes
    # nothing it did not measure itself.
    work_root = Path(args.work_root) / str(target.attrs.get("mcpu", "generic"))
    report = _load(args.quick) or {}
    if report.get("target") not in (None, str(target)):
        raise SystemExit(
            f"the saved report was measured for {report['target']}, this machine is {target}: move "
            f"{report_path('networks', 'networks', '.json', args.quick)} away to start a new study"
        )
    report.update(
        {
            "target": str(target),
            "machine": machine_info(),
            "networks": list(dict.fromkeys([*report.get("networks", []), *networks])),
            "budgets": sorted({*report.get("budgets", []), *budgets}),
            "population": TuneOptions().population_size,
            "rounds": rounds,
            "cost_model": COST_MODEL,
        }
    )
    report.setdefault("points", [])
    for budget in budgets:
        for network in networks:
            if args.report_only or any(
                p["network"] == network and p["budget"] == budget for p in report["points"]
            ):
                continue
            print(f"== {network}: {budget} trials", flush=True)
            point = _point(network, budget, work_root, target, rounds)
            report["points"].append(point)
            write_report("networks", "networks", report, _markdown(report), args.quick)
            _plot(report, work_root, args.quick)
            print(_markdown({**report, "points": [point]}).split("Per point")[0], flush=True)
    write_report("networks", "networks", report, _markdown(report), args.quick)
    _plot(report, work_root, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
