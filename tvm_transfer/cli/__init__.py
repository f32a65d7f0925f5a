"""The ``tvm-transfer`` command line: tune operators and networks, compile tuned networks."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path

from tvm_transfer.cost_model import COST_MODELS
from tvm_transfer.workloads import DEFAULT_SHAPES, SHAPE_PARAMS

DEMO_KIND, DEMO_TRIALS = "conv2d", 64


def _target(args: argparse.Namespace):
    from tvm_transfer.target import as_target, host_target

    if args.target:
        return as_target(json.loads(args.target))
    return host_target(mcpu=args.mcpu, num_cores=args.num_cores)


def _options(args: argparse.Namespace):
    from tvm_transfer.tuning.session import TuneOptions

    return TuneOptions(
        trials=args.trials,
        trials_per_iter=args.trials_per_iter,
        population_size=args.population,
        seed=args.seed,
        progress=not args.quiet,
    )


def _cost_model(args: argparse.Namespace):
    """The model saved in ``--model-file`` (any of ours, e.g. a pretrained BiLSTM), else ``--cost-model``'s
    name; a file that is not a saved model ends the command with its reason."""
    if not args.model_file:
        return args.cost_model
    from tvm_transfer.cost_model import CostModelFileError, load_cost_model

    try:
        return load_cost_model(args.model_file)
    except (CostModelFileError, OSError) as error:
        raise SystemExit(f"tvm-transfer {args.command}: error: --model-file: {error}") from error


def _work_dir(args: argparse.Namespace, name: str) -> Path:
    """``--work-dir``, else ``work/<name>-<cost model name or model file stem>``."""
    model_file = getattr(args, "model_file", None)
    model = Path(model_file).stem if model_file else args.cost_model
    return Path(args.work_dir) if args.work_dir else Path("work") / f"{name}-{model}"


def _report(args: argparse.Namespace, result) -> int:
    """Print a tuning result (and its time breakdown with ``--profile``); save it with ``--json``."""
    print(result.table())
    if args.profile:
        _print_profile(result.profile)
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=1, default=float))
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from tvm_transfer.cli.copula import copula_cost_model, copula_strategy
    from tvm_transfer.tuning.operator import tune_workload
    from tvm_transfer.workloads import parse_workload

    workload = parse_workload(args.kind, args.shape)
    work_dir = _work_dir(args, workload.name)
    print(f"tuning {workload.name} ({workload.flops / 1e6:.1f} MFLOP) in {work_dir}", file=sys.stderr)
    options = _options(args)
    result = tune_workload(
        workload,
        work_dir,
        cost_model=copula_cost_model(args, workload, _cost_model(args), options.seed),
        target=_target(args),
        options=options,
        reference=not args.no_reference,
        search_strategy=copula_strategy(args, options, exclude=workload.ir_module()),
    )
    return _report(args, result)


def _selection(args: argparse.Namespace):
    """A TaskSelection when any selection flag is given; ``None`` (every task, gradient scheduler) else."""
    from tvm_transfer.tuning.task_selection import TaskSelection

    if args.flops_share is None and args.top_tasks is None and not args.no_transfer:
        return None
    share = 0.9 if args.flops_share is None else args.flops_share
    try:
        return TaskSelection(flops_share=share, top_tasks=args.top_tasks, transfer=not args.no_transfer)
    except ValueError as error:
        raise SystemExit(f"tvm-transfer tune-network: error: {error}") from error


def _cmd_tune_network(args: argparse.Namespace) -> int:
    from tvm_transfer.cli.copula import copula_strategy
    from tvm_transfer.tuning.compile import compile_network
    from tvm_transfer.tuning.network import tune_network

    selection = _selection(args)
    work_dir = _work_dir(args, args.network)
    target = _target(args)
    options = _options(args)
    result = tune_network(
        args.network,
        work_dir,
        cost_model=_cost_model(args),
        target=target,
        options=options,
        selection=selection,
        search_strategy=copula_strategy(args, options),
    )
    status = _report(args, result)
    if args.compile:
        print(compile_network(args.network, work_dir, target=target).table())
    return status


def _cmd_compile(args: argparse.Namespace) -> int:
    from tvm_transfer.tuning.compile import compile_network

    result = compile_network(args.network, _work_dir(args, args.network), target=_target(args))
    print(result.table())
    if result.max_abs_error > args.tolerance:
        print(f"error: output differs from PyTorch by more than {args.tolerance}", file=sys.stderr)
        return 1
    return 0


def _cmd_target(args: argparse.Namespace) -> int:
    from tvm_transfer.target import hardware_params

    target = _target(args)
    print(target)
    for name, value in hardware_params(target).items():
        print(f"  {name:<28} {value}")
    return 0


def _print_profile(profile: dict[str, float]) -> None:
    """Where tuning time went, by MetaSchedule's profiler scopes (seconds, share of the total)."""
    total = profile.get("Total", 0.0) or 1.0
    print("\ntime breakdown (MetaSchedule profiler):")
    for name, seconds in sorted(profile.items(), key=lambda kv: -kv[1]):
        if name != "Total" and seconds / total >= 0.005:
            print(f"  {name:<48} {seconds:8.1f} s  {100 * seconds / total:5.1f}%")


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cost-model", default="xgboost", choices=list(COST_MODELS), help="default: xgboost")
    parser.add_argument(
        "--model-file",
        metavar="FILE",
        help="start from a saved model instead (`tenset-tools train -o FILE`, `model.save`; e.g. a "
        "pretrained BiLSTM): it keeps learning from this run's measurements",
    )
    parser.add_argument("--trials", type=int, default=64, help="measurement budget (default: 64)")
    parser.add_argument("--trials-per-iter", type=int, default=16, help="candidates per batch (default: 16)")
    parser.add_argument("--population", type=int, default=128, help="evolutionary population (default: 128)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", help="MetaSchedule database directory; re-use it to resume")
    parser.add_argument("--json", help="also write the result to this JSON file")
    parser.add_argument("--profile", action="store_true", help="print where the tuning time went")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_target(parser)


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help='target as JSON, e.g. \'{"kind": "llvm", "mcpu": "znver4"}\'')
    parser.add_argument("--mcpu", help="LLVM CPU name (default: detected host CPU)")
    parser.add_argument("--num-cores", type=int, help="cores to tune for (default: all available)")


