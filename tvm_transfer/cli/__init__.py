"""The ``tvm-transfer`` command line: tune operators and networks, compile tuned networks."""

from __future__ import annotations

import os

# Worker threads that spin while waiting for a busy core slow every runtime several times over on a shared
# machine (docs/runtimes.md): by default none spins. Set before torch loads (libgomp reads it once); a
# value the user exported is kept. ONNX Runtime's sessions are made with spinning off as well.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")

import argparse
import contextlib
import dataclasses
import json
import logging
import sys
import warnings
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from tenset_tools import command
from tenset_tools.atomic import atomic_write_text
from tenset_tools.command import Command, UsageError, bounded_float, bounded_int, refuse_unused
from tvm_transfer.cli.copula import check_copula_arguments
from tvm_transfer.cli.transfer import add_transfer_arguments
from tvm_transfer.cost_model import COST_MODELS
from tvm_transfer.runtimes import RUNTIMES
from tvm_transfer.tuning.repick import DEFAULT_REPICK, REPICK_MODES
from tvm_transfer.tuning.run import MEASURE_CACHES
from tvm_transfer.workloads import DEFAULT_SHAPES, SHAPE_PARAMS

__all__ = ["add_target_arguments", "add_tuning_arguments", "build_parser", "main", "resolve_target"]

if TYPE_CHECKING:
    from tvm.target import Target

    from tvm_transfer.tuning.run import RunConfig

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


def _plan(args: argparse.Namespace, pack, options, saved=None, workload=None, tunes: bool = True):
    """The run's tuning plan: the default transfer policy's with ``pack``
    (:func:`~tvm_transfer.cli.transfer.transfer_plan`), its cost model replaced by ``saved`` (the
    ``--model-file`` model, which keeps learning from the run) or by ``--cost-model`` pretrained on
    ``--seed-from``'s runs (``--pretrain-on-sources``, for ``workload``), its search by ``--seed-from``'s
    copula search; without tuning (``tunes`` false) only the pack's exact matches."""
    from tvm_transfer.cli.copula import copula_cost_model, copula_strategy
    from tvm_transfer.cli.transfer import transfer_plan
    from tvm_transfer.transfer.policy import ONLINE_COST_MODEL

    plan = transfer_plan(pack, options, args.cost_model, tunes=tunes)
    if not tunes:
        return plan
    if saved is not None:
        plan = dataclasses.replace(plan, cost_model=saved)
    elif getattr(args, "pretrain_on_sources", False):
        online = args.cost_model or ONLINE_COST_MODEL
        plan = dataclasses.replace(plan, cost_model=copula_cost_model(args, workload, online, options.seed))
    exclude = workload.ir_module() if workload is not None else None
    search = copula_strategy(args, options, exclude=exclude)
    return plan if search is None else dataclasses.replace(plan, search_strategy=search)


def _saved_model(args: argparse.Namespace):
    """The model ``--model-file`` names, loaded (``None`` without one); a file that is not a saved model,
    or ``--cost-model`` beside it, ends the command with its reason."""
    if not args.model_file:
        return None
    if args.cost_model:
        raise UsageError("--model-file and --cost-model exclude each other: the saved model is what tunes")
    from tvm_transfer.cost_model import CostModelFileError, load_cost_model

    try:
        return load_cost_model(args.model_file)
    except (CostModelFileError, OSError) as error:
        raise UsageError(f"--model-file: {error}") from error


def _given_work_dir(args: argparse.Namespace):
    """``--work-dir`` checked writable (a usage error before anything slow), else ``None``."""
    from tvm_transfer.tuning.workdir import WorkDir

    return WorkDir.checked(args.work_dir) if args.work_dir else None


def _work_dir(args: argparse.Namespace, given, pack, name: str):
    """``given`` (:func:`_given_work_dir`), else ``work/<name>-<label>`` (:func:`_default_work_dir`)
    checked writable."""
    from tvm_transfer.tuning.workdir import WorkDir

    return given or WorkDir.checked(_default_work_dir(args, pack, name))


def _default_work_dir(args: argparse.Namespace, pack, name: str) -> Path:
    """``work/<name>-<label>`` of :func:`_work_dir` (not created): with a transfer pack ``transfer``, or the
    model file's stem or ``--cost-model`` then ``-transfer``; without one the model file's stem, else the
    ``--cost-model``, else TVM's model. A run with a pack and one without never share a work dir."""
    from tvm_transfer.transfer.policy import NO_TRANSFER_COST_MODEL

    model = Path(args.model_file).stem if args.model_file else args.cost_model
    if pack is not None:
        label = f"{model}-transfer" if model else "transfer"
    else:
        label = model or NO_TRANSFER_COST_MODEL
    return Path("work") / f"{name}-{label}"


