"""The ``tvm-transfer`` command line: tune operators and networks, compile tuned networks."""

from __future__ import annotations

import os

# Worker threads that spin while waiting for a busy core slow every runtime several times over on a shared
# machine (docs/runtimes.md): by default none spins. Set before torch loads (libgomp reads it once); a
# value the user exported is kept. ONNX Runtime's sessions are made with spinning off as well.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")

import argparse
import json
import logging
import sys
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from tenset_tools import command
from tenset_tools.atomic import atomic_write_text
from tenset_tools.command import Command, UsageError, bounded_float, bounded_int
from tvm_transfer.cli.transfer import add_transfer_arguments
from tvm_transfer.cost_model import COST_MODELS
from tvm_transfer.tuning.network import MEASURE_CACHES
from tvm_transfer.tuning.repick import DEFAULT_REPICK, REPICK_MODES
from tvm_transfer.workloads import DEFAULT_SHAPES, SHAPE_PARAMS

__all__ = ["add_target_arguments", "add_tuning_arguments", "build_parser", "main", "resolve_target"]

if TYPE_CHECKING:
    from tvm.target import Target

DEMO_KIND, DEMO_TRIALS = "conv2d", 64


def resolve_target(args: argparse.Namespace) -> Target:
    """The TVM target of the target options: ``--target`` JSON (a CPU target without ``num-cores`` gets
    the host's, as ``--mcpu`` does: a pack's schedules and a work dir's records are kept per core count),
    else the host with ``--mcpu`` and ``--num-cores``; raises :class:`~tenset_tools.command.UsageError`
    naming the option for a value TVM or LLVM would not use as given (an unknown CPU would silently
    compile generic code)."""
    from tvm_transfer.target import UnknownCpuError, as_target, check_mcpu, host_core_count, host_target

    if not args.target:
        try:
            return host_target(mcpu=args.mcpu, num_cores=args.num_cores)
        except UnknownCpuError as error:
            raise UsageError(f"--mcpu {args.mcpu!r}: {error}") from None
    if args.mcpu or args.num_cores:
        raise UsageError("--target sets the whole target: put mcpu and num-cores in its JSON instead")
    try:
        spec = json.loads(args.target)
    except json.JSONDecodeError as error:
        raise UsageError(f"--target {args.target!r} is not JSON ({error}); e.g. {_TARGET_EXAMPLE}") from None
    if not isinstance(spec, dict) or "kind" not in spec:
        raise UsageError(
            f'--target {args.target!r}: expected a JSON object with a "kind", e.g. {_TARGET_EXAMPLE}'
        )
    if spec["kind"] == "llvm":
        spec.setdefault("num-cores", host_core_count())
    if spec["kind"] == "llvm" and "mcpu" in spec:
        try:
            check_mcpu(str(spec["mcpu"]), spec.get("mtriple"))
        except UnknownCpuError as error:
            raise UsageError(f"--target mcpu {spec['mcpu']!r}: {error}") from None
    try:
        return as_target(spec)
    except Exception as error:  # TVM's target parser raises plain runtime errors
        reason = (str(error).strip().splitlines() or [type(error).__name__])[-1]
        raise UsageError(f"--target {args.target!r}: TVM refuses it ({reason})") from None


_TARGET_EXAMPLE = '{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}'


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
    """The model saved in ``--model-file`` (any of ours, e.g. a pretrained BiLSTM), else the transfer
    pack's pretrained model guarded, ``--cost-model`` learning online, else ``--cost-model`` (default TVM's
    ``XGBModel``; :func:`~tvm_transfer.cli.transfer.transfer_cost_model`); a file that is not a saved model
    ends the command with its reason."""
    if not args.model_file:
        from tvm_transfer.cli.transfer import transfer_cost_model
        from tvm_transfer.transfer.policy import ONLINE_COST_MODEL

        if getattr(args, "pretrain_on_sources", False):  # that model is pretrained on --seed-from instead
            return args.cost_model or ONLINE_COST_MODEL
        return transfer_cost_model(args)
    from tvm_transfer.cost_model import CostModelFileError, load_cost_model

    try:
        return load_cost_model(args.model_file)
    except (CostModelFileError, OSError) as error:
        raise UsageError(f"--model-file: {error}") from error


