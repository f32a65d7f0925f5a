"""Transfer per operator: operator shapes of networks a transfer pack never saw, tuned with the pack (the
default policy) and with TVM's ``XGBModel(num_warmup_samples=0)``; the best latency after 8, 16, 32 and 64
trials relative to TVM's after 64, re-timed.

Operators. The held-out networks (``benchmarks.corpus.HELD_OUT``) are extracted as ``compile``
extracts them on this machine's target. Per network the tasks are ranked by their share of the network's
work (weight x FLOPs, ``task_work``). Walking down that ranking, the heaviest task of each operator kind
with at least :data:`MIN_SHARE` of the work is taken first, then the heaviest tasks not yet taken, until
:data:`PER_NETWORK` tasks; a task whose workload was already taken is skipped. A task's kind is the name
and iteration kinds of its first block with a reduction (``conv2d_nchw``/``SSSSRRR``: convolution,
``group_conv2d_nchw``: depthwise convolution, ``matmul``/``SSR``: dense layer, ``matmul``/``SSSR``: batch
matmul); tasks without a reduction are never taken. ``--kinds`` keeps only the tasks of the kinds named,
and the rule walks down theirs. Nothing measured enters the rule.

Arms. Every operator is tuned alone, per arm and seed (:data:`SEEDS`, ``--seeds``) in
``work/bench_transfer_ops/<mcpu>/<network>/<task>/<arm>/seed<k>``, to 64 trials in batches of 8:

* ``transfer``: the pack's record of the task measured on this target when it has one (0 trials; tuned on
  from it under the policy's model at budgets above the pack's measurements of the task), else the
  default policy's cost model and search strategy;
* ``tvm-xgb-nowarmup``: MetaSchedule's ``XGBModel(num_warmup_samples=0)``, evolutionary search.

``--checkpoints`` takes the picks after other trial counts: every arm tunes to the last, and the baseline's
pick is taken after it (e.g. ``--checkpoints 16 32 64 128 256`` for the search's later batches; the goals,
judged at 16 trials, then compare with the baseline at 256).

``--dev`` is the development study of the policy's parts at these budgets: operators of networks the pack
does not hold (:data:`DEV_NETWORKS`), one arm per candidate policy (:data:`DEV_ARMS`), the same baseline.
Each transfer arm keeps the guard's weight after every measured batch. ``--also-pack LABEL=PATH`` compares
two packs: every transfer arm is also tuned with the pack at PATH, as arm ``<arm>@LABEL``, and timed in the
same rounds as the others (separate runs of the benchmark time the same programs several percent apart).

The pick after N trials is the record a run measured fastest among its first N records, in measurement
order. All picks of an operator, of every arm and seed, are re-timed together
(:func:`~tvm_transfer.tuning.retime.retime`: interleaved rounds, fastest kept). An operator's figure at
N trials is the
geometric mean over seeds of a transfer arm's picks after N, relative to the geometric mean over seeds of
the baseline's picks after the last budget: one run per operator is dominated by the search's randomness.
Goals: geometric mean over operators at 16 trials at most 1.0; no operator above 1.5 at 16 trials.

The pack must exclude the held-out networks (as ``transfer_networks`` checks). The report is written after
every operator; a re-run skips finished operators (all of them when the seeds differ; a report of other
networks or kinds is refused), and the work dirs resume an interrupted tuning. ``--retime`` times the picks
of finished operators again, in new interleaved rounds, and keeps each pick's fastest timing over all runs
(the row's ``retimings`` counts them): the machine's noise bursts can slow one pick through all rounds of
one run.

    nice -n 19 python -m benchmarks.transfer_operators > work/bench_transfer_ops.log 2>&1 &   # resumable
    nice -n 19 python -m benchmarks.transfer_operators --dev > work/bench_ops_dev.log 2>&1 &
    nice -n 19 python -m benchmarks.transfer_operators --dev --arms A,B   # only these arms of the study
    nice -n 19 python -m benchmarks.transfer_operators --dev --networks N   # the study on N's operators
    nice -n 19 python -m benchmarks.transfer_operators --dev --networks N --kinds group_conv2d_nchw \
        --report-name NAME   # only N's depthwise convolutions
    nice -n 19 python -m benchmarks.transfer_operators --pack NEW --also-pack before=OLD   # two packs
    nice -n 19 python -m benchmarks.transfer_operators --retime   # no tuning: the picks timed once more
    nice -n 19 python -m benchmarks.transfer_operators --dev --checkpoints 16 32 64 128 256 \
        --work-root work/bench_ops_deep --report-name NAME   # deeper: every arm to 256 trials
    nice -n 19 python -m benchmarks.transfer_operators --report-name transfer_operators_znver3  # another CPU
    python -m benchmarks.transfer_operators --quick   # smoke: one bert_tiny_layer task, 8/16 trials, seed 0
"""

