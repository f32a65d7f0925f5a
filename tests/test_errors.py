"""Bad input on the three command lines: one line naming the option, the value and what is allowed; exit
status 2 for usage errors; no traceback unless ``--debug`` or ``TVM_TRANSFER_DEBUG=1``."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from archive_helpers import archive_blobs, write_archive_blobs

from tenset_tools import SHIPPED_DATASET
from tenset_tools.cli import main as tenset_main
from tenset_tools.command import UsageError
from tvm_transfer.cli import main as tvm_main
from tvm_transfer.common.errors import failure_line
from tvm_transfer.cost_model import CostModelFileError, load_cost_model, make_cost_model
from vta_ext.cli import main as vta_main
from vta_ext.hw import HwConfig, HwConfigError
from vta_ext.knobs import KnobError
from vta_ext.measure import measure
from vta_ext.workloads import LSTM_DENSE

DENSE_KNOBS = {"tile_b": 1, "tile_ci": 2, "tile_co": 2, "oc_nthread": 2}


def _error(main, argv, capsys) -> tuple[int, str]:
    """Exit status and the one stderr line of a command that fails (argparse's errors exit by SystemExit)."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    # A plug-in command that this checkout lacks but the installed entry points name is reported by
    # load_commands; that line is about the environment, not the error under test.
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if "unavailable (" not in line]
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    return code, lines[0]


TUNE = ["tune", "matmul", "--no-reference", "--quiet"]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--shape", "0,64,64"], ["--shape '0,64,64'", "M=0", "at least 1"]),
        (["--shape", "a,b,c"], ["--shape 'a,b,c'", "integers M,N,K"]),
        (["--shape", "64,64"], ["--shape '64,64'", "3 shape values (M,N,K)"]),
        (["--trials-per-iter", "0"], ["--trials-per-iter", "0 is out of range: >= 1"]),
        (["--trials-per-iter", "-3"], ["--trials-per-iter", "-3 is out of range"]),
        (["--trials", "-5"], ["--trials", "-5 is out of range: >= 0"]),
        (["--trials", "many"], ["--trials", "'many' is not an integer"]),
        (["--num-cores", "0"], ["--num-cores", "0 is out of range: >= 1"]),
        (["--population", "1"], ["--population", ">= 2"]),
        (["--mcpu", "bogus-cpu"], ["--mcpu 'bogus-cpu'", "LLVM knows no CPU"]),
        (["--mcpu", "skylake-avx"], ["--mcpu 'skylake-avx'", "closest: skylake-avx512"]),
        (["--target", "llvm -mcpu=znver4"], ["--target 'llvm -mcpu=znver4' is not JSON"]),
        (["--target", "[1, 2]"], ["--target '[1, 2]'", 'a "kind"']),
        (["--target", '{"kind": "llvm", "mcpu": "nope"}'], ["--target mcpu 'nope'"]),
        (["--target", '{"kind": "llvm"}', "--mcpu", "znver4"], ["--target sets the whole target"]),
    ],
)
def test_tune_usage_errors_are_one_named_line(extra, named, tmp_path, capsys):
    code, line = _error(tvm_main, [*TUNE, "--work-dir", str(tmp_path / "w"), *extra], capsys)
    assert code == 2 and line.startswith("tvm-transfer tune")
    for text in named:
        assert text in line
    assert not (tmp_path / "w").exists()  # refused before anything was created


def test_a_work_dir_that_is_a_file_or_not_writable(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, line = _error(tvm_main, [*TUNE, "--work-dir", str(a_file)], capsys)
    assert code == 2 and f"--work-dir '{a_file}' is a file" in line
    code, line = _error(tvm_main, [*TUNE, "--work-dir", str(a_file / "below")], capsys)
    assert code == 2 and "is a file, so the directory cannot be made" in line


def test_debug_shows_the_traceback_instead(monkeypatch):
    with pytest.raises(UsageError, match="--shape 'a,b,c'"):
        tvm_main(["--debug", *TUNE, "--shape", "a,b,c"])
    with pytest.raises(UsageError, match="--shape 'a,b,c'"):
        tvm_main([*TUNE, "--shape", "a,b,c", "--debug"])
    monkeypatch.setenv("TVM_TRANSFER_DEBUG", "1")
    with pytest.raises(UsageError):
        tvm_main([*TUNE, "--shape", "a,b,c"])


# ---- VTA -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"LOG_BUS_WIDTH": -1}, "LOG_BUS_WIDTH=-1: must be in [3, 12]"),
        ({"LOG_INP_BUFF_SIZE": 60}, "LOG_INP_BUFF_SIZE=60: must be in [0, 30]"),
        ({"CLOCK_MHZ": float("nan")}, "CLOCK_MHZ=nan: must be a finite number"),
        ({"LOG_BLOCK": "4"}, "LOG_BLOCK='4': an integer"),
        ({"GEMM_II": True}, "GEMM_II=True: an integer"),
        ({"BOGUS": 1}, "unknown VTA config keys: BOGUS"),
    ],
)
def test_absurd_hardware_configs_are_refused_naming_the_key(config, named, tmp_path, capsys):
    with pytest.raises(HwConfigError, match=named.replace("[", r"\[").replace("]", r"\]")):
        HwConfig.from_dict(config)
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(config))  # NaN is written as the JSON extension Python reads back
    code, line = _error(
        vta_main, ["measure", "lstm.dense.1", "--knobs", json.dumps(DENSE_KNOBS), "--hw", str(path)], capsys
    )
    assert code == 2 and f"argument --hw: {path}: not a valid VTA config: {named}" in line