def _check_tuning_without_pack(pack, work_dir) -> None:
    """Raise :class:`~tenset_tools.command.UsageError` when a run without a transfer pack
    (``--no-transfer``) would tune in ``work_dir`` and it holds schedules a pack applied: the search would
    start from them, which is not TVM alone."""
    applied = work_dir.applied_tasks()
    if applied and pack is None:
        raise UsageError(
            f"{work_dir} holds {len(applied)} schedule(s) applied from a transfer pack, so tuning on in it "
            "would not be TVM alone: tune it with a transfer pack, or use another work dir"
        )


def _report(args: argparse.Namespace, result) -> int:
    """Print a tuning result (and its time breakdown with ``--profile``); save it with ``--json``."""
    _print_tuning(args, result)
    if args.json:
        atomic_write_text(args.json, json.dumps(asdict(result), indent=1, default=float))
    return 0


def _print_tuning(args: argparse.Namespace, result) -> None:
    print(result.table())
    if args.profile:
        _print_profile(result.profile)


def _run_tune(args: argparse.Namespace) -> int:
    from tvm_transfer.cli.transfer import resolve_transfer_pack
    from tvm_transfer.tuning.operator import tune_workload
    from tvm_transfer.tuning.workdir import WorkDirMismatchError
    from tvm_transfer.workloads import parse_workload

    workload = parse_workload(args.kind, args.shape)
    target = resolve_target(args)
    check_copula_arguments(args)
    given = _given_work_dir(args)
    saved = _saved_model(args)
    pack = resolve_transfer_pack(args)
    work_dir = _work_dir(args, given, pack, workload.name)
    _check_tuning_without_pack(pack, work_dir)
    options = _options(args)
    with work_dir.lock(wait=args.wait):
        plan = _plan(args, pack, options, saved, workload)
        print(f"tuning {workload.name} ({workload.flops / 1e6:.1f} MFLOP) in {work_dir}", file=sys.stderr)
        try:
            result = tune_workload(
                workload, work_dir, target=target, options=options, plan=plan, reference=not args.no_reference
            )
        except WorkDirMismatchError as error:
            raise UsageError(str(error)) from error
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


#: Options only tuning reads, with their defaults: ``compile`` refuses them at ``--trials 0``.
_TUNING_ONLY = {
    "--cost-model": ("cost_model", None),
    "--model-file": ("model_file", None),
    "--trials-per-iter": ("trials_per_iter", 16),
    "--population": ("population", 128),
    "--seed": ("seed", 0),
    "--measure-caches": ("measure_caches", None),
    "--profile": ("profile", False),
    "--quiet": ("quiet", False),
}

#: Options only the build reads, with their defaults: ``tune-network`` refuses them without ``--compile``.
_BUILD_ONLY = {
    "--runtimes": ("runtimes", list(RUNTIMES)),
    "--rounds": ("rounds", 5),
    "--tolerance": ("tolerance", 1e-3),
    "--repick": ("repick", DEFAULT_REPICK),
    "--profile-network": ("profile_network", False),
}


@contextlib.contextmanager
def _network_config(args: argparse.Namespace, tunes: bool) -> Iterator[RunConfig]:
    """The :class:`~tvm_transfer.tuning.run.RunConfig` of a network command, made once, within the block
    holding its work dir's lock: the target, the model (its convolution layout taken from ``--work-dir``
    when the options leave it to ``AUTO``), the transfer pack, the work dir, the tuning plan, and the
    layout-rewrite and cache settings (those not given are the work dir's). An unknown or unimportable
    model is a usage error naming the cause, and a busy work dir is refused, before anything slow (a work
    dir tuned otherwise is refused when the run is prepared)."""
    from tvm_transfer.cli.transfer import resolve_transfer_pack
    from tvm_transfer.networks import load_model, model_slug, relax_module
    from tvm_transfer.tuning.run import RunConfig

    target = resolve_target(args)
    if target.kind.name != "llvm":
        raise UsageError(
            f"--target: networks are tuned and compiled for CPU (llvm) targets, not {target.kind.name!r}"
        )
    check_copula_arguments(args)
    given = _given_work_dir(args)
    try:
        model = load_model(args.network, args.input_shape, conv_layout=_conv_layout(args, given))
        relax_module(model)
    except ValueError as error:  # a ModelSourceError
        raise UsageError(str(error)) from error
    saved = _saved_model(args) if tunes else None
    pack = resolve_transfer_pack(args)
    work_dir = _work_dir(args, given, pack, model_slug(model.name, args.input_shape))
    if tunes:
        _check_tuning_without_pack(pack, work_dir)
    _note_nchw_work_dir(args, pack, model, work_dir)
    with work_dir.lock(wait=args.wait):
        options = _options(args)
        try:
            config = RunConfig.make(
                model,
                work_dir,
                target=target,
                options=options,
                plan=_plan(args, pack, options, saved, tunes=tunes),
                layout_free=False if args.no_layout_rewrite else None,
                measure_caches=args.measure_caches,
            )
        except ValueError as error:  # a damaged settings file
            raise UsageError(str(error)) from error
        yield config