from __future__ import annotations

import argparse
import logging
import math
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import gmean

from benchmarks.common import git_commit, records_in_order, report_path, write_report
from benchmarks.corpus import DEV_NETWORKS, HELD_OUT
from benchmarks.transfer_common import (
    add_also_pack_argument,
    also_packs_lines,
    arms_with_packs,
    check_held_out,
    load_resumable,
    open_also_packs,
    pack_context,
    run_context,
)
from tvm_transfer.networks import model_slug
from tvm_transfer.runner import measuring_threads, measuring_workers
from tvm_transfer.search_strategy.replay import block_signature
from tvm_transfer.target import host_target
from tvm_transfer.transfer import DEFAULT_PACK
from tvm_transfer.transfer.guard import GuardedCostModel
from tvm_transfer.transfer.pack import TransferPack
from tvm_transfer.transfer.policy import DEFAULT_POLICY, TransferPolicy
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.plan import TuningPlan
from tvm_transfer.tuning.retime import retime
from tvm_transfer.tuning.run import NetworkRun, RunConfig, extract_network_tasks
from tvm_transfer.tuning.session import Measurement, TuneOptions
from tvm_transfer.tuning.task_selection import task_work

CHECKPOINTS, PER_NETWORK, ROUNDS = (8, 16, 32, 64), 3, 8
QUICK_NETWORKS, QUICK_CHECKPOINTS, QUICK_PER_NETWORK, QUICK_ROUNDS = ("bert_tiny_layer",), (8, 16), 1, 2
#: Share of a network's work (weight x FLOPs) below which a task does not count as its own operator kind.
MIN_SHARE = 0.01
TRIALS_PER_ITER = 8
BASELINE = "tvm-xgb-nowarmup"
#: The transfer arms (name: policy) of the held-out study, and of the development study.
ARMS = {"transfer": DEFAULT_POLICY}
DEV_ARMS = {
    "tuned-model-guard16": TransferPolicy(seed_search=False, blend="rank"),
    "tuned-model-guard16-linear": TransferPolicy(seed_search=False),
    "tuned-model-guard16-linear-seeds-once": TransferPolicy(),
}


#: Seeds of every arm's search and models; an operator's figures are geometric means over them.
SEEDS = (0, 1, 2)
#: What a run's report entry keeps of the tuning that measured it when ``--retime`` only resumes the run.
TUNING_FACTS = ("new_trials", "tune_seconds", "guard_weights")
#: The goals at :data:`GOAL_TRIALS` trials: geometric mean and worst operator, relative to the baseline.
GOAL_TRIALS, GOAL_GEOMEAN, GOAL_WORST = 16, 1.0, 1.5


def _kind(mod) -> str | None:
    """``name/iteration kinds`` of the first block of ``mod`` with a reduction (``None``: no reduction)."""
    return next((f"{name}/{kinds}" for name, kinds in block_signature(mod) if "R" in kinds), None)


