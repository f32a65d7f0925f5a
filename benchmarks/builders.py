"""Build overhead of a tuning batch: MetaSchedule's LocalBuilder vs ours, on the same candidates.

Contenders: ``LocalBuilder()`` (MetaSchedule's default: fresh workers per batch, each importing
``tvm.s_tir.tensor_intrin``), ``LocalBuilder(f_build=fast_build)`` (fresh workers, no intrinsic import) and
``PersistentBuilder`` (workers kept across batches, recycled after 64 builds). Every contender builds the
same batches of sampled conv2d candidates in the same process run; failures (time-outs) are counted,
because MetaSchedule stores a failed build as a 1e10 s record the cost model never learns from.

    python -m benchmarks.builders --quick   # 2 batches of 16
    python -m benchmarks.builders           # 6 batches of 16

Writes benchmarks/results/builders/builders.{json,md}.
"""

from __future__ import annotations

import argparse
import logging
import time

from tvm.s_tir import meta_schedule as ms

from benchmarks.common import git_commit, machine_info, write_report
from benchmarks.features import sample
from tvm_transfer.builder import PersistentBuilder, fast_build, import_tensor_intrin_fast
from tvm_transfer.target import host_target, target_id

BATCH = 16


def contenders() -> dict:
    return {
        "LocalBuilder (MetaSchedule default)": ms.builder.LocalBuilder,
        "LocalBuilder(f_build=fast_build)": lambda: ms.builder.LocalBuilder(f_build=fast_build),
        "PersistentBuilder (ours)": PersistentBuilder,
    }


def time_builder(make_builder, batches: list[list[ms.builder.BuilderInput]]) -> dict:
    start = time.perf_counter()
    builder = make_builder()
    failures = 0
    for batch in batches:
        failures += sum(r.error_msg is not None for r in builder.build(batch))
    if isinstance(builder, PersistentBuilder):
        builder.shutdown()
    seconds = time.perf_counter() - start
    built = sum(len(b) for b in batches)
    return {
        "seconds": seconds,
        "seconds_per_candidate": seconds / built,
        "failures": failures,
        "built": built,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 batches instead of 6")
    args = parser.parse_args()
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    import_tensor_intrin_fast()
    target = host_target()
    num_batches = 2 if args.quick else 6
    _, candidates = sample("conv2d", (1, 14, 14, 256, 256, 3, 1, 1), BATCH * num_batches, target)
    inputs = [ms.builder.BuilderInput(c.sch.mod, target) for c in candidates]
    batches = [inputs[i : i + BATCH] for i in range(0, len(inputs), BATCH)]
    figures = {}
    for name, make_builder in contenders().items():
        figures[name] = time_builder(make_builder, batches)
        print(name, figures[name], flush=True)
    baseline = figures["LocalBuilder (MetaSchedule default)"]["seconds"]
    machine = machine_info()
    lines = [
        f"# Build overhead: {num_batches} batches of {BATCH} conv2d candidates\n",
        f"Machine: {machine['cpu']}, {machine['cores']} cores; target {target_id(target)}; "
        f"commit {git_commit(short=True)}.\n",
        "| builder | wall s | s / candidate | failed builds | speed-up vs default |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {name} | {f['seconds']:.1f} | {f['seconds_per_candidate']:.2f} | {f['failures']}/{f['built']} | "
        f"{baseline / f['seconds']:.2f}x |"
        for name, f in figures.items()
    ]
    report = {
        "machine": machine,
        "target": str(target),
        "commit": git_commit(),
        "settings": {"batches": num_batches, "batch_size": BATCH, "sampling_seed": 1},
        "builders": figures,
    }
    write_report("builders", "builders", report, "\n".join(lines) + "\n", quick=args.quick)


if __name__ == "__main__":
    main()
