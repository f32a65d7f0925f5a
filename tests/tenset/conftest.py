"""Fixtures of the tenset_tools tests: the real Ansor/TenSet records of the shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from tenset_helpers import FIXTURES


@pytest.fixture
def ansor_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {FIXTURES}")
    return FIXTURES