def _of_kinds(kind: str | None, wanted: tuple[str, ...] | None) -> bool:
    """Whether an operator of ``kind`` is studied: it has a reduction, and its kind or its block name (the
    kind before ``/``) is in ``wanted`` (every kind when ``wanted`` is ``None``)."""
    return kind is not None and (wanted is None or kind in wanted or kind.split("/")[0] in wanted)


def _operators(
    networks: tuple[str, ...], per_network: int, target, wanted: tuple[str, ...] | None = None
) -> list[tuple[str, object, dict]]:
    """``(network, extracted task, facts)`` of the chosen operators (the rule of the module docstring),
    among those of the ``wanted`` kinds (:func:`_of_kinds`)."""
    from tvm.s_tir.meta_schedule.utils import shash2hex

    chosen, seen = [], set()
    for network in networks:
        tasks = extract_network_tasks(network, target)
        works = sorted(task_work(tasks), key=lambda w: -w.work)  # stable: ties keep extraction order
        kinds = {w.index: _kind(tasks[w.index].dispatched[0]) for w in works}
        fresh = [
            w
            for w in works
            if _of_kinds(kinds[w.index], wanted) and shash2hex(tasks[w.index].dispatched[0]) not in seen
        ]
        first_of_kind = {}
        for w in fresh:
            if w.share >= MIN_SHARE:
                first_of_kind.setdefault(kinds[w.index], w)
        order = list(first_of_kind.values()) + [w for w in fresh if w not in first_of_kind.values()]
        for w in order[:per_network]:
            task = tasks[w.index]
            seen.add(shash2hex(task.dispatched[0]))
            facts = {"kind": kinds[w.index], "share": w.share, "weight": w.weight, "mflop": w.flops / 1e6}
            chosen.append((network, task, facts))
    return chosen


def _tune(
    network: str,
    task,
    policy: TransferPolicy | None,
    pack: TransferPack,
    work_dir: Path,
    target,
    trials: int,
    seed: int,
) -> dict:
    """Tune ``task`` alone with ``policy`` (``None``: the baseline) to ``trials`` trials in ``work_dir``
    (resuming), the search and the models seeded with ``seed``; what it took, and the guard's weight after
    each batch it measured."""
    options = TuneOptions(trials=trials, trials_per_iter=TRIALS_PER_ITER, seed=seed)
    plan = policy.plan(pack, options) if policy is not None else TuningPlan(cost_model=BASELINE)
    start = time.perf_counter()
    builder, runner = measuring_workers(target)
    config = RunConfig.make(network, work_dir, target=target, options=options, plan=plan)
    result = tune_network(
        NetworkRun(config, tasks=[task]), measure=Measurement(builder=builder, runner=runner)
    )
    guard = plan.cost_model
    weights = [d.weight for d in guard.decisions_] if isinstance(guard, GuardedCostModel) else None
    return {
        "from_pack": bool(result.from_pack),
        "new_trials": result.new_trials,
        "tune_seconds": time.perf_counter() - start,
        "guard_weights": weights,
    }


