"""How much of a tuning run's pick is lost to measurement noise, per operator and budget.

A run's pick after N trials is the record it measured fastest among its first N. On a small shared machine
one timing can be slowed by a burst of noise, never sped up (:func:`~tvm_transfer.tuning.retime.retime`),
so a good program timed during a burst loses to a worse one timed in a quiet moment. This study takes the
operators a per-operator study finished (``benchmarks.transfer_operators``, its report and work dirs),
re-times every record of an operator's runs up to the last budget together, in interleaved rounds, fastest
kept, and reports per arm and budget:

* the noise loss: the re-timed latency of a run's pick over the fastest re-timed latency among its first N
  records (1: the run picked the best program it had measured), geometric mean over runs;
* the operator study's figure twice, from the same timings: each arm's picks after N relative to the
  baseline's after the last budget (geometric mean over seeds, then over operators), once with the runs'
  own picks and once with noise-free picks (the fastest re-timed among the first N, for the baseline too).

The gap between the two figures bounds what better measurements (timing each candidate more than once)
could gain at a budget, before such a runner is built. Finished operators are skipped when the study is
run again; the report is written after each.

    nice -n 19 python -m benchmarks.pick_noise --study transfer_operators_dev_znver3_noise \
        --work-root work/bench_ops_noise --report-name pick_noise_dev_znver3
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from benchmarks.common import geomean, git_commit, machine_info, records_in_order, report_path, write_report
from benchmarks.transfer_operators import BASELINE, CHECKPOINTS, GOAL_TRIALS
from tvm_transfer.networks import model_slug
from tvm_transfer.runner import measuring_threads
from tvm_transfer.target import host_target
from tvm_transfer.tuning.retime import retime

ROUNDS = 4


def _runs(study: dict, root: Path) -> dict[tuple[str, str], dict[str, dict[int, Path]]]:
    """``(network, task) -> arm -> seed -> work dir`` of the operators the per-operator ``study`` (its
    report) finished, its work dirs under ``root``."""
    runs: dict = {}
    for row in study["rows"]:
        task_dir = root / model_slug(row["network"]) / row["task"]
        runs[row["network"], row["task"]] = {
            arm: {seed: task_dir / arm / f"seed{seed}" for seed in row["seeds"]}
            for arm in [*study["arms"], BASELINE]
        }
    return runs


def _measure_operator(runs: dict[str, dict[int, Path]], target, rounds: int, last: int) -> dict:
    """Every run's first ``last`` records (schedule key, seconds as measured) and the re-timed seconds of
    each distinct schedule, all timed in the same rounds."""
    from tvm.s_tir.meta_schedule.utils import shash2hex

    mods, measured = {}, {}
    for arm, seeds in runs.items():
        for seed, work_dir in seeds.items():
            run = []
            for mod, seconds in records_in_order(work_dir)[:last]:
                key = shash2hex(mod)
                mods.setdefault(key, mod)
                run.append([key, seconds])
            measured.setdefault(arm, {})[str(seed)] = run
    latency = retime(mods, target, rounds, num_threads=measuring_threads(target))  # as during tuning
    return {"measured": measured, "latency_s": latency}


def _picks(row: dict, arm: str, n: int) -> tuple[list[float], list[float]]:
    """Re-timed seconds of each seed's pick after ``n`` trials: (the run's pick, the noise-free pick)."""
    picked, best = [], []
    for run in row["measured"][arm].values():
        first = run[:n]
        retimed = [row["latency_s"].get(key, math.inf) for key, _ in first] or [math.inf]
        chosen = int(np.argmin([seconds for _, seconds in first])) if first else 0
        picked.append(retimed[chosen])
        best.append(min(retimed))
    return picked, best


def _operator_figures(row: dict, checkpoints: tuple[int, ...]) -> dict:
    """Per arm and budget: noise loss, and the ratio to the baseline with the runs' and noise-free picks."""
    base_picked, base_best = (geomean(v) for v in _picks(row, BASELINE, checkpoints[-1]))
    out: dict = {}
    for arm in row["measured"]:
        for n in checkpoints:
            picked, best = _picks(row, arm, n)
            losses = [p / b for p, b in zip(picked, best, strict=True) if math.isfinite(p / b)]
            out.setdefault(arm, {})[str(n)] = {
                "noise_loss": geomean(losses) if losses else None,
                "ratio": geomean(picked) / base_picked,
                "ratio_noise_free": geomean(best) / base_best,
            }
    return out


def _known_geomean(values: list[float | None]) -> float | None:
    """Geometric mean of the values that are known; ``None`` when none is."""
    known = [v for v in values if v is not None]
    return geomean(known) if known else None


def _save(report: dict, name: str) -> None:
    """Summarise ``report`` and write it as results/transfer/``name``.{json,md}."""
    report["summary"] = _summary(report)
    write_report("transfer", name, report, _markdown(report))