def _search_strategy(args: argparse.Namespace, options, exclude=None):
    """``--seed-from``'s copula search, else the one the transfer pack seeds, else ``None`` (evolutionary
    search)."""
    from tvm_transfer.cli.copula import copula_strategy
    from tvm_transfer.cli.transfer import transfer_search

    return copula_strategy(args, options, exclude=exclude) or transfer_search(args, options)


def _work_dir(args: argparse.Namespace, name: str) -> Path:
    """``--work-dir``, else ``work/<name>-<label>`` (:func:`_default_work_dir`); raises
    :class:`~tenset_tools.command.UsageError` when it is a file or cannot be created or written."""
    from tvm_transfer.tuning.workdir import check_work_dir

    if args.work_dir:
        return check_work_dir(Path(args.work_dir))
    return check_work_dir(_default_work_dir(args, name))


def _default_work_dir(args: argparse.Namespace, name: str) -> Path:
    """``work/<name>-<label>`` of :func:`_work_dir` (not created): with a transfer pack ``transfer``, or the
    model file's stem or ``--cost-model`` then ``-transfer``; without one the model file's stem, else the
    ``--cost-model``, else TVM's model. A run with a pack and one without never share a work dir."""
    from tvm_transfer.cli.transfer import resolve_transfer_pack
    from tvm_transfer.transfer.policy import NO_TRANSFER_COST_MODEL

    model_file = getattr(args, "model_file", None)
    model = Path(model_file).stem if model_file else args.cost_model
    if resolve_transfer_pack(args) is not None:
        label = f"{model}-transfer" if model else "transfer"
    else:
        label = model or NO_TRANSFER_COST_MODEL
    return Path("work") / f"{name}-{label}"


def _check_tuning_without_pack(args: argparse.Namespace, work_dir: Path) -> None:
    """Raise :class:`~tenset_tools.command.UsageError` when a run without a transfer pack
    (``--no-transfer``) would tune in ``work_dir`` and it holds schedules a pack applied: the search would
    start from them, which is not TVM alone."""
    from tvm_transfer.cli.transfer import resolve_transfer_pack
    from tvm_transfer.transfer.apply import applied_tasks

    applied = applied_tasks(work_dir)
    if applied and resolve_transfer_pack(args) is None:
        raise UsageError(
            f"{work_dir} holds {len(applied)} schedule(s) applied from a transfer pack, so tuning on in it "
            "would not be TVM alone: tune it with a transfer pack, or use another work dir"
        )


def _report(args: argparse.Namespace, result) -> int:
    """Print a tuning result (and its time breakdown with ``--profile``); save it with ``--json``."""
    print(result.table())
    if args.profile:
        _print_profile(result.profile)
    if args.json:
        atomic_write_text(args.json, json.dumps(asdict(result), indent=1, default=float))
    return 0


def _run_tune(args: argparse.Namespace) -> int:
    from tvm_transfer.cli.copula import copula_cost_model
    from tvm_transfer.cli.transfer import resolve_transfer_pack
    from tvm_transfer.transfer.policy import DEFAULT_POLICY
    from tvm_transfer.tuning.operator import tune_workload
    from tvm_transfer.tuning.workdir import check_work_dir_target, work_dir_lock
    from tvm_transfer.workloads import parse_workload

    workload = parse_workload(args.kind, args.shape)
    work_dir = _work_dir(args, workload.name)
    target = resolve_target(args)
    try:
        check_work_dir_target(work_dir, target)
    except ValueError as error:
        raise UsageError(str(error)) from error
    _check_tuning_without_pack(args, work_dir)
    options = _options(args)
    cost_model = _cost_model(args)
    with work_dir_lock(work_dir, wait=args.wait):
        print(f"tuning {workload.name} ({workload.flops / 1e6:.1f} MFLOP) in {work_dir}", file=sys.stderr)
        result = tune_workload(
            workload,
            work_dir,
            cost_model=copula_cost_model(args, workload, cost_model, options.seed),
            target=target,
            options=options,
            reference=not args.no_reference,
            search_strategy=_search_strategy(args, options, exclude=workload.ir_module()),
            transfer_pack=resolve_transfer_pack(args),
            refine_from_pack=DEFAULT_POLICY.refine_exact,
        )
    return _report(args, result)


