"""Transfer on whole networks a transfer pack never saw: tuning with the pack (the default policy) against
TVM alone (``--no-transfer``: MetaSchedule's ``XGBModel``, evolutionary search), side by side in one run.

Every (network, arm) is tuned in its own work dir to each budget in turn, as a user asking for that many
trials would; at every budget the arms are built as ``compile`` builds them (re-picked: each heavy task
from the fastest of its top records re-timed together, :mod:`tvm_transfer.tuning.repick`) and timed
together in interleaved rounds (fastest kept), with PyTorch eager, ``torch.compile`` and ONNX Runtime at
the first and the last budget. The per-batch round
logs of the work dirs give the estimated-latency curves. Every finished point is saved at once: the run
resumes where it stopped, and the tables say which budgets were reached.

The networks are held out: the pack's manifest must list them as excluded (``tenset-tools pack
--exclude-network``), or the run refuses. ``--dev`` is the development study that chose the default
policy: every policy of :class:`~tvm_transfer.transfer.policy.TransferPolicy` on development networks, which
the pack must not hold either. ``--in-pack`` is the opposite case: a network the pack holds, measured on this
machine's target, so that all its tasks but few are exact matches. It compares TVM alone, the default
policy (an exact match tuned on once the run has more trials per task than the pack measured of it) and
the default policy with every exact match final (``exact-final``). ``--new-cpu`` is a network of the pack on
a CPU the pack never measured (``--pack``: one without this CPU's pass): no exact match, every task's
workload measured on other targets. It compares TVM alone, the default policy (each task's first batch
measures the pack's records of its workload from other targets) and the default policy without them
(``no-other-targets``). ``--blend`` compares the guard's two blends within the default policy as it was
before its seeds (:data:`UNSEEDED_POLICY`), by rank (``transfer-rank``) and linear (``transfer-linear``),
beside TVM alone on development networks the pack never held (``benchmarks.corpus.DEV_NETWORKS``; they
need not be listed as excluded). ``--seeds-once`` adds to that study's work dirs that policy with a first
batch of the pack's seeds (``transfer-seeds-once``: ``seed_search=True, keep_seeds=False``, now the
default), timed beside its other two arms. ``--task-order`` compares the default policy, whose first
round visits a network's tasks heaviest first, with the same policy in MetaSchedule's extraction order
(``transfer-extraction-order``), beside TVM alone, on the development networks at budgets below their task
counts. ``--dev-default`` is the default policy beside TVM alone on the development
networks, the one with larger weights included.

``--also-pack LABEL=PATH`` compares packs: every transfer arm is also tuned with the pack at PATH, as arm
``<arm>@LABEL``, and timed beside the others (the first pack is ``--pack``). ``--redo-arm transfer@LABEL``
adds that arm to a report measured without the pack, at every budget it holds, beside the other arms as
they stood: a grown pack is judged against the runs of the pack before it without tuning them again.

    nice -n 19 python -m benchmarks.transfer_networks > work/bench_transfer.log 2>&1 &    # resumable
    nice -n 19 python -m benchmarks.transfer_networks --report-name transfer_networks_znver3 ...  # other CPU
    nice -n 19 python -m benchmarks.transfer_networks --dev --pack PACK > work/bench_dev.log 2>&1 &
    nice -n 19 python -m benchmarks.transfer_networks --in-pack > work/bench_in_pack.log 2>&1 &
    nice -n 19 python -m benchmarks.transfer_networks --new-cpu --pack PACK > work/bench_new_cpu.log 2>&1 &
    nice -n 19 python -m benchmarks.transfer_networks --blend > work/bench_blend.log 2>&1 &
    nice -n 19 python -m benchmarks.transfer_networks --seeds-once --timing-runs 2 > work/seeds.log 2>&1 &
    nice -n 19 python -m benchmarks.transfer_networks --task-order > work/bench_task_order.log 2>&1 &
    nice -n 19 python -m benchmarks.transfer_networks --dev-default --pack OLD --also-pack grown=NEW ...
    nice -n 19 python -m benchmarks.transfer_networks --also-pack grown=NEW --redo-arm transfer@grown ...
    python -m benchmarks.transfer_networks --quick       # smoke: mlp block at 8 and 16 trials
    python -m benchmarks.transfer_networks --report-only

``--redo-arm transfer`` measures one arm again at every budget of the report (of the ``--networks`` and
``--seeds`` given), e.g. after a policy change: the arm is tuned afresh (its old work dirs are moved aside
to ``<arm>.before-<tag>``, ``--redo-tag``, default ``redo``; a new tag redoes an arm redone before) and the
other arms, not tuned again, are compiled from the first N records of their work dirs (N: their trials at
that budget; a record file is append-only, so that is the work dir as it stood then), all timed side by
side as before. A redone point says so (``redone``: the arm, with ``@tag`` for a tag other than
``redo``); the redo resumes like the first run.

``--retime TAG`` builds and times every point again without tuning, every arm from the first records of
its work dir as above: the effect of a change of the compiler alone (e.g. ``--retime fast-math``) on the
same schedules. Retimed points are marked with the tag and keep only their new timing; the retime resumes.

``--reach`` measures the trials each arm needs to reach TVM alone's latency at the largest budget side by
side: per network and seed, every other arm at every budget and no-transfer at the largest one are
built as they stood (first records, as above) and timed together in the same interleaved rounds, topped up
to ``--timing-runs`` such runs (fastest kept, resumable). The table's points are timed at different times,
and the records' sums carry the host's speed when each best was measured; only builds timed together
compare within the noise band.

A point's latency is the fastest of ``--timing-runs`` independent timing runs of the same schedules (each
builds every arm afresh and times all of them, with the references, in interleaved rounds): on a shared
machine the same builds time several percent apart from one run to the next, as its speed changes, so
one run alone can decide a comparison within the goals' noise band. A run tops every point up to that
many timing runs (resumable, saved after each); a new tuning or a retime starts a point's timings again.

Tuning itself varies more than timing: the same arm tuned again with another seed (``--seeds``, the
search's and the cost model's random state) picks other schedules, and the network latency moves by
several percent. Every seed is a whole run of its own, in its own work dirs (seed 0 in
``<network>/<arm>``, seed ``s`` in ``<network>-seed<s>/<arm>``); a table row is the geometric mean over the
seeds that reached its budget, its ratio the geometric mean of the seeds' ratios (each seed's in brackets).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import shutil
import tempfile
import time
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import (
    StolenCpu,
    geomean,
    git_commit,
    network_axes,
    report_path,
    save_figure,
    write_report,
)
from benchmarks.corpus import DEV_LARGE_WEIGHTS, DEV_NETWORKS, HELD_OUT
from benchmarks.transfer_common import (
    REFERENCES,
    add_also_pack_argument,
    also_packs_lines,
    arms_with_packs,
    check_held_out,
    check_in_pack,
    load_resumable,
    open_also_packs,
    pack_context,
    run_context,
    time_work_dirs,
)
from tenset_tools.metaschedule import RECORD_FILE, WORKLOAD_FILE
from tvm_transfer.networks import load_model, model_slug, split_model_names
from tvm_transfer.runtimes import RUNTIMES
from tvm_transfer.target import host_target
from tvm_transfer.transfer import DEFAULT_PACK
from tvm_transfer.transfer.guard import GuardedCostModel
from tvm_transfer.transfer.pack import TransferPack
from tvm_transfer.transfer.policy import DEFAULT_POLICY, TransferPolicy
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.repick import DEFAULT_REPICK
from tvm_transfer.tuning.rounds import read_rounds
from tvm_transfer.tuning.run import RunConfig
from tvm_transfer.tuning.session import TuneOptions


@dataclass(frozen=True)
class Study:
    """One comparison of this benchmark: its report ``name``, ``title``, work-dir ``folder``, networks,
    budgets, arms (name -> policy; ``None``: TVM alone) and seeds. ``pack_holds``: what the pack must hold
    of the networks: nothing (``none``: held out, listed as excluded; ``absent``: development networks,
    only missing from it), their tasks measured on this machine's target (``this-target``: exact
    matches), or measured on other targets only (``other-targets``)."""

    name: str
    title: str
    folder: str
    networks: tuple[str, ...]
    budgets: tuple[int, ...]
    arms: dict[str, TransferPolicy | None]
    seeds: tuple[int, ...] = (0,)
    pack_holds: str = "none"


BUDGETS = (50, 100, 200, 400, 1000, 2000)
ARMS = {"no-transfer": None, "transfer": DEFAULT_POLICY}
#: The policy parts as the first study chose among them: no fine-tuning, a rank blend, seeds in every
#: evolution.
FIRST_PARTS = {"fine_tune": False, "blend": "rank", "keep_seeds": True}
DEV_ARMS = {
    "no-transfer": None,
    "model": TransferPolicy(seed_search=False, **FIRST_PARTS),
    "seeds": TransferPolicy(pretrained_model=False, **FIRST_PARTS),
    "model+seeds": TransferPolicy(**FIRST_PARTS),
}
#: The default policy before its first batch of seeds, which the blend and seeds-once studies measured.
UNSEEDED_POLICY = TransferPolicy(seed_search=False)
#: The blend study's arms; the seeds-once study tunes beside the first two of them, in the same work dirs.
BLEND_ARMS = {
    "no-transfer": None,
    "transfer-rank": dataclasses.replace(UNSEEDED_POLICY, blend="rank"),
    "transfer-linear": UNSEEDED_POLICY,
}
STUDIES = {
    # Held out: tuned with two seeds.
    "held-out": Study("transfer_networks", "Transfer, held out", "held-out", HELD_OUT, BUDGETS, ARMS, (0, 1)),
    # The development study that chose the policy's parts, with a pack built without its networks (the
    # shipped pack holds MobileNet-V3): newer development studies use benchmarks.corpus.DEV_NETWORKS.
    "dev": Study(
        "transfer_dev",
        "Transfer policy study (development networks)",
        "dev",
        ("torchvision:mobilenet_v3_large", "bert_mini_layer"),
        (50, 100, 200),
        DEV_ARMS,
    ),
    # A network of the pack on its own target: every task but few is an exact match, applied with 0 trials
    # and final unless the run has more trials per task than the pack measured of it.
    "in-pack": Study(
        "transfer_in_pack",
        "Transfer on a network of the pack (exact matches)",
        "in-pack",
        ("torchvision:mobilenet_v2",),
        (200, 1000, 2000),
        {**ARMS, "exact-final": dataclasses.replace(DEFAULT_POLICY, refine_exact=False)},
        pack_holds="this-target",
    ),
    # The same network on a CPU the pack never measured: no exact match, every task measured elsewhere.
    "new-cpu": Study(
        "transfer_new_cpu",
        "Transfer on a network of the pack, to a CPU the pack never measured",
        "new-cpu",
        ("torchvision:mobilenet_v2",),
        (50, 100, 200, 400),
        {**ARMS, "no-other-targets": dataclasses.replace(DEFAULT_POLICY, measure_other_targets=False)},
        pack_holds="other-targets",
    ),
    # The guard's blend within the default policy, by rank or linear, on development networks.
    "blend": Study(
        "transfer_blend_dev",
        "The guard's blend, by rank or linear (development networks)",
        "blend",
        DEV_NETWORKS,
        (100,),
        BLEND_ARMS,
        (0, 1),
        pack_holds="absent",
    ),
    # The blend study's linear arm with a first batch of the pack's seeds (its nearest tasks' best
    # schedules, then copula samples), later evolutions from the measured bests; the blend study's work
    # dirs hold the other two arms, tuned already.
    "seeds-once": Study(
        "transfer_seeds_dev",
        "A first batch of the pack's seeds (development networks)",
        "blend",
        DEV_NETWORKS,
        (100,),
        {
            "no-transfer": BLEND_ARMS["no-transfer"],
            "transfer-linear": BLEND_ARMS["transfer-linear"],
            "transfer-seeds-once": dataclasses.replace(
                BLEND_ARMS["transfer-linear"], seed_search=True, keep_seeds=False
            ),
        },
        (0, 1),
        pack_holds="absent",
    ),
    # The default policy's first round over a network's tasks, heaviest first against extraction order
    # (as MetaSchedule visits them), at budgets that leave some of the development networks' tasks
    # (35 and 18) without a trial.
    "task-order": Study(
        "transfer_task_order_dev",
        "Tasks heaviest first in the first round (development networks)",
        "task-order",
        DEV_NETWORKS,
        (16, 32),
        {**ARMS, "transfer-extraction-order": dataclasses.replace(DEFAULT_POLICY, tasks_by_work=False)},
        pack_holds="absent",
    ),
    # The default policy beside TVM alone on the development networks, the larger-weights one included;
    # with --also-pack, the default policy with a second pack too (e.g. the pack grown by a network).
    "dev-default": Study(
        "transfer_default_dev",
        "The default policy (development networks)",
        "dev-default",
        (*DEV_NETWORKS, *DEV_LARGE_WEIGHTS),
        (100, 200, 400),
        ARMS,
        pack_holds="absent",
    ),
    "quick": Study(
        "transfer_networks", "Transfer (smoke run)", "quick", ("bert_tiny_layer",), (8, 16), DEV_ARMS
    ),
}

#: How the reports say what the pack holds of their networks (``Study.pack_holds``).
PACK_HOLDS = {
    "none": "excluded from the pack",
    "absent": "not in the pack (development networks)",
    "this-target": "of the pack, measured on this target",
    "other-targets": "of the pack, measured on other targets only",
}

#: Within this ratio of the no-transfer latency, transfer counts as reaching it (timing noise).
NOISE = 1.03


def _seed(point: dict) -> int:
    """The tuning seed of ``point`` (points saved before seeds were kept are seed 0)."""
    return point.get("seed", 0)


def _network_root(work_root: Path, network: str, seed: int) -> Path:
    """The folder of ``network``'s arm work dirs tuned with ``seed``."""
    return work_root / (model_slug(network) if seed == 0 else f"{model_slug(network)}-seed{seed}")


