"""The random / grid knob tuner, its shared-schema records and ``tvm-transfer vta-tune``."""

import json

import pytest

from tenset_tools.schema import read_dataset
from tvm_transfer.cli import main
from tvm_transfer.vta.sweep import candidates, tune, write_records
from vta_ext.features import VTA_HW_FEATURE_NAMES
from vta_ext.hw import HwConfig
from vta_ext.knobs import KnobSpace
from vta_ext.workloads import RESNET18, Conv2D

HW = HwConfig()


def test_grid_and_random_candidates():
    space = KnobSpace(RESNET18["C11"], HW)
    grid = candidates(space, "grid", 10, seed=0)
    assert grid == [space.point(i) for i in range(10)]
    draws = candidates(space, "random", 50, seed=3)
    assert len({json.dumps(k, sort_keys=True) for k in draws}) == 50
    assert draws == candidates(space, "random", 50, seed=3)


def test_tune_writes_schema_records(tmp_path):
    wl = Conv2D("small", 1, 8, 8, 32, 32, 3, 1, 1)
    result = tune(wl, HW, "random", budget=30, seed=0, progress=False)
    assert result.n_valid > 0 and result.n_invalid > 0
    valid = [r for r in result.records if r["valid"]]
    assert min(r["latency"] for r in valid) == result.best_latency
    write_records(result.records, tmp_path / "vta.parquet")
    frame = read_dataset(tmp_path / "vta.parquet")
    assert len(frame) == 30 and frame.attrs["hw_feature_names"] == VTA_HW_FEATURE_NAMES
    assert frame["norm_throughput"].max() == pytest.approx(1.0)
    invalid = frame[~frame["valid"]]
    assert invalid["error_kind"].notna().all() and (invalid["norm_throughput"] == 0).all()
    assert set(frame["candidate_kind"]) == {"vta_knobs"}


def test_vta_tune_command(tmp_path, capsys):
    hw_file = tmp_path / "hw.json"
    HW.replace(LOG_BUS_WIDTH=7).save(hw_file)
    out_file = tmp_path / "records.parquet"
    args = ["vta-tune", "C11", "--budget", "12", "--seed", "1", "--hw", str(hw_file), "--out", str(out_file)]
    assert main(args) == 0
    assert "best latency" in capsys.readouterr().out
    assert len(read_dataset(out_file)) == 12
