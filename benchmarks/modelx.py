"""ModelX on three tensor-program transfers whose source and target feature spaces differ.

Scenarios (every dataset produced by this package; labels are normalised throughput per task, valid
records only):

- **extractor**: source = MetaSchedule per-store features (``kernel`` view, 328 columns) of the
  ``llvm/znver4/2`` records of the shipped dataset and ``benchmarks/data/bilstm_collected_more.parquet``;
  target = another CPU, ``llvm/x86-64-v3/2`` (``benchmarks/data/bilstm_collected_x86-64-v3-2c.parquet``),
  described by another extractor: pooled schedule-trace features (``trace`` view, 78 columns, no name in
  common with the source);
- **accelerators**: VTA knob runs simulated here (``vta_ext``, ResNet-18 C2-C11, random knobs); source = the
  stock configuration with its visible features (workload, knobs, hardware: 35 columns); target = the
  extended configuration (``evta``: larger scratchpads, 256-bit instructions) with visible plus compilation
  (hidden) features (83 columns, 35 of them named as in the source);
- **platforms**: source = the CPU records of conv2d, matmul and dense tasks of all the CPU datasets above
  (``kernel`` view); target = the stock VTA's visible features of its ResNet-18 conv2d layers (no name in
  common).

For each scenario, seed and fraction f (1, 2, 5% of the target's records), a seeded 40% of the target is
held out; every method sees f of the target from the remaining 60% (ModelX and the baselines) or all of
those 60% (the oracle: 60x the 1% sample, 12x the 5% one). Scores on the held-out records: MSE and
TenSet's pairwise accuracy and peak@1/@5 per task (``tenset_tools.metrics``). The Grassmann distance
(k=3) of each pair is measured in the source model's latent space, through the zero-shot mapping and
through ModelX's alignment (5% sample).

Usage: ``python -m benchmarks.modelx [--quick]`` (quick: one seed, 5% only). Writes
``benchmarks/results/modelx/modelx[_quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import git_commit, machine_info, write_report
from tenset_tools import SHIPPED_DATASET
from tenset_tools.schema import read_dataset
from tvm_transfer.hetero import (
    FineTune,
    LinearProbe,
    ModelX,
    SourceModel,
    TargetOnly,
    ZeroShot,
    labelled_rows,
    scores,
    transfer_distance,
)
from tvm_transfer.vta.sweep import tune, write_records
from vta_ext.hw import HwConfig, preset
from vta_ext.workloads import RESNET18

DATA = Path(__file__).parent / "data"
FRACTIONS = (0.01, 0.02, 0.05)
HELD_OUT = 0.4
VTA_PER_LAYER = 200
METHODS = (
    "zero-shot",
    "linear-probe",
    "fine-tune",
    "target-only-xgb",
    "target-only-mlp",
    "modelx-align",
    "modelx-residual",
    "modelx-both",
    "oracle",
)


def cpu_records() -> pd.DataFrame:
    frames = [read_dataset(SHIPPED_DATASET)] + [
        read_dataset(DATA / name)
        for name in (
            "bilstm_collected_more.parquet",
            "bilstm_collected_x86-64-v2.parquet",
            "bilstm_collected_more_x86-64-v2.parquet",
            "bilstm_collected_x86-64-v3-2c.parquet",
        )
    ]
    return pd.concat(frames, ignore_index=True)


def vta_records(hw: HwConfig, work: Path, per_layer: int) -> pd.DataFrame:
    """Random knob runs of ResNet-18 C2-C11 on ``hw`` (simulated), written and read back as a dataset."""
    records = []
    for name, workload in RESNET18.items():
        records += tune(
            workload, hw, "random", per_layer, seed=int(name[1:]), network="resnet18", progress=False
        ).records
    path = work / f"vta_{hw.short_id()}.parquet"
    write_records(records, path)
    return read_dataset(path)


def scenarios(work: Path, per_layer: int) -> dict[str, dict]:
    cpu = cpu_records()
    default, extended = vta_records(HwConfig(), work, per_layer), vta_records(preset("evta"), work, per_layer)
    conv_dense = cpu[cpu["op_kind"].isin(["conv2d", "matmul", "dense"])]
    return {
        "extractor": {
            "source": (cpu[cpu["target_id"] == "llvm/znver4/2"], "kernel"),
            "target": (cpu[cpu["target_id"] == "llvm/x86-64-v3/2"], "trace"),
        },
        "accelerators": {"source": (default, "kernel"), "target": (extended, "kernel+hidden")},
        "platforms": {"source": (conv_dense, "kernel"), "target": (default, "kernel")},
    }


def methods(source: SourceModel, seed: int) -> dict:
    return {
        "zero-shot": ZeroShot(source),
        "linear-probe": LinearProbe(source),
        "fine-tune": FineTune(source, seed=seed),
        "target-only-xgb": TargetOnly(seed=seed),
        "target-only-mlp": TargetOnly(kind="mlp", seed=seed),
        "modelx-align": ModelX(source, mode="align", seed=seed),
        "modelx-residual": ModelX(source, mode="residual", seed=seed),
        "modelx-both": ModelX(source, mode="both", seed=seed),
    }


def run_scenario(name: str, spec: dict, seeds: list[int], fractions: tuple[float, ...]) -> dict:
    (source_frame, source_view), (target_frame, target_view) = spec["source"], spec["target"]
    Xs, ys, _ = labelled_rows(source_frame, source_view)
    Xt, yt, records = labelled_rows(target_frame, target_view)
    started = time.perf_counter()
    source = SourceModel(seed=0).fit(Xs, ys)
    result = {
        "source_records": len(Xs),
        "source_columns": Xs.shape[1],
        "target_records": len(Xt),
        "target_columns": Xt.shape[1],
        "shared_column_names": len(set(Xs.columns) & set(Xt.columns)),
        "source_fit_seconds": time.perf_counter() - started,
        "runs": [],
        "distance": {},
    }
    latent_rows = Xs.sample(min(len(Xs), 1000), random_state=0)
    result["distance"]["zero_shot"] = transfer_distance(ZeroShot(source).fit(Xt), latent_rows, Xt, k=3)
    aligned_distances = []
    for seed in seeds:
        order = np.random.default_rng(seed).permutation(len(Xt))
        n_test = round(HELD_OUT * len(Xt))
        test, pool = order[:n_test], order[n_test:]
        test_args = (records.iloc[test], yt[test])
        oracle = TargetOnly(seed=seed).fit(Xt.iloc[pool], yt[pool])
        oracle_scores = scores(*test_args, oracle.predict(Xt.iloc[test]))
        for fraction in fractions:
            few = pool[: max(4, round(fraction * len(Xt)))]
            for method, model in methods(source, seed).items():
                t0 = time.perf_counter()
                model.fit(Xt.iloc[few], yt[few])
                fit_seconds = time.perf_counter() - t0
                t0 = time.perf_counter()
                predictions = model.predict(Xt.iloc[test])
                result["runs"].append(
                    {
                        "seed": seed,
                        "fraction": fraction,
                        "samples": len(few),
                        "method": method,
                        "fit_seconds": fit_seconds,
                        "predict_seconds_per_row": (time.perf_counter() - t0) / len(test),
                        **scores(*test_args, predictions),
                    }
                )
                if method == "modelx-both" and fraction == max(fractions):
                    aligned_distances.append(transfer_distance(model, latent_rows, Xt, k=3))
            result["runs"].append(
                {
                    "seed": seed,
                    "fraction": fraction,
                    "samples": len(pool),
                    "method": "oracle",
                    **oracle_scores,
                }
            )
        print(f"{name}: seed {seed} done ({time.perf_counter() - started:.0f} s)", flush=True)
    result["distance"]["aligned"] = float(np.mean(aligned_distances))
    return result


def summary(result: dict) -> pd.DataFrame:
    frame = pd.DataFrame(result["runs"])
    return frame.groupby(["fraction", "method"])[["mse", "pairwise_accuracy", "peak@1", "peak@5"]].mean()


def markdown(report: dict) -> str:
    lines = [
        "# ModelX on three tensor-program transfers",
        "",
        f"Commit `{report['commit']}`, {report['machine']['cpu']} ({report['machine']['cores']} cores), "
        f"seeds {report['seeds']}, fractions {report['fractions']}; {report['seconds']:.0f} s. Means over "
        "seeds; MSE of normalised throughput (lower is better), pairwise accuracy and peak@k within tasks "
        "(higher is better). Oracle: XGBoost on all 60% of the target not held out.",
        "",
        "## Distances and gains",
        "",
        "| scenario | source cols | target cols | shared names | Grassmann zero-shot | Grassmann aligned | "
        "MSE zero-shot | MSE align | MSE both | alignment gain | residual gain |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, result in report["scenarios"].items():
        table = summary(result)
        top = max(report["fractions"])
        mse = {m: table.loc[(top, m), "mse"] for m in ("zero-shot", "modelx-align", "modelx-both")}
        lines.append(
            f"| {name} | {result['source_columns']} | {result['target_columns']} | "
            f"{result['shared_column_names']} | {result['distance']['zero_shot']:.3f} | "
            f"{result['distance']['aligned']:.3f} | {mse['zero-shot']:.4f} | {mse['modelx-align']:.4f} | "
            f"{mse['modelx-both']:.4f} | {mse['zero-shot'] - mse['modelx-align']:.4f} | "
            f"{mse['modelx-align'] - mse['modelx-both']:.4f} |"
        )
    lines.append("")
    lines.append(
        f"Gains at the largest fraction ({max(report['fractions']):.0%}): MSE reduction by alignment "
        "(zero-shot -> align) and by the residual model (align -> both)."
    )
    for name, result in report["scenarios"].items():
        lines += [
            "",
            f"## {name}",
            "",
            f"{result['source_records']} source records, "
            f"{result['target_records']} target records; source model fitted in "
            f"{result['source_fit_seconds']:.1f} s.",
            "",
        ]
        table = summary(result).reset_index()
        lines.append("| fraction | method | MSE | pairwise | peak@1 | peak@5 |")
        lines.append("|---|---|---|---|---|---|")
        for _, row in table.iterrows():
            lines.append(
                f"| {row['fraction']:.0%} | {row['method']} | {row['mse']:.4f} | "
                f"{row['pairwise_accuracy']:.3f} | {row['peak@1']:.3f} | {row['peak@5']:.3f} |"
            )
        runs = pd.DataFrame(result["runs"])
        fit = runs[runs["method"] == "modelx-both"]
        lines.append("")
        lines.append(
            f"ModelX (both) fit {fit['fit_seconds'].mean():.1f} s on average, prediction "
            f"{fit['predict_seconds_per_row'].mean() * 1e6:.1f} us per record."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="one seed, the 5%% fraction, 60 VTA runs per layer"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args(argv)
    seeds = args.seeds[:1] if args.quick else args.seeds
    fractions = (0.05,) if args.quick else FRACTIONS
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        specs = scenarios(Path(work), 60 if args.quick else VTA_PER_LAYER)
        results = {name: run_scenario(name, spec, seeds, fractions) for name, spec in specs.items()}
    report = {
        "machine": machine_info(),
        "commit": git_commit(short=True),
        "seeds": seeds,
        "fractions": list(fractions),
        "vta_runs_per_layer": 60 if args.quick else VTA_PER_LAYER,
        "seconds": time.perf_counter() - started,
        "scenarios": results,
    }
    write_report("modelx", "modelx", report, markdown(report), quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
