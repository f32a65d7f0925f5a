"""Report of ``benchmarks/copula.py``: Markdown tables and best-so-far plots of its JSON report (kept apart
so that the benchmark script holds only the runs)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from tenset_tools.metrics import running_best
from tvm_transfer.tuning.retime import RETIME_ROUNDS


def _fmt_t(x) -> str:
    return "never" if x is None else (f"{x:.1f}" if isinstance(x, float) else str(x))


def _cell(result: dict, timing: str = "") -> str:
    """``timing``: "" for the qualities of the run's own measurements, "_retimed" for the re-timed ones."""
    first, best8 = result[f"first{timing}"], result[f"best_of_8{timing}"]
    return f"{first:.0%} / {best8:.0%} / {_fmt_t(result['trials_to_10pct'])}"


def _means(rows: list, contenders: list[str], timing: str = "", title: str = "Means") -> str:
    parts = []
    for c in contenders:
        first = np.mean([r[c][f"first{timing}"] for r in rows])
        best8 = np.mean([r[c][f"best_of_8{timing}"] for r in rows])
        t10 = [r[c]["trials_to_10pct"] for r in rows]
        reached = [t for t in t10 if t is not None]
        median = np.median(reached) if reached else float("nan")
        parts.append(
            f"- **{c}**: mean first-evaluation quality {first:.1%}, mean best-of-8 {best8:.1%}, within 10% "
            "in "
            f"{len(reached)}/{len(rows)} tasks (median trials {median:.1f})"
        )
    return f"\n{title}:\n\n" + "\n".join(parts) + "\n"


def _budget_check(rows: list, contenders: list[str]) -> str:
    """How often the budget estimate k was enough to get within 10% of the best known."""
    parts = []
    for c in contenders:
        pairs = [(r[c]["budget"]["k"], r[c]["trials_to_10pct"]) for r in rows]
        enough = sum(t is not None and t <= k for k, t in pairs)
        needed = np.median([t if t is not None else np.inf for _, t in pairs])
        parts.append(
            f"- **{c}**: budget k median {np.median([k for k, _ in pairs]):.0f} (range "
            f"{min(k for k, _ in pairs)}-{max(k for k, _ in pairs)}); k trials reached within 10% in "
            f"{enough}/{len(pairs)} tasks; trials actually needed: median {needed:.0f}"
        )
    return (
        "\nBudget estimate (success bar 0.5) vs trials needed to get within 10%:\n\n"
        + "\n".join(parts)
        + "\n"
    )


def markdown(report: dict, cpu_contenders: Sequence[str], budget_variants: Sequence[str]) -> str:
    """The report as Markdown: the VTA table (``budget_variants`` carry the budget column) and one table
    per CPU kind (columns ``cpu_contenders``), each with its means and budget check."""
    machine = report["machine"]
    lines = [
        "# Gaussian-copula transfer tuning\n",
        f"Machine: {machine['cpu']}, {machine['cores']} cores; commit "
        f"{report['commit_short']}; seed {report['seed']}. Quality = best known latency / latency (1 = best "
        "known). Cells: first-evaluation quality / best-of-first-8 quality / trials until within 10% of the "
        "best known. Paper (GC, ICS'23): 64.37% of peak in the first evaluation; goal here > 80%.\n",
    ]
    vta = report.get("vta")
    if vta:
        names = [*vta["variants"], "random"]
        lines += [
            "## VTA ResNet-18 layers C2..C11\n\n"
            f"Leave-one-out; sources: {vta['source_trials']} random settings "
            f"per other layer, source seeds {vta['seeds']}; best known = exhaustive; random = mean of "
            f"{vta['random_repeats']} orders; copula proposals are followed by random unseen settings. "
            "Variants: "
            f"{json.dumps(vta['variants'])} (copula_kde_q0.1 was chosen after seeing seed-0 results). Budget "
            "column: the paper's estimate k (C unique of |S| draws) for copula_paper (copula_default when "
            "copula_paper is not run).\n",
            "| layer | seed | " + " | ".join(names) + " | budget k (C) |",
            "|---|---|" + "---|" * len(names) + "---|",
        ]
        for r in vta["rows"]:
            b = next((r[n]["budget"] for n in budget_variants if n in r), None)
            cells = " | ".join(_cell(r[n]) for n in names)
            budget = f"{b['k']} ({b['unique']})" if b else "-"
            lines.append(f"| {r['task']} | {r['source_seed']} | {cells} | {budget} |")
        lines.append(_means(vta["rows"], names))
        budgeted = [n for n in budget_variants if n in vta["variants"]]
        if budgeted:
            lines.append(_budget_check(vta["rows"], budgeted))
    for cpu in report.get("cpu", []):
        lines += [
            f"\n## CPU {cpu['kind']}\n\n{cpu['trials']} trials per run, {cpu['trials_per_iter']} per batch, "
            f"population {cpu['population']}; copula sources: the {' + '.join(cpu.get('source_runs', []))} "
            "runs of the other shapes. Cells: first / best-of-8 quality *re-timed* (each run's first record, "
            f"best of its first 8 and 3 best, built once and timed in {RETIME_ROUNDS} interleaved rounds, "
            "fastest; best = the best re-timed candidate of the shape) / trials until within 10% of the "
            "best the runs measured. Budget: the paper's k (C unique of |S|), |S| = the covered design "
            "spaces' decision combinations, C counted over 4096 draws at most.\n",
            "| task | best re-timed (us) | " + " | ".join(cpu_contenders) + " | budget k (C of S) |",
            "|---|---|" + "---|" * len(cpu_contenders) + "---|",
        ]
        for r in cpu["rows"]:
            b = r["copula_evolutionary_xgb"]["budget"]
            cells = " | ".join(_cell(r[c], "_retimed") for c in cpu_contenders)
            lines.append(
                f"| {r['task']} | {r['best_retimed_s'] * 1e6:.1f} | {cells} | {b['k']} ({b['unique']} of "
                f"{b['space']:.3g}) |"
            )
        lines.append(_means(cpu["rows"], list(cpu_contenders), "_retimed", "Means (re-timed)"))
        lines.append(_means(cpu["rows"], list(cpu_contenders), title="Means (as the runs measured them)"))
        lines.append(_budget_check(cpu["rows"], ["copula_evolutionary_xgb"]))
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
    """Best-so-far quality curves of the first three VTA layers (the report's seed) and CPU shapes."""
    panels = []
    for r in [r for r in report.get("vta", {}).get("rows", []) if r["source_seed"] == report["seed"]][:3]:
        panels.append(("VTA " + r["task"], r["curves"], r["best_known_s"]))
    for cpu in report.get("cpu", []):
        for r in cpu["rows"][:3]:
            curves = {c: running_best(x) for c, x in cpu["latencies"][r["task"]].items()}
            panels.append((r["task"], curves, r["best_known_s"]))
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5), squeeze=False)
    for ax, (title, curves, best) in zip(axes[0], panels, strict=True):
        for name, curve in curves.items():
            c = np.asarray(curve, dtype=float)
            ax.plot(np.arange(1, len(c) + 1), np.where(np.isfinite(c), best / c, 0), label=name)
        ax.set(title=title, xlabel="trials", ylabel="best known / best so far", ylim=(0, 1.05))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