def _tune_arm(network: str, policy, pack, budget: int, seed: int, work_dir: Path, target) -> dict:
    """Tune one arm of ``network`` (``policy``; ``None``: TVM alone) up to ``budget`` trials; what it took."""
    options = TuneOptions(trials=budget, seed=seed, progress=True)
    start = time.perf_counter()
    fresh = not (work_dir / RECORD_FILE).exists()
    # TVM alone: no pack, so TVM's model, search and task order, whatever the policy.
    plan = policy.plan(pack, options) if policy is not None else DEFAULT_POLICY.plan(None, options)
    result = tune_network(
        RunConfig.make(load_model(network), work_dir, target=target, options=options, plan=plan)
    )
    rounds = read_rounds(work_dir)
    cost_model = plan.cost_model
    guarded = isinstance(cost_model, GuardedCostModel)
    return {
        "trials": rounds[-1]["trials"] if rounds else 0,
        "new_trials": result.new_trials,
        "tune_seconds": time.perf_counter() - start,
        "from_pack": len(result.from_pack),
        "tasks": len(result.tasks),
        "estimated_ms": result.weighted_latency * 1e3 if math.isfinite(result.weighted_latency) else None,
        # A call that resumes a work dir first shows the guard the earlier records: not batches of its own.
        **({"guard_weights": _weight_shares(cost_model)} if guarded and fresh else {}),
    }


