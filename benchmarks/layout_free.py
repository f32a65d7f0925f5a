"""What marking weights layout-free changes: the same network tuned with the same budget, seed and cost
model with and without ``AttachAttrLayoutFreeBuffers`` (schedules may re-lay out the weights, which are
then pre-packed at compile time), both compiled and timed against each other in interleaved rounds.

    nice -n 19 python -m benchmarks.layout_free                   # resnet18 and bert_base, 300 trials
    python -m benchmarks.layout_free --quick                      # resnet_block, 32 trials
"""

from __future__ import annotations

import argparse
import logging
import warnings
from pathlib import Path

from benchmarks.common import git_commit, machine_info, write_report
from tvm_transfer.networks import load_model, model_slug, relax_module, split_model_names
from tvm_transfer.runner import network_threads
from tvm_transfer.runtimes import time_interleaved, tvm_threads
from tvm_transfer.target import host_target
from tvm_transfer.tuning.build import LoadedNetwork, build_network
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.run import RunConfig
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.tuning.workdir import open_database

COST_MODEL = "tvm-xgb"


def _measure(network: str, budget: int, work_root: Path, target, rounds: int) -> dict:
    model = load_model(network)
    calls, estimates = {}, {}
    # Building runs TVM code (the weight pre-packing): size the thread pool before the first build.
    with tvm_threads(network_threads(target)):
        for layout_free in (True, False):
            label = "layout-free" if layout_free else "fixed layout"
            work_dir = work_root / f"{model_slug(network)}-{'free' if layout_free else 'fixed'}"
            config = RunConfig.make(
                model, work_dir, target=target, options=TuneOptions(trials=budget),
                plan=TuningPlan(cost_model=COST_MODEL), layout_free=layout_free,
            )  # fmt: skip
            tuned = tune_network(config)
            estimates[label] = tuned.weighted_latency * 1e3
            executable = build_network(relax_module(model), open_database(work_dir), target, layout_free)
            calls[label] = LoadedNetwork(executable, model.inputs)
        seconds = {k: latency.seconds for k, latency in time_interleaved(calls, rounds, 0.3).items()}
    return {
        "network": network,
        "budget": budget,
        "compiled_ms": {k: v * 1e3 for k, v in seconds.items()},
        "estimated_ms": estimates,
        "speedup": seconds["fixed layout"] / seconds["layout-free"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--networks", default="torchvision:resnet18,bert_base")
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--work-root", default="work/bench_layout_free")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    for noisy in ("onnxscript", "onnx_ir", "tvm.s_tir.meta_schedule"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    networks = ["resnet_block"] if args.quick else split_model_names(args.networks)
    budget = 32 if args.quick else args.budget
    target = host_target()
    work_root = Path(args.work_root) / str(target.attrs.get("mcpu", "generic"))
    rows = [_measure(n, budget, work_root, target, args.rounds) for n in networks]
    report = {
        "machine": machine_info(),
        "target": str(target),
        "commit": git_commit(short=True),
        "cost_model": COST_MODEL,
        "rows": rows,
    }
    lines = [
        "# Weights layout-free vs fixed layout",
        "",
        f"Target `{target}`; MetaSchedule `XGBModel`, {budget} trials per setting, same seed; compiled "
        f"latencies timed against each other in {args.rounds} interleaved rounds (fastest kept).",
        "",
        "| network | trials | layout-free ms | fixed layout ms | speed-up | estimated free / fixed ms |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        c, e = row["compiled_ms"], row["estimated_ms"]
        lines.append(
            f"| {row['network']} | {row['budget']} | {c['layout-free']:.3f} | {c['fixed layout']:.3f} | "
            f"{row['speedup']:.2f}x | {e['layout-free']:.3f} / {e['fixed layout']:.3f} |"
        )
    write_report("networks", "layout_free", report, "\n".join(lines) + "\n", args.quick)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
