"""The held-out network report's arithmetic over tuning seeds: the figures the goals are judged on."""

import json
import math

import pytest

from benchmarks import transfer_networks as report_module
from tvm_transfer.tuning.repick import DEFAULT_REPICK


def _point(budget, seed, transfer, no_transfer, onnx=None):
    latency = {"transfer": {"ms": transfer}, "no-transfer": {"ms": no_transfer}}
    if onnx is not None:
        latency["ONNX Runtime"] = {"ms": onnx}
    point = {
        "network": "net",
        "budget": budget,
        "arms": {a: {"trials": budget, "from_pack": 0} for a in ("no-transfer", "transfer")},
        "latency": latency,
    }
    if seed is not None:  # a point saved before seeds were kept has none: seed 0
        point["seed"] = seed
    return point


def _report(points):
    return {"arms": ["no-transfer", "transfer"], "budgets": [50, 2000], "seeds": [0, 1], "points": points}


def test_rows_are_geometric_means_over_the_seeds_that_reached_each_budget():
    report = _report(
        [
            _point(50, None, 80.0, 100.0),
            _point(50, 1, 45.0, 50.0),
            _point(2000, None, 30.0, 25.0),
        ]
    )
    first, last = report_module._rows(report, "net")
    assert [report_module._seed(p) for p in first["points"]] == [0, 1]
    assert first["ms"]["transfer"] == pytest.approx(math.sqrt(80.0 * 45.0))
    assert first["ratios"]["transfer"] == pytest.approx([0.8, 0.9])
    expected = f"{math.sqrt(80 * 45):.3f} ({math.sqrt(0.72):.3f}: 0.800, 0.900)"
    assert report_module._cell(first, "transfer") == expected
    assert last["ms"]["transfer"] == pytest.approx(30.0)
    assert last["ratios"]["transfer"] == pytest.approx([1.2])


def test_an_arm_failed_in_one_seed_fails_the_row():
    rows = report_module._rows(_report([_point(50, 0, 80.0, 100.0), _point(50, 1, None, 50.0)]), "net")
    assert rows[0]["ms"]["transfer"] is None and rows[0]["ratios"]["transfer"] is None
    assert report_module._cell(rows[0], "transfer") == "failed"


def test_budget_reaching_the_bar_over_the_mean_and_per_seed():
    # Seed 0 reaches its 2000-trial bar at 50 trials, seed 1 only at 2000; their geometric means at 50.
    report = _report(
        [
            _point(50, 0, 90.0, 150.0),
            _point(50, 1, 100.0, 150.0),
            _point(2000, 0, 95.0, 100.0),
            _point(2000, 1, 80.0, 90.0),
        ]
    )
    rows = report_module._rows(report, "net")
    assert report_module._reached(report, rows) == {"no-transfer": 2000, "transfer": 50}
    assert report_module._reached_line(report, "net", rows) == (
        "no-transfer 2000 (seed 0: 2000, seed 1: 2000), transfer 50 (seed 0: 50, seed 1: 2000)"
    )


def test_other_runtimes_are_compared_within_each_seeds_own_timing():
    report = _report([_point(2000, 0, 106.0, 103.0, onnx=100.0), _point(2000, 1, 88.0, 90.0, onnx=89.0)])
    (row,) = report_module._rows(report, "net")
    no_transfer, transfer = math.sqrt(1.03 * 90 / 89), math.sqrt(1.06 * 88 / 89)
    assert report_module._against_others(report, row) == (
        f"no-transfer {no_transfer:.2f}x (1.03, 1.01), transfer {transfer:.2f}x (1.06, 0.99)"
    )


def test_the_fastest_other_runtime_is_the_fastest_over_every_point():
    points = [_point(50, 0, 80.0, 100.0, onnx=12.0), _point(50, 1, 80.0, 100.0, onnx=15.0)]
    assert report_module._fastest_other(points) == ("ONNX Runtime", 12.0)
    assert report_module._fastest_other([_point(50, 0, 80.0, 100.0)]) is None


def test_guard_line_sums_each_arms_batches_over_the_points():
    first, second = _point(50, 0, 80.0, 100.0), _point(50, 1, 80.0, 100.0)
    first["arms"]["transfer"]["guard_weights"] = {"pretrained": 3, "blended": 2, "online": 0}
    second["arms"]["transfer"]["guard_weights"] = {"pretrained": 1, "blended": 0, "online": 4}
    line = report_module._guard_line([first, second], ["no-transfer", "transfer"])
    assert line.endswith(": transfer 4 / 2 / 4 (2 of 2 points).")
    assert report_module._guard_line([_point(50, 0, 80.0, 100.0)], ["transfer"]) == ""


