"""``tenset-tools``: convert Ansor/TenSet measure records and MetaSchedule databases to the dataset format,
prune and split datasets.

Each subcommand is a :class:`~tenset_tools.command.Command` (name, help, argument setup, run function)
listed in :data:`COMMANDS`; a new subcommand is one more entry. Other distributions add subcommands through
the ``tenset_tools.commands`` entry-point group (see :func:`plugin_commands`). Flag names follow
TenSet's scripts where they mean the same thing (``--split-scheme``, ``--train-ratio``, ``--seed``,
``--min-sample-size``, ``--out-file``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import time
from pathlib import Path

from tenset_tools import command
from tenset_tools.command import Command, bounded_float, bounded_int

__all__ = ["COMMANDS", "PLUGIN_GROUP", "build_parser", "main", "plugin_commands"]


def markdown_table(rows: list[tuple[str, object]], header: tuple[str, str] = ("quantity", "value")) -> str:
    """A two-column Markdown table; floats with 4 decimals."""

    def cell(value: object) -> str:
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {name} | {cell(value)} |" for name, value in rows]
    return "\n".join(lines)


# convert ----------------------------------------------------------------------------------------------


def _add_convert(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "logs",
        nargs="+",
        metavar="LOG",
        help="Ansor/TenSet record file(s) (JSON lines, log v0.2-v0.6) or directories such as "
        "dataset/measure_records or dataset/measure_records/<hardware> (searched for *.json); or "
        "MetaSchedule work dirs (database_workload.json + database_tuning_record.json), one of their "
        "files, or a directory of work dirs (e.g. a `tenset-tools collect --work-dir`)",
    )
    parser.add_argument("-o", "--out-file", required=True, help="output Parquet dataset file")
    parser.add_argument(
        "--workers",
        type=bounded_int(1),
        default=1,
        help="parallel processes, over files (default 1; Ansor logs only)",
    )
    parser.add_argument(
        "--batch-size",
        type=bounded_int(1),
        default=1000,
        help="records converted at a time (memory: ~50 KB each)",
    )
    parser.add_argument(
        "--no-sequence-features",
        action="store_true",
        help="leave sequence_features empty (about 2.5x faster; the steps stay in the candidate column; "
        "Ansor logs only)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _metaschedule_databases(paths: list[str]) -> list[Path]:
    """The MetaSchedule work dirs among or under ``paths``; raises when only some inputs hold them."""
    # Only directories and database files can be MetaSchedule inputs: Ansor-only conversions never
    # pay for importing TVM.
    candidates = [p for p in paths if Path(p).is_dir() or Path(p).name.startswith("database_")]
    if not candidates:
        return []
    from .metaschedule import find_databases

    found = {path: find_databases(path) for path in paths}
    databases = [work_dir for work_dirs in found.values() for work_dir in work_dirs]
    without = [path for path, work_dirs in found.items() if not work_dirs]
    if databases and without:
        raise ValueError(
            f"{without} hold no MetaSchedule database but other inputs do; convert MetaSchedule work dirs "
            "and Ansor/TenSet logs separately"
        )
    return databases


def _run_convert(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    missing = [log for log in args.logs if not Path(log).exists()]
    if missing:
        raise FileNotFoundError(f"no such input: {', '.join(missing)}")
    databases = _metaschedule_databases(args.logs)
    start = time.perf_counter()
    with tqdm(unit=" records", disable=args.no_progress, desc="convert") as bar:
        if databases:
            from .metaschedule import convert_databases

            stats = convert_databases(databases, args.out_file, progress=bar.update)
        else:
            from .ansor import convert_records

            stats = convert_records(
                args.logs,
                args.out_file,
                batch_size=args.batch_size,
                workers=args.workers,
                progress=bar.update,
                sequence_features=not args.no_sequence_features,
            )
    elapsed = time.perf_counter() - start
    print(f"wrote {args.out_file}: {stats.summary()}")
    rows = [
        ("files", stats.files),
        ("records", stats.records),
        ("corrupt lines skipped", stats.corrupt),
        ("comment/blank lines", stats.skipped_lines),
        ("seconds", round(elapsed, 2)),
        ("records/second", round(stats.records / elapsed) if elapsed > 0 else 0),
    ]
    print(markdown_table(rows))
    for line in stats.corrupt_lines[:20]:
        print(f"corrupt: {line.path}:{line.line_no}: {line.reason}", file=sys.stderr)
    return 0


# prune ------------------------------------------------------------------------------------------------


def add_split_options(parser: argparse.ArgumentParser, default: str | None = "within_task") -> None:
    """``--split-scheme``, ``--train-ratio``, ``--seed``, ``--test-targets`` (``default=None``: no split
    unless asked for)."""
    from .split import SPLIT_SCHEMES

    parser.add_argument("--split-scheme", choices=sorted(SPLIT_SCHEMES), default=default)
    parser.add_argument("--train-ratio", type=bounded_float(0.0, 1.0, open_minimum=True), default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--test-targets",
        default=None,
        help="by_target only: comma-separated target ids for the test side (default: a seeded draw)",
    )


def split_options(args: argparse.Namespace) -> dict:
    """Keyword options of :func:`tenset_tools.split.split` from the parsed split arguments."""
    options = {}
    if args.test_targets:
        if args.split_scheme != "by_target":
            raise ValueError("--test-targets applies to --split-scheme by_target only")
        options["test_targets"] = args.test_targets.split(",")
    return options


def _add_prune(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", help="Parquet dataset file (from `tenset-tools convert`)")
    parser.add_argument("-o", "--out-file", required=True, help="pruned Parquet dataset file")
    parser.add_argument(
        "--flops-coverage",
        type=bounded_float(0.0, 1.0, open_minimum=True),
        default=0.9,
        help="keep the tasks carrying this fraction of FLOPs x occurrences (default 0.9)",
    )
    parser.add_argument(
        "--min-sample-size",
        "--min-records",
        dest="min_records",
        type=bounded_int(0),
        default=48,
        help="drop (task, target) groups with fewer records (TenSet's make_dataset default 48)",
    )
    parser.add_argument(
        "--min-norm-throughput",
        type=bounded_float(0.0, 1.0),
        default=0.05,
        help="drop records slower than this fraction of their task's best (default 0.05)",
    )
    parser.add_argument("--keep-invalid", action="store_true", help="keep failed measurements")
    parser.add_argument(
        "--evaluate",
        action="store_true",
        help="also split the input, prune the training side, and compare the pairwise accuracy of an "
        "XGBoost baseline trained on pruned vs full data",
    )
    add_split_options(parser)


def _run_prune(args: argparse.Namespace) -> int:
    from .prune import compare_pruning, prune
    from .schema import add_normalised_throughput, read_dataset, write_dataset
    from .split import split

    frame = add_normalised_throughput(read_dataset(args.dataset))
    settings = {
        "flops_coverage": args.flops_coverage,
        "min_records": args.min_records,
        "min_norm_throughput": args.min_norm_throughput,
        "drop_invalid": not args.keep_invalid,
    }
    pruned, report = prune(frame, **settings)
    if pruned.empty:
        raise ValueError(
            f"pruning left no record of the {len(frame)} in {args.dataset} (dropped "
            f"{report.dropped_by_flops} by --flops-coverage, {report.dropped_invalid} invalid, "
            f"{report.dropped_low_performance} below --min-norm-throughput, "
            f"{report.dropped_few_records} in groups under --min-sample-size); {args.out_file} not written"
        )
    write_dataset(pruned, args.out_file, frame.attrs.get("hw_feature_names"))
    rows = list(report.as_dict().items())
    if args.evaluate:
        train, test = split(frame, args.split_scheme, args.train_ratio, args.seed, **split_options(args))
        pruned_train, _ = prune(train, **settings)
        rows += list(compare_pruning(train, pruned_train, test, seed=args.seed).items())
    print(f"wrote {args.out_file}")
    print(markdown_table(rows))
    return 0


# split ------------------------------------------------------------------------------------------------


def _add_split(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dataset", help="Parquet dataset file")
    add_split_options(parser)
    parser.add_argument("--train-out", help="train Parquet file (default: <dataset>_train.parquet)")
    parser.add_argument("--test-out", help="test Parquet file (default: <dataset>_test.parquet)")


def _run_split(args: argparse.Namespace) -> int:
    from .schema import read_dataset, write_dataset
    from .split import split

    frame = read_dataset(args.dataset)
    train, test = split(frame, args.split_scheme, args.train_ratio, args.seed, **split_options(args))
    source = Path(args.dataset)
    outputs = {
        "train": (train, args.train_out or source.with_name(f"{source.stem}_train.parquet")),
        "test": (test, args.test_out or source.with_name(f"{source.stem}_test.parquet")),
    }
    empty = [side for side, (part, _) in outputs.items() if part.empty]
    if empty:
        raise ValueError(
            f"--split-scheme {args.split_scheme} leaves the {' and '.join(empty)} side of {args.dataset} "
            f"empty ({len(frame)} records, {frame['task_id'].nunique()} tasks, "
            f"{frame['target_id'].nunique()} targets); nothing written"
        )
    rows = []
    for side, (part, path) in outputs.items():
        write_dataset(part, path, frame.attrs.get("hw_feature_names"))
        rows += [
            (f"{side} records", len(part)),
            (f"{side} tasks", part["task_id"].nunique()),
            (f"{side} file", path),
        ]
    print(markdown_table(rows))
    return 0


COMMANDS: tuple[Command, ...] = (
    Command(
        "convert",
        "convert Ansor/TenSet measure records or MetaSchedule databases to a Parquet dataset",
        _add_convert,
        _run_convert,
    ),
    Command("prune", "FLOPs-aware pruning of a dataset (Verma et al. 2023)", _add_prune, _run_prune),
    Command("split", "split a dataset: within_task, by_task or by_target", _add_split, _run_split),
)


#: Entry-point group of the subcommands other distributions add (``tvm-transfer``: collect, train, eval).
PLUGIN_GROUP = "tenset_tools.commands"


def plugin_commands() -> list[Command]:
    """The commands of the installed ``tenset_tools.commands`` entry points (each a :class:`Command` or a
    sequence of them). This is how commands that need the TVM plug-ins join this command line without
    this package importing them (dependencies point one way)."""
    return command.load_commands(importlib.metadata.entry_points(group=PLUGIN_GROUP), "tenset-tools")


def build_parser() -> argparse.ArgumentParser:
    """The ``tenset-tools`` parser: the built-in :data:`COMMANDS`, then the plug-ins' commands."""
    return command.build_parser(
        "tenset-tools",
        "TenSet-style datasets for TVM cost models: convert Ansor/TenSet measure records "
        "(dataset/measure_records/<hardware>/*.json) and MetaSchedule databases to Parquet, prune and "
        "split them; with tvm-transfer installed also collect, train and eval.",
        [*COMMANDS, *plugin_commands()],
        metavar="COMMAND",
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tenset-tools`` console script; returns the process exit code."""
    # SchemaVersionError and DatasetFormatError are ValueErrors with a message saying what to do.
    return command.run(build_parser(), argv, errors=(OSError, ValueError))
