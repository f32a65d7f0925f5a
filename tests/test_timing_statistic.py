"""The timing-statistic study's summary: the figures its choice rests on."""

import math
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from benchmarks.timing_statistic import busy_core, summarize


def _run(network, loaded, transfer, no_transfer):
    return {
        "network": network,
        "loaded": loaded,
        "latency": {
            "transfer": {"ms": transfer[0], "fastest_call_ms": transfer[1]},
            "no-transfer": {"ms": no_transfer[0], "fastest_call_ms": no_transfer[1]},
        },
    }


def test_summary_compares_loaded_runs_with_quiet_ones_per_statistic():
    runs = [
        _run("net", False, (10.0, 9.0), (20.0, 18.0)),
        _run("net", True, (15.0, 9.5), (30.0, 18.0)),
        _run("net", False, (11.0, 9.0), (22.0, 18.5)),
        _run("net", True, (17.0, 9.0), (36.0, 19.0)),
    ]
    summary = summarize(runs)
    transfer = summary["arms"]["net/transfer"]
    for key, expected in {
        "ms": {"quiet_ms": 10.5, "loaded_over_quiet": 16.0 / 10.5, "spread": 1.7},
        "fastest_call_ms": {"quiet_ms": 9.0, "loaded_over_quiet": 9.25 / 9.0, "spread": 9.5 / 9.0},
    }.items():
        assert {m: transfer[key][m] for m in expected} == pytest.approx(expected)
    no_transfer = summary["arms"]["net/no-transfer"]["ms"]
    assert no_transfer["loaded_over_quiet"] == pytest.approx(33.0 / 21.0)
    assert "ratio_spread" not in no_transfer  # the baseline's ratio to itself
    # Transfer over no-transfer per run, by the rounds' means: 0.5, 0.5, 0.5, 17 / 36.
    assert transfer["ms"]["ratio_spread"] == pytest.approx(0.5 / (17.0 / 36.0))
    # ... by the fastest calls: 0.5, 9.5 / 18, 9 / 18.5, 9 / 19.
    assert transfer["fastest_call_ms"]["ratio_spread"] == pytest.approx((9.5 / 18.0) / (9.0 / 19.0))
    overall = summary["overall"]["ms"]
    assert overall["loaded_over_quiet"] == pytest.approx(math.sqrt(16.0 / 10.5 * 33.0 / 21.0))
    assert overall["ratio_spread"] == pytest.approx(transfer["ms"]["ratio_spread"])


def test_busy_core_spins_a_process_only_while_the_block_runs():
    with busy_core():
        (spinner,) = multiprocessing.active_children()
        time.sleep(5)  # start-up (a spawned interpreter), then bursts for about half the time
        fields = Path(f"/proc/{spinner.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu_seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # user + system
        assert cpu_seconds >= 1.0
    assert not spinner.is_alive() and multiprocessing.active_children() == []
    with busy_core(busy=False):
        assert multiprocessing.active_children() == []
