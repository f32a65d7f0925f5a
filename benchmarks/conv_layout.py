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

``--corpus PACK`` compares the layouts without tuning, on the corpus networks a pack holds in both on the
same target (:data:`benchmarks.corpus.CHANNELS_LAST`): by the records of the corpus's collection passes,
which give either layout of a network the same budget and search, each layout's sum over its tasks of
the fastest record weighted by the task's calls. These networks are in the corpus, so this too is
development evidence; the held-out networks judge the choice (``benchmarks.transfer_networks``).

    nice -n 19 python -m benchmarks.conv_layout > work/logs/conv_layout.log 2>&1 &
    python -m benchmarks.conv_layout --corpus work/packs/nhwc      # seconds
"""

from __future__ import annotations

import argparse
import logging
import statistics
import warnings
from pathlib import Path

import pandas as pd

from benchmarks.common import (
    git_commit,
    machine_info,
    target_context,
    timing_runs,
    tuned_alone,
    write_report,
)
from benchmarks.corpus import WORK_DIR as CORPUS_WORK_DIR
from tvm_transfer.networks import (
    CONV_LAYOUTS,
    conv_layout_of,
    load_model,
    model_slug,
    split_model_names,
    with_conv_layout,
)
from tvm_transfer.runtimes import RUNTIMES
from tvm_transfer.target import host_target
from tvm_transfer.transfer.pack import TransferPack
from tvm_transfer.tuning.workdir import open_database

NAME = "conv_layout_dev"
CORPUS_NAME = "conv_layout_corpus"
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


def corpus_layouts(corpus: pd.DataFrame) -> list[dict]:
    """Per network of ``corpus`` (a dataset frame) that its collection passes measured in both layouts
    on the same target: each layout's records, tasks with a valid record, and the sum over those tasks of
    the fastest record's latency times the task's calls (ms), and NHWC / NCHW of the sums (below 1:
    channels last is faster)."""
    measured = corpus[corpus["source"].str.startswith(f"{CORPUS_WORK_DIR.as_posix()}/")]
    best = (
        measured[measured["valid"]]
        .groupby(["network", "target_id", "task_id"])
        .agg(seconds=("latency", "min"), calls=("weight", "first"))
    )
    best["weighted_ms"] = best["seconds"] * best["calls"] * 1e3
    runs = best.groupby(["network", "target_id"])["weighted_ms"].agg(["sum", "size"])
    records = measured.groupby(["network", "target_id"]).size()
    rows = []
    for network, target in runs.index:
        twin = with_conv_layout(network, "NCHW")
        if conv_layout_of(network) != "NHWC" or (twin, target) not in runs.index:
            continue
        keys = {"NCHW": (twin, target), "NHWC": (network, target)}
        ms = {layout: float(runs.loc[key, "sum"]) for layout, key in keys.items()}
        rows.append(
            {
                "network": twin,
                "target_id": target,
                "records": {layout: int(records[key]) for layout, key in keys.items()},
                "tasks": {layout: int(runs.loc[key, "size"]) for layout, key in keys.items()},
                "ms": ms,
                "nhwc_over_nchw": ms["NHWC"] / ms["NCHW"],
            }
        )
    return rows


def _corpus_markdown(report: dict) -> str:
    rows = report["networks"]
    lines = [
        "# Convolutions in NCHW or NHWC, by the corpus's collection passes",
        "",
        f"Pack `{report['pack']}`; commit {report['commit']}. Per network and target, the records of its "
        "collection passes in each layout (the same budget and search); per layout, the sum over the tasks "
        "with a valid record of the fastest record's latency times the task's calls.",
        "",
        "| network | target | records NCHW / NHWC | tasks NCHW / NHWC | NCHW ms | NHWC ms | NHWC / NCHW |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['network']} | {r['target_id']} | {r['records']['NCHW']} / {r['records']['NHWC']} | "
            f"{r['tasks']['NCHW']} / {r['tasks']['NHWC']} | {r['ms']['NCHW']:.3f} | {r['ms']['NHWC']:.3f} | "
            f"{r['nhwc_over_nchw']:.3f} |"
        )
    for target in sorted({r["target_id"] for r in rows}):
        ratios = [r["nhwc_over_nchw"] for r in rows if r["target_id"] == target]
        geomean = statistics.geometric_mean(ratios)
        lines.append(
            f"\n`{target}`: NHWC / NCHW geometric mean **{geomean:.3f}** over {len(ratios)} networks "
            f"({min(ratios):.3f}-{max(ratios):.3f})."
        )
    return "\n".join(lines) + "\n"


def _compare_in_corpus(pack_path: str) -> int:
    pack = TransferPack.open(pack_path)
    columns = ["network", "target_id", "task_id", "source", "valid", "latency", "weight"]
    report = {
        "pack": str(pack.path),
        "pack_created": pack.manifest["created"],
        "machine": machine_info(),
        "commit": git_commit(short=True),
        "networks": corpus_layouts(pack.corpus(columns)),
    }
    write_report("networks", CORPUS_NAME, report, _corpus_markdown(report))
    return 0


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
    parser.add_argument(
        "--corpus", metavar="PACK", help="compare the layouts in the corpus of the pack at PACK, untuned"
    )
    args = parser.parse_args(argv)
    if args.corpus:
        return _compare_in_corpus(args.corpus)
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
    for network in split_model_names(args.networks):
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
