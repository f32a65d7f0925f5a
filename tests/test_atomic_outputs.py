"""A failed command never destroys an earlier result: outputs are replaced only when writing succeeded."""

import zipfile

import numpy as np
import pytest

from tenset_tools import SHIPPED_DATASET
from tenset_tools.atomic import atomic_output, atomic_write_text
from tenset_tools.cli import main
from tenset_tools.schema import read_dataset, write_dataset
from tvm_transfer.cost_model import base as cost_model_base
from tvm_transfer.cost_model import make_cost_model


@pytest.fixture
def existing_dataset(tmp_path):
    """An output file that already holds a small valid dataset, and its bytes."""
    path = tmp_path / "out.parquet"
    write_dataset(read_dataset(SHIPPED_DATASET).head(12), path)
    return path, path.read_bytes()


def _stray_files(folder, keep):
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def test_helper_replaces_the_target_on_success(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    with atomic_output(target) as temporary:
        assert temporary.parent == tmp_path and temporary != target
        temporary.write_text("new")
        assert target.read_text() == "old"
    assert target.read_text() == "new"
    assert _stray_files(tmp_path, {"report.json"}) == []


def test_helper_keeps_the_target_when_the_block_raises(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="midway"), atomic_output(target) as temporary:
        temporary.write_text("half")
        raise RuntimeError("midway")
    assert target.read_text() == "old"
    assert _stray_files(tmp_path, {"report.json"}) == []


def test_helper_needs_an_existing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        atomic_write_text(tmp_path / "missing" / "report.json", "text")
    assert _stray_files(tmp_path, set()) == []


def test_convert_of_a_missing_input_leaves_the_output(existing_dataset, tmp_path):
    path, before = existing_dataset
    missing = tmp_path / "does-not-exist.json"
    assert main(["convert", str(missing), "-o", str(path), "--no-progress"]) != 0
    assert path.read_bytes() == before
    assert _stray_files(tmp_path, {"out.parquet"}) == []


def test_prune_of_a_damaged_input_leaves_the_output(existing_dataset, tmp_path):
    path, before = existing_dataset
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(before[: len(before) // 2])
    assert main(["prune", str(damaged), "-o", str(path)]) != 0
    assert path.read_bytes() == before
    assert _stray_files(tmp_path, {"out.parquet", "damaged.parquet"}) == []


def test_a_failing_dataset_stream_leaves_the_output(existing_dataset, tmp_path):
    path, before = existing_dataset
    frame = read_dataset(path)
    with pytest.raises(KeyError):
        write_dataset(frame.drop(columns=["latency"]), path)
    assert path.read_bytes() == before
    assert _stray_files(tmp_path, {"out.parquet"}) == []


@pytest.fixture
def saved_model(tmp_path):
    """A small fitted XGBoost cost model saved to a file, and the file's bytes."""
    rng = np.random.default_rng(0)
    model = make_cost_model("xgboost").fit_features(
        rng.normal(size=(30, 4)).astype(np.float32), rng.uniform(size=30), ["g"] * 30
    )
    path = tmp_path / "model.zip"
    model.save(str(path))
    return model, path, path.read_bytes()


def test_a_failing_model_blob_leaves_the_saved_model(saved_model, tmp_path, monkeypatch):
    model, path, before = saved_model

    def broken_blob(arrays):
        raise ValueError("blob failed")

    monkeypatch.setattr(cost_model_base, "arrays_bytes", broken_blob)
    # The error crosses MetaSchedule's C++ boundary, which may change its type.
    with pytest.raises(Exception, match="blob failed"):
        model.save(str(path))
    assert path.read_bytes() == before
    assert _stray_files(tmp_path, {"model.zip"}) == []


def test_a_model_archive_failing_midway_leaves_the_saved_model(saved_model, tmp_path, monkeypatch):
    model, path, before = saved_model
    writestr = zipfile.ZipFile.writestr

    def fail_after_meta(archive, name, data, *args, **kwargs):
        if name != "meta.json":
            raise OSError("disk full")
        return writestr(archive, name, data, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "writestr", fail_after_meta)
    with pytest.raises(Exception, match="disk full"):
        model.save(str(path))
    assert path.read_bytes() == before
    assert _stray_files(tmp_path, {"model.zip"}) == []