def _measure_operator(
    network: str, task, facts: dict, pack, work_root: Path, target, args, earlier: dict | None = None
) -> dict:
    """Tune every arm of one operator with every seed (resuming), re-time all their picks together, and
    return its report row; with the ``earlier`` row of the same operator, each pick keeps the fastest of
    its earlier and its new timing. ``args.arms``: transfer arm -> (policy, the pack it tunes with)."""
    from tvm.s_tir.meta_schedule.utils import shash2hex

    checkpoints, last = args.checkpoints, args.checkpoints[-1]
    earlier = earlier or {}
    row = {"network": network, "task": task.task_name, **facts, "seeds": list(args.seeds), "arms": {}}
    picks, mods = {}, {}
    for arm, (policy, arm_pack) in {**args.arms, BASELINE: (None, pack)}.items():
        row["arms"][arm] = {}
        for seed in args.seeds:
            work_dir = work_root / model_slug(network) / task.task_name / arm / f"seed{seed}"
            run = _tune(network, task, policy, arm_pack, work_dir, target, last, seed)
            run = _with_tuning_facts(run, earlier.get("arms", {}).get(arm, {}).get(str(seed)))
            records = records_in_order(work_dir)
            row["arms"][arm][str(seed)] = {**run, "records": len(records)}
            measured = [seconds for _, seconds in records]
            for n in checkpoints if policy is not None else (last,):
                if records:
                    best = int(np.argmin(measured[:n]))
                    key = shash2hex(records[best][0])
                    picks[_pick_key(arm, seed, n)] = {"key": key, "measured_s": measured[best]}
                    mods.setdefault(key, records[best][0])
    threads = measuring_threads(target)  # as during tuning
    latency = retime(mods, target, args.rounds, num_threads=threads) if mods else {}
    timed_before = earlier.get("latency_s", {})
    latency = {k: min(v, timed_before.get(k, math.inf)) for k, v in latency.items()}
    row.update(picks=picks, latency_s=latency, retimings=earlier.get("retimings", 0) + 1)
    row.update(_ratios(row, args.arms, args.seeds, checkpoints))
    row["finished"], row["commit"] = time.strftime("%Y-%m-%d %H:%M:%S"), git_commit(short=True)
    return row


def _with_tuning_facts(run: dict, before: dict | None) -> dict:
    """``run`` with the tuning facts (:data:`TUNING_FACTS`) of ``before``, the same run's entry in the
    earlier row, when ``run`` tuned nothing new: a re-run (``--retime``) only resumes the work dir, and
    its guard made no decisions and its time is not the tuning's."""
    if before is None or run["new_trials"]:
        return run
    return {**run, **{k: before[k] for k in TUNING_FACTS if k in before}}


def _pick_key(arm: str, seed: int, trials: int) -> str:
    """The key of a row's ``picks`` (and so of the report's JSON) for an arm's pick after ``trials``."""
    return f"{arm}/{seed}/{trials}"


def _ratios(row: dict, arms, seeds: list[int], checkpoints) -> dict:
    """A row's baseline and ratios from its picks and their re-timed latencies (see the module docstring)."""
    last = checkpoints[-1]

    def seconds(arm: str, seed: int, n: int) -> tuple[float, float]:
        """(re-timed, as measured) seconds of a pick; ``inf`` when it failed or there was none."""
        pick = row["picks"].get(_pick_key(arm, seed, n), {"key": None, "measured_s": math.inf})
        return row["latency_s"].get(pick["key"], math.inf), pick["measured_s"]

    def relative(value: float, reference: float) -> float | None:
        """inf: a pick failed or there was none; None: no baseline to compare with."""
        return value / reference if math.isfinite(reference) else None

    base = [seconds(BASELINE, seed, last) for seed in seeds]
    base_retimed, base_measured = gmean([b[0] for b in base]), gmean([b[1] for b in base])
    out: dict = {
        "baseline_us": base_retimed * 1e6 if math.isfinite(base_retimed) else None,
        "baseline_us_by_seed": [b[0] * 1e6 if math.isfinite(b[0]) else None for b in base],
        "ratio": {},
        "ratio_by_seed": {},
        "ratio_measured": {},
    }
    for arm in arms:
        for n in map(str, checkpoints):
            picked = [seconds(arm, seed, int(n)) for seed in seeds]
            retimed, measured = [p[0] for p in picked], [p[1] for p in picked]
            out["ratio"].setdefault(arm, {})[n] = relative(gmean(retimed), base_retimed)
            out["ratio_by_seed"].setdefault(arm, {})[n] = [relative(p, base_retimed) for p in retimed]
            out["ratio_measured"].setdefault(arm, {})[n] = relative(gmean(measured), base_measured)
    return out


