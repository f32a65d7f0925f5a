"""The convolutions' activation layout: NCHW as the frontend imports them, or channels last (NHWC), each
network tuned by TVM alone in both and timed side by side with ONNX Runtime. Chosen on development
networks only.

PyTorch and ONNX hand TVM convolutions in NCHW, so a schedule vectorises along a row of the image; a
late layer of a mobile network has rows of 7 or 14, which fill an AVX-512 register poorly. ONNX Runtime
re-lays such networks out in blocks of channels. NHWC puts the channels innermost
(:func:`tvm_transfer.networks.load_model` with ``conv_layout="NHWC"``, a name ending in ``@nhwc``). The
layout changes the task of every convolution, so the default pack's schedules would no longer match them:
it has to be worth that.

Each development convolutional network is tuned by TVM alone (MetaSchedule's ``XGBModel``, evolutionary
search, seed 0) to ``--trials`` in each layout (work dirs ``<slug>`` and ``<slug>@nhwc``; resumes), then
both builds are timed with ONNX Runtime in ``--rounds`` interleaved rounds, ``--runs`` times.

    nice -n 19 python -m benchmarks.conv_layout > work/logs/conv_layout.log 2>&1 &
"""

from __future__ import annotations

import argparse
import logging
import statistics
import warnings
from pathlib import Path

from benchmarks.common import git_commit, target_context, timing_runs, tuned_alone, write_report
from tvm_transfer.networks import CONV_LAYOUTS, load_model, model_slug
from tvm_transfer.runtimes import RUNTIMES
from tvm_transfer.target import host_target
from tvm_transfer.tuning.session import open_database

NAME = "conv_layout_dev"
#: The development networks with convolutions (of :data:`benchmarks.corpus.DEV_NETWORKS`).
NETWORKS = ("torchvision:mnasnet1_0",)
ONNX_RUNTIME = RUNTIMES["onnxruntime"]


def summarize(report: dict) -> dict:
    """Per network, over the timing runs where both builds and ONNX Runtime ran: NHWC / NCHW per run and
    its median (below 1: channels last is faster), and the median milliseconds of each."""
    out = {}
    for network, entry in report["networks"].items():
        runs = [r["ms"] for r in entry["runs"] if all(r["ms"].get(k) for k in (*CONV_LAYOUTS, ONNX_RUNTIME))]
        if not runs:
            continue
        nhwc = [r["NHWC"] / r["NCHW"] for r in runs]
        out[network] = {
            "runs": len(runs),
            "nhwc_over_nchw": nhwc,
            "median_nhwc_over_nchw": statistics.median(nhwc),
            "median_ms": {k: statistics.median(r[k] for r in runs) for k in (*CONV_LAYOUTS, ONNX_RUNTIME)},
        }
    return out


def _markdown(report: dict) -> str:
    lines = [
        "# Convolutions in NCHW or NHWC (development networks)",
        "",
        f"{report['machine'].get('cpu', 'CPU')}, target `{report['target']}`, commit {report['commit']}. "
        f"Each network tuned by TVM alone to {report['trials']} trials in each layout, both builds timed "
        f"with ONNX Runtime in {report['rounds']} interleaved rounds per timing run.",
        "",
        "| network | runs | NCHW ms | NHWC ms | ONNX Runtime ms | NHWC / NCHW per run | median |",
        "|---|---|---|---|---|---|---|",
    ]
    for network, s in summarize(report).items():
        ms = s["median_ms"]
        per_run = ", ".join(f"{r:.3f}" for r in s["nhwc_over_nchw"])
        lines.append(
            f"| {network} | {s['runs']} | {ms['NCHW']:.3f} | {ms['NHWC']:.3f} | {ms[ONNX_RUNTIME]:.3f} | "
            f"{per_run} | {s['median_nhwc_over_nchw']:.3f} |"
        )
    lines += ["", "Milliseconds are medians over the timing runs; ratios are taken within a run."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--trials", type=int, default=1000, help="TVM alone's budget per layout (default 1000)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    parser.add_argument("--runs", type=int, default=3, help="timing runs of the builds (default 3)")
    parser.add_argument("--networks", default=",".join(NETWORKS), help="comma-separated networks")
    parser.add_argument(
        "--work-root", default="work/bench_transfer/conv-layout", help="root of the networks' work dirs"
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    target = host_target()
    root = Path(args.work_root) / str(target.attrs["mcpu"])
    report = {
        "trials": args.trials,
        "rounds": args.rounds,
        **target_context(target),
        "commit": git_commit(short=True),
        "networks": {},
    }
    for network in args.networks.split(","):
        models = {layout: load_model(network, conv_layout=layout) for layout in CONV_LAYOUTS}
        databases = {}
        for layout, model in models.items():
            work_dir = root / model_slug(model.name)
            tuned_alone(model, work_dir, args.trials, target)
            databases[layout] = open_database(work_dir)
        print(f"== {network}: timing the builds", flush=True)
        runs = timing_runs(models, databases, target, args.runs, args.rounds)
        report["networks"][network] = {"work_root": str(root), "runs": runs}
        write_report("networks", NAME, report, _markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
