"""What every benchmark records: the machine, the commit, and where the results go."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def machine_info() -> dict:
    """CPU model, usable cores and Python version of this machine."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": model or platform.processor(), "cores": cores, "python": platform.python_version()}


def git_commit(short: bool = False) -> str:
    """The commit the benchmark ran on (``-dirty`` when tracked files had uncommitted changes); ``short``
    abbreviates the hash to 12 digits (the suffix stays)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent)
        return done.stdout.strip()

    commit = (git("rev-parse", "HEAD") or "unknown")[: 12 if short else None]
    return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def write_report(name: str, report: dict, markdown: str, quick: bool = False) -> None:
    """Write ``results/<name>.json`` and ``results/<name>.md`` and print the Markdown table.

    Quick (smoke) runs go to ``<name>_quick.*`` so that they never overwrite the full results quoted in
    closing notes.
    """
    name = f"{name}_quick" if quick else name
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2, default=float) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)
    print(markdown)
