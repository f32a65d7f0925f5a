"""Speed of the guard's blended scoring: one feature extraction for both models against one per model.

While the guard gives both the pretrained and the online model a share, every generation of the
evolutionary search is scored by both. When the two compute the same features (the shipped pack's XGBoost
model and the online XGBoost model do), the guard extracts them once. This benchmark scores one realistic
generation, ``--candidates`` schedules of a conv2d from the evolutionary search's initial population, with

* ``shared``: ``GuardedCostModel.predict``, the blend as tuning runs it;
* ``separate``: the pretrained model's ``predict`` plus the online model's ``predict``, each extracting its
  own features (what a blend cost before the sharing; the rank blend itself is negligible).

The guard is the default policy's, on the shipped pack; its online model first learns from a real
16-trial run of the workload, and its threshold is set so that both models keep a share (the weight does
not change the cost of a blend). Interleaved rounds, the fastest of each kept; the ratio is the result.

Usage: ``python -m benchmarks.guard_speed [--quick]``. Writes ``benchmarks/results/transfer/guard_speed.*``.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import shash2hex

from benchmarks.common import first_generation, git_commit, write_report
from benchmarks.transfer_common import run_context
from tvm_transfer.cost_model.warm_start import warm_start
from tvm_transfer.target import host_target
from tvm_transfer.transfer import DEFAULT_PACK
from tvm_transfer.transfer.guard import GuardedCostModel
from tvm_transfer.transfer.pack import TransferPack
from tvm_transfer.transfer.policy import DEFAULT_POLICY
from tvm_transfer.tuning.operator import tune_workload
from tvm_transfer.tuning.session import TuneOptions, records_of
from tvm_transfer.tuning.workdir import open_database
from tvm_transfer.workloads import make_workload

WORKLOAD = ("conv2d", (1, 14, 14, 256, 256, 3, 1, 1))


def _guard(pack: TransferPack, context: ms.TuneContext, work_dir: str) -> GuardedCostModel:
    """The default policy's guard, its online model taught by the run in ``work_dir``, both models
    keeping a share of the blend and computing the same features."""
    guard = DEFAULT_POLICY.cost_model(pack)
    guard.set_params(threshold=-1.0, margin=2.5)
    warm_start(guard, context, records_of(open_database(work_dir), context.mod))
    weight = guard.weight(shash2hex(context.mod))
    if not 0.0 < weight < 1.0:
        raise SystemExit(f"the guard's weight is {weight}: no blend to time")
    key = guard.pretrained.shared_features_key()
    if key is None or key != guard.online_.shared_features_key():
        raise SystemExit("the pretrained and the online model do not share their features: nothing to time")
    return guard


def main(argv: list[str] | None = None) -> int:
    """Time both arms on one generation and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="128 candidates, 2 rounds")
    parser.add_argument("--candidates", type=int, default=None, help="generation size (default 512)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5)")
    args = parser.parse_args(argv)
    count = args.candidates or (128 if args.quick else 512)
    rounds = args.rounds or (2 if args.quick else 5)
    target = host_target()
    workload = make_workload(*WORKLOAD)
    context, candidates = first_generation(workload, target, count)
    pack = TransferPack.open(DEFAULT_PACK)
    with tempfile.TemporaryDirectory() as work_dir:
        options = TuneOptions(trials=16, trials_per_iter=16, progress=False)
        tune_workload(workload, work_dir, options=options, reference=False)
        guard = _guard(pack, context, work_dir)
    arms = {
        "shared": lambda: guard.predict(context, candidates),
        "separate": lambda: (
            guard.pretrained.predict(context, candidates),
            guard.online_.predict(context, candidates),
        ),
    }
    best = {arm: float("inf") for arm in arms}
    for round_ in range(rounds):
        for arm in list(arms)[:: 1 if round_ % 2 == 0 else -1]:  # alternate which arm goes first
            start = time.perf_counter()
            arms[arm]()
            best[arm] = min(best[arm], time.perf_counter() - start)
    ratio = best["shared"] / best["separate"]
    report = {
        **run_context(pack, target),
        "commit": git_commit(short=True),
        "workload": list(WORKLOAD),
        "candidates": count,
        "rounds": rounds,
        "seconds": best,
        "ratio": ratio,
    }
    markdown = "\n".join(
        [
            "# Guard scoring speed: shared features against one extraction per model",
            "",
            f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores; target "
            f"`{report['target_id']}`; commit {report['commit']}; pack created {report['pack']['created']}. "
            f"One generation of {count} candidates of {WORKLOAD[0]} {WORKLOAD[1]}, fastest of {rounds} "
            "interleaved rounds.",
            "",
            "| arm | seconds | candidates/s |",
            "|---|---|---|",
            *(f"| {arm} | {seconds:.3f} | {count / seconds:.0f} |" for arm, seconds in best.items()),
            "",
            f"Shared / separate: **{ratio:.3f}**.",
            "",
        ]
    )
    write_report("transfer", "guard_speed", report, markdown, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