def _weight_shares(guard: GuardedCostModel) -> dict[str, int]:
    """How many of the batches ``guard`` judged in a tuning call from an empty work dir left their task
    ranked by the pretrained model alone (weight 1), by both (blended) or by the online model alone
    (weight 0)."""
    weights = [d.weight for d in guard.decisions_]
    return {
        "pretrained": sum(w >= 1.0 for w in weights),
        "blended": sum(0.0 < w < 1.0 for w in weights),
        "online": sum(w <= 0.0 for w in weights),
    }


def _first_records(work_dir: Path, count: int, into: Path) -> Path:
    """A copy of ``work_dir``'s database in ``into`` holding only its first ``count`` records."""
    into.mkdir(parents=True)
    shutil.copy(work_dir / WORKLOAD_FILE, into / WORKLOAD_FILE)
    with open(work_dir / RECORD_FILE) as source, open(into / RECORD_FILE, "w") as kept:
        for _, line in zip(range(count), source, strict=False):
            kept.write(line)
    return into


def _as_they_stood(
    point: dict, arms: dict, network_root: Path, views: Path, fresh: Collection[str] = ()
) -> dict:
    """Each arm's work dir as it stood at ``point``'s budget: a view of its first records (the records the
    pack applied, one per task and written before any trial, then its trials), or for the ``fresh`` arms
    their own work dirs, just tuned to that budget."""
    return {
        arm: network_root / arm
        if arm in fresh
        else _first_records(network_root / arm, _held(point, arm), views / arm)
        for arm in arms
    }


def _held(point: dict, arm: str) -> int:
    """The records ``arm``'s work dir held at ``point``'s budget: the pack's applied ones, then its trials."""
    return point["arms"][arm]["trials"] + point["arms"][arm]["from_pack"]


def _time_point(
    report: dict,
    point: dict,
    arms: dict,
    work_root: Path,
    target,
    rounds: int,
    fresh: Collection[str] = (),
    again: bool = False,
) -> None:
    """Time every arm of ``point`` as it stood at its budget (with the reference runtimes at the first and
    the last budget); ``again`` adds the timing run to the point's earlier ones of the same schedules,
    otherwise it replaces them. ``point["latency"]`` is then the fastest of its timing runs."""
    network = point["network"]
    with tempfile.TemporaryDirectory() as views:
        root = _network_root(work_root, network, _seed(point))
        dirs = _as_they_stood(point, arms, root, Path(views), fresh)
        references = point["budget"] in (report["budgets"][0], report["budgets"][-1])
        timing = _timing_run(network, dirs, target, rounds, references)
    point["timings"] = [*_current_timings(point), timing] if again else [timing]
    point["latency"] = _fastest(point["timings"])
    point["finished"], point["commit"] = timing["finished"], timing["commit"]


def _timing_run(network: str, dirs: dict[str, Path], target, rounds: int, references: bool) -> dict:
    """One timing run of the builds of ``dirs`` (label -> work dir): their ``latency``
    (:func:`~benchmarks.transfer_common.time_work_dirs`), when it ``finished``, the ``commit`` and the share
    of CPU time stolen by the hypervisor meanwhile (``cpu_stolen``)."""
    with StolenCpu() as stolen:
        latency = time_work_dirs(network, dirs, target, rounds, references)
    return {
        "latency": latency,
        "repick_mode": DEFAULT_REPICK,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "commit": git_commit(short=True),
        "cpu_stolen": stolen.share,
    }