def test_missing_or_non_json_hardware_files(tmp_path, capsys):
    code, line = _error(vta_main, ["space", "C2", "--hw", str(tmp_path / "missing.json")], capsys)
    assert code == 2 and "missing.json' is neither a preset (default, evta) nor a JSON file" in line
    (tmp_path / "bad.json").write_text("{")
    code, line = _error(vta_main, ["space", "C2", "--hw", str(tmp_path / "bad.json")], capsys)
    assert code == 2 and "not JSON" in line


@pytest.mark.parametrize(
    ("knobs", "named"),
    [
        ({**DENSE_KNOBS, "tile_ci": 0}, "knob tile_ci=0 is not one of its options [1, 2, 4, 8, 16]"),
        ({**DENSE_KNOBS, "tile_ci": "2"}, "knob tile_ci='2' is not an integer"),
        ({**DENSE_KNOBS, "tile_ci": 2.5}, "knob tile_ci=2.5 is not an integer"),
        ({k: v for k, v in DENSE_KNOBS.items() if k != "tile_co"}, "knob tile_co is missing"),
        ({**DENSE_KNOBS, "tile_x": 1}, "unknown knob(s) tile_x"),
    ],
)
def test_knobs_out_of_range_or_of_the_wrong_type(knobs, named, capsys):
    with pytest.raises(KnobError) as info:
        measure(LSTM_DENSE["lstm.dense.1"], knobs, HwConfig())
    assert named in str(info.value)
    code, line = _error(vta_main, ["measure", "lstm.dense.1", "--knobs", json.dumps(knobs)], capsys)
    assert code == 2 and f"vta-ext measure: error: --knobs: {named}" in line


def test_knobs_that_are_not_json(capsys):
    code, line = _error(vta_main, ["measure", "lstm.dense.1", "--knobs", "tile_ci=2"], capsys)
    assert code == 2 and "--knobs 'tile_ci=2' is not JSON" in line and '"tile_ci"' in line


# ---- model files and datasets -------------------------------------------------------------------------


def _fitted(name: str, path):
    rng = np.random.default_rng(0)
    model = make_cost_model(name, **({"num_rounds": 2} if name in ("xgboost", "lightgbm") else {}))
    model.fit_features(rng.random((24, 172), np.float32), rng.random(24), np.repeat(["a", "b"], 12))
    model.save(str(path))
    return path


def test_an_archive_holding_another_models_payload_is_a_named_file_error(tmp_path, capsys):
    xgb, lgbm = _fitted("xgboost", tmp_path / "x.model"), _fitted("lightgbm", tmp_path / "l.model")
    for host, guest in ((xgb, lgbm), (lgbm, xgb)):
        blobs = archive_blobs(host)
        blobs["model.bin"] = archive_blobs(guest)["model.bin"]
        swapped = tmp_path / f"{host.stem}_with_{guest.stem}.model"
        write_archive_blobs(swapped, blobs)
        with pytest.raises(CostModelFileError, match=rf"{swapped.name}: model\.bin is not a saved \w+ state"):
            load_cost_model(swapped)
    code, line = _error(
        tvm_main, [*TUNE, "--model-file", str(swapped), "--work-dir", str(tmp_path / "w")], capsys
    )
    assert code == 2 and "--model-file:" in line and swapped.name in line

    blobs = archive_blobs(xgb)
    meta = json.loads(blobs["meta.json"])
    meta["params"]["max_depth"] = "deep"
    blobs["meta.json"] = json.dumps(meta)
    write_archive_blobs(tmp_path / "params.model", blobs)
    with pytest.raises(
        CostModelFileError, match=r"params\.model: meta\.json: hyper-parameter max_depth='deep'"
    ):
        load_cost_model(tmp_path / "params.model")


def test_a_dataset_without_kernel_features_is_refused_and_nothing_is_written(tmp_path, capsys):
    table = pq.read_table(SHIPPED_DATASET)
    broken = tmp_path / "broken.parquet"
    pq.write_table(
        table.drop_columns(["kernel_features"]).replace_schema_metadata(table.schema.metadata), broken
    )
    out = tmp_path / "out.parquet"
    for argv in (
        ["prune", str(broken), "-o", str(out)],
        ["split", str(broken), "--train-out", str(out), "--test-out", str(tmp_path / "test.parquet")],
        ["train", str(broken), "-o", str(tmp_path / "m.model")],
    ):
        code, line = _error(tenset_main, argv, capsys)
        assert code == 1 and "broken.parquet lacks the dataset column(s) kernel_features" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.parquet"]


def test_pruning_everything_away_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out.parquet"
    code, line = _error(
        tenset_main, ["prune", str(SHIPPED_DATASET), "-o", str(out), "--min-sample-size", "100000"], capsys
    )
    assert code == 1 and "pruning left no record" in line and "--min-sample-size" in line and not out.exists()
    code, line = _error(
        tenset_main, ["prune", str(SHIPPED_DATASET), "-o", str(out), "--flops-coverage", "0"], capsys
    )
    assert code == 2 and "--flops-coverage" in line and "out of range" in line


def test_a_tvm_failure_is_told_by_the_line_that_says_what_failed():
    rendered = "ScheduleError: An error occurred in a schedule primitive\nError message: Cannot find a block"
    assert failure_line(rendered) == "Cannot find a block"
    header = "LocalRunner: An exception occurred\nTraceback (most recent call last):\n ...\nRuntimeError: bad"
    assert failure_line(header) == "RuntimeError: bad"
    assert failure_line("PersistentBuilder: timeout, killed after 60.0 s\n") == (
        "PersistentBuilder: timeout, killed after 60.0 s"
    )
    assert len(failure_line("x" * 1000)) == 240 and failure_line("") == ""
