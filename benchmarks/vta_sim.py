"""Benchmark of vta_ext: compile + timing speed, functional simulation speed, invalid-configuration rates
and the best latency per ResNet-18 layer.

    python -m benchmarks.vta_sim --quick   # a few minutes at most
    python -m benchmarks.vta_sim           # exhaustive over every layer's space (about 5 minutes here)

Writes benchmarks/results/vta/vta_sim.json (machine, commit, seeds, settings, every figure) and vta_sim.md.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

import numpy as np
from tqdm import tqdm

from benchmarks.common import git_commit, machine_info, write_report
from vta_ext import sim, timing
from vta_ext.compiler import compile_program
from vta_ext.errors import InvalidConfigError
from vta_ext.hw import HwConfig, preset
from vta_ext.knobs import KnobSpace
from vta_ext.runtime import verify
from vta_ext.workloads import RESNET18, flops, random_inputs, reference

SEED = 0


def sweep(name: str, hw: HwConfig, points: list[int]) -> dict:
    """Compile, check and time (counters-only) the given points of a layer's space."""
    workload = RESNET18[name]
    space = KnobSpace(workload, hw)
    kinds: Counter[str] = Counter()
    valid_ms, invalid_ms, best = [], [], (float("inf"), None)
    for index in tqdm(points, desc=f"{name} {hw.short_id()}", leave=False):
        knobs = space.point(index)
        start = time.perf_counter()
        try:
            program = compile_program(workload, knobs, hw)
            sim.profile(program)
            cycles = timing.simulate(program).cycles
        except InvalidConfigError as error:
            kinds[error.kind] += 1
            invalid_ms.append(1e3 * (time.perf_counter() - start))
            continue
        valid_ms.append(1e3 * (time.perf_counter() - start))
        if cycles < best[0]:
            best = (cycles, knobs)
    cycles, knobs = best
    latency = cycles / (hw.CLOCK_MHZ * 1e6) if knobs else float("nan")
    peak_cycles = workload.macs / hw.peak_macs_per_cycle
    return {
        "space": len(space),
        "measured": len(points),
        "invalid_fraction": sum(kinds.values()) / len(points),
        "invalid_kinds": dict(kinds),
        "valid_ms_mean": float(np.mean(valid_ms)) if valid_ms else None,
        "valid_ms_median": float(np.median(valid_ms)) if valid_ms else None,
        "invalid_ms_mean": float(np.mean(invalid_ms)) if invalid_ms else None,
        "best_cycles": cycles if knobs else None,
        "best_latency_ms": 1e3 * latency,
        "best_gops": flops(workload) / latency / 1e9 if knobs else None,
        "best_fraction_of_peak": peak_cycles / cycles if knobs else None,
        "best_knobs": knobs,
    }


def functional_c2(hw: HwConfig, knobs: dict) -> dict:
    workload = RESNET18["C2"]
    program = compile_program(workload, knobs, hw)
    inputs = random_inputs(workload, SEED)
    start = time.perf_counter()
    output = sim.run(program, inputs).output
    seconds = time.perf_counter() - start
    verify(program)
    return {
        "knobs": knobs,
        "instructions": len(program.insns),
        "seconds": seconds,
        "bit_exact": bool(np.array_equal(output, reference(workload, **inputs))),
    }


def table(report: dict) -> str:
    lines = [
        "| layer | space | invalid (default) | invalid (evta) | compile+time ms/valid cfg | best latency ms "
        "(default) | GOPS | fraction of 16x16 peak | best knobs (h, w, ci, co, oc_nt, h_nt) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in report["layers"]["default"].items():
        ext = report["layers"]["evta"][name]
        k = row["best_knobs"] or {}
        knobs = ", ".join(
            str(k.get(n, "-")) for n in ("tile_h", "tile_w", "tile_ci", "tile_co", "oc_nthread", "h_nthread")
        )
        lines.append(
            f"| {name} | {row['space']} | {row['invalid_fraction']:.1%} | {ext['invalid_fraction']:.1%} "
            f"| {row['valid_ms_mean']:.1f} | {row['best_latency_ms']:.3f} | {row['best_gops']:.1f} "
            f"| {row['best_fraction_of_peak']:.1%} | {knobs} |"
        )
    f = report["functional_c2"]
    lines += [
        "",
        f"Search: {report['settings']['search']}. Functional simulation of C2 "
        f"({f['instructions']} instructions, knobs {json.dumps(f['knobs'])}): {f['seconds']:.2f} s, "
        f"bit-exact: {f['bit_exact']}.",
        f"Machine: {report['machine']['cpu']}, {report['machine']['cores']} cores; "
        f"commit {report['commit'][:12]}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="random 150 points per layer instead of all")
    args = parser.parse_args()
    rng = np.random.default_rng(SEED)
    configs = {"default": HwConfig(), "evta": preset("evta")}
    report = {
        "machine": machine_info(),
        "commit": git_commit(),
        "seeds": {"sampling": SEED, "inputs": SEED},
        "settings": {
            "search": "random 150 per layer" if args.quick else "exhaustive",
            "hw": {name: hw.to_dict() for name, hw in configs.items()},
        },
        "layers": {},
    }
    for config_name, hw in configs.items():
        report["layers"][config_name] = {}
        for name in RESNET18:
            size = len(KnobSpace(RESNET18[name], hw))
            points = (
                sorted(rng.choice(size, min(150, size), replace=False)) if args.quick else list(range(size))
            )
            report["layers"][config_name][name] = sweep(name, hw, [int(p) for p in points])
    report["functional_c2"] = functional_c2(HwConfig(), report["layers"]["default"]["C2"]["best_knobs"])
    write_report("vta", "vta_sim", report, table(report), quick=args.quick)


if __name__ == "__main__":
    main()
