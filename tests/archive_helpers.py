"""Helpers of the tests that tamper with saved cost models."""

import re
import zipfile

import numpy as np
import pytest

from tvm_transfer.common.archive import arrays_bytes, read_arrays
from tvm_transfer.cost_model import CostModelFileError, load_cost_model


def archive_blobs(path) -> dict[str, bytes]:
    """The members of the model archive at ``path``, by name."""
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def write_archive_blobs(path, blobs) -> None:
    """Write ``blobs`` (member name -> bytes or str) as a model archive at ``path``."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, blob in blobs.items():
            archive.writestr(name, blob)


def with_changed_arrays(path, out, change) -> None:
    """Copy the archive at ``path`` to ``out`` with ``change`` applied to the arrays (a dict, by name) of its
    ``model.bin``."""
    blobs = archive_blobs(path)
    arrays = read_arrays(blobs["model.bin"], "model.bin")
    change(arrays)
    blobs["model.bin"] = arrays_bytes(arrays)
    write_archive_blobs(out, blobs)


def assert_tampered_arrays_are_named(path, tmp_path, missing: str, misshaped: str) -> None:
    """Copies of the saved model at ``path`` without the array ``missing``, or with ``misshaped`` of another
    shape, are refused with a :class:`CostModelFileError` naming the file and the array."""
    without, reshaped = tmp_path / "without.model", tmp_path / "reshaped.model"
    with_changed_arrays(path, without, lambda arrays: arrays.pop(missing))
    with_changed_arrays(path, reshaped, lambda arrays: arrays.update({misshaped: np.zeros(1, np.float32)}))
    with pytest.raises(
        CostModelFileError, match=rf"without\.model: model\.bin: lacks the array '{re.escape(missing)}'"
    ):
        load_cost_model(without)
    with pytest.raises(
        CostModelFileError,
        match=rf"reshaped\.model: model\.bin: the array '{re.escape(misshaped)}' has shape",
    ):
        load_cost_model(reshaped)
