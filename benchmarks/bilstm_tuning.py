"""Tuning with the transferred BiLSTM: best latency after 8/16/32/64 trials on the tasks of a network the
model never saw, vs TVM's XGBModel from scratch and random search.

Setup (one run, same tasks, seeds and search settings for every contender):

- **held-out network** (``--network``, default ``mobilenet_v2_block``): its MetaSchedule tasks on the host
  target, the ``--tasks`` largest by FLOPs x occurrences;
- **BiLSTM**: pretrained on the records of the *other* networks measured on the *other* targets
  (``--dataset`` + ``--extra-dataset``), fine-tuned (``--mode``) on the other networks' records measured
  on the host target (``--few`` per task), then tuning each task from that file and fine-tuning online on
  the run's measurements (``make_cost_model("bilstm", pretrained=..., fine_tune_mode=...)``);
- **tvm-xgb-nowarmup**: TVM's ``XGBModel`` from scratch, trained from the first measured batch on (TVM's
  default waits for 100 measurements, i.e. is random search for the whole 64-trial budget);
- **tvm-random**: TVM's ``RandomModel``;
- with ``--seed-from`` (MetaSchedule work dirs of other networks, e.g. ``collect``'s): **bilstm+anchors**,
  the same transferred BiLSTM, its search seeded by copula anchors (``TraceCopulaSampler`` fitted on those
  runs: the best schedules of the source tasks whose design space matches, repaired to this task's
  extents, then copula draws); the BiLSTM chooses the first batch among the first ``--rank-pool`` of them
  (``CopulaSearch(rank_pool=...)``) and the rest join the evolution's population. And
  **bilstm+anchors-copula-order**, the control: the first batch in the copula's order (nearest task's
  best first), then the same evolution under the BiLSTM.

With ``--bilstm-variant "NAME=VALUE ..."`` every BiLSTM contender runs twice, with the model's defaults
and with those constructor arguments (its own transfer model, named ``CONTENDER (NAME=VALUE ...)``):
settings compared on the same tasks, seeds and machine load. ``--contenders`` keeps only some contenders
(``tvm-xgb-nowarmup``, the reference, always runs).

Each task is tuned with ``ms.tune_tir`` (evolutionary search, population ``--population``, batches of 8)
for ``--trials`` trials; the curve is the running best latency in measurement order. Every seed of
``--seeds`` repeats everything (transfer model, sampling of the few-shot records, search); within a seed
the contenders tune one task after the other in the same process (their order rotates with the task and
seed), so they share the machine's load. Reported: per seed, task and contender the best latency after
8/16/32/64 trials relative to tvm-xgb-nowarmup's last-checkpoint best of the same seed, the geometric
mean over tasks per seed, and over all (seed, task) pairs. One timing can be 2x off on this machine, so
the candidate each run measured best at each checkpoint is re-timed
(:func:`~tvm_transfer.tuning.retime.retime`: every pick of a
task built once and timed in 8 interleaved rounds, fastest); the goal is judged on the re-timed ratios,
and the ratios as the runs measured them are reported beside them. Goal (after Verma et al.):
the BiLSTM reaches XGBoost's 64-trial latency within 16 trials.

Usage: ``python -m benchmarks.bilstm_tuning [--quick] [--seeds 0 1] [--extra-dataset F ...]
[--seed-from DIR ...]`` (quick: 2 tasks, 16 trials, few epochs). With ``D=benchmarks/data``, the run
``bilstm_tuning`` of ``results/bilstm/bilstm_tuning.json``::

    python -m benchmarks.bilstm_tuning --seeds 0 1 --extra-dataset $D/bilstm_collected_x86-64-v2.parquet \
        --extra-dataset $D/bilstm_collected_more.parquet --seed-from $D/bilstm_collected_more

and its run ``bilstm_tuning_variant`` (default vs quantile-scaled, batch-16 BiLSTM, side by side)::

    python -m benchmarks.bilstm_tuning --seeds 0 1 --extra-dataset $D/bilstm_collected_x86-64-v2.parquet \
        --extra-dataset $D/bilstm_collected_more.parquet \
        --extra-dataset $D/bilstm_collected_more_x86-64-v2.parquet \
        --seed-from $D/bilstm_collected_more --contenders bilstm,bilstm+anchors-copula-order \
        --bilstm-variant "kernel_scaling=quantile batch_size=16" --report-name bilstm_tuning_variant

Writes ``benchmarks/results/bilstm/bilstm_tuning.*`` (``--report-name``). Takes ~(seeds x tasks x contenders x
trials x 1-2 s) on the 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import shash2hex

from benchmarks.common import geomean, git_commit, machine_info, records_in_order, write_report
from tenset_tools import SHIPPED_DATASET
from tenset_tools.features import target_id
from tenset_tools.flops import estimate_flops
from tenset_tools.metaschedule import find_databases, sidecar_network
from tenset_tools.metrics import running_best
from tenset_tools.schema import add_normalised_throughput, read_dataset
from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.cli.dataset import parse_hyper_parameters
from tvm_transfer.cost_model import make_cost_model
from tvm_transfer.runner import measuring_workers
from tvm_transfer.search_strategy.copula import CopulaSearch, TraceCopulaSampler, load_sources
from tvm_transfer.target import host_target
from tvm_transfer.tuning.retime import RETIME_ROUNDS, retime
from tvm_transfer.tuning.run import extract_network_tasks
from tvm_transfer.tuning.session import evolution_settings

CHECKPOINTS = (8, 16, 32, 64)
BASELINES = ("tvm-xgb-nowarmup", "tvm-random")
#: With ``--seed-from``: the BiLSTM's search starts from the source tasks' best schedules (copula anchors),
#: the first batch chosen by the BiLSTM from ``--rank-pool`` of them, or measured in the copula's order.
ANCHORED = {"bilstm+anchors": True, "bilstm+anchors-copula-order": False}


def _variant(contender: str) -> tuple[str, str]:
    """``(contender without its variant, variant)``: ``"bilstm (batch_size=16)"`` -> ``("bilstm",
    "batch_size=16")``; the variant is ``""`` for the defaults."""
    name, _, variant = contender.partition(" (")
    return name, variant.removesuffix(")")


def _transfer_model(
    frame: pd.DataFrame, network: str, host: str, args, path: Path, variant: str = ""
) -> dict:
    """Pretrain on other networks x other targets, fine-tune on other networks x host; save to ``path``.
    ``variant``: ``"NAME=VALUE ..."`` constructor arguments of the BiLSTM (its defaults otherwise)."""
    others = frame[frame["network"] != network]
    source = add_normalised_throughput(others[others["target_id"] != host].reset_index(drop=True))
    on_host = others[others["target_id"] == host]
    few = on_host.sample(frac=1.0, random_state=args.seed).groupby("task_id", sort=False).head(args.few)
    few = add_normalised_throughput(few.reset_index(drop=True))
    if source.empty or few.empty:
        raise ValueError(f"need records of other targets and of the host target {host} for other networks")
    epochs = 4 if args.quick else 60
    params = {"epochs": epochs, "fine_tune_epochs": args.fine_tune_epochs}
    params.update(parse_hyper_parameters(variant.split()))
    model = make_cost_model("bilstm", seed=args.seed, **params)
    model.pretrain(source)
    model.fine_tune(few, mode=args.mode)
    model.save(str(path))
    return {
        "source_records": len(source),
        "fine_tune_records": len(few),
        "source_targets": sorted(set(source["target_id"])),
    }


def _anchor_sampler(roots: list[Path], network: str) -> TraceCopulaSampler | None:
    """A copula sampler fitted on the work dirs under ``roots`` that are not ``network``'s own (by their
    collect sidecar); None without roots."""
    if not roots:
        return None
    dirs = [d for root in roots for d in find_databases(root) if sidecar_network(d) != network]
    if not dirs:
        raise ValueError(f"no MetaSchedule work dir of a network other than {network} under {roots}")
    sources = load_sources(dirs)
    print(f"anchors: {len(sources)} source records from {len(dirs)} work dirs", flush=True)
    return TraceCopulaSampler().fit(sources)


def _strategy(contender: str, sampler: TraceCopulaSampler | None, args):
    """The search strategy of a contender: MetaSchedule's evolutionary search, for the anchored ones
    seeded with the copula sampler's proposals (:class:`CopulaSearch`)."""
    evolution = evolution_settings(args.population)
    name, _ = _variant(contender)
    if name not in ANCHORED:
        return ms.search_strategy.EvolutionarySearch(**evolution)
    rank_pool = args.rank_pool if ANCHORED[name] else 0
    return CopulaSearch(sampler, seed=args.seed, rank_pool=rank_pool, **evolution)


