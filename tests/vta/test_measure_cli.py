"""measure(), features, the knob space and the ``vta-ext`` command line."""

import json

import numpy as np
import pytest

from vta_ext import measure
from vta_ext.cli import main
from vta_ext.features import HIDDEN_FEATURE_NAMES, VISIBLE_FEATURE_NAMES
from vta_ext.hw import HwConfig
from vta_ext.knobs import KnobSpace
from vta_ext.workloads import LSTM_DENSE, RESNET18

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


def test_cli(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert main(["space", "C2"]) == 0
    assert "2304 configurations" in capsys.readouterr().out
    knobs = json.dumps(dict(tile_b=1, tile_ci=2, tile_co=2, oc_nthread=2))
    assert main(["measure", "lstm.dense.1", "--knobs", knobs]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True


def test_a_missing_hw_file_is_a_usage_error_naming_it(capsys):
    knobs = json.dumps(dict(tile_b=1, tile_ci=2, tile_co=2, oc_nthread=2))
    with pytest.raises(SystemExit) as info:
        main(["measure", "lstm.dense.1", "--knobs", knobs, "--hw", "missing.json"])
    assert info.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert "missing.json" in message and "Traceback" not in message