def build_parser() -> argparse.ArgumentParser:
    from tvm_transfer.cli.copula import add_tune_arguments as add_copula_arguments
    from tvm_transfer.cli.copula import register as register_copula_commands
    from tvm_transfer.cli.ml2tune import add_parser as add_ml2tune_command
    from tvm_transfer.cli.vta_tune import add_parser as add_vta_tune_command
    from tvm_transfer.networks import NETWORKS

    parser = argparse.ArgumentParser(prog="tvm-transfer", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="show MetaSchedule's own logs")
    commands = parser.add_subparsers(dest="command", required=True)

    shapes = "; ".join(
        f"{k}: {','.join(v)} (default {','.join(map(str, DEFAULT_SHAPES[k]))})"
        for k, v in SHAPE_PARAMS.items()
    )
    tune = commands.add_parser("tune", help="tune one operator", description=f"Shapes: {shapes}.")
    tune.add_argument("kind", choices=list(SHAPE_PARAMS))
    tune.add_argument("--shape", help="comma-separated shape values in the order above")
    tune.add_argument("--no-reference", action="store_true", help="skip timing the PyTorch reference")
    _add_common(tune)
    add_copula_arguments(tune)
    tune.set_defaults(func=_cmd_tune)

    demo = commands.add_parser(
        "demo", help=f"the built-in default: tune a ResNet-18 {DEMO_KIND} layer for {DEMO_TRIALS} trials"
    )
    _add_common(demo)
    demo.set_defaults(func=_cmd_tune, kind=DEMO_KIND, shape=None, no_reference=False, trials=DEMO_TRIALS)

    network = commands.add_parser("tune-network", help="tune every task of a small PyTorch network")
    network.add_argument("network", choices=list(NETWORKS))
    network.add_argument(
        "--flops-share",
        type=float,
        help="tune only the tasks carrying this share of weight x FLOPs, budget split by FLOPs "
        "(0.9 recommended; default without any selection flag: every task, gradient scheduler)",
    )
    network.add_argument("--top-tasks", type=int, help="tune at most this many tasks (heaviest first)")
    network.add_argument(
        "--no-transfer", action="store_true", help="leave untuned tasks on TVM's default schedule"
    )
    network.add_argument("--compile", action="store_true", help="then build the network and time it")
    _add_common(network)
    add_copula_arguments(network, network=True)
    network.set_defaults(func=_cmd_tune_network)

    compile_ = commands.add_parser(
        "compile", help="build a tuned network, run it and check it against PyTorch"
    )
    compile_.add_argument("network", choices=list(NETWORKS))
    compile_.add_argument("--cost-model", default="xgboost", help="only to find the default work dir")
    compile_.add_argument("--work-dir", help="the work dir the network was tuned in")
    compile_.add_argument(
        "--tolerance", type=float, default=1e-3, help="max abs error allowed (default 1e-3)"
    )
    _add_target(compile_)
    compile_.set_defaults(func=_cmd_compile)

    target = commands.add_parser("target", help="show the host target and its hardware features")
    _add_target(target)
    target.set_defaults(func=_cmd_target)
    register_copula_commands(commands, _add_target)
    add_ml2tune_command(commands)
    add_vta_tune_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # MetaSchedule's per-round logs and copulas' one line per fitted design space
        for library in ("tvm.s_tir.meta_schedule", "copulas"):
            logging.getLogger(library).setLevel(logging.WARNING)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