def _summary(report: dict) -> dict:
    """Per arm and budget: the geometric means over operators of each row's figures, and the spread of
    the runs' timings against the re-timed latency of the same schedule (10th, 50th, 90th percentile)."""
    summary: dict = {"arms": {}}
    for arm in report["arms"]:
        for n in map(str, report["checkpoints"]):
            cells = [r["figures"][arm][n] for r in report["rows"] if arm in r["figures"]]
            summary["arms"].setdefault(arm, {})[n] = {
                name: _known_geomean([c[name] for c in cells])
                for name in ("noise_loss", "ratio", "ratio_noise_free")
            }
    spread = [
        seconds / row["latency_s"][key]
        for row in report["rows"]
        for runs in row["measured"].values()
        for run in runs.values()
        for key, seconds in run
        if math.isfinite(seconds) and math.isfinite(row["latency_s"].get(key, math.inf))
    ]
    summary["measured_over_retimed"] = (
        dict(zip(("p10", "p50", "p90"), np.percentile(spread, [10, 50, 90]).tolist(), strict=True))
        if spread
        else None
    )
    return summary


def _markdown(report: dict) -> str:
    summary = report["summary"]
    lines = [
        "# Measurement noise in the picks of a per-operator study",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores; "
        f"target `{report['target']}`; runs of `{report['work_root']}` "
        f"({len(report['rows'])} operators); every record up to {report['checkpoints'][-1]} trials of every "
        f"run re-timed, fastest of {report['rounds']} interleaved rounds per operator. Ratios are to "
        f"{BASELINE}'s pick after {report['checkpoints'][-1]} trials, geometric means over seeds, then "
        "operators; noise-free: every arm's pick (the baseline's too) is the fastest re-timed among the "
        "run's first N records.",
        "",
        "| arm | trials | noise loss | ratio, the runs' picks | ratio, noise-free picks |",
        "|---|---|---|---|---|",
    ]
    for arm, cells in summary["arms"].items():
        for n, cell in cells.items():
            values = [cell[k] for k in ("noise_loss", "ratio", "ratio_noise_free")]
            text = " | ".join("n/a" if v is None else f"{v:.3f}" for v in values)
            lines.append(f"| {arm} | {n} | {text} |")
    spread = summary["measured_over_retimed"]
    if spread:
        lines += [
            "",
            "A record's timing in its run over its re-timed latency: "
            f"{spread['p10']:.2f} / {spread['p50']:.2f} / {spread['p90']:.2f} "
            "(10th / 50th / 90th percentile).",
        ]
    lines += ["", f"Per operator at {GOAL_TRIALS} trials (runs' picks / noise-free picks):", ""]
    arms = [a for a in report["arms"] if a != BASELINE]
    lines += ["| network | task | " + " | ".join(arms) + " |", "|---|---|" + "---|" * len(arms)]
    for row in report["rows"]:
        cells = [row["figures"][a][str(GOAL_TRIALS)] for a in arms]
        lines.append(
            f"| {row['network']} | {row['task']} | "
            + " | ".join(f"{c['ratio']:.3f} / {c['ratio_noise_free']:.3f}" for c in cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--study", required=True, help="the per-operator study's --report-name")
    parser.add_argument("--work-root", required=True, help="the per-operator study's --work-root")
    parser.add_argument("--report-name", default="pick_noise", help="results/transfer/<name>.{json,md}")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"timing rounds (default {ROUNDS})")
    args = parser.parse_args(argv)
    target = host_target()
    root = Path(args.work_root) / str(target.attrs.get("mcpu", "host"))
    study_path = report_path("transfer", args.study, ".json")
    if not study_path.exists():
        raise SystemExit(
            f"no {study_path}: run benchmarks.transfer_operators --report-name {args.study} first"
        )
    runs = _runs(json.loads(study_path.read_text()), root)
    path = report_path("transfer", args.report_name, ".json")
    report = json.loads(path.read_text()) if path.exists() else {"rows": []}
    report.update(
        {
            "machine": machine_info(),
            "target": str(target),
            "study": args.study,
            "work_root": args.work_root,
            "checkpoints": list(CHECKPOINTS),
            "rounds": args.rounds,
            "arms": sorted({arm for arms in runs.values() for arm in arms}),
        }
    )
    done = {(r["network"], r["task"]) for r in report["rows"]}
    todo = {operator: arms for operator, arms in runs.items() if operator not in done}
    for operator, arms in todo.items():
        print(f"== {operator[0]}: {operator[1]}", flush=True)
        row = {"network": operator[0], "task": operator[1]}
        row |= _measure_operator(arms, target, args.rounds, CHECKPOINTS[-1])
        row["figures"] = _operator_figures(row, CHECKPOINTS)
        row["finished"], row["commit"] = time.strftime("%Y-%m-%d %H:%M:%S"), git_commit(short=True)
        report["rows"].append(row)
        _save(report, args.report_name)
    if not todo and report["rows"]:  # nothing left to time: re-draw the report
        _save(report, args.report_name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