def _summary(report: dict) -> dict:
    """Per transfer arm: geometric mean and worst ratio over the finished operators at each checkpoint,
    and the goals."""
    out: dict = {}
    for arm in report["arms"]:
        geomean, worst = {}, {}
        for n in map(str, report["checkpoints"]):
            ratios = [r["ratio"][arm][n] for r in report["rows"] if r["ratio"][arm].get(n) is not None]
            geomean[n] = float(gmean(ratios)) if ratios else None
            worst[n] = float(max(ratios)) if ratios else None
        mean, bad = geomean.get(str(GOAL_TRIALS)), worst.get(str(GOAL_TRIALS))
        goals = {
            f"geomean at {GOAL_TRIALS} <= {GOAL_GEOMEAN}": None if mean is None else mean <= GOAL_GEOMEAN,
            f"no operator above {GOAL_WORST} at {GOAL_TRIALS}": None if bad is None else bad <= GOAL_WORST,
        }
        out[arm] = {"geomean": geomean, "worst": worst, "goals": goals}
    return out


def _cell(value: float | None, fmt: str = ".3f") -> str:
    return "n/a" if value is None else f"{value:{fmt}}"


def _spread(values: list[float | None]) -> str:
    """``lowest-highest`` of the per-seed ratios."""
    known = [v for v in values if v is not None]
    return f"{min(known):.2f}-{max(known):.2f}" if known else "n/a"


def _arm_table(report: dict, arm: str) -> list[str]:
    """The markdown table of one transfer arm and its goal lines."""
    checkpoints, summary, last = report["checkpoints"], report["summary"][arm], report["checkpoints"][-1]
    lines = [
        "| network | task | kind | work share | MFLOP | baseline µs | "
        + " | ".join(f"{n} trials" for n in checkpoints)
        + " | from pack |",
        "|---|---|---|---|---|---|" + "---|" * len(checkpoints) + "---|",
    ]
    for r in report["rows"]:
        ratio, by_seed = r["ratio"][arm], r["ratio_by_seed"][arm]
        ratios = [f"{_cell(ratio[str(n)])} ({_spread(by_seed[str(n)])})" for n in checkpoints]
        from_pack = any(run["from_pack"] for run in r["arms"][arm].values())
        lines.append(
            f"| {r['network']} | {r['task']} | {r['kind']} | {r['share']:.3f} | {r['mflop']:.1f} | "
            f"{_cell(r['baseline_us'], '.1f')} | "
            + " | ".join(ratios)
            + f" | {'yes' if from_pack else 'no'} |"
        )
    geomeans = " | ".join(_cell(summary["geomean"][str(n)]) for n in checkpoints)
    lines += [f"| geometric mean | | | | | | {geomeans} | |", ""]
    figures = (summary["geomean"].get(str(GOAL_TRIALS)), summary["worst"].get(str(GOAL_TRIALS)))
    for (goal, met), figure in zip(summary["goals"].items(), figures, strict=True):
        verdict = "not measured" if met is None else ("met" if met else "missed")
        lines.append(f"- Goal: {goal} (vs {BASELINE} at {last}): {verdict}, {_cell(figure)}.")
    return [*lines, ""]


def _guard_lines(report: dict) -> list[str]:
    """Per operator and guarded arm, the pretrained model's weight after each measured batch."""
    lines = ["Guard: the pretrained model's weight after each measured batch (this run's batches).", ""]
    for r in report["rows"]:
        for arm in report["arms"]:
            for seed, run in r["arms"][arm].items():
                if run.get("guard_weights"):
                    weights = " ".join(f"{w:.2f}" for w in run["guard_weights"])
                    lines.append(f"- {r['task']}, {arm}, seed {seed}: {weights}")
    return [*lines, ""]


def _runs_clause(report: dict) -> str:
    """How many re-timing runs every pick's fastest timing was taken over, when more than one."""
    runs = min((r.get("retimings", 1) for r in report["rows"]), default=1)
    return f", the fastest of {runs} such runs for every pick" if runs > 1 else ""