def _timings(point: dict) -> list[dict]:
    """The point's timing runs of its current schedules (a point saved before timing runs were kept has
    one: its latency)."""
    if "timings" in point:
        return point["timings"]
    return [{"latency": point["latency"], "finished": point["finished"], "commit": point["commit"]}]


def _current_timings(point: dict) -> list[dict]:
    """The point's timing runs built as ``compile`` builds now: those a further timing run may join."""
    return _repicked_now(_timings(point))


def _repicked_now(timings: list[dict]) -> list[dict]:
    """The timing runs whose builds were re-picked as :data:`~tvm_transfer.tuning.repick.DEFAULT_REPICK`
    says (a run saved before the modes were recorded was re-picked warm)."""
    return [t for t in timings if t.get("repick_mode", "warm") == DEFAULT_REPICK]


def _fastest(timings: list[dict]) -> dict:
    """Per arm and runtime, the timing run with the lowest latency (its ``ms`` and ``max_abs_error``)."""
    names = {name for timing in timings for name in timing["latency"]}
    fastest = {}
    for name in sorted(names):
        runs = [t["latency"][name] for t in timings if (t["latency"].get(name) or {}).get("ms")]
        fastest[name] = min(runs, key=lambda r: r["ms"]) if runs else {"ms": None, "max_abs_error": None}
    return fastest


def _order(point: dict) -> tuple:
    """Points in the order they are tuned: budget by budget, then network and seed."""
    return point["budget"], point["network"], _seed(point)


def _label(point: dict) -> str:
    """``network: N trials`` (and the seed, when not 0) for progress lines."""
    seed = f", seed {_seed(point)}" if _seed(point) else ""
    return f"{point['network']}: {point['budget']} trials{seed}"


def _named(report: dict) -> list[dict]:
    """The points of the networks and seeds this run names (``--networks``, ``--seeds``), in tuning order."""
    networks, seeds = set(report["networks"]), set(report["seeds"])
    named = [p for p in report["points"] if p["network"] in networks and _seed(p) in seeds]
    return sorted(named, key=_order)


def _time_again(report: dict, arms: dict, work_root: Path, target, args, save) -> None:
    """Time every named point until it has ``args.timing_runs`` timing runs of its current schedules."""
    for point in _named(report):
        while len(_current_timings(point)) < args.timing_runs:
            print(
                f"\n== {_label(point)}, timing run {len(_current_timings(point)) + 1} of {args.timing_runs}",
                flush=True,
            )
            _time_point(report, point, arms, work_root, target, args.rounds, again=True)
            save()


def _set_aside(work_dir: Path, tag: str) -> None:
    """Move ``work_dir`` aside to ``<name>.before-<tag>`` when a redo under ``tag`` begins; an arm new to
    the report leaves an empty one. Once only: a resumed redo finds it and keeps its own work dir."""
    aside = work_dir.with_name(f"{work_dir.name}.before-{tag}")
    if aside.exists():
        return
    if work_dir.exists():
        work_dir.rename(aside)
    else:
        aside.mkdir(parents=True)


def _redo(
    report: dict, arm: str, tag: str, arms: dict, arm_packs: dict, work_root: Path, target, args, save
) -> None:
    """Measure ``arm`` (tuned with its pack in ``arm_packs``) again at every named point not yet redone under
    ``tag``, beside the other arms as they stood at that budget (see the module docstring)."""
    mark = arm if tag == "redo" else f"{arm}@{tag}"
    points = _named(report)
    for network, seed in {(p["network"], _seed(p)) for p in points}:
        _set_aside(_network_root(work_root, network, seed) / arm, tag)
    for point in points:
        if mark in point.get("redone", []):
            continue
        network, budget, seed = point["network"], point["budget"], _seed(point)
        print(f"\n== {_label(point)}, {arm} again ({tag})", flush=True)
        work_dir = _network_root(work_root, network, seed) / arm
        point["arms"][arm] = _tune_arm(network, arms[arm], arm_packs[arm], budget, seed, work_dir, target)
        _time_point(report, point, arms, work_root, target, args.rounds, fresh={arm})
        point["redone"] = [*point.get("redone", []), mark]
        save()


def _retime(report: dict, tag: str, arms: dict, work_root: Path, target, args, save) -> None:
    """Build and time every point of ``report`` not yet retimed under ``tag`` again, every arm as it stood
    at that budget, without tuning (see the module docstring)."""
    for point in _named(report):
        if point.get("retimed") == tag:
            continue
        print(f"\n== {_label(point)}, timed again ({tag})", flush=True)
        _time_point(report, point, arms, work_root, target, args.rounds)
        point["retimed"] = tag
        save()


def _reach_builds(report: dict, network: str, seed: int) -> dict[str, tuple[str, int]]:
    """The builds of ``--reach`` for ``network`` and ``seed``: label ``ARM@BUDGET`` -> (arm, records as it
    stood then) for every other arm at every budget up to the largest one reached, and the no-transfer arm
    at that budget (``{}`` before any point)."""
    points = sorted((p for p in report["points"] if p["network"] == network and _seed(p) == seed), key=_order)
    if not points or "no-transfer" not in points[-1]["arms"]:
        return {}
    last = points[-1]
    builds = {
        f"{arm}@{p['budget']}": (arm, _held(p, arm))
        for p in points
        for arm in report["arms"]
        if arm != "no-transfer" and _tuned(p, arm)
    }
    builds[f"no-transfer@{last['budget']}"] = ("no-transfer", _held(last, "no-transfer"))
    return builds


