"""Cost-model quality of the attention BiLSTM vs our XGBoost, LightGBM and MLP, on held-out tasks and on a
held-out target, each trained on the full and on the FLOPs-pruned training data.

- **by_task**: ``tenset_tools.split.by_task`` of the dataset and the ``--extra-dataset`` files (whole tasks
  held out on every target, 70/30 by records), repeated for ``--seeds`` (each seed holds out other tasks);
  metrics averaged over the seeds.
- **by_target**: for each held-out target, the source side is every record of the other targets (several
  targets when ``--extra-dataset`` adds one); ``--few`` random records per task of the held-out target
  form the fine-tuning set and the rest of its records the test set (normalised on their own), once per
  seed of ``--seeds`` (each seed samples other few-shot records and seeds the models). Contenders: every
  model trained on the source only (zero-shot), on source + the few target records, XGBoost on the few
  target records only, and the BiLSTM pretrained on the source and fine-tuned on the few target records
  in each mode (full / head / task / plus).

Pruning: ``tenset_tools.prune.prune`` of the training (source) side with ``--flops-coverage``,
``--min-norm-throughput``, ``--min-records``. Metrics: ``tenset_tools.metrics.evaluate_predictions``
(pairwise accuracy, peak@1, peak@5, RMSE; per (task, target) group, size-weighted). The BiLSTM trained
with the LambdaRank loss predicts ranking scores, not throughputs: its RMSE is not comparable.
Anchors: TenSet XGB (within_task, 500 tasks) pairwise 0.846 / peak@1 0.829 / peak@5 0.905; Verma et al.
pairwise 0.84-0.90.

Usage: ``python -m benchmarks.bilstm_quality [--quick] [--extra-dataset FILE ...]``. Writes
``benchmarks/results/bilstm/bilstm_quality.*``. One process, same splits and seeds for every contender.
``--bilstm-variant "NAME=VALUE ..."`` adds a BiLSTM contender with those constructor arguments and
``--contenders`` keeps only some of the others: BiLSTM settings compared on the same splits.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from benchmarks.common import git_commit, machine_info, write_report
from tenset_tools import SHIPPED_DATASET
from tenset_tools.metrics import evaluate_predictions
from tenset_tools.prune import prune
from tenset_tools.schema import add_normalised_throughput, read_dataset
from tenset_tools.split import by_task
from tvm_transfer.cli.dataset import parse_hyper_parameters
from tvm_transfer.cost_model.training import evaluate_model, train_model

BASELINES = ("xgboost", "lightgbm", "mlp")
LOSSES = ("rmse", "lambdarank")
MODES = ("full", "head", "task", "plus")
METRICS = ("pairwise_accuracy", "peak@1", "peak@5", "rmse")


class Bench:
    """Trains and scores contenders; keeps one result row per (section, split, contender, data)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rows: list[dict] = []
        self.bilstm_params = {"epochs": args.epochs, "patience": args.patience, "threads": 1}
        #: --bilstm-variant contenders and all BiLSTM contenders -> their constructor arguments
        self.variants = {
            f"bilstm-rmse {v}": {"loss": "rmse", **parse_hyper_parameters(v.split())}
            for v in args.bilstm_variant or []
        }
        self.bilstm = {**{f"bilstm-{loss}": {"loss": loss} for loss in LOSSES}, **self.variants}

    def _prune(self, frame: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
        pruned, report = prune(
            frame,
            flops_coverage=self.args.flops_coverage,
            min_norm_throughput=self.args.min_norm_throughput,
            min_records=self.args.min_records,
        )
        return pruned, report.as_dict()

    def _record(self, section: str, split: str, contender: str, data: str, metrics: dict, **extra) -> None:
        row = {"section": section, "split": split, "contender": contender, "data": data, **extra}
        row.update({k: float(metrics[k]) for k in METRICS})
        self.rows.append(row)
        print(
            f"[{time.strftime('%H:%M:%S')}] {section} {split} {contender} ({data}): "
            + " ".join(f"{k}={row[k]:.4f}" for k in METRICS),
            flush=True,
        )

    def _train(self, name: str, frame: pd.DataFrame, seed: int):
        if name in self.bilstm:
            return train_model(frame, "bilstm", seed, **self.bilstm_params, **self.bilstm[name])
        return train_model(frame, name, seed)

    def _sides(self, full: pd.DataFrame, pruned: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
        """The training sides ``--data`` asks for: ``("full", full)`` and/or ``("pruned", pruned)``."""
        wanted = self.args.data.split(",")
        return [(name, side) for name, side in (("full", full), ("pruned", pruned)) if name in wanted]

    def contenders(self) -> list[str]:
        every = [*BASELINES, *self.bilstm]
        wanted = self.args.contenders.split(",") if self.args.contenders else every
        return [c for c in every if c in wanted or c in self.variants]

    # ---- by_task ---------------------------------------------------------------------------------------
    def by_task(self, frame: pd.DataFrame) -> None:
        for seed in self.args.seeds:
            train, test = by_task(frame, train_ratio=0.7, seed=seed)
            pruned, report = self._prune(train)
            split = f"seed {seed}"
            labels = test["norm_throughput"].to_numpy()
            self._record(
                "by_task",
                split,
                "mean predictor",
                "-",
                evaluate_predictions(test, np.full(len(test), labels.mean())),
            )
            for data, side in self._sides(train, pruned):
                for name in self.contenders():
                    start = time.perf_counter()
                    model = self._train(name, side, seed)
                    self._record(
                        "by_task", split, name, data, evaluate_model(model, test),
                        train_records=len(side), test_tasks=int(test["task_id"].nunique()),
                        seconds=time.perf_counter() - start,
                        size_reduction=report["size_reduction"] if data == "pruned" else 0.0,
                    )  # fmt: skip

    # ---- by_target -------------------------------------------------------------------------------------
    def by_target(self, frame: pd.DataFrame, held_out: str, seed: int) -> None:
        source = add_normalised_throughput(frame[frame["target_id"] != held_out].reset_index(drop=True))
        target = frame[frame["target_id"] == held_out]
        shuffled = target.sample(frac=1.0, random_state=seed)
        few_index = shuffled.groupby("task_id", sort=False).head(self.args.few).index
        few = add_normalised_throughput(target.loc[few_index].reset_index(drop=True))
        test = add_normalised_throughput(target.drop(index=few_index).reset_index(drop=True))
        pruned, report = self._prune(source)
        split = (
            f"{held_out} seed {seed} (source: {', '.join(sorted(source['target_id'].unique()))}; "
            f"{len(few)} few-shot)"
        )
        extra = {"held_out": held_out, "seed": seed, "few_records": len(few), "test_records": len(test)}
        labels = test["norm_throughput"].to_numpy()
        self._record(
            "by_target",
            split,
            "mean predictor",
            "-",
            evaluate_predictions(test, np.full(len(test), labels.mean())),
            **extra,
        )
        if "xgboost" in self.contenders():
            model = train_model(few, "xgboost", seed)
            self._record(
                "by_target", split, "xgboost, target few only", "few", evaluate_model(model, test), **extra
            )
        for data, side in self._sides(source, pruned):
            reduction = report["size_reduction"] if data == "pruned" else 0.0
            with_few = add_normalised_throughput(pd.concat([side, few], ignore_index=True))
            for name in self.contenders():
                start = time.perf_counter()
                model = self._train(name, side, seed)
                self._record(
                    "by_target", split, f"{name}, source only", data, evaluate_model(model, test),
                    seconds=time.perf_counter() - start, train_records=len(side), size_reduction=reduction,
                    **extra,
                )  # fmt: skip
                if not name.startswith("bilstm-"):
                    model = self._train(name, with_few, seed)
                    self._record(
                        "by_target", split, f"{name}, source + few", data, evaluate_model(model, test),
                        train_records=len(with_few), size_reduction=reduction, **extra,
                    )  # fmt: skip
                    continue
                base = Path(self.args.work_dir) / f"{name}_{data}_{held_out.replace('/', '_')}_{seed}.zip"
                model.save(str(base))
                for mode in MODES:
                    from tvm_transfer.cost_model import load_cost_model

                    start = time.perf_counter()
                    tuned = load_cost_model(base).fine_tune(few, mode=mode)
                    self._record(
                        "by_target", split, f"{name}, pretrained + fine-tune {mode}", data,
                        evaluate_model(tuned, test), seconds=time.perf_counter() - start,
                        train_records=len(side), size_reduction=reduction, **extra,
                    )  # fmt: skip


def _mean(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean metrics per (contender, data), in the order the contenders ran."""
    return rows.groupby(["contender", "data"], sort=False)[list(METRICS)].mean().reset_index()


def _markdown(rows: list[dict], args: argparse.Namespace, reports: dict) -> str:
    frame = pd.DataFrame(rows)
    lines = [f"# {args.report_name}", ""]
    lines.append(
        f"Settings: BiLSTM epochs {args.epochs} (patience {args.patience}), default architecture (3 BiLSTM "
        f"layers, 2 heads, hidden 32) unless its name says; pruning flops_coverage {args.flops_coverage}, "
        f"min_norm_throughput {args.min_norm_throughput}, min_records {args.min_records}; seeds {args.seeds}."
        " LambdaRank scores are not throughputs: ignore their RMSE."
    )
    for section in ("by_task", "by_target"):
        part = frame[frame["section"] == section]
        if part.empty:
            continue
        lines += ["", f"## {section}", ""]
        if section == "by_task":
            lines.append(
                f"Mean over {len(args.seeds)} by_task splits (seeds {args.seeds}; per-seed rows in the JSON)."
            )
            lines.append(f"Pruning: {reports.get('by_task', '')}")
            groups = [("", _mean(part))]
        else:
            held_out = list(part["held_out"].unique())
            lines.append(
                f"Each held-out target once per seed (seeds {args.seeds}: another few-shot sample and "
                "model seed); means over them, per-seed rows and source targets in the JSON."
            )
            overall = f"### mean over {len(held_out)} held-out targets x {len(args.seeds)} seeds"
            groups = [(overall, _mean(part))]
            if len(held_out) > 1:
                per_target = [(t, part[part["held_out"] == t]) for t in held_out]
                groups += [(f"### {t}, mean over seeds", _mean(of_t)) for t, of_t in per_target]
        for title, table in groups:
            lines += ["", title, ""]
            lines += ["| contender | data | pairwise | peak@1 | peak@5 | RMSE |", "|---|---|---|---|---|---|"]
            for _, r in table.iterrows():
                lines.append(
                    f"| {r['contender']} | {r['data']} | {r['pairwise_accuracy']:.4f} | {r['peak@1']:.4f} | "
                    f"{r['peak@5']:.4f} | {r['rmse']:.4f} |"
                )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, 4 BiLSTM epochs, one held-out target")
    parser.add_argument("--dataset", type=Path, default=SHIPPED_DATASET)
    parser.add_argument(
        "--extra-dataset", type=Path, action="append", default=[], help="more records (both sections)"
    )
    parser.add_argument("--sections", default="by_task,by_target")
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=None, help="split seeds of both sections (default 0 1 2)"
    )
    parser.add_argument(
        "--held-out", nargs="+", default=None, help="by_target held-out targets (default all)"
    )
    parser.add_argument("--epochs", type=int, default=None, help="BiLSTM epochs (default 60, quick 4)")
    parser.add_argument("--patience", type=int, default=8)
    parser.add_argument(
        "--bilstm-variant",
        action="append",
        metavar='"NAME=VALUE ..."',
        help="one more BiLSTM contender with these constructor arguments (repeatable)",
    )
    parser.add_argument("--contenders", help="comma-separated subset of xgboost,lightgbm,mlp,bilstm-rmse,...")
    parser.add_argument("--data", default="full,pruned", help="training data: full, pruned or both (default)")
    parser.add_argument("--few", type=int, default=16, help="target records per task for fine-tuning")
    parser.add_argument("--flops-coverage", type=float, default=0.9)
    parser.add_argument("--min-norm-throughput", type=float, default=0.05)
    parser.add_argument("--min-records", type=int, default=8)
    parser.add_argument("--work-dir", default="/tmp/bilstm_quality")
    parser.add_argument(
        "--report-name", default="bilstm_quality", help="results/bilstm/<name>.* (e.g. one name per section)"
    )
    args = parser.parse_args(argv)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    args.seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    args.epochs = args.epochs or (4 if args.quick else 60)
    Path(args.work_dir).mkdir(parents=True, exist_ok=True)

    frames = [read_dataset(p) for p in [args.dataset, *args.extra_dataset]]
    everything = add_normalised_throughput(pd.concat(frames, ignore_index=True))
    bench = Bench(args)
    sections = args.sections.split(",")
    reports = {}
    start = time.perf_counter()
    if "by_task" in sections:
        _, reports["by_task"] = bench._prune(by_task(everything, train_ratio=0.7, seed=args.seeds[0]).train)
        bench.by_task(everything)
    if "by_target" in sections:
        held_out = args.held_out or (
            ["llvm/x86-64-v3/1"] if args.quick else sorted(everything["target_id"].unique())
        )
        for target in held_out:
            for seed in args.seeds:
                bench.by_target(everything, target, seed)
    report = {
        "benchmark": "bilstm_quality",
        "mode": "quick" if args.quick else "full",
        "machine": machine_info(),
        "git_commit": git_commit(),
        "datasets": {
            str(p): {"records": len(f), "targets": sorted(f["target_id"].unique())}
            for p, f in zip([args.dataset, *args.extra_dataset], frames, strict=True)
        },
        "settings": json.loads(json.dumps(vars(args), default=str)),  # Paths as strings
        "bilstm_params": bench.bilstm_params,
        "bilstm_contenders": bench.bilstm,
        "pruning_first_by_task_split": reports.get("by_task"),
        "seconds": time.perf_counter() - start,
        "results": bench.rows,
    }
    write_report("bilstm", args.report_name, report, _markdown(bench.rows, args, reports), quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
