"""``tenset-tools train-source`` and ``tenset-tools adapt``: heterogeneous transfer (ModelX) on datasets.

``train-source SOURCE.parquet -o source.model`` fits a :class:`~tvm_transfer.hetero.SourceModel` on the
named features of one view of a dataset (``--features``, see :mod:`tvm_transfer.hetero.views`) to the
normalised throughput of its valid records. ``adapt SOURCE_MODEL TARGET.parquet -o adapted.model`` adapts
it to a target dataset described by other features: a seeded ``--fraction`` of the target's valid records
trains ModelX, the others are held out and scored against the zero-shot use of the source model (MSE and
TenSet's ranking metrics). ``--source-data`` adds the Grassmann distance of the pair in the source model's
latent space; ``--distance-only`` prints it and writes nothing.

Both join the ``tenset-tools`` command line through the ``tenset_tools.commands`` entry-point group; this
module imports only the standard library and ``tenset_tools`` at import time.
"""

from __future__ import annotations

import argparse
import json

from tenset_tools.atomic import atomic_write_text
from tenset_tools.cli import markdown_table
from tenset_tools.command import Command

__all__ = ["ADAPT", "COMMANDS", "TRAIN_SOURCE"]


def _dataset_rows(path: str, view: str, targets: str | None):
    from tenset_tools.schema import read_dataset
    from tvm_transfer.hetero import labelled_rows

    frame = read_dataset(path)
    if targets:
        wanted = targets.split(",")
        unknown = sorted(set(wanted) - set(frame["target_id"]))
        if unknown:
            raise ValueError(f"--targets: {unknown} not in {path} (it has {sorted(set(frame['target_id']))})")
        frame = frame[frame["target_id"].isin(wanted)]
    return labelled_rows(frame, view)


def _add_common(parser: argparse.ArgumentParser, features_help: str) -> None:
    parser.add_argument("--features", default="kernel", help=features_help)
    parser.add_argument("--targets", help="comma-separated target ids: use only these records of the dataset")
    parser.add_argument("--seed", type=int, default=0, help="seeds the sampling and the models (default 0)")
    parser.add_argument("--json", help="also write the report as JSON to this file")


def _finish(rows: list[tuple[str, object]], report: dict, json_path: str | None) -> int:
    print(markdown_table(rows))
    if json_path:
        atomic_write_text(json_path, json.dumps(report, indent=1) + "\n")
    return 0


def _run_train_source(args: argparse.Namespace) -> int:
    from tvm_transfer.hetero import SourceModel

    X, y, _ = _dataset_rows(args.dataset, args.features, args.targets)
    model = SourceModel(seed=args.seed, epochs=args.epochs).fit(X, y)
    model.save(args.output)
    report = {
        "dataset": args.dataset,
        "features": args.features,
        "records": len(X),
        "columns": X.shape[1],
        "epochs": model.n_epochs_,
        "output": args.output,
    }
    return _finish(list(report.items()), report, args.json)


def _add_train_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", help="source dataset (Parquet, tenset_tools schema)")
    parser.add_argument("-o", "--output", required=True, help="the source model file to write")
    parser.add_argument(
        "--epochs", type=int, default=300, help="upper bound on training epochs (default 300)"
    )
    _add_common(parser, "feature view(s) of the source, e.g. kernel, trace, kernel+hidden (default kernel)")


TRAIN_SOURCE = Command(
    "train-source",
    "fit a ModelX source model (PyTorch MLP) on one feature view of a dataset",
    _add_train_source,
    _run_train_source,
)


def _run_adapt(args: argparse.Namespace) -> int:
    from tvm_transfer.hetero import ModelX, SourceModel, ZeroShot, sample_rows, scores, transfer_distance

    if not args.distance_only and not args.output:
        raise ValueError("adapt: -o/--output is required unless --distance-only is given")
    if args.distance_only and not args.source_data:
        raise ValueError("adapt: --distance-only needs --source-data (the source model's training dataset)")
    source = SourceModel.load(args.source_model)
    X, y, records = _dataset_rows(args.target, args.features, args.targets)
    chosen, rest = sample_rows(len(X), args.fraction, args.seed)
    model = ModelX(source, mode=args.mode, residual=args.residual, seed=args.seed).fit(
        X.iloc[chosen], y[chosen]
    )
    report: dict = {
        "target": args.target,
        "features": args.features,
        "target_columns": X.shape[1],
        "source_columns": source.n_features_in_,
        "adaptation_records": len(chosen),
        "held_out_records": len(rest),
        "mode": args.mode,
        "fit_seconds": round(model.fit_seconds_, 3),
        "columns": model.column_report(),
    }
    if args.source_data:
        Xs, _, _ = _dataset_rows(args.source_data, args.source_features, None)
        report["distance_zero_shot"] = transfer_distance(ZeroShot(source).fit(X), Xs, X, k=args.k)
        if args.mode != "residual":
            report["distance_aligned"] = transfer_distance(model, Xs, X, k=args.k)
    if not args.distance_only:
        held, held_y, held_records = X.iloc[rest], y[rest], records.iloc[rest]
        report["modelx"] = scores(held_records, held_y, model.predict(held))
        report["zero_shot"] = scores(held_records, held_y, ZeroShot(source).fit(X).predict(held))
        model.save(args.output)
        report["output"] = args.output
    rows = [(k, v) for k, v in report.items() if k != "columns"]
    rows.append(("name-matched columns", len(report["columns"]["matched"])))
    return _finish(rows, report, args.json)


def _add_adapt(parser: argparse.ArgumentParser) -> None:
    from_choices = ("align", "residual", "both")
    parser.add_argument("source_model", help="a source model file (tenset-tools train-source)")
    parser.add_argument("target", help="target dataset (Parquet, tenset_tools schema)")
    parser.add_argument("-o", "--output", help="the adapted model file to write")
    parser.add_argument(
        "--fraction",
        type=float,
        default=0.05,
        help="share of the target's records to adapt on (default 0.05)",
    )
    parser.add_argument("--mode", choices=from_choices, default="both", help="ModelX parts (default both)")
    parser.add_argument(
        "--residual",
        choices=("mean", "ridge", "xgboost"),
        default="ridge",
        help="residual model (default ridge)",
    )
    parser.add_argument("--source-data", help="the source dataset: adds the Grassmann transfer distance")
    parser.add_argument(
        "--source-features", default="kernel", help="feature view of --source-data (default kernel)"
    )
    parser.add_argument("--k", type=int, default=3, help="principal directions of the distance (default 3)")
    parser.add_argument(
        "--distance-only", action="store_true", help="print the transfer distance, write no model"
    )
    _add_common(parser, "feature view(s) of the target, e.g. trace, hidden, kernel+hidden (default kernel)")


ADAPT = Command(
    "adapt",
    "adapt a source model to a target dataset of other features (ModelX) and score it on held-out records",
    _add_adapt,
    _run_adapt,
)

#: What the ``tenset_tools.commands`` entry point ``adapt`` contributes.
COMMANDS = (TRAIN_SOURCE, ADAPT)
