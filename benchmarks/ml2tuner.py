"""ML2Tuner vs the AutoTVM-like baseline on ResNet-18 C2..C11, default and evta VTA configs.

Same profiling budget, same seeds, same layers, one run. Contenders: the baseline, ML2Tuner from scratch
(the paper's setting) and ML2Tuner warm-started from the baseline runs of the *other* layers (same seed and
hardware; transfer across layers, settings WARM_START_OPTIONS chosen on development seeds 10 and 11).
Reports per hardware config and ML2Tuner variant:
- invalid profiling attempts of the baseline vs ML2Tuner (all of them, and the run-time ones only: the
  baseline profiles compile failures too, ML2Tuner finds those by compiling, which is not a profile);
- the best latency found, relative to the best known (exhaustive search of every space);
- the profiles ML2Tuner needs to reach the baseline's final best (and 95% of it), as a share of the budget;
- held-out RMSE of A and P (normalised throughput; pooled over the ten layers) and V's precision/recall.

    python -m benchmarks.ml2tuner --quick   # two layers, two seeds, budget 64 (a minute or two)
    python -m benchmarks.ml2tuner           # ten layers, five seeds, budget 128 (~30 minutes, shared machine)
    python -m benchmarks.ml2tuner --seeds 10,11 --configs default --name ml2tuner_dev  # development seeds

Simulated latencies are deterministic, so the figures do not depend on the machine's load; the wall times
in the JSON do. Exhaustive results are pickled under work/ml2tuner_cache/ and reused. Writes
benchmarks/results/ml2tuner/ml2tuner{,_quick}.{json,md,png}.
"""

from __future__ import annotations

import argparse
import pickle
import time
from pathlib import Path

import matplotlib
import numpy as np
from tqdm import tqdm

from benchmarks.common import git_commit, machine_info, report_path, write_report
from tenset_tools.metrics import running_best, trials_to_reach
from tvm_transfer.vta.ml2tuner import (
    KNOB_TUNER_METHODS,
    WARM_START_OPTIONS,
    TransferPrior,
    VtaMeasurer,
    make_tuner,
)
from tvm_transfer.vta.ml2tuner.evaluation import LayerData, rmse_ratio, validity_scores
from vta_ext.hw import preset
from vta_ext.workloads import RESNET18

matplotlib.use("Agg")
import matplotlib.pyplot as plt

BATCH = 16
TRAIN_FRACTION = 0.2
#: Exhaustive results per (hardware, layer), pickled: the simulator is deterministic, so a cached result is
#: the result a new measurement would give; rebuilding them takes ~20 minutes on two cores.
CACHE_DIR = Path(__file__).resolve().parent.parent / "work" / "ml2tuner_cache"


def exhaustive_cache(layer: str, hw) -> dict:
    """index -> MeasureResult of every configuration of ``layer`` on ``hw``, from disk when cached there."""
    path = CACHE_DIR / f"{hw.short_id()}-{RESNET18[layer].key}.pkl"
    if path.exists():
        with open(path, "rb") as f:
            return pickle.load(f)
    measurer = VtaMeasurer(RESNET18[layer], hw)
    measurer.exhaustive()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".tmp"), "wb") as f:
        pickle.dump(measurer.cache, f)
    path.with_suffix(".tmp").rename(path)
    return measurer.cache


#: Contenders: the two tuners of the paper and ML2Tuner warm-started from the other layers' baseline runs.
CONTENDERS = ("baseline", "ml2tuner", "ml2tuner_warm")
ML2_VARIANTS = ("ml2tuner", "ml2tuner_warm")
#: Settings of the warm-started ML2Tuner, chosen on development seeds 10 and 11 (see the report).
WARM_OPTIONS = dict(WARM_START_OPTIONS)
WARM_CHOSEN_ON = (
    "development seeds 10 and 11, layers C2, C5, C7, C11, default config, 48-profile runs; "
    "never on the reported seeds"
)


def _record(run, seconds: float, best_known: float) -> dict:
    return {
        "seconds": seconds,
        "invalid_profiles": run.n_invalid_profiles,
        "runtime_invalid_profiles": sum(not e.valid and e.error_stage == "runtime" for e in run.profiles),
        "compiles": run.n_compiles,
        "compile_failures": run.n_compile_failures,
        "best_s": run.best_latency,
        "curve": (best_known / running_best(run.latencies)).tolist(),
        "latencies": run.latencies,
    }


