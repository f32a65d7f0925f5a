"""``tvm-transfer vta-tune``: tune one vta_ext layer's knobs in random or grid order (no cost model)."""

from __future__ import annotations

import argparse
import json

from tenset_tools.command import Command, bounded_int
from tvm_transfer.vta.sweep import SWEEP_METHODS, tune, write_records
from vta_ext.cli import add_layer_arguments
from vta_ext.workloads import flops


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_layer_arguments(parser)
    parser.add_argument("--method", choices=SWEEP_METHODS, default="random")
    parser.add_argument("--budget", type=bounded_int(1), default=64, help="configurations to measure")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write records to this Parquet file (shared dataset schema)")


def _run_vta_tune(args: argparse.Namespace) -> int:
    """Tune, print the counts and the best configuration's latency (ms) and GOPS; 1 if none was valid."""
    result = tune(args.layer, args.hw, args.method, args.budget, args.seed, network="resnet-18")
    print(f"{args.layer.name}: {result.n_valid} valid, {result.n_invalid} invalid of {len(result.records)}")
    if args.out:
        write_records(result.records, args.out)
        print(f"records written to {args.out}")
    if result.best_knobs is None:
        print("no valid configuration found")
        return 1
    gops = flops(args.layer) / result.best_latency / 1e9
    peak = 2 * args.hw.peak_macs_per_cycle * args.hw.CLOCK_MHZ / 1e3
    print(f"best latency {result.best_latency * 1e3:.3f} ms, {gops:.2f} GOPS ({gops / peak:.1%} of peak)")
    print(f"best knobs {json.dumps(result.best_knobs)}")
    return 0


COMMAND = Command(
    "vta-tune", "tune a layer's knobs and print the best configuration", _add_arguments, _run_vta_tune
)
