"""``tenset-tools pack``: build a transfer pack from MetaSchedule work dirs (a ``tenset_tools.commands``
entry-point plug-in: building one trains cost models, which live here, not in ``tenset_tools``)."""

from __future__ import annotations

import argparse
import sys

from tenset_tools.command import Command, UsageError, bounded_int

__all__ = ["PACK"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "work_dirs",
        nargs="*",
        metavar="WORK_DIR",
        help="MetaSchedule work dirs (tvm-transfer tune / tune-network / compile --work-dir, or a "
        "`tenset-tools collect --work-dir`), or folders holding them; none with --extend to change only "
        "the base pack's models",
    )
    parser.add_argument("-o", "--out", required=True, metavar="PACK", help="the pack folder to write")
    parser.add_argument(
        "--top-k",
        type=bounded_int(1),
        help="records kept per task and target in the schedule database (default 5; with --extend, the "
        "base pack's, and no more than it)",
    )
    parser.add_argument(
        "--model",
        action="append",
        metavar="NAME_OR_FILE",
        help="a cost model to train on the corpus (xgboost, lightgbm, mlp, bilstm, multilevel) or a saved "
        "model file (.model) to include as it is; repeat for several, the first is the default; "
        "`none` for no model (default: xgboost)",
    )
    parser.add_argument(
        "--exclude-network",
        action="append",
        default=[],
        metavar="MODEL",
        help="leave out the work dirs of this network (as its run named it, e.g. torchvision:efficientnet_b0"
        "), e.g. one held out for evaluation; repeat for several",
    )
    parser.add_argument(
        "--extend",
        metavar="BASE_PACK",
        help="add the work dirs to a copy of this pack: its corpus and best schedules are kept (a candidate "
        "measured in both counts once), its excluded networks stay excluded, the models are trained on the "
        "whole corpus; -o may name BASE_PACK itself",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the trained models")


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tenset_tools.cli import markdown_table
    from tvm_transfer.cost_model import LEARNED_COST_MODELS
    from tvm_transfer.transfer.pack import TransferPack, build_pack, check_pack_models

    if not args.work_dirs and not args.extend:
        raise UsageError("give WORK_DIR... to pack, or --extend BASE_PACK to change only its models")
    chosen = args.model or ["xgboost"]
    names, files = [], []
    for item in chosen:
        if item == "none":
            continue
        if item in LEARNED_COST_MODELS:
            names.append(item)
        elif Path(item).is_file():
            files.append(item)
        else:
            raise UsageError(
                f"--model {item!r} is neither a cost model that trains on a dataset "
                f"({', '.join(LEARNED_COST_MODELS)}) nor a model file"
            )
    try:
        check_pack_models(names, files)
    except ValueError as error:
        raise UsageError(f"--model: {error}") from None
    pack = build_pack(
        args.work_dirs,
        args.out,
        top_k=args.top_k,
        models=names,
        model_files=files,
        exclude_networks=args.exclude_network,
        seed=args.seed,
        base=TransferPack.open(args.extend) if args.extend else None,
        progress=lambda line: print(line, file=sys.stderr),
    )
    manifest = pack.manifest
    rows = [
        ("pack", pack.path),
        ("targets", ", ".join(manifest["targets"])),
        ("networks", ", ".join(manifest["networks"]) or "-"),
        ("corpus records", manifest["records"]["corpus"]),
        ("schedules (top-k per task and target)", manifest["records"]["schedules"]),
        ("workloads", manifest["records"]["workloads"]),
        ("models", ", ".join(manifest["models"]) or "-"),
        ("extends", manifest["extends"]["created"] if manifest.get("extends") else "-"),
    ]
    print(markdown_table(rows))
    return 0


PACK = Command(
    "pack",
    "build a transfer pack (corpus, cost models, best-schedule database) from MetaSchedule work dirs",
    _add_arguments,
    _run,
)
