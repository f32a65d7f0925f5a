"""Helpers of the tests that tamper with saved cost models."""

import zipfile

from tvm_transfer.common.archive import arrays_bytes, read_arrays


def with_changed_arrays(path, out, change) -> None:
    """Copy the archive at ``path`` to ``out`` with ``change`` applied to the arrays (a dict, by name) of its
    ``model.bin``."""
    with zipfile.ZipFile(path) as archive:
        blobs = {name: archive.read(name) for name in archive.namelist()}
    arrays = read_arrays(blobs["model.bin"], "model.bin")
    change(arrays)
    blobs["model.bin"] = arrays_bytes(arrays)
    with zipfile.ZipFile(out, "w") as archive:
        for name, blob in blobs.items():
            archive.writestr(name, blob)
