"""Helpers of the tenset_tools tests (a uniquely named module: ``conftest`` is taken by tests/)."""

from __future__ import annotations

import math
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO.parent / "shared" / "fixtures" / "ansor"


def make_record(task: str, target: str, latency: float | None, **overrides) -> dict:
    """A minimal valid schema record; ``latency=None`` makes an invalid one."""
    valid = latency is not None
    record = {
        "task_id": task,
        "workload_key": f'["{task}"]',
        "op_kind": "dense",
        "flops": 2.0e6,
        "target_id": target,
        "hw_features": [4.0, 64.0],
        "candidate_kind": "vta_knobs",
        "candidate": "{}",
        "valid": valid,
        "error_kind": None if valid else "run_timeout",
        "latencies": [latency, latency] if valid else [],
        "latency": latency if valid else math.nan,
        "source": "test",
    }
    record.update(overrides)
    return record
