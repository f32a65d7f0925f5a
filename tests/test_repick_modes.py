"""The re-pick mode study's summary: the figures its choice rests on."""

import argparse

import pytest

from benchmarks.repick_modes import _choices, _markdown, arms, main, summarize
from tvm_transfer.tuning.repick import REPICK_MODES


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
    assert text.startswith("# Re-pick modes: warm, network (development networks)")


def test_a_network_tuned_both_ways_is_summarized_per_arm_against_the_first_tuned_warm():
    report = {
        "modes": ["cold"],
        "tune_caches": ["warm", "cold"],
        "last_level_cache_bytes": 32 << 20,
        "weights_bytes": {"big": 50 << 20},
        "runs": [
            {
                "network": "big",
                "cpu_stolen": None,
                "latency": {"cold": {"ms": w}, "cold@tuned-cold": {"ms": c}},
            }
            for w, c in ((10.0, 9.0), (10.0, 9.8))
        ],
    }
    assert summarize(report)["big"]["median_over_reference"] == {"cold@tuned-cold": pytest.approx(0.94)}
    report.update(machine={"cpu": "a CPU", "cores": 2}, target="llvm", commit="abc", trials=200, rounds=5)
    text = _markdown(report)
    assert text.startswith("# Re-pick modes and tuner timings: cold, cold@tuned-cold")
    assert "| cold@tuned-cold / cold per run | median |" in text and "0.900, 0.980 | 0.940 |" in text


def test_every_mode_is_an_arm_of_each_tuning_and_the_reference_is_the_first_mode_tuned_warm():
    assert arms(["cold", "warm"], ["warm", "cold"]) == {
        "cold": ("warm", "cold"),
        "warm": ("warm", "warm"),
        "cold@tuned-cold": ("cold", "cold"),
        "warm@tuned-cold": ("cold", "warm"),
    }


@pytest.mark.parametrize("text", ["warm,warm", "warm,hot", ""])
def test_the_values_compared_are_known_and_different(text):
    with pytest.raises(argparse.ArgumentTypeError, match="give different values of"):
        _choices(REPICK_MODES)(text)


def test_one_arm_is_refused_before_any_tuning(capsys):
    with pytest.raises(SystemExit):
        main(["--modes", "cold", "--report-name", "unused"])
    assert "give one arm: compare two or more" in capsys.readouterr().err
