"""The pruning table: dataset size vs pairwise accuracy of a baseline trained on pruned vs full data.

The dataset (a Parquet file of the tenset_tools schema, e.g. the collected dataset shipped in
``tenset_tools/data/``) is split once (``--split-scheme``, seed); every pruning setting prunes the same
training side, and the same baseline (``tenset_tools.prune.XGBBaseline``, same seed) is trained on the
full and on the pruned training data and scored on the same test side. Verma et al. (ExHET 2023) report
up to 45% smaller data with no loss in pairwise comparison accuracy.

Usage: ``python -m benchmarks.tenset_prune DATASET [--quick]``. Writes
``benchmarks/results/tenset/tenset_prune.json`` and ``.md`` (``tenset_prune_quick.*`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from benchmarks.common import git_commit, machine_info, write_report
from tenset_tools.prune import compare_pruning, prune
from tenset_tools.schema import add_normalised_throughput, read_dataset
from tenset_tools.split import SPLIT_SCHEMES, split

# (flops_coverage, min_norm_throughput, min_records); the first row prunes only invalid records.
GRIDS = {
    "quick": [(1.0, 0.0, 1), (0.9, 0.05, 8)],
    "full": list(itertools.product((1.0, 0.95, 0.9, 0.8), (0.0, 0.05, 0.2), (1, 8, 48))),
}


def _table(rows: list[dict]) -> str:
    lines = [
        "| flops coverage | min norm throughput | min records | train records | size reduction | "
        "pairwise acc. full | pairwise acc. pruned | pruned / full |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['flops_coverage']} | {r['min_norm_throughput']} | {r['min_records']} | "
            f"{r['records_after']} / {r['records_before']} | {r['size_reduction']:.1%} | "
            f"{r['pairwise_accuracy_full']:.4f} | {r['pairwise_accuracy_pruned']:.4f} | "
            f"{r['pairwise_accuracy_pruned'] / r['pairwise_accuracy_full']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="Parquet dataset file (tenset_tools schema)")
    parser.add_argument("--quick", action="store_true", help="two pruning settings instead of 36")
    parser.add_argument("--split-scheme", choices=sorted(SPLIT_SCHEMES), default="within_task")
    parser.add_argument("--train-ratio", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    frame = add_normalised_throughput(read_dataset(args.dataset))
    train, test = split(frame, args.split_scheme, args.train_ratio, args.seed)
    mode = "quick" if args.quick else "full"
    rows = []
    for coverage, min_throughput, min_records in GRIDS[mode]:
        start = time.perf_counter()
        settings = {
            "flops_coverage": coverage,
            "min_norm_throughput": min_throughput,
            "min_records": min_records,
        }
        pruned, report = prune(train, **settings)
        if pruned.empty:
            print(f"{settings}: nothing left after pruning, skipped", flush=True)
            continue
        scores = compare_pruning(train, pruned, test, seed=args.seed)
        rows.append({**settings, **report.as_dict(), **scores, "seconds": time.perf_counter() - start})
        print(f"{settings}: {report.size_reduction:.1%} smaller, pairwise {scores}", flush=True)
    table = _table(rows)
    result = {
        "benchmark": "tenset_prune",
        "mode": mode,
        "machine": machine_info(),
        "git_commit": git_commit(),
        "dataset": {
            "path": str(args.dataset),
            "records": len(frame),
            "tasks": int(frame["task_id"].nunique()),
        },
        "settings": {"split_scheme": args.split_scheme, "train_ratio": args.train_ratio, "seed": args.seed},
        "split": {"train_records": len(train), "test_records": len(test)},
        "results": rows,
        "markdown": table,
    }
    title = f"tenset_prune ({mode}, {args.dataset.name}, {args.split_scheme} split, seed {args.seed})"
    write_report("tenset", "tenset_prune", result, f"# {title}\n\n{table}\n", quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