def tune_config(hw, layers: list[str], budget: int, seeds: list[int]) -> tuple[dict, list[LayerData]]:
    """Per seed: the baseline and cold ML2Tuner on every layer, then ML2Tuner on each layer warm-started
    from the baseline runs of the *other* layers (same seed, same hardware, same budget): what a user who
    tuned the rest of the network earlier would have. Nothing exhaustive and nothing of the layer itself
    enters the prior; the exhaustive results only give the best known latency."""
    caches, out, datas = {}, {}, []
    for layer in tqdm(layers, desc="exhaustive (disk cache)"):
        start = time.perf_counter()
        caches[layer] = exhaustive_cache(layer, hw)
        data = LayerData.from_measurer(VtaMeasurer(RESNET18[layer], hw, caches[layer]))
        datas.append(data)
        out[layer] = {
            "space": len(data.valid),
            "invalid_share": float(1 - data.valid.mean()),
            "best_known_s": float(np.nanmin(data.latency)),
            "exhaustive_or_load_s": time.perf_counter() - start,
            "runs": [],
        }
    bar = tqdm(total=len(seeds) * len(layers) * len(CONTENDERS), desc="runs")
    for seed in seeds:
        runs: dict[str, dict] = {layer: {} for layer in layers}
        baseline_runs = {}
        for layer in layers:
            for method in KNOB_TUNER_METHODS:
                start = time.perf_counter()
                run = make_tuner(method, batch_size=BATCH, seed=seed).tune(
                    VtaMeasurer(RESNET18[layer], hw, caches[layer]), budget
                )
                runs[layer][method] = _record(run, time.perf_counter() - start, out[layer]["best_known_s"])
                if method == "baseline":
                    baseline_runs[layer] = run
                bar.update()
        for layer in layers:
            prior = TransferPrior.from_runs([baseline_runs[o] for o in layers if o != layer])
            start = time.perf_counter()
            run = make_tuner("ml2tuner", batch_size=BATCH, seed=seed, prior=prior, **WARM_OPTIONS).tune(
                VtaMeasurer(RESNET18[layer], hw, caches[layer]), budget
            )
            record = _record(run, time.perf_counter() - start, out[layer]["best_known_s"])
            runs[layer]["ml2tuner_warm"] = {**record, "prior_rows": len(prior)}
            bar.update()
        for layer in layers:
            r = runs[layer]
            base_best = r["baseline"]["best_s"]
            for variant in ML2_VARIANTS:
                r[variant]["profiles_to_baseline_best"] = trials_to_reach(
                    r[variant]["latencies"], base_best, 1.0
                )
                r[variant]["profiles_to_95pct_baseline_best"] = trials_to_reach(
                    r[variant]["latencies"], base_best, 0.95
                )
            out[layer]["runs"].append({"seed": seed, **r})
    bar.close()
    return out, datas


def summarise(layers: dict, budget: int, variant: str) -> dict:
    """Figures of one ML2Tuner variant against the baseline."""
    runs = [(name, r) for name, layer in layers.items() for r in layer["runs"]]
    methods = ("baseline", variant)
    total = {m: sum(r[m]["invalid_profiles"] for _, r in runs) for m in methods}
    runtime = {m: sum(r[m]["runtime_invalid_profiles"] for _, r in runs) for m in methods}
    per_layer = []
    for layer in layers.values():
        b = sum(r["baseline"]["invalid_profiles"] for r in layer["runs"])
        m = sum(r[variant]["invalid_profiles"] for r in layer["runs"])
        per_layer.append(1 - m / b if b else 0.0)
    ratios = [r[variant]["best_s"] / r["baseline"]["best_s"] for _, r in runs]
    reach = [r[variant]["profiles_to_baseline_best"] for _, r in runs]
    reach95 = [r[variant]["profiles_to_95pct_baseline_best"] for _, r in runs]

    def share(values: list[int | None]) -> list[float]:
        return [(v if v is not None else float("inf")) / budget for v in values]

    best_vs_known = {
        m: float(np.mean([layers[n]["best_known_s"] / r[m]["best_s"] for n, r in runs])) for m in methods
    }
    return {
        "invalid_profiles": total,
        "invalid_reduction_total": 1 - total[variant] / total["baseline"],
        "invalid_reduction_mean_per_layer": float(np.mean(per_layer)),
        "runtime_invalid_profiles": runtime,
        "runtime_invalid_reduction": 1 - runtime[variant] / max(runtime["baseline"], 1),
        "worse_best_runs": int(sum(x > 1 + 1e-9 for x in ratios)),
        "better_best_runs": int(sum(x < 1 - 1e-9 for x in ratios)),
        "n_runs": len(runs),
        "best_ratio_over_baseline_mean": float(np.mean(ratios)),
        "best_ratio_over_baseline_max": float(np.max(ratios)),
        "mean_fraction_of_best_known": best_vs_known,
        "reach_share_median": float(np.median(share(reach))),
        "reach_share_mean": float(np.mean(share(reach))),
        "reach_share_max": float(np.max(share(reach))),
        "reach_within_10pct_budget_runs": int(sum(s <= 0.10 for s in share(reach))),
        "reach95_share_median": float(np.median(share(reach95))),
        "mean_seconds": {m: float(np.mean([r[m]["seconds"] for _, r in runs])) for m in methods},
    }


