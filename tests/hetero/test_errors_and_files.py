"""Named errors (wrong widths, too few samples, mismatched model files) and the saved-model format."""

from __future__ import annotations

import json

import numpy as np
import pytest
from archive_helpers import archive_blobs, write_archive_blobs
from hetero_synthetic import permuted_target_rows, source_rows

from tvm_transfer.common.archive import CostModelFileError
from tvm_transfer.hetero import (
    FeatureWidthError,
    ModelFileMismatchError,
    ModelX,
    NotFittedError,
    SourceModel,
    TooFewSamplesError,
    load_model,
)


@pytest.fixture(scope="module")
def adapted(source_model) -> ModelX:
    few, labels = permuted_target_rows(30, np.random.default_rng(0))
    return ModelX(source_model, residual="xgboost", epochs=200, align_restarts=1).fit(few, labels)


def test_wrong_widths_are_named(source_model, adapted):
    target, _ = permuted_target_rows(5, np.random.default_rng(1))
    with pytest.raises(FeatureWidthError, match=r"missing \['t3'\]"):
        adapted.predict(target.drop(columns="t3"))
    with pytest.raises(FeatureWidthError, match="X has 7 columns, the model was fitted on 8"):
        adapted.predict(target.to_numpy()[:, :7])
    with pytest.raises(FeatureWidthError, match=r"missing \[\], unexpected \['t3', 't5'"):
        source_model.predict(target.rename(columns={"t1": "f1"}).assign(f2=0, f3=0, f5=0, f6=0, f7=0))


def test_too_few_samples_are_named(source_model):
    target, labels = permuted_target_rows(3, np.random.default_rng(2))
    with pytest.raises(
        TooFewSamplesError, match=r"ModelX.fit: 3 samples, at least 4 needed \(min_samples=4\)"
    ):
        ModelX(source_model).fit(target, labels)
    frame, labels = source_rows(10, np.random.default_rng(2))
    with pytest.raises(TooFewSamplesError, match=r"SourceModel\.fit: 10 samples, at least 16"):
        SourceModel().fit(frame, labels)
    with pytest.raises(NotFittedError, match="ModelX is not fitted"):
        ModelX(source_model).predict(target)


def test_save_load_round_trip(tmp_path, source_model, adapted):
    target, _ = permuted_target_rows(50, np.random.default_rng(3))
    source_model.save(tmp_path / "source.model")
    adapted.save(tmp_path / "adapted.model")
    source = load_model(tmp_path / "source.model")
    again = ModelX.load(tmp_path / "adapted.model", source_model=source)
    np.testing.assert_allclose(again.predict(target), adapted.predict(target), rtol=1e-6, atol=1e-9)
    frame, _ = source_rows(20, np.random.default_rng(3))
    np.testing.assert_allclose(source.predict(frame), source_model.predict(frame), rtol=1e-6)
    assert again.feature_names_in_ == list(target.columns)
    assert isinstance(load_model(tmp_path / "adapted.model"), ModelX)


def test_mismatched_model_files_are_named(tmp_path, source_model, adapted):
    source_model.save(tmp_path / "source.model")
    adapted.save(tmp_path / "adapted.model")
    with pytest.raises(ModelFileMismatchError, match="holds a SourceModel model, expected ModelX"):
        ModelX.load(tmp_path / "source.model")
    with pytest.raises(ModelFileMismatchError, match="holds a ModelX model, expected SourceModel"):
        SourceModel.load(tmp_path / "adapted.model")

    other_frame, other_labels = source_rows(100, np.random.default_rng(9))
    other = SourceModel(epochs=5, seed=1).fit(other_frame, other_labels)
    with pytest.raises(ModelFileMismatchError, match="adapted from another source model"):
        ModelX.load(tmp_path / "adapted.model", source_model=other)

    # A blob altered after saving (here: the residual booster swapped for zeros) fails its checksum.
    tampered = tmp_path / "tampered.model"
    blobs = archive_blobs(tmp_path / "adapted.model")
    blobs["residual.ubj"] = bytes(len(blobs["residual.ubj"]))
    write_archive_blobs(tampered, blobs)
    with pytest.raises(ModelFileMismatchError, match=r"checksum mismatch in residual\.ubj"):
        ModelX.load(tampered)

    # Another format version is refused by the shared archive reader.
    meta = json.loads(blobs["meta.json"])
    meta["format_version"] = 99
    blobs["meta.json"] = json.dumps(meta).encode()
    write_archive_blobs(tmp_path / "future.model", blobs)
    with pytest.raises(CostModelFileError, match="version 99"):
        ModelX.load(tmp_path / "future.model")