def _tune(task, contender: str, model_files: dict[str, Path], sampler, target, args) -> list[tuple]:
    """``(schedule module, seconds)`` of every candidate one tuning run of ``task`` with ``contender``
    measured, in measurement order. ``model_files``: variant -> transfer model file."""
    if contender.startswith("bilstm"):
        extra = {} if args.online_rounds is None else {"online_rounds": args.online_rounds}
        model_file = model_files[_variant(contender)[1]]
        cost_model = make_cost_model("bilstm", pretrained=model_file, fine_tune_mode=args.mode, **extra)
    else:
        cost_model = make_cost_model(contender, seed=args.seed)
    builder, runner = measuring_workers()
    with tempfile.TemporaryDirectory() as work_dir:
        ms.tune_tir(
            mod=task.dispatched[0],
            target=target,
            work_dir=work_dir,
            max_trials_global=args.trials,
            num_trials_per_iter=8,
            builder=builder,
            runner=runner,
            cost_model=cost_model,
            strategy=_strategy(contender, sampler, args),
            seed=args.seed,
        )
        return records_in_order(Path(work_dir))


def _tune_task(task, index: int, model_files: dict[str, Path], sampler, target, args) -> dict:
    """One task, every contender (order rotated by task and seed, so no contender always runs first)."""
    shift = (index + args.seed) % len(args.contenders)
    curves, runs = {}, {}
    for contender in args.contenders[shift:] + args.contenders[:shift]:
        begin = time.perf_counter()
        runs[contender] = _tune(task, contender, model_files, sampler, target, args)
        latencies = [seconds for _, seconds in runs[contender]]
        curves[contender] = list(running_best(latencies))
        print(f"seed {args.seed} {task.task_name} {contender}: best {min(latencies) * 1e6:.1f} us "
              f"({time.perf_counter() - begin:.0f} s)", flush=True)  # fmt: skip
    retimed = _retime_checkpoints(runs, target, args)
    reference = curves["tvm-xgb-nowarmup"][-1]
    row = {
        "seed": args.seed,
        "task": task.task_name,
        "flops": estimate_flops(task.dispatched[0]),
        "weight": float(task.weight),
    }
    for contender, curve in curves.items():
        row[contender] = {
            str(n): curve[min(n, len(curve)) - 1] / reference for n in CHECKPOINTS if n <= args.trials
        }
        row[contender]["curve_seconds"] = curve
        row[contender]["retimed"] = retimed[contender]
    return row