def _reach(report: dict, work_root: Path, target, args, save) -> None:
    """Time every arm at every budget beside no-transfer at the largest one, in the same interleaved
    rounds, until each network and seed has ``args.timing_runs`` such runs (see the module docstring)."""
    for network in report["networks"]:
        for seed in report["seeds"]:
            builds = _reach_builds(report, network, seed)
            if not builds:
                continue
            counts = {label: count for label, (_, count) in builds.items()}
            entry = report.setdefault("reach", {}).setdefault(network, {}).setdefault(str(seed), {})
            if entry.get("builds") != counts:  # tuned on since: the earlier timings are of other builds
                entry.update(builds=counts, timings=[])
            entry["timings"] = _repicked_now(entry["timings"])
            while len(entry["timings"]) < args.timing_runs:
                print(
                    f"\n== {network}, seed {seed}: side by side, timing run {len(entry['timings']) + 1} "
                    f"of {args.timing_runs}",
                    flush=True,
                )
                root = _network_root(work_root, network, seed)
                with tempfile.TemporaryDirectory() as views:
                    dirs = {
                        label: _first_records(root / arm, count, Path(views) / label)
                        for label, (arm, count) in builds.items()
                    }
                    entry["timings"].append(_timing_run(network, dirs, target, args.rounds, references=False))
                save()


def _reach_line(report: dict, network: str) -> str:
    """The Markdown lines of ``--reach`` for ``network``: per seed, every build's latency (the fastest of
    its timing runs) over no-transfer's at the largest budget, and each arm's smallest budget within
    :data:`NOISE` of it (empty when not timed)."""
    lines = []
    for seed, entry in sorted((report.get("reach") or {}).get(network, {}).items(), key=lambda e: int(e[0])):
        if not entry.get("timings"):
            continue
        bar_label = next(label for label in entry["builds"] if label.startswith("no-transfer@"))
        fastest = _fastest(entry["timings"])
        bar = fastest[bar_label]["ms"]
        if not bar:
            continue
        cells = [
            f"{label} {ms:.3f} ms ({ms / bar:.3f})" if (ms := fastest[label]["ms"]) else f"{label} failed"
            for label in entry["builds"]
        ]
        each_run = [_reached_beside(report, run["latency"], bar_label) for run in entry["timings"]]
        per_run = {arm: ", ".join(_budget_text(r[arm]) for r in each_run) for arm in each_run[0]}
        summary = ", ".join(
            f"{arm} {_budget_text(budget)} (per timing run: {per_run[arm]})"
            for arm, budget in _reached_beside(report, fastest, bar_label).items()
        )
        runs, stolen = len(entry["timings"]), _stolen(entry["timings"])
        lines.append(
            f"Side by side (`--reach`), seed {seed}: every budget built as it stood and timed beside "
            f"no-transfer at its largest budget in {report['rounds']} interleaved rounds, the fastest of "
            f"{runs} timing run(s) (CPU stolen % per run: {stolen}); in brackets the ratio to "
            f"{bar_label}: {'; '.join(cells)}. Smallest budget within {NOISE:.2f}x: {summary}."
        )
    return "\n\n".join(lines)


def _reached_beside(report: dict, latency: dict, bar_label: str) -> dict[str, int | None]:
    """Per arm other than no-transfer with builds in ``latency`` (label -> ``{"ms"}``; an arm added to the
    report since was not timed), the smallest budget of its ``--reach`` builds within :data:`NOISE` of
    ``bar_label``'s (``None``: not reached)."""
    builds = [
        (arm, int(budget), latency[label]["ms"])
        for label in latency
        for arm, budget in [label.rsplit("@", 1)]
    ]
    return {
        arm: _first_within([(budget, ms) for a, budget, ms in builds if a == arm], latency[bar_label]["ms"])
        for arm in report["arms"]
        if arm != "no-transfer" and any(a == arm for a, _, _ in builds)
    }


def _first_within(latencies: list[tuple[int, float | None]], bar: float | None) -> int | None:
    """The smallest budget of ``(budget, ms)`` pairs whose latency is within :data:`NOISE` of ``bar`` (ms);
    ``None`` when none is, or there is no bar. A missing latency (``None``: failed or not timed) never
    reaches."""
    hits = [budget for budget, ms in latencies if bar and ms and ms <= bar * NOISE]
    return min(hits, default=None)


def _budget_text(budget: int | None) -> str:
    return "not reached" if budget is None else str(budget)


def _rows(report: dict, network: str, seed: int | None = None) -> list[dict]:
    """``network``'s budgets in order, each a row over the seeds that reached it (only ``seed``'s points,
    when given): its ``points``, the geometric mean ``ms`` of every arm and runtime timed in all of them
    (``None`` otherwise), and per arm the ``ratios`` of each seed's latency to its no-transfer latency."""
    mine = [p for p in report["points"] if p["network"] == network and seed in (None, _seed(p))]
    rows = []
    for budget in sorted({p["budget"] for p in mine}):
        points = sorted((p for p in mine if p["budget"] == budget), key=_seed)
        ms = {}
        for name in {name for p in points for name in p["latency"]}:
            values = [(p["latency"].get(name) or {}).get("ms") for p in points]
            ms[name] = geomean(values) if all(values) else None
        ratios = {
            arm: [p["latency"][arm]["ms"] / p["latency"]["no-transfer"]["ms"] for p in points]
            if all((p["latency"].get(a) or {}).get("ms") for p in points for a in (arm, "no-transfer"))
            else None
            for arm in report["arms"]
        }
        rows.append({"budget": budget, "points": points, "ms": ms, "ratios": ratios})
    return rows


def _reached(report: dict, rows: list[dict]) -> dict[str, int | None]:
    """Per arm, the smallest budget of ``rows`` whose compiled latency is within :data:`NOISE` of the
    no-transfer arm's at the last row's budget (``None``: not reached)."""
    if not rows:
        return {}
    goal = rows[-1]["ms"].get("no-transfer")
    return {
        arm: _first_within([(r["budget"], r["ms"].get(arm)) for r in rows], goal) for arm in report["arms"]
    }


def _reached_line(report: dict, network: str, rows: list[dict]) -> str:
    """Per arm, the smallest budget reaching no-transfer's latency at the largest budget: over the
    geometric means of the seeds, then each seed alone (when several reached the largest budget)."""
    seeds = [_seed(p) for p in rows[-1]["points"]]
    overall = {arm: _budget_text(b) for arm, b in _reached(report, rows).items()}
    if len(seeds) > 1:
        each = [_reached(report, _rows(report, network, seed)) for seed in seeds]
        per_seed = {
            arm: ", ".join(f"seed {s}: {_budget_text(e[arm])}" for s, e in zip(seeds, each, strict=True))
            for arm in overall
        }
        overall = {arm: f"{v} ({per_seed[arm]})" for arm, v in overall.items()}
    return ", ".join(f"{arm} {v}" for arm, v in overall.items())


