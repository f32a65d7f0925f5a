"""Loader throughput and peak memory of ``tenset_tools.ansor`` on a generated TenSet-shaped record tree.

The tree is ``measure_records/<hardware>/<task>.json`` with one CPU (platinum-8272, from the ResNet-50
Ansor records of the fixtures, rewritten to log v0.6) and one GPU folder (k80, from the TenSet K80 record
and the CUDA conv2d record); every line re-emits a real record with new random costs (3 repeats,
log-normal around the original mean), 5% failed measurements, and TenSet's defects (a comment, a
truncated line, trailing blank lines). Each contender runs in its own subprocess so its peak RSS is its
own:

* ``json.loads only``: reading and decoding every line with the stdlib, nothing else (the floor of any
  stdlib-JSON loader);
* ``parse``: :func:`tenset_tools.ansor.iter_records` (decode + validate + record objects);
* ``parse + convert``: :func:`tenset_tools.ansor.convert_records` to Parquet (op kind, FLOPs, step
  encoding, zstd Parquet), with 1 and with 2 worker processes, and without the step encoding
  (``--no-sequence-features``).

Usage: ``python -m benchmarks.tenset_loader [--quick] [--workdir DIR]``. Writes
``benchmarks/results/tenset/tenset_loader.json`` and ``.md`` (``tenset_loader_quick.*`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import git_commit, machine_info, write_report

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures" / "ansor"
TENSET_RECORDS = 51_577_248  # full TenSet, github.com/tlc-pack/tenset README

CPU_TARGET = "llvm -keys=cpu -link-params=0 -mcpu=skylake-avx512 -model=platinum-8272"
CPU_HARDWARE = [16, 64, 64, 0, 0, 0, 0, 0]
GPU_TARGET = (
    "cuda -keys=cuda,gpu -arch=sm_37 -max_num_threads=1024 -max_threads_per_block=1024 "
    "-registers_per_block=65536 -shared_memory_per_block=49152 -thread_warp_size=32 -model=k80"
)
GPU_HARDWARE = [-1, 16, 64, 49152, 2147483647, 1024, 8, 32]
SETTINGS = {
    "quick": {"tasks_per_hardware": 10, "records_per_task": 5000},
    "full": {"tasks_per_hardware": 100, "records_per_task": 10000},
}


def _templates() -> dict[str, list[dict]]:
    """Fixture records rewritten as TenSet v0.6 records of the two benchmark hardware folders."""

    def records(name: str) -> list[dict]:
        lines = (FIXTURES / name).read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def retarget(record: dict, target: str, hardware: list[int]) -> dict:
        key = record["i"][0][0]
        return {"i": [[key, target, hardware, "", 0, []], record["i"][1]], "r": record["r"], "v": "v0.6"}

    cpu = [retarget(r, CPU_TARGET, CPU_HARDWARE) for r in records("resnet-50-NHWC-B1-llvm.json")]
    gpu = [
        retarget(r, GPU_TARGET, GPU_HARDWARE)
        for r in records("tenset-k80-sample.json") + records("conv2d.json")
    ]
    return {"platinum-8272": cpu, "k80": gpu}


def generate_tree(root: Path, tasks_per_hardware: int, records_per_task: int, seed: int) -> int:
    """Write the tree; returns the number of valid JSON record lines written."""
    rng = np.random.default_rng(seed)
    written = 0
    for hardware, templates in _templates().items():
        folder = root / "measure_records" / hardware
        folder.mkdir(parents=True, exist_ok=True)
        for task in range(tasks_per_hardware):
            template = templates[task % len(templates)]
            # Only the result part changes per line: splice it between a fixed prefix and suffix.
            prefix = json.dumps({"i": template["i"]})[:-1] + ', "r": '
            suffix = ', "v": "v0.6"}\n'
            mean = float(np.mean(template["r"][0]))
            costs = mean * rng.lognormal(0.0, 0.5, size=(records_per_task, 3))
            failed = rng.random(records_per_task) < 0.05
            lines = []
            for i in range(records_per_task):
                if failed[i]:
                    result = [[1e10], 7, 10.0, 1626295478 + i]
                else:
                    result = [
                        [round(c, 9) for c in costs[i]],
                        0,
                        round(1.5 + costs[i].sum(), 4),
                        1626295478 + i,
                    ]
                lines.append(prefix + json.dumps(result) + suffix)
            if task == 0:  # TenSet's known defects, once per hardware folder
                lines.insert(0, "# measured with TenSet's scripts\n")
                lines.insert(len(lines) // 2, lines[1][: len(lines[1]) // 2] + "\n")
                lines.append("\n\n")
            (folder / f"task{task:04d}.json").write_text("".join(lines))
            written += records_per_task
    return written


def _measure(mode: str, tree: Path, out: Path) -> dict:
    """Run one contender in this (child) process; returns records, seconds and peak RSS figures."""
    import gc

    from tenset_tools.ansor import LoadStats, convert_records, iter_records
    from tenset_tools.ansor.records import list_record_files

    baseline_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if mode == "json_floor":
        gc.disable()  # as the loaders do: decoded records hold no cycles
        count = 0
        for path, _ in list_record_files(tree):
            with open(path, encoding="utf-8") as lines:
                for line in lines:
                    if line.startswith("{"):
                        try:
                            json.loads(line)
                            count += 1
                        except ValueError:
                            pass
        corrupt = None
    elif mode == "parse":
        stats = LoadStats()
        count = sum(1 for _ in iter_records(tree, stats))
        corrupt = stats.corrupt
    else:
        workers = int(mode.rsplit("_", 1)[1])
        stats = convert_records(tree, out, workers=workers, sequence_features=not mode.startswith("lean"))
        count, corrupt = stats.records, stats.corrupt
    seconds = time.perf_counter() - start
    return {
        "records": count,
        "corrupt": corrupt,
        "seconds": seconds,
        "baseline_rss_mb": baseline_kb / 1024,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "parquet_bytes": out.stat().st_size if out.exists() else None,
    }


def _run_child(mode: str, tree: Path, out: Path) -> dict:
    command = [sys.executable, "-m", "benchmarks.tenset_loader", "--measure", mode, "--tree", str(tree)]
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _machine() -> dict:
    import pyarrow

    # The machine is shared: the load says how much of the cores the contenders really had.
    return {**machine_info(), "pyarrow": pyarrow.__version__, "load_average_1min": os.getloadavg()[0]}


CONTENDERS = {
    "json_floor": "json.loads only (floor)",
    "parse": "parse (iter_records)",
    "convert_1": "parse + convert to Parquet, 1 process",
    "convert_2": "parse + convert to Parquet, 2 processes",
    "lean_1": "parse + convert without sequence features, 1 process",
}


def _table(rows: list[dict]) -> str:
    header = (
        "| contender | records | seconds | records/s | vs json floor | full TenSet (51.6 M) | "
        "peak RSS MB (main / worker) |"
    )
    lines = [header, "|---|---|---|---|---|---|---|"]
    floor = next(r["records_per_second"] for r in rows if r["mode"] == "json_floor")
    for r in rows:
        worker = f"{r['peak_worker_rss_mb']:.0f}" if r["mode"].endswith("_2") else "-"
        rate = r["records_per_second"]
        lines.append(
            f"| {CONTENDERS[r['mode']]} | {r['records']} | {r['seconds']:.1f} | {rate:,.0f} | "
            f"{rate / floor:.2f}x | {r['tenset_minutes']:.0f} min | {r['peak_rss_mb']:.0f} / {worker} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 000 records (about a minute)")
    parser.add_argument("--workdir", type=Path, help="where to generate the tree (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--measure", choices=sorted(CONTENDERS), help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(_measure(args.measure, args.tree, args.out)))
        return 0

    mode = "quick" if args.quick else "full"
    settings = SETTINGS[mode]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=args.workdir) as work:
        work = Path(work)
        start = time.perf_counter()
        lines = generate_tree(work, seed=args.seed, **settings)
        generate_seconds = time.perf_counter() - start
        tree_bytes = sum(p.stat().st_size for p in (work / "measure_records").rglob("*.json"))
        print(
            f"generated {lines} record lines ({tree_bytes / 1e6:.0f} MB) in {generate_seconds:.0f} s",
            flush=True,
        )
        rows = []
        for contender in CONTENDERS:
            result = _run_child(contender, work / "measure_records", work / f"{contender}.parquet")
            result["mode"] = contender
            result["records_per_second"] = result["records"] / result["seconds"]
            result["tenset_minutes"] = TENSET_RECORDS / result["records_per_second"] / 60
            rows.append(result)
            print(f"{CONTENDERS[contender]}: {result['records_per_second']:,.0f} records/s", flush=True)
    table = _table(rows)
    report = {
        "benchmark": "tenset_loader",
        "mode": mode,
        "machine": {**_machine(), "load_average_1min_before": load_before},
        "git_commit": git_commit(),
        "seed": args.seed,
        "settings": {**settings, "hardware_folders": ["platinum-8272", "k80"], "failed_fraction": 0.05},
        "tree": {"record_lines": lines, "bytes": tree_bytes, "generate_seconds": generate_seconds},
        "results": rows,
        "markdown": table,
    }
    machine = report["machine"]
    title = f"tenset_loader ({mode}, {machine['cpu']}, {machine['cores']} cores)"
    summary = f"{lines} records, {tree_bytes / 1e6:.0f} MB of JSON lines."
    write_report("tenset", "tenset_loader", report, f"# {title}\n\n{summary}\n\n{table}\n", quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