def _retime_checkpoints(runs: dict[str, list[tuple]], target, args) -> dict[str, dict[str, float]]:
    """Per contender and checkpoint n: the candidate the run measured best within its first n trials,
    re-timed (:func:`~tvm_transfer.tuning.retime.retime`), relative to tvm-xgb-nowarmup's last-checkpoint
    pick re-timed."""
    checkpoints = [n for n in CHECKPOINTS if n <= args.trials]
    picks, mods = {}, {}
    for contender, records in runs.items():
        recorded = [seconds for _, seconds in records]
        for n in checkpoints:
            mod = records[int(np.argmin(recorded[:n]))][0]
            picks[contender, n] = shash2hex(mod)
            mods.setdefault(picks[contender, n], mod)
    latency = retime(mods, target)  # local_runner()'s threads, as the tuning runs
    reference = latency[picks["tvm-xgb-nowarmup", checkpoints[-1]]]
    return {c: {str(n): latency[picks[c, n]] / reference for n in checkpoints} for c in runs}


def _geomean(rows: list[dict], checkpoints: list[int], contenders: list[str], retimed: bool = False) -> dict:
    """Geometric mean ratio per contender and checkpoint (``retimed``: of the re-timed ratios)."""

    def ratio(row: dict, contender: str, n: int) -> float:
        return (row[contender]["retimed"] if retimed else row[contender])[str(n)]

    return {c: {str(n): geomean([ratio(r, c, n) for r in rows]) for n in checkpoints} for c in contenders}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--network", default="mobilenet_v2_block")
    parser.add_argument("--dataset", type=Path, default=SHIPPED_DATASET)
    parser.add_argument("--extra-dataset", type=Path, action="append", default=[])
    parser.add_argument(
        "--seed-from",
        type=Path,
        nargs="+",
        default=[],
        help="MetaSchedule work dirs (or trees of them, e.g. a collect --work-dir) of other networks: adds "
        f"the contenders {', '.join(ANCHORED)} (work dirs of --network itself are left out)",
    )
    parser.add_argument(
        "--rank-pool", type=int, default=32, help="copula candidates the BiLSTM picks the first batch from"
    )
    parser.add_argument("--tasks", type=int, default=None, help="largest tasks to tune (default 3; quick 2)")
    parser.add_argument("--trials", type=int, default=None, help="default 64 (quick 16)")
    parser.add_argument("--population", type=int, default=128)
    parser.add_argument("--mode", default="full", choices=("full", "head", "task", "plus"))
    parser.add_argument("--few", type=int, default=16)
    parser.add_argument("--fine-tune-epochs", type=int, default=15)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="one full repetition per seed")
    parser.add_argument("--report-name", default="bilstm_tuning", help="writes results/bilstm/<name>.*")
    parser.add_argument(
        "--online-rounds", type=int, default=None, help="BiLSTM online_rounds (default: model's)"
    )
    parser.add_argument(
        "--bilstm-variant",
        metavar='"NAME=VALUE ..."',
        help="also run every BiLSTM contender with these constructor arguments (its own transfer model)",
    )
    parser.add_argument(
        "--contenders", help="comma-separated subset of the contenders (tvm-xgb-nowarmup always runs)"
    )
    args = parser.parse_args(argv)
    args.tasks = args.tasks or (2 if args.quick else 3)
    args.trials = args.trials or (16 if args.quick else 64)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    import_tensor_intrin_fast()

    target = host_target()
    host = target_id(target)
    frame = pd.concat([read_dataset(p) for p in [args.dataset, *args.extra_dataset]], ignore_index=True)
    sampler = _anchor_sampler(args.seed_from, args.network)
    args.contenders = _contenders(args, sampler is not None)
    start = time.perf_counter()
    tasks = [t for t in extract_network_tasks(args.network, target) if estimate_flops(t.dispatched[0]) > 0]
    tasks.sort(key=lambda t: -estimate_flops(t.dispatched[0]) * float(t.weight))
    tasks = tasks[: args.tasks]
    rows, transfers = [], {}
    with tempfile.TemporaryDirectory() as scratch:
        model_files: dict[int, dict[str, Path]] = {}
        variants = sorted({_variant(c)[1] for c in args.contenders if c.startswith("bilstm")})
        for seed in args.seeds:
            args.seed = seed
            model_files[seed] = {
                v: Path(scratch) / f"bilstm_transfer_{seed}_{i}.zip" for i, v in enumerate(variants)
            }
            for variant, path in model_files[seed].items():
                # every variant learns from the same source and few-shot records: one summary per seed
                transfers[seed] = _transfer_model(frame, args.network, host, args, path, variant)
            print(f"seed {seed}: transfer model {transfers[seed]}", flush=True)
        # Tasks outside, seeds inside; the report is rewritten after every (task, seed), so a run stopped
        # early still leaves its finished pairs (the report says how many of the planned ones).
        for index, task in enumerate(tasks):
            for seed in args.seeds:
                args.seed = seed
                rows.append(_tune_task(task, index, model_files[seed], sampler, target, args))
                _report(rows, tasks, transfers, host, args, start)
    return 0


