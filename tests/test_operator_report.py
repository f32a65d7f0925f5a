"""The per-operator report's arithmetic: the ratios and goal verdicts the held-out operators are judged on."""

import argparse
import math

import pytest

from benchmarks import transfer_operators as report_module
from benchmarks.transfer_common import open_also_packs

BASELINE = report_module.BASELINE


def _row(transfer_s, baseline_s, checkpoints=(16, 64)):
    """A row of one transfer arm: ``transfer_s[seed][n]`` and ``baseline_s[seed]`` are the re-timed seconds
    of each pick (``None``: no pick); every pick measured 10% slower in tuning than re-timed."""
    picks, latency = {}, {}
    for seed, by_n in enumerate(transfer_s):
        for n in checkpoints:
            if by_n.get(n) is not None:
                key = f"transfer-{seed}-{n}"
                pick = {"key": key, "measured_s": by_n[n] * 1.1}
                picks[report_module._pick_key("transfer", seed, n)] = pick
                latency[key] = by_n[n]
    for seed, seconds in enumerate(baseline_s):
        key = f"base-{seed}"
        picks[report_module._pick_key(BASELINE, seed, checkpoints[-1])] = {"key": key, "measured_s": seconds}
        latency[key] = seconds
    return {"picks": picks, "latency_s": latency}


def test_a_ratio_is_the_geometric_mean_over_seeds_against_the_baselines():
    row = _row([{16: 2e-6, 64: 1e-6}, {16: 8e-6, 64: 4e-6}], [2e-6, 8e-6])
    out = report_module._ratios(row, ["transfer"], [0, 1], (16, 64))
    assert out["baseline_us"] == pytest.approx(4.0)
    assert out["ratio"]["transfer"]["16"] == pytest.approx(1.0)
    assert out["ratio"]["transfer"]["64"] == pytest.approx(0.5)
    assert out["ratio_by_seed"]["transfer"]["16"] == pytest.approx([0.5, 2.0])  # each against the mean
    assert out["ratio_measured"]["transfer"]["16"] == pytest.approx(1.1)


def test_a_missing_pick_is_infinitely_slow_and_a_missing_baseline_gives_no_ratio():
    out = report_module._ratios(_row([{16: None, 64: 1e-6}], [2e-6]), ["transfer"], [0], (16, 64))
    assert out["ratio"]["transfer"]["16"] == math.inf and out["ratio"]["transfer"]["64"] == pytest.approx(0.5)
    row = _row([{16: 1e-6, 64: 1e-6}], [2e-6])
    row["latency_s"]["base-0"] = math.inf  # the baseline's pick failed when re-timed
    out = report_module._ratios(row, ["transfer"], [0], (16, 64))
    assert out["baseline_us"] is None and out["ratio"]["transfer"]["16"] is None


def test_the_summary_judges_the_goals_at_16_trials_over_the_operators_with_a_ratio():
    rows = [{"ratio": {"transfer": {"16": r, "64": 0.9}}} for r in (0.8, 1.6, None)]
    summary = report_module._summary({"arms": ["transfer"], "checkpoints": [16, 64], "rows": rows})
    arm = summary["transfer"]
    assert arm["geomean"]["16"] == pytest.approx(math.sqrt(0.8 * 1.6))  # the unmeasured third is left out
    assert arm["worst"]["16"] == pytest.approx(1.6)
    assert list(arm["goals"].values()) == [False, False]  # 1.131 > 1.0 and 1.6 > 1.5
    rows[1]["ratio"]["transfer"]["16"] = 1.2
    arm = report_module._summary({"arms": ["transfer"], "checkpoints": [16, 64], "rows": rows})["transfer"]
    assert list(arm["goals"].values()) == [True, True]  # sqrt(0.96) and 1.2
    empty = report_module._summary({"arms": ["transfer"], "checkpoints": [16], "rows": []})["transfer"]
    assert list(empty["goals"].values()) == [None, None]


def test_a_retimed_run_keeps_the_tuning_facts_of_the_run_that_tuned_it():
    tuned = {"from_pack": False, "new_trials": 64, "tune_seconds": 61.0, "guard_weights": [1.0, 0.0]}
    resumed = {"from_pack": False, "new_trials": 0, "tune_seconds": 0.4, "guard_weights": []}
    assert report_module._with_tuning_facts(resumed, tuned) == tuned
    assert report_module._with_tuning_facts(resumed, None) == resumed  # nothing earlier to keep
    tuned_on = {**resumed, "new_trials": 8, "tune_seconds": 9.0, "guard_weights": [0.5]}
    assert report_module._with_tuning_facts(tuned_on, tuned) == tuned_on  # it tuned: its own facts


def test_kinds_are_chosen_by_their_block_name_or_in_full():
    depthwise = "group_conv2d_nchw/SSSSRR"
    assert report_module._of_kinds(depthwise, None)
    assert report_module._of_kinds(depthwise, ("matmul", depthwise))
    assert report_module._of_kinds(depthwise, ("group_conv2d_nchw",))
    assert not report_module._of_kinds("conv2d_nchw/SSSSRRR", ("group_conv2d_nchw", "conv2d_nchw/SSSS"))
    assert not report_module._of_kinds(None, None)  # no reduction: never an operator


@pytest.mark.parametrize("spec", ["=work/p", "vit=", "a@b=work/p"])
def test_a_second_pack_needs_a_plain_label_and_a_path(spec, capsys):
    with pytest.raises(SystemExit):
        open_also_packs(argparse.ArgumentParser(prog="transfer_operators"), [spec])
    assert "give LABEL=PATH, a label without '@' used once" in capsys.readouterr().err


def test_the_noise_study_compares_each_runs_pick_with_the_fastest_it_had_measured():
    from benchmarks import pick_noise

    # Re-timed: a 1 us, b 2 us, c 4 us. The transfer run measured a during a noise burst (5 us), so after
    # two trials it picked b; the baseline's one run picked c.
    row = {
        "measured": {
            "transfer": {"0": [["a", 5e-6], ["b", 3e-6]]},
            BASELINE: {"0": [["c", 4e-6], ["b", 9e-6]]},
        },
        "latency_s": {"a": 1e-6, "b": 2e-6, "c": 4e-6},
    }
    figures = pick_noise._operator_figures(row, (1, 2))
    # The baseline's pick is c (4 us), its noise-free pick b (2 us).
    after_one, after_two = figures["transfer"]["1"], figures["transfer"]["2"]
    assert after_one == pytest.approx({"noise_loss": 1.0, "ratio": 0.25, "ratio_noise_free": 0.5})
    assert after_two == pytest.approx({"noise_loss": 2.0, "ratio": 0.5, "ratio_noise_free": 0.5})
    assert figures[BASELINE]["2"]["noise_loss"] == pytest.approx(2.0)


@pytest.mark.parametrize("checkpoints", [["64", "16"], ["16", "16", "64"], ["0", "64"]])
def test_checkpoints_must_be_distinct_positive_and_ascending(checkpoints, capsys):
    with pytest.raises(SystemExit) as exit_info:
        report_module.main(["--dev", "--checkpoints", *checkpoints])
    assert exit_info.value.code == 2
    assert "--checkpoints: give distinct positive trial counts in ascending order" in capsys.readouterr().err
