"""The re-pick cache study's summary: the figures its choice rests on."""

import pytest

from benchmarks.repick_caches import _markdown, summarize


def _run(network, warm, cold):
    return {"network": network, "cpu_stolen": 0.0, "latency": {"warm": {"ms": warm}, "cold": {"ms": cold}}}


def test_summary_gives_cold_over_warm_per_run_and_its_median_per_network():
    report = {
        "last_level_cache_bytes": 32 << 20,
        "weights_bytes": {"big": 50 << 20, "small": 12 << 20, "untimed": 1 << 20},
        "runs": [
            *(_run("big", warm, cold) for warm, cold in ((10.0, 9.0), (12.0, 9.6), (8.0, 8.8))),
            _run("small", 2.0, 4.0),
        ],
    }
    summary = summarize(report)
    assert set(summary) == {"big", "small"}  # a network not timed yet has no row
    assert summary["big"]["cold_over_warm"] == pytest.approx([0.9, 0.8, 1.1])
    assert summary["big"]["median_cold_over_warm"] == pytest.approx(0.9)
    assert (summary["big"]["warm_ms"], summary["big"]["cold_ms"]) == (10.0, 9.0)
    assert summary["small"]["median_cold_over_warm"] == 2.0 and summary["big"]["weights_mb"] == 50.0
    report.update(
        machine={"cpu": "a CPU", "cores": 2},
        target="llvm",
        commit="abc",
        trials=200,
        rounds=5,
    )
    assert "| big | 50.0 | yes | 10.00 | 9.00 | 0.900, 0.800, 1.100 | 0.900 |" in _markdown(report)
    assert "| small | 12.0 | no |" in _markdown(report)