def _selection(args: argparse.Namespace):
    """A TaskSelection when any selection flag is given; ``None`` (every task, gradient scheduler) else."""
    from tvm_transfer.tuning.task_selection import TaskSelection

    if args.flops_share is None and args.top_tasks is None and not args.no_schedule_transfer:
        return None
    share = 0.9 if args.flops_share is None else args.flops_share
    try:
        return TaskSelection(
            flops_share=share, top_tasks=args.top_tasks, transfer=not args.no_schedule_transfer
        )
    except ValueError as error:
        raise UsageError(str(error)) from error


def _load_model(args: argparse.Namespace):
    """The model named by the ``network`` argument; an unknown or unimportable one is a usage error naming
    the model and the cause (checked before any tuning)."""
    from tvm_transfer.networks import load_model, relax_module
    from tvm_transfer.tuning.network import check_work_dir_layout
    from tvm_transfer.tuning.workdir import check_work_dir_target

    target = resolve_target(args)
    if target.kind.name != "llvm":
        raise UsageError(
            f"--target: networks are tuned and compiled for CPU (llvm) targets, not {target.kind.name!r}"
        )
    try:
        model = load_model(args.network, args.input_shape, conv_layout=args.conv_layout)
        work_dir = _network_work_dir(args, model)
        check_work_dir_layout(work_dir, model.name)
        check_work_dir_target(work_dir, target)
        relax_module(model)
    except ValueError as error:  # a ModelSourceError too
        raise UsageError(str(error)) from error
    _note_nchw_work_dir(args, model, work_dir)
    return model


def _note_nchw_work_dir(args: argparse.Namespace, model, work_dir: Path) -> None:
    """Say so when the default layout picked NHWC for ``model`` (tuned in ``work_dir``) and the default
    work dir of the same model in NCHW holds records (tuned before the commands defaulted to NHWC): a run
    would otherwise start over unannounced."""
    from tenset_tools.metaschedule import has_records
    from tvm_transfer.networks import AUTO_CONV_LAYOUT, conv_layout_of, model_slug, with_conv_layout

    picked = args.conv_layout == AUTO_CONV_LAYOUT and conv_layout_of(args.network) != "NHWC"
    if args.work_dir or not picked or model.conv_layout != "NHWC":
        return
    nchw = _default_work_dir(args, model_slug(with_conv_layout(model.name, "NCHW"), args.input_shape))
    if has_records(nchw):
        print(
            f"note: {nchw} holds this model tuned with its convolutions NCHW; this run imports them NHWC "
            f"(the default, faster) into {work_dir}. Pass --conv-layout NCHW to use "
            "that work dir instead.",
            file=sys.stderr,
        )


def _network_work_dir(args: argparse.Namespace, model) -> Path:
    """``--work-dir``, else the default work dir of ``model``, named by its layout too (``args.network``
    does not say which layout ``AUTO`` picked)."""
    from tvm_transfer.networks import model_slug

    return _work_dir(args, model_slug(model.name, args.input_shape))


def _tune_model(args: argparse.Namespace, model, selection=None):
    """Tune ``model``'s tasks in its work dir up to ``--trials``, holding the work dir's lock (schedule
    transfer between tasks included); returns the NetworkTuneResult."""
    from tvm_transfer.cli.transfer import resolve_transfer_pack
    from tvm_transfer.transfer.policy import DEFAULT_POLICY
    from tvm_transfer.tuning.network import check_work_dir_caches, resolve_measure_caches, tune_network
    from tvm_transfer.tuning.workdir import work_dir_lock

    work_dir = _network_work_dir(args, model)
    try:
        check_work_dir_caches(work_dir, resolve_measure_caches(args.measure_caches, model))
    except ValueError as error:
        raise UsageError(str(error)) from error
    _check_tuning_without_pack(args, work_dir)
    pack = resolve_transfer_pack(args)
    with work_dir_lock(work_dir, wait=args.wait):
        return tune_network(
            model,
            work_dir,
            cost_model=_cost_model(args),
            target=resolve_target(args),
            options=_options(args),
            selection=selection,
            search_strategy=_search_strategy(args, _options(args)),
            layout_free=not args.no_layout_rewrite,
            measure_caches=args.measure_caches,
            **DEFAULT_POLICY.network_tuning(pack),
        )


