"""Command line: ``vta-ext tune | measure | space``."""

from __future__ import annotations

import argparse
import json
import math
import sys

from vta_ext.hw import HwConfig, preset
from vta_ext.knobs import KnobSpace
from vta_ext.measure import measure
from vta_ext.tune import METHODS, tune, write_records
from vta_ext.workloads import LSTM_DENSE, RESNET18, Workload, flops

LAYERS: dict[str, Workload] = {**RESNET18, **LSTM_DENSE}


def _workload(name: str) -> Workload:
    if name not in LAYERS:
        raise argparse.ArgumentTypeError(f"unknown layer {name!r}; choose from {', '.join(LAYERS)}")
    return LAYERS[name]


def _hw(value: str) -> HwConfig:
    """A preset name (``default``, ``evta``) or a VTA-style JSON config file."""
    try:
        return preset(value)
    except KeyError:
        return HwConfig.load(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vta-ext", description="Extended VTA: compile, simulate, time, tune."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        cmd.add_argument("layer", type=_workload, help=f"one of {', '.join(LAYERS)}")
        cmd.add_argument("--hw", type=_hw, default=HwConfig(), help="preset (default, evta) or config JSON")
        return cmd

    tune_cmd = add("tune", "tune a layer's knobs and print the best configuration")
    tune_cmd.add_argument("--method", choices=METHODS, default="random")
    tune_cmd.add_argument("--budget", type=int, default=64, help="configurations to measure")
    tune_cmd.add_argument("--seed", type=int, default=0)
    tune_cmd.add_argument("--out", help="write records to this Parquet file (shared dataset schema)")
    measure_cmd = add("measure", "measure one knob setting and print the result as JSON")
    measure_cmd.add_argument("--knobs", required=True, help="JSON, e.g. '{\"tile_h\": 4, ...}'")
    add("space", "print the knob space of a layer")
    return parser


def _report_tune(args: argparse.Namespace) -> int:
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


def _report_measure(args: argparse.Namespace) -> int:
    result = measure(args.layer, json.loads(args.knobs), args.hw)
    out = {
        "valid": result.valid,
        "error_kind": result.error_kind,
        "error_stage": result.error_stage,
        "error": result.error,
        "cycles": result.cycles,
        "latency_s": None if math.isnan(result.latency) else result.latency,
        "counters": result.counters,
        "timing": result.timing.summary if result.timing else None,
    }
    print(json.dumps(out, indent=2))
    return 0 if result.valid else 1


def _report_space(args: argparse.Namespace) -> int:
    space = KnobSpace(args.layer, args.hw)
    print(f"{args.layer.name}: {len(space)} configurations")
    for name, options in space.options.items():
        print(f"  {name}: {options}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handlers = {"tune": _report_tune, "measure": _report_measure, "space": _report_space}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
