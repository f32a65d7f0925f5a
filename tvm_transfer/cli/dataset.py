"""``tenset-tools collect | train | eval | store-features``: the dataset commands that need tvm-transfer.

They join the ``tenset-tools`` command line through the ``tenset_tools.commands`` entry-point group
(``pyproject.toml``), which point at the :class:`~tenset_tools.command.Command` objects below. This module
imports only the standard library and ``tenset_tools`` at import time, so ``tenset-tools --help``
does not pay for TVM's import; the work is imported when a command runs.

``train`` fits one of our cost models (:data:`TRAINABLE`) on a dataset's kernel + hardware features to the
normalised throughput and saves it; ``eval`` loads a saved model and prints TenSet's metrics. For the
BiLSTM, ``train`` pretrains (the saved file is a base for fine-tuning) and ``train --pretrained FILE
--fine-tune-mode MODE`` fine-tunes such a base on (target) records instead; see ``docs/bilstm.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

from tenset_tools.atomic import atomic_write_text
from tenset_tools.cli import add_split_options, markdown_table, split_options
from tenset_tools.command import Command, UsageError

__all__ = ["COLLECT", "EVAL", "STORE_FEATURES", "TRAIN", "TRAINABLE"]

#: Cost models ``train`` can fit (ours: they take feature matrices and save themselves).
TRAINABLE = ("xgboost", "lightgbm", "mlp", "bilstm")


def _read_split(args: argparse.Namespace):
    """``(train, test)``: the sides of the dataset's split when ``--split-scheme`` is given, else the whole
    dataset twice; ``norm_throughput`` filled either way."""
    from tenset_tools.schema import add_normalised_throughput, read_dataset
    from tenset_tools.split import split

    frame = read_dataset(args.dataset)
    if getattr(args, "targets", None):
        wanted = args.targets.split(",")
        unknown = sorted(set(wanted) - set(frame["target_id"]))
        if unknown:
            raise ValueError(f"target(s) {unknown} not in {args.dataset} ({sorted(set(frame['target_id']))})")
        frame = frame[frame["target_id"].isin(wanted)].reset_index(drop=True)
    if args.split_scheme is None:
        frame = add_normalised_throughput(frame)
        return frame, frame
    return split(frame, args.split_scheme, args.train_ratio, args.seed, **split_options(args))


def _summary(frame) -> list[tuple[str, object]]:
    return [
        ("records", len(frame)),
        ("tasks", frame["task_id"].nunique()),
        ("targets", frame["target_id"].nunique()),
    ]


# train ---------------------------------------------------------------------------------------------------


def parse_hyper_parameters(pairs: list[str] | None) -> dict:
    """``--set NAME=VALUE`` pairs as constructor arguments (values parsed as JSON, else kept as strings)."""
    params = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--set expects NAME=VALUE, got {pair!r}")
        try:
            params[name] = json.loads(value)
        except json.JSONDecodeError:
            params[name] = value
    return params


def _run_train(args: argparse.Namespace) -> int:
    from tvm_transfer.cost_model.training import evaluate_model, few_records, fine_tune_model, train_model

    train, test = _read_split(args)
    params = parse_hyper_parameters(args.set)
    start = time.perf_counter()
    if args.pretrained:
        if args.records_per_task:
            train = few_records(train, args.records_per_task, args.seed)
        tasks = args.tasks.split(",") if args.tasks else None
        cost_model = fine_tune_model(args.pretrained, train, args.fine_tune_mode, tasks, **params)
    else:
        cost_model = train_model(train, args.model, args.seed, **params)
    elapsed = time.perf_counter() - start
    cost_model.save(str(args.out_file))
    print(f"wrote {args.out_file}")
    model = f"{args.pretrained} fine-tuned ({args.fine_tune_mode})" if args.pretrained else args.model
    rows = [("model", model), *_summary(train), ("training seconds", round(elapsed, 2))]
    if args.split_scheme is not None:
        rows += [(f"test {name}", value) for name, value in _summary(test)]
        rows += [(f"test {name}", value) for name, value in evaluate_model(cost_model, test).items()]
    print(markdown_table(rows))
    return 0


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", help="Parquet dataset file")
    parser.add_argument("--model", choices=TRAINABLE, default="xgboost", help="default: xgboost")
    parser.add_argument("-o", "--out-file", required=True, help="where to save the model")
    parser.add_argument(
        "--targets", help="comma-separated target ids: use only their records (e.g. the source targets)"
    )
    parser.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help="a constructor argument of the model, e.g. --set epochs=30 --set loss=lambdarank (repeatable)",
    )
    parser.add_argument(
        "--pretrained",
        metavar="FILE",
        help="fine-tune this pretrained BiLSTM (from `train --model bilstm`) on the (train side of the) "
        "dataset instead of training from scratch; --model is ignored",
    )
    parser.add_argument(
        "--fine-tune-mode",
        choices=("full", "head", "task", "plus"),
        default="full",
        help="with --pretrained: full, head (frozen encoder), task (task embedding + head, on --tasks), "
        "plus (frozen base + XGBoost on residuals); default: full",
    )
    parser.add_argument("--tasks", help="with --fine-tune-mode task: comma-separated task ids to retrain on")
    parser.add_argument(
        "--records-per-task",
        type=int,
        help="with --pretrained: fine-tune on at most this many random records per (task, target)",
    )
    add_split_options(parser, default=None)


TRAIN = Command(
    "train",
    "train a tvm-transfer cost model on a dataset and save it",
    _add_train_arguments,
    _run_train,
    description="Fit a cost model on the kernel + hardware features of a dataset (MetaSchedule "
    "records) to the normalised throughput, and save it (a versioned archive). With --split-scheme "
    "it trains on the train side and prints the metrics on the test side.",
)


# eval ----------------------------------------------------------------------------------------------------


def _run_eval(args: argparse.Namespace) -> int:
    from tvm_transfer.cost_model import load_cost_model
    from tvm_transfer.cost_model.training import evaluate_model

    cost_model = load_cost_model(args.model)
    _, test = _read_split(args)
    metrics = evaluate_model(cost_model, test)
    print(markdown_table([*_summary(test), *metrics.items()]))
    if args.json:
        atomic_write_text(args.json, json.dumps(metrics, indent=1))
    return 0


def _add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="saved model file")
    parser.add_argument("dataset", help="Parquet dataset file")
    parser.add_argument("--json", help="also write the metrics to this JSON file")
    parser.add_argument("--targets", help="comma-separated target ids: evaluate on their records only")
    add_split_options(parser, default=None)


EVAL = Command(
    "eval",
    "print TenSet's metrics of a saved cost model on a dataset",
    _add_eval_arguments,
    _run_eval,
    description="RMSE, pairwise accuracy, average peak score@1/@5 and network top-1/top-5 of a model "
    "saved by `tenset-tools train`, on a dataset or (with --split-scheme) the test side of its split.",
)


# collect -------------------------------------------------------------------------------------------------


def _run_collect(args: argparse.Namespace) -> int:
    from tvm_transfer.networks import NETWORKS, ModelSourceError, load_model, split_model_names
    from tvm_transfer.tuning.collect import collect, default_targets, parse_targets
    from tvm_transfer.tuning.session import TuneOptions

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    networks = split_model_names(args.networks) if args.networks else list(NETWORKS)
    try:  # spelt as the models name themselves (``x@nchw`` is ``x``), so one network has one name
        networks = [load_model(network).name for network in networks]
    except ModelSourceError as error:
        raise UsageError(f"--networks: {error}") from error
    if bool(args.rpc) != bool(args.device_key):
        raise ValueError("--rpc and --device-key go together")
    targets = parse_targets(args.targets) if args.targets else default_targets()
    options = TuneOptions(
        trials_per_iter=args.trials_per_iter, population_size=args.population, seed=args.seed, progress=False
    )
    start = time.perf_counter()
    result = collect(
        networks,
        targets,
        args.budget,
        args.work_dir,
        args.out_file,
        options=options,
        cost_model=args.cost_model,
        rpc=(args.rpc, args.device_key) if args.rpc else None,
        all_tasks=args.all_tasks,
        progress=not args.no_progress,
    )
    elapsed = time.perf_counter() - start
    rows = [
        ("networks", ",".join(networks)),
        ("targets", ",".join(t.name for t in targets)),
        ("new measurements", result.new_measurements),
        ("seconds", round(elapsed, 1)),
    ]
    if result.stats is not None:
        print(f"wrote {args.out_file}: {result.stats.summary()}")
        rows += [
            ("records in dataset", result.stats.records),
            ("corrupt lines skipped", result.stats.corrupt),
        ]
    print(markdown_table(rows))
    return 0


def _add_collect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--networks",
        help="comma-separated models: built-in names, torchvision:NAME, .onnx files or "
        "package.module:factory, each may end in @SHAPE, e.g. torchvision:resnet50@1,3,160,160 "
        "(default: every built-in network)",
    )
    parser.add_argument(
        "--targets",
        help="comma-separated MCPU:CORES, e.g. znver4:2,x86-64-v3:2,x86-64:1 (host: this machine's CPU) "
        "(default: the host CPU with all cores, and x86-64-v3 with 1 core)",
    )
    parser.add_argument(
        "--budget", type=int, default=1000, help="total measurements, spread over (network, target) pairs"
    )
    parser.add_argument(
        "--work-dir", default="collect_work", help="root of the work dirs (default: %(default)s)"
    )
    parser.add_argument("-o", "--out-file", "--out", required=True, help="output Parquet dataset file")
    parser.add_argument("--rpc", metavar="HOST:PORT", help="measure through the TVM RPC tracker at HOST:PORT")
    parser.add_argument("--device-key", help="device key of the RPC servers to measure on")
    parser.add_argument(
        "--cost-model",
        default="tvm-random",
        help="model guiding the search (default tvm-random: random sampling plus mutations of the best)",
    )
    parser.add_argument("--trials-per-iter", type=int, default=8, help="candidates per batch (default 8)")
    parser.add_argument("--population", type=int, default=64, help="evolutionary population (default 64)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--all-tasks", action="store_true", help="also tune tasks of zero FLOPs (reshapes)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


COLLECT = Command(
    "collect",
    "measure a TenSet-style dataset on this machine (tuning real networks' tasks)",
    _add_collect_arguments,
    _run_collect,
    description="Tune the tasks of real networks on one or more CPU targets, one MetaSchedule work "
    "dir per (network, target) under --work-dir (re-running resumes), then convert everything to one "
    "Parquet dataset.",
)


# store-features --------------------------------------------------------------------------------------------


def _run_store_features(args: argparse.Namespace) -> int:
    from tenset_tools.schema import read_dataset, write_dataset
    from tvm_transfer.tuning.collect import add_store_features

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    start = time.perf_counter()
    frame, report = add_store_features(read_dataset(args.dataset), progress=not args.no_progress)
    write_dataset(frame, args.out_file)
    print(
        markdown_table(
            [
                ("records", len(frame)),
                ("filled", report.filled),
                ("not replayable (left empty)", report.unreplayable),
                ("not matching kernel_features (left empty)", report.mismatched),
                ("seconds", round(time.perf_counter() - start, 1)),
            ]
        )
    )
    return 0


def _add_store_features_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", help="Parquet dataset file (e.g. schema version 1)")
    parser.add_argument("-o", "--out-file", "--out", required=True, help="output Parquet dataset file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


STORE_FEATURES = Command(
    "store-features",
    "fill the per-store feature rows of a dataset collected before the schema had them",
    _add_store_features_arguments,
    _run_store_features,
    description="Replay every MetaSchedule record's trace on its task (extracted again from its "
    "network in tvm_transfer.networks for its target) and store the per-store feature rows that "
    "pool back to its kernel_features; other records are counted and left without rows.",
)