def _run_tune_network(args: argparse.Namespace) -> int:
    selection = _selection(args)
    model = _load_model(args)
    result = _tune_model(args, model, selection)
    if not args.compile:
        return _report(args, result)
    print(result.table())
    return _compile_model(args, model, result)


def _run_compile(args: argparse.Namespace) -> int:
    model = _load_model(args)
    tuning = None
    if args.trials > 0:
        tuning = _tune_model(args, model)
        print(tuning.table())
    return _compile_model(args, model, tuning)


def _compile_model(args: argparse.Namespace, model, tuning) -> int:
    """Build ``model`` from its work dir and print the comparison table; ``--json`` writes it with the
    tuning result (if any). Exit status 1 when TVM's output differs from the reference by more than
    ``--tolerance``."""
    from tvm_transfer.cli.transfer import resolve_transfer_pack
    from tvm_transfer.tuning.compile import compile_network
    from tvm_transfer.tuning.workdir import work_dir_lock

    work_dir = _network_work_dir(args, model)
    with work_dir_lock(work_dir, wait=args.wait):
        result = compile_network(
            model,
            work_dir,
            target=resolve_target(args),
            runtimes=args.runtimes,
            rounds=args.rounds,
            layout_free=not args.no_layout_rewrite,
            transfer_pack=resolve_transfer_pack(args) if tuning is None else None,  # tuning applied it
            profile=args.profile_network,
            repick_mode=args.repick,
        )
    print(result.table())
    if args.json:
        report = {"compile": asdict(result), "tuning": asdict(tuning) if tuning is not None else None}
        atomic_write_text(args.json, json.dumps(report, indent=1, default=float))
    error = result.max_abs_error
    if error is None:
        print("note: no reference output (no PyTorch module, no ONNX Runtime): not checked", file=sys.stderr)
    elif not error <= args.tolerance:
        print(f"error: output differs from the reference by more than {args.tolerance}", file=sys.stderr)
        return 1
    return 0


def _run_target(args: argparse.Namespace) -> int:
    from tvm_transfer.target import hardware_params

    target = resolve_target(args)
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


def add_tuning_arguments(parser: argparse.ArgumentParser) -> None:
    """The cost-model, budget, work-dir and output options of the tuning commands, and the target options."""
    parser.add_argument(
        "--cost-model",
        choices=list(COST_MODELS),
        help="with a transfer pack: the model learning from this run under the pack's guarded model "
        "(default: xgboost); without one (--no-transfer): the model (default: tvm-xgb, TVM's XGBModel)",
    )
    parser.add_argument(
        "--model-file",
        metavar="FILE",
        help="start from a saved model instead (`tenset-tools train -o FILE`, `model.save`; e.g. a "
        "pretrained BiLSTM): it keeps learning from this run's measurements",
    )
    parser.add_argument(
        "--trials",
        type=bounded_int(0),
        default=64,
        help="measurement budget, records already in the work dir included (default: 64; 0: only report "
        "what the work dir holds)",
    )
    parser.add_argument(
        "--trials-per-iter", type=bounded_int(1), default=16, help="candidates per batch (default: 16)"
    )
    parser.add_argument(
        "--population", type=bounded_int(2), default=128, help="evolutionary population (default: 128)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", help="MetaSchedule database directory; re-use it to resume")
    parser.add_argument(
        "--wait",
        action="store_true",
        help="if another run holds the work dir, wait for it instead of failing",
    )
    parser.add_argument("--json", help="also write the result to this JSON file")
    parser.add_argument("--profile", action="store_true", help="print where the tuning time went")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_target_arguments(parser)
    add_transfer_arguments(parser)


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """``--target`` (JSON), ``--mcpu``, ``--num-cores``: read by :func:`resolve_target`."""
    parser.add_argument(
        "--target",
        help='target as JSON, e.g. \'{"kind": "llvm", "mcpu": "znver4", "num-cores": 2}\' (default '
        "num-cores: this machine's)",
    )
    parser.add_argument("--mcpu", help="LLVM CPU name (default: detected host CPU)")
    parser.add_argument(
        "--num-cores",
        type=bounded_int(1),
        help="cores to tune for (default: all available; more is allowed, for another machine)",
    )