def plot(report: dict, path: Path) -> None:
    configs = list(report["hw"])
    fig, axes = plt.subplots(1, len(configs), figsize=(5 * len(configs), 3.6), squeeze=False)
    for ax, config in zip(axes[0], configs, strict=True):
        for method in CONTENDERS:
            curves = [
                np.nan_to_num(r[method]["curve"], posinf=0.0)
                for layer in report["hw"][config]["layers"].values()
                for r in layer["runs"]
            ]
            ax.plot(np.arange(1, len(curves[0]) + 1), np.mean(curves, axis=0), label=method)
        ax.axvline(0.1 * report["settings"]["budget"], color="grey", lw=0.8, ls=":")
        ax.set_title(f"{config}: mean over layers and seeds")
        ax.set_xlabel("profiles")
        ax.set_ylabel("best known / best so far")
        ax.set_ylim(0, 1.02)
        ax.set_xscale("log")
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
        "Contenders (same seeds, same layers, one run): `baseline` (AutoTVM-like, from scratch), `ml2tuner` "
        "(from scratch, the paper's setting), `ml2tuner_warm` (warm-started from the baseline runs of the "
        f"*other* layers, same seed and hardware; options {s['warm_options']}, chosen on "
        f"{s['warm_options_chosen_on']}).",
        "",
        "| config | ML2 variant | invalid profiles baseline | ML2 | fewer (total) | fewer (mean per layer) "
        "| run-time invalid baseline / ML2 | runs with worse best (of n) | mean best ratio ML2/base "
        "| ML2 profiles to baseline's final best (median / mean share of budget) "
        "| runs reaching it within 10% | to 95% of it (median) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config, block in report["hw"].items():
        for variant in ML2_VARIANTS:
            m = block["summary"][variant]
            lines.append(
                f"| {config} | {variant} | {m['invalid_profiles']['baseline']} | "
                f"{m['invalid_profiles'][variant]} | "
                f"{m['invalid_reduction_total']:.1%} | {m['invalid_reduction_mean_per_layer']:.1%} | "
                f"{m['runtime_invalid_profiles']['baseline']} / {m['runtime_invalid_profiles'][variant]} | "
                f"{m['worse_best_runs']} (of {m['n_runs']}) | {m['best_ratio_over_baseline_mean']:.4f} | "
                f"{m['reach_share_median']:.1%} / {m['reach_share_mean']:.1%} | "
                f"{m['reach_within_10pct_budget_runs']} of {m['n_runs']} | {m['reach95_share_median']:.1%} |"
            )
    lines += [
        "",
        "| config | RMSE A/P (mean of seeds) | V recall / precision / invalid filtered |",
        "|---|---|---|",
    ]
    for config, block in report["hw"].items():
        r, v = block["rmse"], block["validity"]
        lines.append(
            f"| {config} | {r['ratio_mean']:.3f} ({r['rmse_a_mean']:.4f} / {r['rmse_p_mean']:.4f}) | "
            f"{v['recall_mean']:.3f} / {v['precision_mean']:.3f} / {v['invalid_filtered_mean']:.3f} |"
        )
    lines += [
        "",
        "Per layer (sums over seeds; best = mean of best known / best found):",
        "",
        "| config | layer | space | invalid share | invalid profiles base / ML2 / ML2 warm "
        "| best base / ML2 / ML2 warm | ML2 profiles to baseline best (per seed) | ML2 warm (per seed) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for config, block in report["hw"].items():
        for name, layer in block["layers"].items():
            runs = layer["runs"]
            inv = " / ".join(str(sum(x[m]["invalid_profiles"] for x in runs)) for m in CONTENDERS)
            best = " / ".join(
                f"{np.mean([layer['best_known_s'] / x[m]['best_s'] for x in runs]):.3f}" for m in CONTENDERS
            )
            reach = {v: ", ".join(str(x[v]["profiles_to_baseline_best"]) for x in runs) for v in ML2_VARIANTS}
            lines.append(
                f"| {config} | {name} | {layer['space']} | {layer['invalid_share']:.1%} | {inv} | {best} | "
                f"{reach['ml2tuner']} | {reach['ml2tuner_warm']} |"
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
    parser.add_argument("--seeds", help="comma-separated seeds (default 0-4; quick 0,1)")
    parser.add_argument("--configs", default="default,evta", help="comma-separated hardware presets")
    parser.add_argument("--name", default="ml2tuner", help="report name under benchmarks/results/ml2tuner/")
    args = parser.parse_args()
    layers = ["C9", "C10"] if args.quick else list(RESNET18)
    seeds = [0, 1] if args.quick else [0, 1, 2, 3, 4]
    if args.seeds:
        seeds = [int(x) for x in args.seeds.split(",")]
    budget = 64 if args.quick else 128
    configs = {name: preset(name) for name in args.configs.split(",")}
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
            "warm_options": WARM_OPTIONS,
            "warm_options_chosen_on": WARM_CHOSEN_ON,
        },
        "hw": {},
    }
    for config, hw in configs.items():
        block: dict = {"hw": hw.to_dict()}
        block["layers"], datas = tune_config(hw, layers, budget, seeds)
        block["summary"] = {v: summarise(block["layers"], budget, v) for v in ML2_VARIANTS}
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
    write_report("ml2tuner", args.name, report, table(report), quick=args.quick)
    plot(report, report_path("ml2tuner", args.name, ".png", quick=args.quick))


if __name__ == "__main__":
    main()