def test_timed_over_records_and_stolen_cpu_per_timing_run():
    first, second = _point(1000, 0, 64.0, 67.0), _point(1000, 1, 30.0, 40.0)
    first["arms"]["transfer"]["estimated_ms"], second["arms"]["transfer"]["estimated_ms"] = 32.0, 25.0
    first["timings"] = [{"latency": first["latency"], "cpu_stolen": 0.174}]
    second.update(finished="2026-11-25 10:00:00", commit="0123456789ab")
    assert report_module._over_records([first, second], "transfer") == f"{math.sqrt(2.0 * 1.2):.2f}"
    # An arm without its sum of records (no-transfer here) is not guessed.
    assert report_module._over_records([first, second], "no-transfer") == "-"
    # A point saved before timing runs were kept has one run, without a stolen share.
    timings = [t for p in (first, second) for t in report_module._timings(p)]
    assert report_module._stolen(timings) == "17, -"


def test_stolen_cpu_is_the_steal_ticks_share_of_all_ticks(tmp_path, monkeypatch):
    from benchmarks import common

    stat = tmp_path / "stat"
    monkeypatch.setattr(common, "_PROC_STAT", stat)
    stat.write_text("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3\n")
    with common.StolenCpu() as stolen:
        # user +60, system +10, idle +100, steal +30: 30 of 200 ticks stolen
        stat.write_text("cpu  160 0 60 900 10 0 5 65 0 0\n")
    assert stolen.share == pytest.approx(30 / 200)
    stat.write_text("cpu  100 0 50 800\n")  # an old kernel without the steal column
    with common.StolenCpu() as stolen:
        pass
    assert stolen.share is None


def test_development_networks_need_only_be_missing_from_the_pack():
    from benchmarks.transfer_common import check_held_out
    from tvm_transfer.transfer import DEFAULT_PACK
    from tvm_transfer.transfer.pack import TransferPack

    pack = TransferPack.open(DEFAULT_PACK)
    check_held_out(pack, report_module.DEV_NETWORKS, listed=False)
    with pytest.raises(SystemExit, match="does not hold out torchvision:mnasnet1_0"):
        check_held_out(pack, report_module.DEV_NETWORKS)
    with pytest.raises(SystemExit, match="does not hold out torchvision:resnet18"):
        check_held_out(pack, ("torchvision:resnet18",), listed=False)
    # Another shape or layout of a corpus network is that network, not held out.
    with pytest.raises(SystemExit, match="does not hold out torchvision:resnet18@1,3,96,96@nhwc"):
        check_held_out(pack, ("torchvision:resnet18@1,3,96,96@nhwc",), listed=False)
    check_held_out(pack, ("torchvision:efficientnet_b0@nhwc", "bert_base@1,64"))


def _round_log(work_dir, rows):
    work_dir.mkdir(parents=True)
    lines = [
        json.dumps({"trials": t, "best_ms": [1.0] * 3, "estimated_ms": ms, "tasks_with_record": tasks})
        for t, ms, tasks in rows
    ]
    (work_dir / "tuning_rounds.jsonl").write_text("\n".join(lines) + "\n")


def test_trials_to_reach_by_the_records_read_from_the_round_logs(tmp_path):
    # No-transfer's sum at its largest budget (2000) is 100 ms: the bar is 103 ms.
    _round_log(tmp_path / "net" / "no-transfer", [(50, 300.0, 3), (400, 104.0, 3), (1500, 102.0, 3)])
    _round_log(
        tmp_path / "net" / "transfer",
        # A sum missing a task is not a network's latency; trials past the bar's budget do not count.
        [(16, 50.0, 2), (32, 120.0, 3), (200, 103.0, 3), (2100, 90.0, 3)],
    )
    first, last = _point(50, 0, 80.0, 100.0), _point(2000, 0, 30.0, 25.0)
    last["arms"]["no-transfer"]["estimated_ms"] = 100.0
    report = _report([last, first])
    report["reached_by_records"] = report_module._reached_by_records(report, tmp_path)
    assert report["reached_by_records"] == {
        "net": {"0": {"bar_ms": 100.0, "bar_budget": 2000, "no-transfer": 1500, "transfer": 200}}
    }
    assert report_module._reached_by_records_line(report, "net").endswith(
        "seed 0 (bar 100.0 ms at 2000): no-transfer 1500, transfer 200."
    )
    # Without the work dirs (a report re-drawn elsewhere) nothing is claimed.
    assert report_module._reached_by_records(report, tmp_path / "elsewhere") == {}


def test_the_report_counts_the_points_timed_with_re_picked_builds():
    repicked, as_measured = _point(50, 0, 80.0, 100.0), _point(100, 0, 70.0, 90.0)
    for arm in ("transfer", "no-transfer"):
        repicked["latency"][arm].update(repicked=4, repick_changed=2)
    as_measured["latency"]["transfer"].update(repicked=4, repick_changed=1)  # one arm only: not counted
    line = report_module._repicked_line([repicked, as_measured], ["no-transfer", "transfer"])
    assert line.endswith("by re-pick mode): warm 1 of 2 points.")  # saved before modes were recorded
    for arm in ("transfer", "no-transfer"):
        as_measured["latency"][arm].update(repicked=4, repick_changed=1, repick_mode="network")
    line = report_module._repicked_line([repicked, as_measured], ["no-transfer", "transfer"])
    assert line.endswith("by re-pick mode): network 1, warm 1 of 2 points.")