def _against_others(report: dict, row: dict) -> str:
    """Each arm's latency over the fastest other runtime timed in the same point (per seed: the same
    timing runs), the geometric mean over the row's seeds, then each seed's."""
    parts = []
    for arm in report["arms"]:
        ratios = []
        for point in row["points"]:
            others = [(point["latency"].get(RUNTIMES[k]) or {}).get("ms") for k in REFERENCES]
            others = [v for v in others if v]
            mine = (point["latency"].get(arm) or {}).get("ms")
            if others and mine:
                ratios.append(mine / min(others))
        if ratios:
            each = f" ({', '.join(f'{r:.2f}' for r in ratios)})" if len(ratios) > 1 else ""
            parts.append(f"{arm} {geomean(ratios):.2f}x{each}")
    return ", ".join(parts)


def _cell(row: dict, arm: str) -> str:
    """An arm's latency in a row, with its ratio to no-transfer (and each seed's, when several); ``-`` while
    the arm has not reached it."""
    value, ratios = row["ms"].get(arm), row["ratios"][arm]
    if not all(_tuned(p, arm) for p in row["points"]):
        return "-"
    if not value:
        return "failed"
    if not ratios or arm == "no-transfer":
        return f"{value:.3f}"
    each = f": {', '.join(f'{r:.3f}' for r in ratios)}" if len(ratios) > 1 else ""
    return f"{value:.3f} ({geomean(ratios):.3f}{each})"


def _tuned(point: dict, arm: str) -> dict:
    """What tuning ``arm`` at ``point`` took (``{}`` while an arm added by ``--redo-arm`` has not reached
    the point yet)."""
    return point["arms"].get(arm, {})


def _over_records(points: list[dict], arm: str) -> str:
    """The arm's timed latency over its sum of best records (``estimated_ms``), geometric mean over the
    points; ``-`` when a point lacks either."""
    ratios = [
        p["latency"][arm]["ms"] / p["arms"][arm]["estimated_ms"]
        for p in points
        if (p["latency"].get(arm) or {}).get("ms") and _tuned(p, arm).get("estimated_ms")
    ]
    return f"{geomean(ratios):.2f}" if ratios and len(ratios) == len(points) else "-"


def _stolen(timings: list[dict]) -> str:
    """Each timing run's share of CPU time stolen by the hypervisor, in percent (``-`` where not
    recorded)."""
    shares = [t.get("cpu_stolen") for t in timings]
    return ", ".join("-" if share is None else f"{100 * share:.0f}" for share in shares)


def _fastest_other(points: list[dict]) -> tuple[str, float] | None:
    """The other runtime (PyTorch, ONNX Runtime) fastest at any of ``points`` and its latency (ms), or
    ``None`` when none was timed."""
    names = [RUNTIMES[k] for k in REFERENCES]
    timed = [(name, v["ms"]) for p in points for name in names if (v := p["latency"].get(name)) and v["ms"]]
    return min(timed, key=lambda item: item[1], default=None)


def _markdown(report: dict) -> str:
    arms = report["arms"]
    lines = [
        f"# {report['title']}",
        "",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores; "
        f"target `{report['target']}`;"
        f" pack `{report['pack']['path']}` ({report['pack']['describe']}). Networks "
        + PACK_HOLDS[report.get("pack_holds") or ("this-target" if report.get("in_pack") else "none")]
        + f": {', '.join(report['networks'])}. Latency of the compiled network (ms): per tuning seed, the "
        "fastest of the point's timing runs (how many: their column), each building every arm afresh and "
        f"timing all of them (and the other runtimes) in {report['rounds']} interleaved rounds, fastest "
        "kept; the geometric mean over the seeds that reached the budget. In brackets the ratio to "
        "no-transfer at the same budget: the geometric mean over seeds, then each seed's. Timed / records: "
        "each arm's latency over the sum of its tasks' best measured records weighted by calls (geometric "
        "mean over seeds); well above 1 when the host was busy during the timing. CPU stolen: the share of "
        "CPU time the hypervisor gave other guests during each timing run (- where not recorded).",
        "",
    ]
    lines += also_packs_lines(report)
    for network in report["networks"]:
        rows = _rows(report, network)
        points = [p for row in rows for p in row["points"]]
        lines += [f"## {network}", ""]
        if not rows:
            lines += ["not reached", ""]
            continue
        header = " | ".join(f"{a} ms" for a in arms)
        lines += [
            f"| budget | {header} | seeds | trials (per arm) | from pack | timing runs | timed / records "
            "(per arm) | CPU stolen % (per run) |"
        ]
        lines += ["|---|" + "---|" * len(arms) + "---|---|---|---|---|---|"]
        for row in rows:
            cells = " | ".join(_cell(row, arm) for arm in arms)
            seeds = ", ".join(str(_seed(p)) for p in row["points"])
            trials = ", ".join(
                str(max((_tuned(p, a)["trials"] for p in row["points"] if _tuned(p, a)), default="-"))
                for a in arms
            )
            from_pack = max(_tuned(p, a).get("from_pack", 0) for p in row["points"] for a in arms)
            runs = ", ".join(str(len(_timings(p))) for p in row["points"])
            over_records = ", ".join(_over_records(row["points"], arm) for arm in arms)
            lines.append(
                f"| {row['budget']} | {cells} | {seeds} | {trials} | {from_pack} | {runs} | {over_records} "
                f"| {_stolen([t for p in row['points'] for t in _timings(p)])} |"
            )
        redone = sorted({(a, _seed(p)) for p in points for a in p.get("redone", [])})
        if redone:
            lines.append(
                "\nTuned again beside the other arms as they stood at each budget: "
                + ", ".join(f"{a} (seed {seed})" for a, seed in redone)
                + "."
            )
        retimed = sorted({(p["retimed"], _seed(p)) for p in points if "retimed" in p})
        if retimed:
            lines.append(
                "\nBuilt and timed again without tuning, every arm as it stood at each budget: "
                + ", ".join(f"{tag} (seed {seed})" for tag, seed in retimed)
                + "."
            )
        lines.append(f"\n{_repicked_line(points, arms)}")
        guard = _guard_line(points, arms)
        if guard:
            lines.append(f"\n{guard}")
        present = {(p["budget"], _seed(p)) for p in points}
        for seed in report.get("seeds", [0]):
            missing = [b for b in report["budgets"] if (b, seed) not in present]
            if missing:
                lines.append(f"\nSeed {seed}: budgets not reached yet: {', '.join(map(str, missing))}.")
        fastest = _fastest_other(points)
        if fastest is not None:
            name, best = fastest
            lines.append(f"\nBest non-TVM runtime: {name} {best:.3f} ms.")
            # Other runtimes are timed at the first and last budgets only: the last row that timed them.
            beside = (
                (row["budget"], text) for row in reversed(rows) if (text := _against_others(report, row))
            )
            if (last := next(beside, None)) is not None:
                budget, against = last
                lines[-1] += (
                    f" At {budget} trials, against the fastest other runtime timed beside it: {against}."
                )
        lines.append(
            f"\nSmallest budget within {NOISE:.2f}x of no-transfer's latency at "
            f"{rows[-1]['budget']} trials: {_reached_line(report, network, rows)}"
        )
        by_records = _reached_by_records_line(report, network)
        if by_records:
            lines.append(f"\n{by_records}")
        reach = _reach_line(report, network)
        if reach:
            lines.append(f"\n{reach}")
        lines.append("")
    return "\n".join(lines) + "\n"


