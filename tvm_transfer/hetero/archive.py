"""Saved heterogeneous-transfer models: the package's versioned archive plus a checksum of every blob.

An archive holds ``meta.json`` (format name and version, the model class, its hyper-parameters, column
names, and the SHA-256 of each blob) and plain blobs: NumPy ``.npz`` arrays read without unpickling, and
XGBoost's own UBJSON for boosters. A blob whose checksum differs from the one recorded (a file edited or
assembled from parts of others) is refused, as is another format, version or model class.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import IO

import numpy as np

from tvm_transfer.common.archive import (
    CostModelFileError,
    arrays_bytes,
    read_archive,
    read_arrays,
    write_archive,
)
from tvm_transfer.hetero.errors import ModelFileMismatchError

FORMAT_NAME = "tvm-transfer-hetero-model"
#: Version of the archive layout; :func:`read_model` refuses any other.
FORMAT_VERSION = 1
ARRAYS = "arrays.npz"


def digest(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def write_model(
    path: str | Path | IO[bytes],
    model: str,
    meta: dict,
    arrays: dict[str, np.ndarray],
    blobs: dict[str, bytes] | None = None,
) -> None:
    """Write one model archive: ``meta`` (JSON-serialisable), named ``arrays`` and other ``blobs``."""
    everything = {ARRAYS: arrays_bytes(arrays), **(blobs or {})}
    header = {"model": model, **meta, "checksums": {name: digest(b) for name, b in everything.items()}}
    write_archive(path, FORMAT_NAME, FORMAT_VERSION, header, everything)


def read_model(
    path: str | Path | IO[bytes], model: str | tuple[str, ...]
) -> tuple[dict, dict[str, np.ndarray], dict[str, bytes]]:
    """``(meta, arrays, other blobs)`` of an archive written by :func:`write_model` for a ``model`` class
    (or one of several); raises :class:`ModelFileMismatchError` for another class or a wrong checksum, and
    :class:`~tvm_transfer.common.archive.CostModelFileError` for another format or version."""
    where = str(path) if isinstance(path, (str, Path)) else "model file"
    meta, blobs = read_archive(path, FORMAT_NAME, FORMAT_VERSION, None)
    allowed = (model,) if isinstance(model, str) else model
    if meta.get("model") not in allowed:
        raise ModelFileMismatchError(
            f"{where}: holds a {meta.get('model')} model, expected {' or '.join(allowed)}; "
            f"load it with {meta.get('model')}.load"
        )
    checksums = meta.get("checksums", {})
    if set(checksums) != set(blobs):
        raise ModelFileMismatchError(
            f"{where}: blobs {sorted(blobs)} do not match the recorded checksums {sorted(checksums)}"
        )
    for name, blob in blobs.items():
        if digest(blob) != checksums[name]:
            raise ModelFileMismatchError(f"{where}: checksum mismatch in {name}; the file was altered")
    if ARRAYS not in blobs:
        raise CostModelFileError(f"{where}: lacks {ARRAYS}")
    arrays = read_arrays(blobs.pop(ARRAYS), f"{where}: {ARRAYS}")
    return meta, arrays, blobs
