"""Command line: ``vta-ext measure | space`` (knob tuning is ``tvm-transfer vta-tune``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from tenset_tools import command
from tenset_tools.command import Command, UsageError
from vta_ext.errors import InvalidConfigError
from vta_ext.hw import HwConfig, preset
from vta_ext.knobs import KnobError, KnobSpace
from vta_ext.measure import measure
from vta_ext.workloads import LSTM_DENSE, RESNET18, VtaWorkload

LAYERS: dict[str, VtaWorkload] = {**RESNET18, **LSTM_DENSE}


def _workload(name: str) -> VtaWorkload:
    """The layer named ``name`` (an argparse type)."""
    if name not in LAYERS:
        raise argparse.ArgumentTypeError(f"unknown layer {name!r}; choose from {', '.join(LAYERS)}")
    return LAYERS[name]


def parse_hw(value: str) -> HwConfig:
    """The ``--hw`` argument (an argparse type): a preset name (``default``, ``evta``) or a VTA-style JSON
    config file; raises ``argparse.ArgumentTypeError`` naming the value (and the bad key) when it is
    neither a preset nor a readable, valid configuration."""
    try:
        return preset(value)
    except KeyError:
        pass
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value!r} is neither a preset (default, evta) nor a JSON file")
    try:
        return HwConfig.load(path)
    except (ValueError, TypeError, InvalidConfigError, OSError) as err:
        raise argparse.ArgumentTypeError(f"{value}: not a valid VTA config: {err}") from None


def parse_knobs(text: str, space: KnobSpace) -> dict[str, int]:
    """The ``--knobs`` JSON of a layer's knob space; raises :class:`~tenset_tools.command.UsageError`
    naming the bad knob (or the JSON error) and the allowed values."""
    try:
        knobs = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(
            f"--knobs {text!r} is not JSON ({error}); e.g. {json.dumps(space.point(0))}"
        ) from None
    try:
        return space.check(knobs)
    except KnobError as error:
        raise UsageError(f"--knobs: {error}") from None


def add_layer_arguments(parser: argparse.ArgumentParser) -> None:
    """A layer name and ``--hw`` (a preset or a config JSON), parsed into ``args.layer`` (a
    :class:`VtaWorkload`) and ``args.hw`` (a :class:`HwConfig`)."""
    parser.add_argument("layer", type=_workload, help=f"one of {', '.join(LAYERS)}")
    parser.add_argument(
        "--hw", type=parse_hw, default=HwConfig(), help="preset (default, evta) or config JSON"
    )


def _add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    add_layer_arguments(parser)
    parser.add_argument("--knobs", required=True, help="JSON, e.g. '{\"tile_h\": 4, ...}'")


def _run_measure(args: argparse.Namespace) -> int:
    knobs = parse_knobs(args.knobs, KnobSpace(args.layer, args.hw))
    result = measure(args.layer, knobs, args.hw)
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


def _run_space(args: argparse.Namespace) -> int:
    space = KnobSpace(args.layer, args.hw)
    print(f"{args.layer.name}: {len(space)} configurations")
    for name, options in space.options.items():
        print(f"  {name}: {options}")
    return 0


COMMANDS: tuple[Command, ...] = (
    Command(
        "measure",
        "measure one knob setting and print the result as JSON",
        _add_measure_arguments,
        _run_measure,
    ),
    Command("space", "print the knob space of a layer", add_layer_arguments, _run_space),
)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``vta-ext`` console script; returns the process exit code (1: invalid setting)."""
    parser = command.build_parser("vta-ext", "Extended VTA: compile, simulate, time.", COMMANDS)
    return command.run(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