def _reached_by_records(report: dict, work_root: Path) -> dict:
    """Per network and seed (as a string), the trials after which each arm's sum of best records weighted
    by calls first came within :data:`NOISE` of no-transfer's at its largest budget reached (``bar_ms``
    at ``bar_budget``), read from the arms' round logs up to that budget (``None``: not reached; a network
    or seed without its work dirs is left out)."""
    out: dict = {}
    for point in sorted(report["points"], key=_order):  # the last point of each seed sets its bar
        bar = point["arms"]["no-transfer"].get("estimated_ms")
        root = _network_root(work_root, point["network"], _seed(point))
        if bar and root.is_dir():
            reached = {"bar_ms": bar, "bar_budget": point["budget"]}
            for arm in report["arms"]:
                rows = [
                    r
                    for r in read_rounds(root / arm)
                    if r["trials"] <= point["budget"] and r["tasks_with_record"] == len(r["best_ms"])
                ]
                hits = [r["trials"] for r in rows if r["estimated_ms"] and r["estimated_ms"] <= bar * NOISE]
                reached[arm] = hits[0] if hits else None
            out.setdefault(point["network"], {})[str(_seed(point))] = reached
    return out


def _reached_by_records_line(report: dict, network: str) -> str:
    """The Markdown line of :func:`_reached_by_records` for ``network`` (empty when not computed)."""
    seeds = (report.get("reached_by_records") or {}).get(network) or {}
    parts = []
    for seed, reached in sorted(seeds.items(), key=lambda item: int(item[0])):
        arms = ", ".join(
            f"{arm} {reached[arm] if reached[arm] is not None else 'not reached'}" for arm in report["arms"]
        )
        parts.append(f"seed {seed} (bar {reached['bar_ms']:.1f} ms at {reached['bar_budget']}): {arms}")
    if not parts:
        return ""
    return (
        f"By the records' sums instead (the round logs, trial by trial), trials to come within {NOISE:.2f}x "
        "of no-transfer's sum at its largest budget: " + "; ".join(parts) + "."
    )


def _repicked_line(points: list[dict], arms: list[str]) -> str:
    """How many of ``points`` have latencies of re-picked builds (the heaviest tasks built from the
    fastest of their top records re-timed, as ``compile`` builds), per re-pick mode."""
    modes: dict[str, int] = {}
    for point in points:
        entries = [point["latency"].get(arm) or {} for arm in arms]
        if all("repicked" in entry for entry in entries):
            mode = entries[0].get("repick_mode", "cold" if entries[0].get("repick_cold") else "warm")
            modes[mode] = modes.get(mode, 0) + 1
    counts = ", ".join(f"{mode} {count}" for mode, count in sorted(modes.items())) or "none"
    return (
        "Re-picked builds (each arm's heaviest tasks built from the fastest of their top records re-timed, "
        f"as `compile` builds; by re-pick mode): {counts} of {len(points)} points."
    )


def _guard_line(points: list[dict], arms: list[str]) -> str:
    """What the guard decided in the points' tuning calls from empty work dirs (a point's first budget),
    per arm: the batches after which their task was ranked by the pretrained model alone, by both
    blended, or by the online model alone, and over how many of the points."""
    parts = []
    for arm in arms:
        shares = [p["arms"][arm]["guard_weights"] for p in points if "guard_weights" in _tuned(p, arm)]
        if shares:
            total = {k: sum(s[k] for s in shares) for k in ("pretrained", "blended", "online")}
            parts.append(
                f"{arm} {total['pretrained']} / {total['blended']} / {total['online']} "
                f"({len(shares)} of {len(points)} points)"
            )
    if not parts:
        return ""
    return (
        "Guard, batches after which the task was ranked by the pretrained model / both / the online model: "
        + "; ".join(parts)
        + "."
    )