def _contenders(args, anchored: bool) -> list[str]:
    """The contenders to run: ``--contenders`` of the BiLSTM ones (anchored ones with ``--seed-from``),
    each also with ``--bilstm-variant``, and of the baselines; tvm-xgb-nowarmup (the reference) always."""
    bilstm = ["bilstm", *(ANCHORED if anchored else ())]
    known = [*bilstm, *BASELINES]
    parse_hyper_parameters((args.bilstm_variant or "").split())  # a malformed variant stops here, not later
    wanted = set(args.contenders.split(",")) if args.contenders else set(known)
    if wanted - set(known):
        raise SystemExit(f"unknown contender(s) {sorted(wanted - set(known))}; choose from {known}")
    wanted.add(BASELINES[0])
    variants = ["", *([args.bilstm_variant] if args.bilstm_variant else [])]
    runs = [f"{c} ({v})" if v else c for c in bilstm if c in wanted for v in variants]
    return [*runs, *(b for b in BASELINES if b in wanted)]


def _geomean_table(
    title: str, per_seed: dict, overall: dict, checkpoints: list[int], contenders: list[str]
) -> list[str]:
    lines = ["", f"{title}:", "", "| over | contender | " + " | ".join(f"@{n}" for n in checkpoints) + " |"]
    lines.append("|---|---|" + "---|" * len(checkpoints))
    for label, table in [*((f"seed {s}", per_seed[s]) for s in per_seed), ("**all**", overall)]:
        for c in contenders:
            lines.append(
                f"| {label} | {c} | " + " | ".join(f"{table[c][str(n)]:.3f}" for n in checkpoints) + " |"
            )
    return lines