def _add_tune_arguments(parser: argparse.ArgumentParser) -> None:
    from tvm_transfer.cli.copula import add_copula_arguments

    parser.add_argument("kind", choices=list(SHAPE_PARAMS))
    parser.add_argument("--shape", help="comma-separated shape values in the order above")
    parser.add_argument("--no-reference", action="store_true", help="skip timing the PyTorch reference")
    add_tuning_arguments(parser)
    add_copula_arguments(parser)


MODEL_HELP = (
    "a built-in network ({builtin}), torchvision:NAME (any torchvision classification model, random "
    "weights), a path ending in .onnx, or package.module:factory (a callable returning "
    "(torch.nn.Module, example_inputs))"
)


def _input_shape(text: str) -> tuple[int, ...]:
    """``--input-shape``: comma-separated positive integers, batch first."""
    from tvm_transfer.networks import parse_input_shape

    try:
        return parse_input_shape(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _runtime_keys(text: str) -> list[str]:
    """``--runtimes``: ``none`` or comma-separated keys of :data:`tvm_transfer.runtimes.RUNTIMES`."""
    from tvm_transfer.runtimes import RUNTIMES

    keys = [] if text == "none" else text.split(",")
    unknown = [key for key in keys if key not in RUNTIMES]
    if unknown or len(set(keys)) != len(keys):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give none or distinct names among {', '.join(RUNTIMES)}, comma-separated"
        )
    return keys


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    from tvm_transfer.networks import AUTO_CONV_LAYOUT, CONV_LAYOUTS, NETWORKS
    from tvm_transfer.runtimes import RUNTIMES

    parser.add_argument("network", metavar="MODEL", help=MODEL_HELP.format(builtin=", ".join(NETWORKS)))
    parser.add_argument(
        "--input-shape",
        type=_input_shape,
        help="input shape, batch first (default: the network's own; 1,3,224,224 for torchvision)",
    )
    parser.add_argument(
        "--conv-layout",
        type=str.upper,
        choices=(AUTO_CONV_LAYOUT, *CONV_LAYOUTS),
        default=AUTO_CONV_LAYOUT,
        help="layout of the 2-d convolutions: AUTO (default) is NHWC, channels last, for a model with "
        "2-d convolutions, else NCHW; NCHW as the model gives them (also: MODEL@nchw), NHWC (MODEL@nhwc); "
        "a name's suffix wins over AUTO; tune and compile with the same",
    )
    parser.add_argument(
        "--no-layout-rewrite",
        action="store_true",
        help="do not let schedules re-lay out the weights (tune and compile with the same setting)",
    )
    parser.add_argument(
        "--runtimes",
        type=_runtime_keys,
        default=list(RUNTIMES),
        help=f"comparison runtimes, comma-separated, or none (default: {','.join(RUNTIMES)})",
    )
    parser.add_argument(
        "--rounds", type=bounded_int(1), default=5, help="interleaved timing rounds (default 5)"
    )
    parser.add_argument(
        "--tolerance", type=bounded_float(0.0), default=1e-3, help="max abs error allowed (default 1e-3)"
    )
    parser.add_argument(
        "--repick",
        choices=REPICK_MODES,
        default=DEFAULT_REPICK,
        help="how the heaviest tasks' schedules are chosen among their top records before the build: "
        "re-timed together warm (as tuned) or cold (caches flushed before every run), or inside the "
        "network (one build per candidate rank, every function call timed); none: the best records as "
        "measured; auto: cold when the network's weights outgrow the last-level cache, else warm "
        "(default: %(default)s; docs/models.md)",
    )
    parser.add_argument(
        "--no-repick", dest="repick", action="store_const", const="none", help="the same as --repick none"
    )
    parser.add_argument(
        "--repick-cold", dest="repick", action="store_const", const="cold", help="the same as --repick cold"
    )
    parser.add_argument(
        "--measure-caches",
        choices=MEASURE_CACHES,
        default="warm",
        help="how tuning times each candidate: warm (runs back to back, as MetaSchedule does) or cold "
        "(caches flushed of its weights before every run); auto: cold when the network's weights outgrow "
        "the last-level cache, else warm (default: %(default)s; measure a work dir one way only)",
    )
    parser.add_argument(
        "--profile-network",
        action="store_true",
        help="also time every function TVM's compiled network calls, in the network and warm, beside its "
        "tuned record",
    )


