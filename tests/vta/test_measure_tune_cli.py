"""measure(), features, the knob space, the tuner, records and the command line."""

import json

import numpy as np
import pytest

from tenset_tools.schema import read_dataset
from vta_ext import measure
from vta_ext.cli import main
from vta_ext.features import HIDDEN_FEATURE_NAMES, HW_FEATURE_NAMES, VISIBLE_FEATURE_NAMES
from vta_ext.hw import HwConfig
from vta_ext.knobs import KnobSpace
from vta_ext.tune import candidates, tune, write_records
from vta_ext.workloads import LSTM_DENSE, RESNET18, Conv2D

HW = HwConfig()


def test_space_sizes_match_vta_templates():
    sizes = {name: len(KnobSpace(wl, HW)) for name, wl in RESNET18.items()}
    assert sizes["C2"] == 2304 and sizes["C8"] == 1600 and sizes["C10"] == 480
    assert len(KnobSpace(LSTM_DENSE["lstm.dense.4"], HW)) == 3 * 5 * 4 * 2  # batch 4, 256 in, 128 out
    space = KnobSpace(RESNET18["C5"], HW)
    for index in (0, 17, len(space) - 1):
        assert space.index(space.point(index)) == index
    assert [space.index(k) for k in space][:5] == [0, 1, 2, 3, 4]


def test_measure_valid_result_has_all_features():
    knobs = dict(tile_b=1, tile_h=4, tile_w=56, tile_ci=1, tile_co=2, oc_nthread=2, h_nthread=2)
    result = measure(RESNET18["C2"], knobs, HW, repeats=3, noise=0.02, seed=1)
    assert result.valid and result.error_kind is None
    assert len(result.visible_features) == len(VISIBLE_FEATURE_NAMES)
    assert len(result.hidden_features) == len(HIDDEN_FEATURE_NAMES)
    assert np.all(np.isfinite(result.hidden_features))
    assert len(result.latencies) == 3 and len(set(result.latencies)) == 3
    assert result.latency == pytest.approx(result.cycles / 100e6)
    # Hidden features tell apart settings the visible knobs of another layer could not: they differ.
    other = measure(RESNET18["C2"], {**knobs, "tile_w": 28}, HW)
    assert other.hidden_features != result.hidden_features


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
    assert len(frame) == 30 and frame.attrs["hw_feature_names"] == HW_FEATURE_NAMES
    assert frame["norm_throughput"].max() == pytest.approx(1.0)
    invalid = frame[~frame["valid"]]
    assert invalid["error_kind"].notna().all() and (invalid["norm_throughput"] == 0).all()
    assert set(frame["candidate_kind"]) == {"vta_knobs"}


def test_cli(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert main(["space", "C2"]) == 0
    assert "2304 configurations" in capsys.readouterr().out
    hw_file = tmp_path / "hw.json"
    HW.replace(LOG_BUS_WIDTH=7).save(hw_file)
    out_file = tmp_path / "records.parquet"
    assert (
        main(["tune", "C11", "--budget", "12", "--seed", "1", "--hw", str(hw_file), "--out", str(out_file)])
        == 0
    )
    assert "best latency" in capsys.readouterr().out
    assert len(read_dataset(out_file)) == 12
    knobs = json.dumps(dict(tile_b=1, tile_ci=2, tile_co=2, oc_nthread=2))
    assert main(["measure", "lstm.dense.1", "--knobs", knobs]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True