def _markdown(report: dict) -> str:
    last, pack = report["checkpoints"][-1], report["pack"]
    title = "Transfer per operator, " + ("development study" if report["dev"] else "held out")
    lines = [
        f"# {title}",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores; target "
        f"`{report['target']}`; pack `{pack['path']}` ({pack['describe']}). Operators of "
        f"{', '.join(report['networks'])}, each tuned with seeds {', '.join(map(str, report['seeds']))}. "
        f"Per operator: the geometric mean over seeds of a transfer arm's pick after N trials, relative to "
        f"that of {BASELINE}'s pick after {last}, all re-timed together (fastest of {report['rounds']} "
        f"interleaved rounds{_runs_clause(report)}); in brackets the lowest and highest seed's pick against "
        "the same baseline.",
        "",
    ]
    lines += also_packs_lines(report)
    for arm in report["arms"]:
        if len(report["arms"]) > 1:
            lines += [f"## {arm}", ""]
        lines += _arm_table(report, arm)
    missing = [
        f"{n}/{t}"
        for n, t in report["planned"]
        if (n, t) not in {(r["network"], r["task"]) for r in report["rows"]}
    ]
    if missing:
        lines += [f"Operators not measured yet: {', '.join(missing)}.", ""]
    runs = [f"`{key}` ({run['what']}; commit {run['commit']})" for key, run in report.get("runs", {}).items()]
    if runs:
        lines += [f"Earlier runs, in this report's JSON under `runs`: {'; '.join(runs)}.", ""]
    return "\n".join(lines + _guard_lines(report))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: one bert_tiny_layer task, 8/16 trials"
    )
    parser.add_argument("--dev", action="store_true", help="the policy study on development operators")
    parser.add_argument(
        "--networks",
        nargs="+",
        help="take the operators of these networks instead (default: the held-out ones; --dev: "
        + ", ".join(DEV_NETWORKS)
        + "); the pack must not hold them",
    )
    parser.add_argument(
        "--kinds",
        nargs="+",
        metavar="KIND",
        help="take only operators of these kinds, given as NAME/ITERATIONS or NAME (for example "
        "group_conv2d_nchw: depthwise convolutions), however small their share of the work",
    )
    parser.add_argument(
        "--pack", default=str(DEFAULT_PACK), help="the transfer pack (default: the shipped one)"
    )
    parser.add_argument("--work-root", default="work/bench_transfer_ops", help="root of the work dirs")
    parser.add_argument(
        "--seeds", type=int, nargs="+", help=f"seeds of every arm (default: {SEEDS}; --quick: 0)"
    )
    parser.add_argument(
        "--retime",
        action="store_true",
        help="re-time the picks of finished operators too; each keeps the fastest of all its timings",
    )
    parser.add_argument(
        "--arms",
        help="comma-separated arms of the study to tune (default: all; --dev: " + ", ".join(DEV_ARMS) + ")",
    )
    add_also_pack_argument(parser)
    parser.add_argument(
        "--checkpoints",
        type=int,
        nargs="+",
        metavar="N",
        help=f"trials after which each arm's pick is taken, ascending; the baseline's after the last "
        f"(default: {' '.join(map(str, CHECKPOINTS))}); a report of other checkpoints is refused",
    )
    parser.add_argument(
        "--report-name",
        help="results/transfer/<name>.{json,md} (default: transfer_operators, or transfer_operators_dev); "
        "a study on another CPU or pack gets its own",
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    networks = QUICK_NETWORKS if args.quick else DEV_NETWORKS if args.dev else HELD_OUT
    networks = tuple(args.networks) if args.networks else networks
    per_network = QUICK_PER_NETWORK if args.quick else PER_NETWORK
    args.checkpoints = tuple(args.checkpoints or (QUICK_CHECKPOINTS if args.quick else CHECKPOINTS))
    if list(args.checkpoints) != sorted(set(args.checkpoints)) or args.checkpoints[0] < 1:
        parser.error(
            f"--checkpoints: give distinct positive trial counts in ascending order, not {args.checkpoints}"
        )
    args.rounds = QUICK_ROUNDS if args.quick else ROUNDS
    args.seeds = args.seeds or ([0] if args.quick else list(SEEDS))
    study_arms = DEV_ARMS if args.dev else ARMS
    unknown = set(args.arms.split(",")) - set(study_arms) if args.arms else set()
    if unknown:
        parser.error(f"--arms: no arm {', '.join(sorted(unknown))} in this study ({', '.join(study_arms)})")
    policies = {name: study_arms[name] for name in args.arms.split(",")} if args.arms else study_arms
    name = args.report_name or ("transfer_operators_dev" if args.dev else "transfer_operators")

    target = host_target()
    work_root = Path(args.work_root) / str(target.attrs.get("mcpu", "host"))
    pack = TransferPack.open(args.pack)
    also_packs = open_also_packs(parser, args.also_pack)
    if not args.quick:  # the quick operator's network is in most packs: a smoke run, not a result
        for checked in (pack, *also_packs.values()):
            check_held_out(checked, networks, listed=not args.dev)
    policies, arm_packs = arms_with_packs(policies, pack, also_packs)
    args.arms = {arm: (policy, arm_packs[arm]) for arm, policy in policies.items()}
    path = report_path("transfer", name, ".json", args.quick)
    report = None if args.quick else load_resumable(path, pack, target, also_packs)
    if report is not None and report.get("arms") != list(args.arms):
        raise SystemExit(f"{path} compares other arms ({report.get('arms')}): move it away to start over")
    kinds = list(args.kinds) if args.kinds else None
    if report is not None and (report.get("networks"), report.get("kinds")) != (list(networks), kinds):
        studied = ", ".join(report.get("networks", []))
        raise SystemExit(
            f"{path} studies the operators of other networks or kinds ({studied}; kinds "
            f"{report.get('kinds') or 'all'}): pass --report-name to start a report of its own"
        )
    if report is not None and report.get("checkpoints") != list(args.checkpoints):
        raise SystemExit(
            f"{path} takes its picks after {report.get('checkpoints')} trials, not {list(args.checkpoints)}: "
            "pass --report-name to start a report of its own"
        )
    if report is not None and report.get("seeds") != args.seeds:
        print(f"{path} holds other seeds ({report.get('seeds')}): measuring every operator again", flush=True)
        report = None  # the work dirs keep every tuning, so only the picks are re-timed
    if report is None:
        report = {"rows": []}
    operators = _operators(networks, per_network, target, tuple(kinds) if kinds else None)
    if not operators:
        of_kinds = f" of the kinds {', '.join(kinds)}" if kinds else ""
        parser.error(f"no operator{of_kinds} in {', '.join(networks)}")
    report.update(
        {
            "dev": args.dev,
            "networks": list(networks),
            "kinds": kinds,
            "checkpoints": list(args.checkpoints),
            "arms": list(args.arms),
            "rounds": args.rounds,
            "seeds": args.seeds,
            "planned": [[network, task.task_name] for network, task, _ in operators],
            **run_context(pack, target),
            "also_packs": {label: pack_context(other) for label, other in also_packs.items()},
        }
    )
    rows = {(r["network"], r["task"]): r for r in report["rows"]}
    todo = [(n, t, f) for n, t, f in operators if args.retime or (n, t.task_name) not in rows]
    for network, task, facts in todo:
        print(
            f"\n== {network}: {task.task_name} ({facts['kind']}, {facts['share']:.1%} of the work)",
            flush=True,
        )
        earlier = rows.get((network, task.task_name))
        row = _measure_operator(network, task, facts, pack, work_root, target, args, earlier)
        rows[network, task.task_name] = row
        report["rows"] = list(rows.values())
        report["summary"] = _summary(report)
        write_report("transfer", name, report, _markdown(report), args.quick)
    if not todo:  # nothing left to measure: re-draw the table
        report["summary"] = _summary(report)
        write_report("transfer", name, report, _markdown(report), args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
