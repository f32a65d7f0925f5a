"""One run, one plan: a work dir's settings recorded once and followed by later runs, every setting a
run contradicts refused, and no option accepted that the run would not read."""

from __future__ import annotations

import json

import pytest

from tenset_tools.metaschedule import SIDECAR_FILE, Sidecar, write_sidecar
from tvm_transfer.cli import main
from tvm_transfer.tuning.network import first_round_batch
from tvm_transfer.tuning.workdir import SETTINGS_FILE, WorkDir, WorkDirMismatchError, WorkDirSettings

SMALL = ["--trials-per-iter", "4", "--population", "8", "--no-transfer", "--quiet"]
BUILD = ["--runtimes", "none", "--rounds", "1"]


def test_settings_are_recorded_once_and_unsaid_ones_are_taken_from_the_work_dir(tmp_path):
    work_dir = WorkDir(tmp_path / "run")
    assert work_dir.settings() == WorkDirSettings() and not work_dir.path.exists()  # reading creates nothing
    work_dir.record_settings(WorkDirSettings("mlp", False, "cold"))
    assert work_dir.settings() == WorkDirSettings("mlp", False, "cold")
    work_dir.record_settings(WorkDirSettings("mlp", True, "warm"))  # what is recorded stays
    assert work_dir.settings() == WorkDirSettings("mlp", False, "cold")
    assert WorkDirSettings(layout_free=True).merged(work_dir.settings()) == WorkDirSettings(
        "mlp", True, "cold"
    )
    with pytest.raises(WorkDirMismatchError, match="tuned without weight layout rewrite"):
        work_dir.check(WorkDirSettings(layout_free=True))
    with pytest.raises(WorkDirMismatchError, match="timed cold, and records timed warm would not compare"):
        work_dir.check(WorkDirSettings(measure_caches="warm"))
    with pytest.raises(WorkDirMismatchError, match="convolutions NCHW: tune and compile it with that layout"):
        work_dir.check(WorkDirSettings(network="mlp@nhwc"))
    work_dir.check(WorkDirSettings("mlp", False, "cold"))  # the same settings pass


def test_a_work_dir_from_before_the_settings_file_says_its_network_and_timing_through_its_sidecar(tmp_path):
    write_sidecar(tmp_path, Sidecar("resnet_block@nhwc", {"t": ("task", 1.0)}))
    path = tmp_path / SIDECAR_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), "measure_caches": "cold"}))
    assert WorkDir(tmp_path).settings() == WorkDirSettings("resnet_block@nhwc", None, "cold")


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"layout_free": "yes"}'])
def test_a_damaged_settings_file_is_a_named_error_saying_what_to_do(tmp_path, content):
    (tmp_path / SETTINGS_FILE).write_text(content)
    with pytest.raises(WorkDirMismatchError, match="delete it if you know how the work dir was tuned"):
        WorkDir(tmp_path).settings()


def test_the_first_round_shrinks_its_batches_so_every_task_gets_one():
    assert first_round_batch(16, 400, 51) == 7  # 7 x 51 = 357 trials: every task gets its first batch
    assert first_round_batch(16, 10_000, 51) == 16  # never above trials_per_iter
    assert first_round_batch(16, 20, 51) == 1  # at least one candidate


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["compile", "mlp", "--cost-model", "xgboost"], "--cost-model"),
        (["compile", "mlp", "--population", "64", "--profile"], "--population, --profile"),
        (["tune-network", "mlp", "--rounds", "3"], "--rounds"),
        (["tune-network", "mlp", "--repick", "cold", "--profile-network"], "--repick, --profile-network"),
        (["tune-network", "mlp", "--copula-quantile", "0.3"], "--copula-quantile"),
        (["tune", "matmul", "--few-shot"], "--few-shot"),
    ],
)
def test_an_option_the_run_would_not_read_is_refused_naming_it(tmp_path, capsys, argv, named):
    assert main([*argv, "--work-dir", str(tmp_path / "w")]) == 2
    assert f"{named}: not used by this run" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_a_saved_model_and_a_cost_model_name_exclude_each_other(tmp_path, capsys):
    argv = [
        "tune",
        "matmul",
        "--model-file",
        "m.model",
        "--cost-model",
        "xgboost",
        "--work-dir",
        str(tmp_path),
    ]
    assert main(argv) == 2
    assert "--model-file and --cost-model exclude each other" in capsys.readouterr().err


def test_compile_follows_the_layout_rewrite_the_work_dir_was_tuned_with(tmp_path, capsys):
    work_dir = ["--work-dir", str(tmp_path / "fixed")]
    assert main(["tune-network", "mlp", "--trials", "4", "--no-layout-rewrite", *SMALL, *work_dir]) == 0
    assert main(["compile", "mlp", *BUILD, *work_dir, "--json", str(tmp_path / "c.json")]) == 0
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["compile"]["layout_free"] is False and report["compile"]["tuned_tasks"][0] > 0
    free = ["--work-dir", str(tmp_path / "free")]
    assert main(["tune-network", "mlp", "--trials", "4", *SMALL, *free]) == 0
    capsys.readouterr()
    assert main(["compile", "mlp", "--no-layout-rewrite", *BUILD, *free]) == 2
    assert "was tuned with weight layout rewrite: run without --no-layout-rewrite" in capsys.readouterr().err
