"""``tvm-transfer ml2tune``: tune ResNet-18 layers on a vta_ext config with the baseline or ML2Tuner."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from tqdm import tqdm

from tenset_tools.atomic import atomic_write_text
from tenset_tools.command import Command, UsageError, bounded_int
from tvm_transfer.vta.ml2tuner.measurer import VtaMeasurer
from tvm_transfer.vta.ml2tuner.methods import KNOB_TUNER_METHODS, make_tuner
from tvm_transfer.vta.ml2tuner.ml2_tuner import WARM_START_OPTIONS
from tvm_transfer.vta.ml2tuner.prior import PriorError, TransferPrior
from tvm_transfer.vta.ml2tuner.runs import TuneRun, load_log
from vta_ext.cli import parse_hw
from vta_ext.hw import HwConfig
from vta_ext.workloads import RESNET18, flops


def _layers(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in RESNET18]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown layer(s) {unknown or value!r}; choose from {', '.join(RESNET18)}"
        )
    return names


def _seeds(value: str) -> list[int]:
    try:
        seeds = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {value!r}: comma-separated integers expected") from None
    if not seeds:
        raise argparse.ArgumentTypeError("--seeds: at least one seed")
    return seeds


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hw", type=parse_hw, default="default", help="preset (default, evta) or a VTA config JSON"
    )
    parser.add_argument("--layers", type=_layers, default=list(RESNET18), help="comma-separated, e.g. C2,C9")
    parser.add_argument("--method", choices=[*KNOB_TUNER_METHODS, "both"], default="ml2tuner")
    parser.add_argument(
        "--budget", type=bounded_int(1), default=128, help="profiles per layer and seed (default 128)"
    )
    parser.add_argument(
        "--batch-size", type=bounded_int(1), default=16, help="profiles per round (default 16)"
    )
    parser.add_argument("--seeds", type=_seeds, default=[0], help="comma-separated seeds (default 0)")
    parser.add_argument("--log-dir", help="write one JSON-lines log per run here; existing logs are resumed")
    parser.add_argument(
        "--warm-start-from",
        nargs="+",
        metavar="LOG",
        help="ml2tuner-logs of earlier runs of OTHER layers/hardware: ML2Tuner's models start from them "
        "(transfer across layers, with the warm-start settings of docs/ml2tuner.md; the baseline ignores "
        "them)",
    )
    parser.add_argument(
        "--initial-batch-size",
        type=bounded_int(1),
        help="ML2Tuner: profiles per round until --batch-size profiles are made (default: 4 with "
        "--warm-start-from, else --batch-size)",
    )
    parser.add_argument("--json", help="write the summary rows to this JSON file")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _tune_one(
    method: str, layer: str, hw: HwConfig, seed: int, args: argparse.Namespace, prior: TransferPrior | None
) -> TuneRun:
    cache = None
    log = None
    if args.log_dir:
        log = Path(args.log_dir) / f"{method}-{layer}-{hw.short_id()}-seed{seed}.jsonl"
        log.parent.mkdir(parents=True, exist_ok=True)
        if log.exists():  # resume: the logged profiles are not measured again
            _, cache = load_log(log)
    measurer = VtaMeasurer(RESNET18[layer], hw, cache)
    bar = tqdm(total=args.budget, desc=f"{method} {layer} seed {seed}", disable=args.quiet, leave=False)
    options: dict = {}
    if method == "ml2tuner":
        options = {**WARM_START_OPTIONS, "prior": prior} if prior is not None else {}
        if args.initial_batch_size is not None:
            options["initial_batch_size"] = args.initial_batch_size
    run = make_tuner(method, batch_size=args.batch_size, seed=seed, **options).tune(
        measurer, args.budget, bar.update, log
    )
    bar.close()
    return run


def _run_ml2tune(args: argparse.Namespace) -> int:
    """Tune every (layer, method, seed), print the summary table; 1 if a run found no valid profile."""
    methods = list(KNOB_TUNER_METHODS) if args.method == "both" else [args.method]
    prior = None
    if args.warm_start_from:
        try:
            prior = TransferPrior.from_runs(args.warm_start_from)
        except PriorError as err:
            raise UsageError(f"--warm-start-from: {err}") from None
        print(f"warm start: {len(prior)} configurations from {len(prior.sources)} earlier run(s)")
    rows = []
    for layer in args.layers:
        for method in methods:
            for seed in args.seeds:
                run = _tune_one(method, layer, args.hw, seed, args, prior)
                best = run.best
                rows.append(
                    {
                        "layer": layer,
                        "method": method,
                        "seed": seed,
                        "profiles": run.n_profiles,
                        "invalid_profiles": run.n_invalid_profiles,
                        "compiles": run.n_compiles,
                        "compile_failures": run.n_compile_failures,
                        "best_ms": run.best_latency * 1e3,
                        "gops": flops(RESNET18[layer]) / run.best_latency / 1e9 if best else math.nan,
                        "best_knobs": best.knobs if best else None,
                    }
                )
    print(f"hardware {args.hw.bitstream} ({args.hw.short_id()}), budget {args.budget} profiles per run")
    print("| layer | method | seed | profiles | invalid profiles | compiles (failed) | best ms | GOPS |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['layer']} | {r['method']} | {r['seed']} | {r['profiles']} | {r['invalid_profiles']} | "
            f"{r['compiles']} ({r['compile_failures']}) | {r['best_ms']:.3f} | {r['gops']:.1f} |"
        )
    if args.json:
        atomic_write_text(args.json, json.dumps(rows, indent=1, default=float) + "\n")
    return 0 if all(r["best_knobs"] for r in rows) else 1


COMMAND = Command(
    "ml2tune",
    "tune ResNet-18 conv layers on the extended VTA (baseline or ML2Tuner)",
    _add_arguments,
    _run_ml2tune,
    description="Tune ResNet-18 C2..C11 knob spaces on a vta_ext hardware config. A profile is one "
    "simulated measurement; invalid profiles are wasted. See docs/ml2tuner.md.",
)