def _conv_layout(args: argparse.Namespace, work_dir) -> str:
    """``--conv-layout``; left ``AUTO``, the layout ``work_dir`` (a ``--work-dir``) was tuned with."""
    from tvm_transfer.networks import AUTO_CONV_LAYOUT, conv_layout_of

    tuned = work_dir.settings().network if work_dir is not None else None
    if args.conv_layout != AUTO_CONV_LAYOUT or tuned is None:
        return args.conv_layout
    return conv_layout_of(tuned)


def _note_nchw_work_dir(args: argparse.Namespace, pack, model, work_dir) -> None:
    """Say so when the default layout picked NHWC for ``model`` (tuned in ``work_dir``) and the default
    work dir of the same model in NCHW holds records (tuned before the commands defaulted to NHWC): a run
    would otherwise start over unannounced."""
    from tvm_transfer.networks import AUTO_CONV_LAYOUT, conv_layout_of, model_slug, with_conv_layout
    from tvm_transfer.tuning.workdir import WorkDir

    picked = args.conv_layout == AUTO_CONV_LAYOUT and conv_layout_of(args.network) != "NHWC"
    if args.work_dir or not picked or model.conv_layout != "NHWC":
        return
    nchw = _default_work_dir(args, pack, model_slug(with_conv_layout(model.name, "NCHW"), args.input_shape))
    if WorkDir(nchw).record_count():
        print(
            f"note: {nchw} holds this model tuned with its convolutions NCHW; this run imports them NHWC "
            f"(the default, faster) into {work_dir}. Pass --conv-layout NCHW to use "
            "that work dir instead.",
            file=sys.stderr,
        )


def _run_tune_network(args: argparse.Namespace) -> int:
    if not args.compile:
        refuse_unused(args, _BUILD_ONLY, "give --compile to build the network after tuning")
    return _run_network(args, tunes=True, compiles=args.compile)


def _run_compile(args: argparse.Namespace) -> int:
    if args.trials == 0:
        refuse_unused(args, _TUNING_ONLY, "give --trials N to tune first")
    return _run_network(args, tunes=args.trials > 0, compiles=True)


def _run_network(args: argparse.Namespace, *, tunes: bool, compiles: bool) -> int:
    """Tune (``tunes``) and build and compare (``compiles``) a network in one run holding its work dir's
    lock: one config, one extraction of its tasks, one check and preparation of its work dir. ``--json``
    writes the tuning result, or with ``compiles`` both. Exit status 1 when TVM's output differs from the
    reference by more than ``--tolerance``."""
    from tvm_transfer.tuning.compile import compile_network
    from tvm_transfer.tuning.network import tune_network
    from tvm_transfer.tuning.run import NetworkRun
    from tvm_transfer.tuning.workdir import WorkDirMismatchError

    selection = _selection(args) if hasattr(args, "flops_share") else None
    with _network_config(args, tunes) as config:
        try:
            run = NetworkRun(config)
        except WorkDirMismatchError as error:
            raise UsageError(str(error)) from error
        tuning = tune_network(run, selection=selection) if tunes else None
        if not compiles:
            return _report(args, tuning)
        if tuning is not None:
            _print_tuning(args, tuning)
        result = compile_network(
            run,
            runtimes=args.runtimes,
            rounds=args.rounds,
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
    keys = [] if text == "none" else text.split(",")
    unknown = [key for key in keys if key not in RUNTIMES]
    if unknown or len(set(keys)) != len(keys):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give none or distinct names among {', '.join(RUNTIMES)}, comma-separated"
        )
    return keys


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    from tvm_transfer.networks import AUTO_CONV_LAYOUT, CONV_LAYOUTS, NETWORKS

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
        help="do not let schedules re-lay out the weights (the work dir records it: compile follows)",
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
        "--measure-caches",
        choices=MEASURE_CACHES,
        help="how tuning times each candidate: warm (runs back to back, as MetaSchedule does) or cold "
        "(caches flushed of its weights before every run); auto: cold when the network's weights outgrow "
        "the last-level cache, else warm (default: as the work dir was tuned, else warm; a work dir is "
        "measured one way only)",
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
