"""The re-pick mode study's summary: the figures its choice rests on."""

import argparse

import pytest

from benchmarks.repick_modes import _markdown, _modes, summarize


def _run(network, warm, network_ms):
    return {
        "network": network,
        "cpu_stolen": 0.0,
        "latency": {"warm": {"ms": warm}, "network": {"ms": network_ms}},
    }


def test_summary_gives_each_mode_over_the_first_per_run_its_median_and_each_modes_spread():
    report = {
        "modes": ["warm", "network"],
        "last_level_cache_bytes": 32 << 20,
        "weights_bytes": {"big": 50 << 20, "small": 12 << 20, "untimed": 1 << 20},
        "runs": [
            *(_run("big", warm, net) for warm, net in ((10.0, 9.0), (12.0, 9.6), (8.0, 8.8))),
            _run("small", 2.0, 4.0),
        ],
    }
    summary = summarize(report)
    assert set(summary) == {"big", "small"}  # a network not timed yet has no row
    big = summary["big"]
    assert big["over_reference"]["network"] == pytest.approx([0.9, 0.8, 1.1])
    assert big["median_over_reference"]["network"] == pytest.approx(0.9)
    assert big["median_ms"] == {"warm": 10.0, "network": 9.0} and big["runs"] == 3
    assert big["spread"] == pytest.approx({"warm": 1.5, "network": 9.6 / 8.8})
    assert summary["small"]["median_over_reference"]["network"] == 2.0 and big["weights_mb"] == 50.0
    report.update(machine={"cpu": "a CPU", "cores": 2}, target="llvm", commit="abc", trials=200, rounds=5)
    text = _markdown(report)
    assert "| big | 50.0 | yes | 3 | 10.00 (1.500) | 9.00 (1.091) | 0.900, 0.800, 1.100 | 0.900 |" in text
    assert "| small | 12.0 | no | 1 |" in text


@pytest.mark.parametrize("text", ["warm", "warm,warm", "warm,hot"])
def test_the_modes_compared_are_two_or_more_known_and_different(text):
    with pytest.raises(argparse.ArgumentTypeError, match="two or more different modes"):
        _modes(text)