def test_a_further_timing_run_joins_only_the_runs_re_picked_as_compile_re_picks_now():
    point = _point(50, 0, 80.0, 100.0)
    other = "cold" if DEFAULT_REPICK != "cold" else "warm"
    point["timings"] = [
        {"latency": point["latency"], "repick_mode": other},
        {"latency": point["latency"], "repick_mode": DEFAULT_REPICK},
    ]
    assert report_module._current_timings(point) == point["timings"][1:]
    point["timings"][0].pop("repick_mode")  # saved before the modes were recorded: re-picked warm
    assert len(report_module._current_timings(point)) == 1 + (DEFAULT_REPICK == "warm")


def test_side_by_side_reach_builds_every_budget_beside_the_last_no_transfer():
    report = _report([_point(50, 0, 90.0, 150.0), _point(400, 0, 60.0, 70.0), _point(2000, 0, 50.0, 55.0)])
    report["points"][1]["arms"]["transfer"]["from_pack"] = 3  # applied records precede the trials
    builds = report_module._reach_builds(report, "net", 0)
    assert builds == {
        "transfer@50": ("transfer", 50),
        "transfer@400": ("transfer", 403),
        "transfer@2000": ("transfer", 2000),
        "no-transfer@2000": ("no-transfer", 2000),
    }
    assert report_module._reach_builds(report, "net", 1) == {}


def test_side_by_side_reach_takes_each_builds_fastest_run_and_the_first_budget_within_noise():
    # Labels come back from the timing in any order: budgets compare as numbers, not as text.
    report = _report([_point(b, 0, 1.0, 1.0) for b in (50, 400, 2000)])
    report["rounds"] = 5
    run = {"transfer@2000": 49.0, "transfer@400": 52.0, "transfer@50": 80.0, "no-transfer@2000": 50.0}
    slow = {label: {"ms": 1.2 * ms} for label, ms in run.items()}
    slow["transfer@400"] = {"ms": 51.4}  # within 1.03 of the bar in its fastest run only
    report["reach"] = {
        "net": {
            "0": {
                "builds": dict.fromkeys(run, 0),
                "timings": [{"latency": {k: {"ms": v} for k, v in run.items()}}, {"latency": slow}],
            }
        }
    }
    line = report_module._reach_line(report, "net")
    assert "transfer@400 51.400 ms (1.028)" in line
    assert "transfer@50 80.000 ms (1.600)" in line
    # The slow run's bar is slow too: against it 400 trials reach; the first run reaches only at 2000.
    assert line.endswith("Smallest budget within 1.03x: transfer 400 (per timing run: 2000, 400).")
    run["transfer@400"] = 60.0
    report["reach"]["net"]["0"]["timings"] = [{"latency": {k: {"ms": v} for k, v in run.items()}}]
    assert report_module._reach_line(report, "net").endswith("transfer 2000 (per timing run: 2000).")
    report["arms"].append("transfer@grown")  # added by a redo after the side-by-side run: not claimed
    assert report_module._reach_line(report, "net").endswith("transfer 2000 (per timing run: 2000).")


def test_a_second_pack_tunes_each_transfer_arm_again_and_a_resumed_report_must_hold_the_same_packs(tmp_path):
    from benchmarks.transfer_common import arms_with_packs, load_resumable, run_context
    from tvm_transfer.target import host_target
    from tvm_transfer.transfer import DEFAULT_PACK
    from tvm_transfer.transfer.pack import TransferPack

    pack = TransferPack.open(DEFAULT_PACK)
    arms, packs = arms_with_packs(report_module.ARMS, pack, {"grown": pack})
    assert list(arms) == ["no-transfer", "transfer", "transfer@grown"]
    assert arms["transfer@grown"] is arms["transfer"]
    assert packs == {"no-transfer": None, "transfer": pack, "transfer@grown": pack}

    target = host_target()
    path = tmp_path / "report.json"
    path.write_text(json.dumps({**run_context(pack, target), "points": []}))  # measured without it
    with pytest.raises(SystemExit, match=r"measured beside other second packs \(none\)"):
        load_resumable(path, pack, target, {"grown": pack})
    # A redo of one of its arms adds the pack to the report; any other new pack is still refused.
    assert load_resumable(path, pack, target, {"grown": pack}, adding="grown")["points"] == []
    with pytest.raises(SystemExit, match="measured beside other second packs"):
        load_resumable(path, pack, target, {"grown": pack, "other": pack}, adding="grown")


def test_a_redo_sets_an_arms_work_dir_aside_once_and_a_resumed_redo_keeps_its_own(tmp_path):
    old, new_arm = tmp_path / "transfer", tmp_path / "transfer@grown"
    old.mkdir()
    (old / "records").write_text("before")
    for work_dir in (old, new_arm):
        report_module._set_aside(work_dir, "grown")
        work_dir.mkdir()
        (work_dir / "records").write_text("the redo's")
        report_module._set_aside(work_dir, "grown")  # resumed
        assert (work_dir / "records").read_text() == "the redo's"
    assert (tmp_path / "transfer.before-grown" / "records").read_text() == "before"
    assert not any((tmp_path / "transfer@grown.before-grown").iterdir())
