"""Shared fixtures of the tenset_tools tests: paths to the real Ansor/TenSet records and record factories."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The package may not be installed in the venv (no editable install yet): import it from the checkout.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

FIXTURES = REPO.parent / "shared" / "fixtures" / "ansor"


@pytest.fixture
def ansor_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {FIXTURES}")
    return FIXTURES


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