def _plot(report: dict, work_root: Path, quick: bool) -> None:
    networks = [n for n in report["networks"] if any(p["network"] == n for p in report["points"])]
    if not networks:
        return
    fig, axes = network_axes(networks)
    for ax, network in zip(axes, networks, strict=True):
        rows = _rows(report, network)
        seeds = sorted({_seed(p) for row in rows for p in row["points"]})
        for arm in report["arms"]:
            xs = [r["budget"] for r in rows if r["ms"].get(arm)]
            ys = [r["ms"][arm] for r in rows if r["ms"].get(arm)]
            (line,) = ax.plot(xs, ys, "o-", label=f"{arm} (compiled, mean of seeds)")
            for seed in seeds:
                curve = [
                    (r["trials"], r["estimated_ms"])
                    for r in read_rounds(_network_root(work_root, network, seed) / arm)
                    if r.get("estimated_ms")
                ]
                if curve:
                    ax.plot(*zip(*curve, strict=True), "-", alpha=0.3, color=line.get_color())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("trials")
        ax.set_ylabel("latency (ms)")
    axes[0].legend(fontsize=7)
    save_figure(fig, "transfer", report["name"], quick)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    studies = parser.add_mutually_exclusive_group()
    for flag, what in (
        ("dev", "the policy study on the development networks"),
        ("in-pack", "a network of the pack on its own target (exact matches)"),
        ("new-cpu", "a network of the pack on a CPU the pack never measured (--pack without its pass)"),
        ("blend", "the guard's rank blend against its linear blend, on development networks"),
        ("seeds-once", "the default policy with a first batch of the pack's seeds, on development networks"),
        ("task-order", "the default policy's tasks heaviest first against extraction order, dev networks"),
        ("dev-default", "the default policy beside TVM alone on development networks (see --also-pack)"),
        ("quick", "smoke run: one small block, two budgets"),
    ):
        studies.add_argument(f"--{flag}", dest="study", action="store_const", const=flag, help=what)
    parser.add_argument(
        "--pack", default=str(DEFAULT_PACK), help="the transfer pack (default: the shipped one)"
    )
    parser.add_argument("--networks", help="comma-separated models (default: the study's)")
    parser.add_argument("--budgets", help="comma-separated trial budgets (default: the study's)")
    parser.add_argument(
        "--seeds", help="comma-separated tuning seeds, each a whole run of every arm (default: the study's)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    parser.add_argument(
        "--timing-runs",
        type=int,
        default=3,
        help="independent timing runs per point, each building every arm afresh; the fastest is kept "
        "(default 3)",
    )
    parser.add_argument("--work-root", default="work/bench_transfer", help="root of the work dirs")
    parser.add_argument("--report-only", action="store_true", help="only re-draw table and plot")
    parser.add_argument(
        "--report-name",
        help="results/transfer/<name>.{json,md} (default: the study's); a study on another CPU or pack "
        "gets its own",
    )
    add_also_pack_argument(parser, "; --redo-arm ARM@LABEL adds its arm to a report measured without it")
    parser.add_argument(
        "--redo-arm", help="measure this arm again at every budget of the report, the others as they were"
    )
    parser.add_argument(
        "--redo-tag",
        default="redo",
        help="name of the redo (default 'redo'); a new tag redoes points an earlier redo did already",
    )
    parser.add_argument(
        "--retime",
        metavar="TAG",
        help="build and time every point again without tuning (e.g. after a compiler change), under TAG",
    )
    parser.add_argument(
        "--reach",
        action="store_true",
        help="time every arm at every budget beside no-transfer at the largest one, in the same rounds "
        "(the trials to reach it, side by side; --timing-runs such runs)",
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)

    study, quick = STUDIES[args.study or "held-out"], args.study == "quick"
    networks = tuple(split_model_names(args.networks)) if args.networks else study.networks
    budgets = tuple(int(b) for b in args.budgets.split(",")) if args.budgets else study.budgets
    seeds = tuple(int(s) for s in args.seeds.split(",")) if args.seeds else study.seeds
    target = host_target()
    mcpu = str(target.attrs.get("mcpu", "host"))
    work_root = Path(args.work_root) / study.folder / mcpu
    pack = TransferPack.open(args.pack)
    also_packs = open_also_packs(parser, args.also_pack)
    arms, arm_packs = arms_with_packs(study.arms, pack, also_packs)
    for checked in (pack, *also_packs.values()):
        if study.pack_holds in ("this-target", "other-targets"):
            check_in_pack(checked, networks, target, same_target=study.pack_holds == "this-target")
        elif not quick:
            check_held_out(checked, networks, listed=study.pack_holds == "none")
    name = args.report_name or study.name
    path = report_path("transfer", name, ".json", quick)
    adding = (args.redo_arm or "").partition("@")[2] or None  # a redone ARM@LABEL may add its pack
    report = None if quick else load_resumable(path, pack, target, also_packs, adding=adding)
    if report is None:
        report = {"points": []}
    report.pop("dev", None)  # reports written before studies were named
    report.pop("in_pack", None)  # ... and before `pack_holds`
    report.update(
        {
            "name": name,
            "title": study.title,
            "pack_holds": study.pack_holds,
            "networks": list(networks),
            "budgets": list(budgets),
            "seeds": list(seeds),
            "arms": list(arms),
            "rounds": args.rounds,
            "timing_runs": args.timing_runs,
            **run_context(pack, target),
            "also_packs": {label: pack_context(other) for label, other in also_packs.items()},
        }
    )

    def save() -> None:
        report["reached_by_records"] = _reached_by_records(report, work_root)
        write_report("transfer", name, report, _markdown(report), quick)
        _plot(report, work_root, quick)

    if args.redo_arm:
        if args.redo_arm not in arms or not report["points"]:
            raise SystemExit(
                f"--redo-arm: {args.redo_arm!r} is not an arm of {path} ({list(arms)}) or it has no points"
            )
        _redo(report, args.redo_arm, args.redo_tag, arms, arm_packs, work_root, target, args, save)
    elif args.retime:
        _retime(report, args.retime, arms, work_root, target, args, save)
    elif args.reach:
        _reach(report, work_root, target, args, save)
    elif not args.report_only:
        done = {(p["network"], p["budget"], _seed(p)) for p in report["points"]}
        # Budget by budget over the networks and seeds, so that a run stopped early has every network's
        # small budgets.
        for budget, network, seed in ((b, n, s) for b in budgets for n in networks for s in seeds):
            if (network, budget, seed) in done:
                continue
            point = {"network": network, "budget": budget, "seed": seed}
            print(f"\n== {_label(point)}", flush=True)
            root = _network_root(work_root, network, seed)
            point["arms"] = {
                arm: _tune_arm(network, policy, arm_packs[arm], budget, seed, root / arm, target)
                for arm, policy in arms.items()
            }
            _time_point(report, point, arms, work_root, target, args.rounds, fresh=set(arms))
            report["points"].append(point)
            save()
    if args.report_only:
        save()
    elif not args.reach:
        _time_again(report, arms, work_root, target, args, save)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