def _add_tune_network_arguments(parser: argparse.ArgumentParser) -> None:
    from tvm_transfer.cli.copula import add_copula_arguments

    _add_model_arguments(parser)
    parser.add_argument(
        "--flops-share",
        type=float,
        help="tune only the tasks carrying this share of weight x FLOPs, budget split by FLOPs "
        "(0.9 recommended; default without any selection flag: every task, gradient scheduler)",
    )
    parser.add_argument("--top-tasks", type=int, help="tune at most this many tasks (heaviest first)")
    parser.add_argument(
        "--no-schedule-transfer",
        action="store_true",
        help="leave the tasks a selection does not tune on TVM's default schedule",
    )
    parser.add_argument("--compile", action="store_true", help="then build the network and compare it")
    add_tuning_arguments(parser)
    add_copula_arguments(parser, network=True)


def _add_compile_arguments(parser: argparse.ArgumentParser) -> None:
    _add_model_arguments(parser)
    add_tuning_arguments(parser)
    parser.set_defaults(trials=0)


_SHAPES = "; ".join(
    f"{k}: {','.join(v)} (default {','.join(map(str, DEFAULT_SHAPES[k]))})" for k, v in SHAPE_PARAMS.items()
)

#: The operator and network commands; :func:`build_parser` adds the copula and VTA ones after them.
COMMANDS: tuple[Command, ...] = (
    Command("tune", "tune one operator", _add_tune_arguments, _run_tune, description=f"Shapes: {_SHAPES}."),
    Command(
        "demo",
        f"the built-in default: tune a ResNet-18 {DEMO_KIND} layer for {DEMO_TRIALS} trials",
        add_tuning_arguments,
        _run_tune,
        description=None,
        defaults={"kind": DEMO_KIND, "shape": None, "no_reference": False, "trials": DEMO_TRIALS},
    ),
    Command(
        "tune-network",
        "tune every task of a network (built-in, torchvision, ONNX or your own PyTorch model)",
        _add_tune_network_arguments,
        _run_tune_network,
        description=None,
    ),
    Command(
        "compile",
        "build a network with its tuned schedules (--trials N tunes first), check it and time it against "
        "PyTorch, torch.compile and ONNX Runtime",
        _add_compile_arguments,
        _run_compile,
        description=None,
    ),
    Command(
        "target",
        "show the host target and its hardware features",
        add_target_arguments,
        _run_target,
        description=None,
    ),
)


def _add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true", help="show MetaSchedule's own logs")


def build_parser() -> argparse.ArgumentParser:
    """The ``tvm-transfer`` parser: :data:`COMMANDS`, then ``budget``, ``ml2tune`` and ``vta-tune``."""
    from tvm_transfer.cli import ml2tune, vta_tune
    from tvm_transfer.cli.copula import budget_command

    commands = [
        *COMMANDS,
        budget_command(add_target_arguments, resolve_target),
        ml2tune.COMMAND,
        vta_tune.COMMAND,
    ]
    return command.build_parser("tvm-transfer", __doc__, commands, add_arguments=_add_verbose_argument)


def _configure_logging(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        # MetaSchedule's per-round logs, copulas' one line per fitted design space, the ONNX exporter's
        # pass-by-pass notes, and torch.export's deprecation notices about its own internals.
        for library in ("tvm.s_tir.meta_schedule", "copulas", "onnxscript", "onnx_ir"):
            logging.getLogger(library).setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tvm-transfer`` console script; returns the process exit code."""
    return command.run(build_parser(), argv, configure=_configure_logging)
