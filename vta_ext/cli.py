"""Command line: ``vta-ext measure | space`` (knob tuning is ``tvm-transfer vta-tune``)."""

from __future__ import annotations

import argparse
import json
import math
import sys

from vta_ext.hw import HwConfig, preset
from vta_ext.knobs import KnobSpace
from vta_ext.measure import measure
from vta_ext.workloads import LSTM_DENSE, RESNET18, VtaWorkload

LAYERS: dict[str, VtaWorkload] = {**RESNET18, **LSTM_DENSE}


def _workload(name: str) -> VtaWorkload:
    """The layer named ``name`` (an argparse type)."""
    if name not in LAYERS:
        raise argparse.ArgumentTypeError(f"unknown layer {name!r}; choose from {', '.join(LAYERS)}")
    return LAYERS[name]


def _hw(value: str) -> HwConfig:
    """A preset name (``default``, ``evta``) or a VTA-style JSON config file."""
    try:
        return preset(value)
    except KeyError:
        return HwConfig.load(value)


def add_layer_command(
    commands: argparse._SubParsersAction, name: str, help_text: str
) -> argparse.ArgumentParser:
    """A subcommand taking a layer name and ``--hw`` (a preset or a config JSON) as ``args.layer`` and
    ``args.hw``."""
    cmd = commands.add_parser(name, help=help_text, description=help_text)
    cmd.add_argument("layer", type=_workload, help=f"one of {', '.join(LAYERS)}")
    cmd.add_argument("--hw", type=_hw, default=HwConfig(), help="preset (default, evta) or config JSON")
    return cmd


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vta-ext", description="Extended VTA: compile, simulate, time.")
    sub = parser.add_subparsers(dest="command", required=True)

    measure_cmd = add_layer_command(sub, "measure", "measure one knob setting and print the result as JSON")
    measure_cmd.add_argument("--knobs", required=True, help="JSON, e.g. '{\"tile_h\": 4, ...}'")
    add_layer_command(sub, "space", "print the knob space of a layer")
    return parser


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
    handlers = {"measure": _report_measure, "space": _report_space}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
