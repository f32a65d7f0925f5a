"""Which cost model a transfer pack should ship: each contender trained on the pack's corpus with one network
held out at a time, and scored on that network's records.

A network held out takes every record of its tasks with it, on every target: a task that another corpus
network shares (the same workload) is held out too, so the contenders never saw any of the tasks they are
scored on, as for a user's new network. Metrics: :func:`tenset_tools.metrics.evaluate_predictions` over the
held-out records (pairwise accuracy, peak@1, peak@5; per (task, target) group, size-weighted), then their
mean over the held-out networks, each network once. A search asks a model only for the order of the
candidates of one task, which is what these metrics score; the RMSE of a ranking loss means nothing.

    nice -n 19 python -m benchmarks.pack_model          # the shipped pack's corpus; minutes on 2 cores
    python -m benchmarks.pack_model --quick             # smoke: two networks held out, small models
    python -m benchmarks.pack_model --contenders xgboost,xgboost-even   # some contenders, the reference first

Writes ``benchmarks/results/transfer/pack_model.{json,md}``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from benchmarks.common import git_commit, machine_info, write_report
from tenset_tools.metrics import evaluate_predictions
from tenset_tools.schema import add_normalised_throughput
from tvm_transfer.cost_model.training import train_model
from tvm_transfer.transfer import DEFAULT_PACK
from tvm_transfer.transfer.pack import TransferPack

#: name -> (cost model, its constructor arguments); the first is the one the shipped pack holds.
CONTENDERS = {
    "xgboost": ("xgboost", {}),
    "xgboost-rank": ("xgboost", {"objective": "rank:pairwise"}),
    "xgboost-even": ("xgboost", {"balance_groups": True}),
}
METRICS = ("pairwise_accuracy", "peak@1", "peak@5")
QUICK_NETWORKS = 2
QUICK_ROUNDS = 20


def held_out_split(frame: pd.DataFrame, network: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(train, test)``: the records of every task of ``network`` (on every target) and all others, each
    with its throughput normalised on its own rows."""
    tasks = set(frame.loc[frame["network"] == network, "task_id"])
    held = frame["task_id"].isin(tasks)
    return tuple(  # type: ignore[return-value]
        add_normalised_throughput(side.reset_index(drop=True)) for side in (frame[~held], frame[held])
    )


def _markdown(report: dict) -> str:
    contenders = report["contenders"]
    lines = [
        "# Which model the pack ships: one corpus network held out at a time",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores; commit "
        f"`{report['commit']}`; corpus of `{report['pack']}` ({report['records']} records). Each row: every "
        "contender trained on the corpus without the network's tasks, scored on their records (all targets).",
        "",
        "| held-out network | tasks | records | "
        + " | ".join(f"{c} {m}" for m in METRICS for c in contenders)
        + " |",
        "|---|---|---|" + "---|" * (len(METRICS) * len(contenders)),
    ]
    for row in report["rows"]:
        cells = [f"{row['scores'][c][m]:.3f}" for m in METRICS for c in contenders]
        lines.append(f"| {row['network']} | {row['tasks']} | {row['records']} | " + " | ".join(cells) + " |")
    mean = report["mean"]
    lines.append(
        "| **mean** | | | " + " | ".join(f"**{mean[c][m]:.3f}**" for m in METRICS for c in contenders) + " |"
    )
    first = next(iter(contenders))
    lines.append("")
    for name, wins in report["wins"].items():
        lines.append(
            f"Networks where {name} beats {first} (pairwise accuracy / peak@1): "
            f"{wins['pairwise_accuracy']} / {wins['peak@1']} of {len(report['rows'])}."
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pack", default=str(DEFAULT_PACK), help="the pack whose corpus is used")
    parser.add_argument(
        "--contenders",
        default=",".join(CONTENDERS),
        help=f"comma-separated contenders, the reference first (default and choices: {','.join(CONTENDERS)})",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: two networks, small models")
    args = parser.parse_args(argv)
    names = args.contenders.split(",")
    unknown = sorted(set(names) - set(CONTENDERS))
    if unknown or len(set(names)) != len(names):
        parser.error(
            f"--contenders: unknown or repeated {unknown or names}; choose from {', '.join(CONTENDERS)}"
        )
    contenders = {name: CONTENDERS[name] for name in names}

    pack = TransferPack.open(args.pack)
    frame = pack.corpus()
    networks = sorted(frame["network"].dropna().unique())[: QUICK_NETWORKS if args.quick else None]
    extra = {"num_rounds": QUICK_ROUNDS} if args.quick else {}
    rows = []
    for network in networks:
        train, test = held_out_split(frame, network)
        row = {
            "network": network,
            "tasks": int(test["task_id"].nunique()),
            "records": len(test),
            "scores": {},
        }
        for name, (model, params) in contenders.items():
            start = time.perf_counter()
            fitted = train_model(train, model, seed=0, **params, **extra)
            row["scores"][name] = evaluate_predictions(test, fitted.predict_frame(test))
            row["scores"][name]["seconds"] = time.perf_counter() - start
            print(
                f"{network} {name}: "
                + " ".join(f"{m}={row['scores'][name][m]:.3f}" for m in METRICS)
                + f" ({row['scores'][name]['seconds']:.0f} s)",
                flush=True,
            )
        rows.append(row)
    first, *others = contenders
    report = {
        "machine": machine_info(),
        "commit": git_commit(),
        "pack": str(args.pack),
        "records": len(frame),
        "contenders": {name: {"model": m, "params": p} for name, (m, p) in contenders.items()},
        "rows": rows,
        "mean": {
            c: {m: float(np.mean([r["scores"][c][m] for r in rows])) for m in METRICS} for c in contenders
        },
        "wins": {
            other: {m: sum(r["scores"][other][m] > r["scores"][first][m] for r in rows) for m in METRICS}
            for other in others
        },
    }
    write_report("transfer", "pack_model", report, _markdown(report), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
