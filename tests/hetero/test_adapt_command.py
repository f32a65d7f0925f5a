"""``tenset-tools train-source`` and ``tenset-tools adapt`` on the shipped dataset: a source model on one CPU
target's per-store features adapted to the other target described by trace features."""

from __future__ import annotations

import json

import pytest

from tenset_tools import SHIPPED_DATASET
from tenset_tools.command import build_parser, run
from tvm_transfer.cli.adapt import COMMANDS
from tvm_transfer.hetero import ModelX, SourceModel


def tenset_tools(*argv: str) -> int:
    parser = build_parser("tenset-tools", None, COMMANDS)
    return run(parser, [str(a) for a in argv], errors=(OSError, ValueError))


@pytest.fixture(scope="module")
def source_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("adapt") / "source.model"
    assert (
        tenset_tools(
            "train-source", SHIPPED_DATASET, "-o", path, "--targets", "llvm/znver4/2", "--epochs", 30
        )
        == 0
    )
    return path


def test_adapt_writes_a_model_and_scores_it(tmp_path, source_file, capsys):
    out, report = tmp_path / "adapted.model", tmp_path / "report.json"
    code = tenset_tools(
        "adapt", source_file, SHIPPED_DATASET, "-o", out, "--features", "trace",
        "--targets", "llvm/x86-64-v3/1", "--fraction", 0.05, "--source-data", SHIPPED_DATASET,
        "--json", report,
    )  # fmt: skip
    assert code == 0
    result = json.loads(report.read_text())
    assert result["source_columns"] == 328 and result["target_columns"] == 78
    assert result["adaptation_records"] == round(
        0.05 * (result["adaptation_records"] + result["held_out_records"])
    )
    assert set(result["modelx"]) == {"mse", "pairwise_accuracy", "peak@1", "peak@5"}
    assert result["distance_zero_shot"] > 0 and "distance_aligned" in result
    assert result["columns"]["matched"] == []  # no per-store column has a trace column's name
    adapted = ModelX.load(out, source_model=SourceModel.load(source_file))
    assert adapted.feature_names_in_[0] == "trace.n_GetSBlock"
    assert "| modelx |" in capsys.readouterr().out


def test_distance_only_writes_nothing_and_options_are_checked(tmp_path, source_file, capsys):
    code = tenset_tools(
        "adapt", source_file, SHIPPED_DATASET, "--features", "trace", "--mode", "align", "--distance-only",
        "--source-data", SHIPPED_DATASET, "--targets", "llvm/x86-64-v3/1",
    )  # fmt: skip
    assert code == 0 and "distance_zero_shot" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
    assert tenset_tools("adapt", source_file, SHIPPED_DATASET, "--features", "trace") == 1
    assert "-o/--output is required" in capsys.readouterr().err
    assert (
        tenset_tools("adapt", source_file, SHIPPED_DATASET, "-o", tmp_path / "x", "--features", "bogus") == 1
    )
    assert "unknown feature view 'bogus'" in capsys.readouterr().err