def _report(rows: list[dict], tasks: list, transfers: dict, host: str, args, start: float) -> None:
    checkpoints = [n for n in CHECKPOINTS if n <= args.trials]
    seeds = [s for s in args.seeds if any(r["seed"] == s for r in rows)]
    per_seed, per_seed_retimed = (
        {
            s: _geomean([r for r in rows if r["seed"] == s], checkpoints, args.contenders, retimed)
            for s in seeds
        }
        for retimed in (False, True)
    )
    geomean = _geomean(rows, checkpoints, args.contenders)
    geomean_retimed = _geomean(rows, checkpoints, args.contenders, retimed=True)
    transfer = transfers[args.seeds[0]]
    lines = [
        f"# bilstm_tuning ({args.network}, {len(tasks)} tasks x {len(args.seeds)} seeds, "
        f"{args.trials} trials, host {host})",
        "",
        f"Finished {len(rows)} of {len(tasks) * len(args.seeds)} planned (task, seed) pairs.",
        "",
        f"Transfer model (seed {args.seeds[0]}): {transfer}; fine-tune mode {args.mode}. Values: latency "
        "of the best candidate a run measured within its first n trials / that of tvm-xgb-nowarmup's "
        f"best after {args.trials} trials, same task and seed (lower is better; the goal: bilstm <= 1 at 16, "
        "geometric mean). Cells: re-timed (the picked candidates of all contenders of a task built once "
        f"and timed in {RETIME_ROUNDS} interleaved rounds, fastest) and, in brackets, as the runs measured "
        "them.",
        "",
        "| seed | task | contender | " + " | ".join(f"@{n}" for n in checkpoints) + " |",
        "|---|---|---|" + "---|" * len(checkpoints),
    ]
    for r in rows:
        for c in args.contenders:
            cells = [f"{r[c]['retimed'][str(n)]:.3f} ({r[c][str(n)]:.3f})" for n in checkpoints]
            lines.append(f"| {r['seed']} | {r['task']} | {c} | " + " | ".join(cells) + " |")
    lines += _geomean_table(
        "Geometric means, re-timed", per_seed_retimed, geomean_retimed, checkpoints, args.contenders
    )
    lines += _geomean_table(
        "Geometric means, as the runs measured them", per_seed, geomean, checkpoints, args.contenders
    )
    at_16 = {c: geomean_retimed[c].get("16", math.inf) for c in args.contenders if c.startswith("bilstm")}
    lines += ["", "Goal (a BiLSTM contender @16 <= 1.0, re-timed geometric mean over all):", ""]
    lines += [f"- {c}: {value:.3f}, {'met' if value <= 1.0 else 'not met'}" for c, value in at_16.items()]
    report = {
        "benchmark": "bilstm_tuning",
        "mode": "quick" if args.quick else "full",
        "machine": machine_info(),
        "git_commit": git_commit(),
        "settings": json.loads(json.dumps(vars(args), default=str)),  # Paths as strings
        "host_target": host,
        "transfer": {str(s): t for s, t in transfers.items()},
        "results": rows,
        "geomean": geomean,
        "geomean_per_seed": {str(s): g for s, g in per_seed.items()},
        "geomean_retimed": geomean_retimed,
        "geomean_retimed_per_seed": {str(s): g for s, g in per_seed_retimed.items()},
        "goal_met": {c: value <= 1.0 for c, value in at_16.items()},
        "seconds": time.perf_counter() - start,
        "finished_pairs": len(rows),
        "planned_pairs": len(tasks) * len(args.seeds),
    }
    write_report("bilstm", args.report_name, report, "\n".join(lines) + "\n", quick=args.quick)


if __name__ == "__main__":
    raise SystemExit(main())
