"""ML2Tuner vs the AutoTVM-like baseline on ResNet-18 C2..C11, default and evta VTA configs.

Same profiling budget, same seeds, same layers, one run. Reports per hardware config:
- invalid profiling attempts of the baseline vs ML2Tuner (all of them, and the run-time ones only: the
  baseline profiles compile failures too, ML2Tuner finds those by compiling, which is not a profile);
- the best latency found, relative to the best known (exhaustive search of every space);
- the profiles ML2Tuner needs to reach the baseline's final best (and 95% of it), as a share of the budget;
- held-out RMSE of A and P (normalised throughput; pooled over the ten layers) and V's precision/recall.

    python benchmarks/ml2tuner.py --quick   # two layers, two seeds, budget 64 (a minute or two)
    python benchmarks/ml2tuner.py           # ten layers, five seeds, budget 128 (about 15 minutes here)

Simulated latencies are deterministic, so the figures do not depend on the machine's load; the wall times
in the JSON do. Writes benchmarks/results/ml2tuner{,_quick}.{json,md,png}.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import matplotlib
import numpy as np
from common import RESULTS, git_commit, machine_info, write_report
from tqdm import tqdm

from tenset_tools.metrics import running_best, trials_to_reach
from tvm_transfer.ml2tuner import METHODS, VtaMeasurer, make_tuner
from tvm_transfer.ml2tuner.evaluation import LayerData, rmse_ratio, validity_scores
from vta_ext.hw import preset
from vta_ext.workloads import RESNET18

matplotlib.use("Agg")
import matplotlib.pyplot as plt

BATCH = 16
TRAIN_FRACTION = 0.2


def tune_layer(layer: str, hw, budget: int, seeds: list[int]) -> tuple[dict, LayerData]:
    """Exhaustive ground truth, then both tuners per seed on a shared (deterministic) result cache."""
    cache: dict = {}
    start = time.perf_counter()
    data = LayerData.from_measurer(VtaMeasurer(RESNET18[layer], hw, cache))
    exhaustive_s = time.perf_counter() - start
    best_known = float(np.nanmin(data.latency))
    out = {
        "space": len(data.valid),
        "invalid_share": float(1 - data.valid.mean()),
        "best_known_s": best_known,
    }
    out["exhaustive_s"] = exhaustive_s
    out["runs"] = []
    for seed in seeds:
        runs = {}
        for method in METHODS:
            start = time.perf_counter()
            run = make_tuner(method, batch_size=BATCH, seed=seed).tune(
                VtaMeasurer(RESNET18[layer], hw, cache), budget
            )
            runs[method] = {
                "seconds": time.perf_counter() - start,
                "invalid_profiles": run.n_invalid_profiles,
                "runtime_invalid_profiles": sum(
                    not e.valid and e.error_stage == "runtime" for e in run.profiles
                ),
                "compiles": run.n_compiles,
                "compile_failures": run.n_compile_failures,
                "best_s": run.best_latency,
                "curve": (best_known / running_best(run.latencies)).tolist(),
                "latencies": run.latencies,
            }
        base, ml2 = runs["baseline"], runs["ml2tuner"]
        reach = trials_to_reach(ml2["latencies"], base["best_s"], 1.0)
        reach95 = trials_to_reach(ml2["latencies"], base["best_s"], 0.95)
        out["runs"].append(
            {
                "seed": seed,
                **runs,
                "ml2_profiles_to_baseline_best": reach,
                "ml2_profiles_to_95pct_baseline_best": reach95,
            }
        )
    return out, data


def summarise(layers: dict, budget: int) -> dict:
    runs = [(name, r) for name, layer in layers.items() for r in layer["runs"]]
    total = {m: sum(r[m]["invalid_profiles"] for _, r in runs) for m in METHODS}
    runtime = {m: sum(r[m]["runtime_invalid_profiles"] for _, r in runs) for m in METHODS}
    per_layer = []
    for layer in layers.values():
        b = sum(r["baseline"]["invalid_profiles"] for r in layer["runs"])
        m = sum(r["ml2tuner"]["invalid_profiles"] for r in layer["runs"])
        per_layer.append(1 - m / b if b else 0.0)
    ratios = [r["ml2tuner"]["best_s"] / r["baseline"]["best_s"] for _, r in runs]
    reach = [r["ml2_profiles_to_baseline_best"] for _, r in runs]
    reach95 = [r["ml2_profiles_to_95pct_baseline_best"] for _, r in runs]

    def share(values: list[int | None]) -> list[float]:
        return [(v if v is not None else float("inf")) / budget for v in values]

    best_vs_known = {
        m: float(np.mean([layers[n]["best_known_s"] / r[m]["best_s"] for n, r in runs])) for m in METHODS
    }
    return {
        "invalid_profiles": total,
        "invalid_reduction_total": 1 - total["ml2tuner"] / total["baseline"],
        "invalid_reduction_mean_per_layer": float(np.mean(per_layer)),
        "runtime_invalid_profiles": runtime,
        "runtime_invalid_reduction": 1 - runtime["ml2tuner"] / max(runtime["baseline"], 1),
        "ml2_worse_best_runs": int(sum(x > 1 + 1e-9 for x in ratios)),
        "ml2_better_best_runs": int(sum(x < 1 - 1e-9 for x in ratios)),
        "n_runs": len(runs),
        "best_ratio_ml2_over_baseline_mean": float(np.mean(ratios)),
        "best_ratio_ml2_over_baseline_max": float(np.max(ratios)),
        "mean_fraction_of_best_known": best_vs_known,
        "reach_share_median": float(np.median(share(reach))),
        "reach_share_mean": float(np.mean(share(reach))),
        "reach_share_max": float(np.max(share(reach))),
        "reach_within_10pct_budget_runs": int(sum(s <= 0.10 for s in share(reach))),
        "reach95_share_median": float(np.median(share(reach95))),
    }


def plot(report: dict, path: Path) -> None:
    configs = list(report["hw"])
    fig, axes = plt.subplots(1, len(configs), figsize=(5 * len(configs), 3.6), squeeze=False)
    for ax, config in zip(axes[0], configs, strict=True):
        for method in METHODS:
            curves = [
                np.nan_to_num(r[method]["curve"], posinf=0.0)
                for layer in report["hw"][config]["layers"].values()
                for r in layer["runs"]
            ]
            ax.plot(np.arange(1, len(curves[0]) + 1), np.mean(curves, axis=0), label=method)
        ax.set_title(f"{config}: mean over layers and seeds")
        ax.set_xlabel("profiles")
        ax.set_ylabel("best known / best so far")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(report: dict) -> str:
    s = report["settings"]
    lines = [
        "# ML2Tuner vs the AutoTVM-like baseline on vta_ext (ResNet-18 conv layers)",
        "",
        f"Budget {s['budget']} profiles per layer and seed, batch {s['batch']}, seeds {s['seeds']}, "
        f"layers {', '.join(s['layers'])}. A profile = one `vta_ext.measure` (compile + run + time); "
        "ML2Tuner also compiles its short list (`compile_only`, not a profile).",
        "",
        "| config | invalid profiles baseline | ML2Tuner | fewer (total) | fewer (mean per layer) "
        "| run-time invalid baseline / ML2Tuner | runs with worse best (of n) | mean best ratio ML2/base "
        "| ML2 profiles to baseline's final best (median / mean share of budget) "
        "| runs reaching it within 10% | RMSE A/P (mean of seeds) "
        "| V recall / precision / invalid filtered |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config, block in report["hw"].items():
        m, r, v = block["summary"], block["rmse"], block["validity"]
        lines.append(
            f"| {config} | {m['invalid_profiles']['baseline']} | {m['invalid_profiles']['ml2tuner']} | "
            f"{m['invalid_reduction_total']:.1%} | {m['invalid_reduction_mean_per_layer']:.1%} | "
            f"{m['runtime_invalid_profiles']['baseline']} / {m['runtime_invalid_profiles']['ml2tuner']} | "
            f"{m['ml2_worse_best_runs']} (of {m['n_runs']}) | {m['best_ratio_ml2_over_baseline_mean']:.4f} | "
            f"{m['reach_share_median']:.1%} / {m['reach_share_mean']:.1%} | "
            f"{m['reach_within_10pct_budget_runs']} of {m['n_runs']} | "
            f"{r['ratio_mean']:.3f} ({r['rmse_a_mean']:.4f} / {r['rmse_p_mean']:.4f}) | "
            f"{v['recall_mean']:.3f} / {v['precision_mean']:.3f} / {v['invalid_filtered_mean']:.3f} |"
        )
    lines += [
        "",
        "Per layer (sums over seeds; best = mean of best known / best found):",
        "",
        "| config | layer | space | invalid share | invalid profiles base / ML2 | best base / ML2 | "
        "ML2 profiles to baseline best (per seed) |",
        "|---|---|---|---|---|---|---|",
    ]
    for config, block in report["hw"].items():
        for name, layer in block["layers"].items():
            runs = layer["runs"]
            b = sum(x["baseline"]["invalid_profiles"] for x in runs)
            m = sum(x["ml2tuner"]["invalid_profiles"] for x in runs)
            fb = np.mean([layer["best_known_s"] / x["baseline"]["best_s"] for x in runs])
            fm = np.mean([layer["best_known_s"] / x["ml2tuner"]["best_s"] for x in runs])
            reach = ", ".join(str(x["ml2_profiles_to_baseline_best"]) for x in runs)
            lines.append(
                f"| {config} | {name} | {layer['space']} | {layer['invalid_share']:.1%} | {b} / {m} | "
                f"{fb:.3f} / {fm:.3f} | {reach} |"
            )
    lines += [
        "",
        f"RMSE: P (visible features) and A (visible + hidden) fitted on {TRAIN_FRACTION:.0%} of the valid "
        "configurations of all layers pooled, scored on the other 80% (normalised throughput per layer); "
        "V fitted on 20% of all configurations, scored on the rest (target recall 0.98).",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores (shared with other jobs: "
        "wall times in the JSON are distorted, the simulated figures are not); "
        f"commit {report['commit'][:12]}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="C9 and C10, two seeds, budget 64")
    args = parser.parse_args()
    layers = ["C9", "C10"] if args.quick else list(RESNET18)
    seeds = [0, 1] if args.quick else [0, 1, 2, 3, 4]
    budget = 64 if args.quick else 128
    configs = {"default": preset("default"), "evta": preset("evta")}
    report = {
        "machine": machine_info(),
        "commit": git_commit(),
        "seeds": seeds,
        "settings": {
            "budget": budget,
            "batch": BATCH,
            "seeds": seeds,
            "layers": layers,
            "train_fraction": TRAIN_FRACTION,
        },
        "hw": {},
    }
    for config, hw in configs.items():
        block: dict = {"hw": hw.to_dict(), "layers": {}}
        datas = []
        for layer in tqdm(layers, desc=config):
            block["layers"][layer], data = tune_layer(layer, hw, budget, seeds)
            datas.append(data)
        block["summary"] = summarise(block["layers"], budget)
        rm = [rmse_ratio(datas, TRAIN_FRACTION, seed) for seed in seeds]
        va = [validity_scores(datas, TRAIN_FRACTION, seed) for seed in seeds]
        per_layer = {d.name: [rmse_ratio([d], TRAIN_FRACTION, s)["ratio"] for s in seeds] for d in datas}
        block["rmse"] = {
            "per_seed": rm,
            "ratio_mean": float(np.mean([x["ratio"] for x in rm])),
            "rmse_a_mean": float(np.mean([x["rmse_a"] for x in rm])),
            "rmse_p_mean": float(np.mean([x["rmse_p"] for x in rm])),
            "per_layer_ratio_mean": {k: float(np.mean(v)) for k, v in per_layer.items()},
        }
        block["validity"] = {
            "per_seed": va,
            **{
                f"{k}_mean": float(np.mean([x[k] for x in va]))
                for k in ("recall", "precision", "invalid_filtered")
            },
        }
        report["hw"][config] = block
    name = "ml2tuner"
    write_report(name, report, table(report), quick=args.quick)
    plot(report, RESULTS / f"{name}{'_quick' if args.quick else ''}.png")


if __name__ == "__main__":
    main()
