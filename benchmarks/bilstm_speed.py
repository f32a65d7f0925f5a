"""Speed of the BiLSTM cost model: prediction throughput vs XGBoost, and its share of real tuning time.

1. **Prediction throughput** on one realistic generation batch: ``--candidates`` schedules of a conv2d
   sampled by MetaSchedule's evolutionary search (its initial population), scored by ``predict(context,
   candidates)`` of (a) the BiLSTM (default architecture: 3 BiLSTM layers, 2 heads) and (b) our XGBoost
   cost model (same PerStoreFeature extraction, the same xgboost library as TVM's XGBModel). Both are
   trained on the shipped dataset first (prediction cost does not depend on how well they were trained).
   The BiLSTM's time is split into kernel-feature extraction (shared with XGBoost), trace encoding and
   the network's forward pass. Median of ``--repeats`` runs.
2. **Share of tuning wall time**: a real ``tune_workload`` run (matmul) with each model, MetaSchedule's
   profiler scopes: ``TaskScheduler`` / ``EvoSearch`` times and the cost model's own
   ``CostModel.predict`` / ``CostModel.update`` scopes (added here around the model's calls). Contenders:
   the pretrained BiLSTM as shipped (network re-adapted when the run's measurements double, online
   residual every batch), the same model updating as before the fix (network re-adapted at every batch,
   no online residual: ``online_growth=1, online_rounds=0``), and our XGBoost model.

Usage: ``python -m benchmarks.bilstm_speed [--quick]``. Writes ``benchmarks/results/bilstm/bilstm_speed.*``.
The machine is shared with other jobs: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time

import torch
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from benchmarks.common import first_generation, git_commit, machine_info, write_report
from tenset_tools import SHIPPED_DATASET
from tenset_tools.schema import add_normalised_throughput, read_dataset
from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.cost_model.bilstm_model import BiLSTMCostModel
from tvm_transfer.cost_model.gbdt import XGBoostCostModel
from tvm_transfer.cost_model.training import train_model
from tvm_transfer.features import candidate_trace_json, encode_trace
from tvm_transfer.target import host_target
from tvm_transfer.tuning.operator import tune_workload
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.session import TuneOptions
from tvm_transfer.workloads import make_workload


def _median_seconds(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _throughput(models: dict, context, candidates, repeats: int) -> list[dict]:
    rows = []
    n = len(candidates)
    for name, model in models.items():
        model.predict(context, candidates)  # warm-up: caches, lazy imports
        total = _median_seconds(lambda m=model: m.predict(context, candidates), repeats)
        row = {"model": name, "candidates": n, "predict_seconds": total, "candidates_per_second": n / total}
        kernel = _median_seconds(lambda m=model: m._extractor.pooled(context, candidates), repeats)
        row["kernel_features_seconds"] = kernel
        if name == "bilstm":  # split its time
            row["trace_encoding_seconds"] = _median_seconds(
                lambda: [encode_trace(candidate_trace_json(c)) for c in candidates], repeats
            )
            packed = model.features(context, candidates)
            row["network_seconds"] = _median_seconds(lambda m=model, x=packed: m.predict_features(x), repeats)
        rows.append(row)
    return rows


def _timed(model_class):
    """``model_class`` with its predict/update calls inside MetaSchedule profiler scopes."""

    class Timed(model_class._cls):
        def predict(self, context, candidates):
            with ms.Profiler.timeit("CostModel.predict"):
                return super().predict(context, candidates)

        def update(self, context, candidates, results):
            with ms.Profiler.timeit("CostModel.update"):
                super().update(context, candidates, results)

    # Saved models are loaded by class name: keep the model's own.
    Timed.__name__ = Timed.__qualname__ = model_class._cls.__name__
    return derived_object(Timed)


def _tuning_share(models: dict, trials: int, seed: int) -> list[dict]:
    workload = make_workload("matmul", (128, 128, 128))
    rows = []
    for name, model in models.items():
        with tempfile.TemporaryDirectory() as work_dir:
            options = TuneOptions(
                trials=trials, trials_per_iter=16, population_size=128, seed=seed, progress=False
            )
            plan = TuningPlan(cost_model=model)
            result = tune_workload(workload, work_dir, options=options, plan=plan, reference=False)
        profile = result.profile
        model_seconds = profile.get("CostModel.predict", 0.0) + profile.get("CostModel.update", 0.0)
        rows.append(
            {
                "model": name,
                "trials": result.new_trials,
                "tuning_seconds": result.tuning_seconds,
                "predict_seconds": profile.get("CostModel.predict", 0.0),
                "update_seconds": profile.get("CostModel.update", 0.0),
                "model_share": model_seconds / result.tuning_seconds,
                "best_ms": result.best_seconds * 1e3,
                "profile": profile,
            }
        )
        print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="128 candidates, 16 tuning trials")
    parser.add_argument("--candidates", type=int, default=None, help="batch size (default 512; quick 128)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", type=int, default=None, help="tuning trials (default 64; quick 16)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    import_tensor_intrin_fast()
    count = args.candidates or (128 if args.quick else 512)
    trials = args.trials or (16 if args.quick else 64)

    frame = add_normalised_throughput(read_dataset(SHIPPED_DATASET))
    bilstm = _timed(BiLSTMCostModel)(epochs=2 if args.quick else 10, seed=args.seed).pretrain(frame)
    xgboost = train_model(frame, "xgboost", args.seed)
    target = host_target()
    context, candidates = first_generation(make_workload("conv2d"), target, count, args.seed)
    throughput = _throughput({"bilstm": bilstm, "xgboost": xgboost}, context, candidates, args.repeats)
    for row in throughput:
        print(row, flush=True)

    timed_xgb = _timed(XGBoostCostModel)(seed=args.seed)
    with tempfile.TemporaryDirectory() as scratch:
        bilstm.save(f"{scratch}/base.zip")
        every_batch = _timed(BiLSTMCostModel)()
        every_batch.load(f"{scratch}/base.zip")
    every_batch.set_params(online_growth=1.0, online_rounds=0)
    share = _tuning_share(
        {
            "bilstm (pretrained, full fine-tune)": bilstm,
            "bilstm, refit every batch, no online residual (before)": every_batch,
            "xgboost": timed_xgb,
        },
        trials,
        args.seed,
    )

    ratio = throughput[0]["predict_seconds"] / throughput[1]["predict_seconds"]
    lines = [
        f"## Prediction throughput ({count} conv2d candidates, median of {args.repeats}; torch threads 1)",
        "",
        "| model | predict s | candidates/s | kernel features s | trace encoding s | network s |",
        "|---|---|---|---|---|---|",
    ]
    for r in throughput:
        lines.append(
            f"| {r['model']} | {r['predict_seconds']:.3f} | {r['candidates_per_second']:.0f} | "
            f"{r['kernel_features_seconds']:.3f} | {r.get('trace_encoding_seconds', float('nan')):.3f} | "
            f"{r.get('network_seconds', float('nan')):.3f} |"
        )
    lines += [
        "",
        f"BiLSTM / XGBoost predict time: {ratio:.2f}x",
        "",
        f"## Share of tuning wall time (matmul 128^3, {trials} trials, population 128, batches of 16)",
        "",
        "| model | trials | tuning s | model predict s | model update s | model share | best ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in share:
        lines.append(
            f"| {r['model']} | {r['trials']} | {r['tuning_seconds']:.1f} | {r['predict_seconds']:.2f} | "
            f"{r['update_seconds']:.2f} | {r['model_share']:.1%} | {r['best_ms']:.4f} |"
        )
    markdown = "# bilstm_speed\n\n" + "\n".join(lines) + "\n"
    report = {
        "benchmark": "bilstm_speed",
        "mode": "quick" if args.quick else "full",
        "machine": machine_info(),
        "git_commit": git_commit(),
        "settings": {"candidates": count, "repeats": args.repeats, "trials": trials, "seed": args.seed},
        "bilstm_params": bilstm.get_params(),
        "throughput": throughput,
        "predict_time_ratio_bilstm_over_xgboost": ratio,
        "tuning": share,
    }
    write_report("bilstm", "bilstm_speed", report, markdown, quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
