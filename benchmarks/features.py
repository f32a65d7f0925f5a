"""Feature extraction throughput, in candidates per second, for every shared feature of tvm_transfer.features.

Measured on real MetaSchedule candidates sampled from the design spaces of a conv2d and a matmul:
per-store kernel features (TVM's C++ PerStoreFeature, on all cores), their pooling, the trace-sequence
encoding from candidates in memory (``Trace.as_json`` + encoding) and from database JSON lines, and the
hardware vector. The evolutionary search scores population x generations candidates per batch (640 with
the defaults here), so this rate bounds what a learned model can cost per batch.

    python -m benchmarks.features --quick   # 64 candidates per workload
    python -m benchmarks.features           # 512 candidates per workload

Writes benchmarks/results/features/features.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable

from tvm.s_tir import meta_schedule as ms

from benchmarks.common import git_commit, machine_info, write_report
from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.features import (
    KernelFeatureExtractor,
    candidate_trace_json,
    encode_traces,
    hardware_features,
    pool_per_store,
)
from tvm_transfer.search_strategy.copula.population import initial_population
from tvm_transfer.target import host_target, target_id
from tvm_transfer.workloads import make_workload

WORKLOADS = {"conv2d": (1, 14, 14, 256, 256, 3, 1, 1), "matmul": (512, 512, 512)}


def sample(kind: str, shape: tuple[int, ...], count: int, target) -> tuple[ms.TuneContext, list]:
    workload = make_workload(kind, shape)
    mod = workload.ir_module()
    context = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.EvolutionarySearch(
            population_size=count, init_min_unmeasured=count
        ),
        task_name=workload.name,
        rand_state=1,
        num_threads="physical",
    )
    return context, initial_population(context, count)


def rate(fn: Callable[[], object], count: int, repeats: int = 3) -> float:
    """Best-of-``repeats`` throughput of ``fn`` (which handles ``count`` candidates), candidates/second."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return count / best


def measure(context: ms.TuneContext, candidates: list) -> dict[str, float]:
    extractor = KernelFeatureExtractor()
    per_store = extractor.per_store(context, candidates)
    traces = [candidate_trace_json(c) for c in candidates]
    # what a JSONDatabase line holds: plain JSON text
    lines = [json.dumps(t, default=lambda o: o.value) for t in traces]
    n = len(candidates)
    return {
        "kernel per-store (PerStoreFeature)": rate(lambda: extractor.per_store(context, candidates), n),
        "kernel pooled (extract + pool)": rate(lambda: extractor.pooled(context, candidates), n),
        "pooling only": rate(lambda: pool_per_store(per_store), n),
        "trace JSON of candidates (as_json)": rate(lambda: [candidate_trace_json(c) for c in candidates], n),
        "trace encoding (from JSON)": rate(lambda: encode_traces(traces), n),
        "trace encoding from database lines": rate(lambda: encode_traces([json.loads(x) for x in lines]), n),
        "hardware vector": rate(lambda: [hardware_features(context.target) for _ in candidates], n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 candidates per workload")
    args = parser.parse_args()
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    count = 64 if args.quick else 512
    import_tensor_intrin_fast()
    target = host_target()
    figures = {}
    for kind, shape in WORKLOADS.items():
        context, candidates = sample(kind, shape, count, target)
        figures[kind] = measure(context, candidates)
    names = list(next(iter(figures.values())))
    lines = [
        f"# Feature extraction throughput ({count} sampled candidates per workload)\n",
        f"Machine: {machine_info()['cpu']}, {machine_info()['cores']} cores; target {target_id(target)}; "
        f"commit {git_commit(short=True)}. Candidates per second, best of 3.\n",
        "| feature | " + " | ".join(figures) + " |",
        "|---|" + "---:|" * len(figures),
    ]
    lines += [
        f"| {name} | " + " | ".join(f"{figures[k][name]:,.0f}" for k in figures) + " |" for name in names
    ]
    report = {
        "machine": machine_info(),
        "target": str(target),
        "commit": git_commit(),
        "settings": {"candidates": count, "workloads": WORKLOADS, "sampling_seed": 1},
        "candidates_per_second": figures,
    }
    write_report("features", "features", report, "\n".join(lines) + "\n", quick=args.quick)


if __name__ == "__main__":
    main()
