"""Versioned model archives: a zip of ``meta.json`` and named binary blobs, never a pickle."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import IO

import tvm_ffi


@tvm_ffi.register_error
class CostModelFileError(ValueError):
    """A saved cost model cannot be read: not our format, another version, or another model class.

    Registered with tvm-ffi so that it keeps its type when ``load`` is called through MetaSchedule's
    ``CostModel`` object (the call crosses the C++ boundary).
    """


def write_archive(
    target: str | Path | IO[bytes], format_name: str, version: int, meta: dict, blobs: dict[str, bytes]
) -> None:
    """Write a versioned model archive: a zip of ``meta.json`` (``meta`` plus the format name and version)
    and the named binary ``blobs``. :func:`read_archive` reads it back."""
    header = {"format": format_name, "format_version": version, **meta}
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("meta.json", json.dumps(header, indent=1))
        for name, blob in blobs.items():
            archive.writestr(name, blob)


def read_archive(
    source: str | Path | IO[bytes], format_name: str, version: int, expected_model: str | None
) -> tuple[dict, dict[str, bytes]]:
    """``(meta, blobs)`` of an archive written by :func:`write_archive`; raises :class:`CostModelFileError`
    for an unreadable file, another format or version, or (with ``expected_model``) another model class."""
    expected = f"a {format_name} archive, format version {version}"
    try:
        with zipfile.ZipFile(source) as archive:
            meta = json.loads(archive.read("meta.json"))
            blobs = {n: archive.read(n) for n in archive.namelist() if n != "meta.json"}
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as err:
        raise CostModelFileError(f"{source}: not readable as a model ({err}); expected {expected}") from err
    if meta.get("format") != format_name or meta.get("format_version") != version:
        raise CostModelFileError(
            f"{source}: format {meta.get('format')!r} version {meta.get('format_version')!r}, expected "
            f"{expected}; retrain the model with this version of tvm-transfer and save it again"
        )
    if expected_model is not None and meta.get("model") != expected_model:
        raise CostModelFileError(
            f"{source}: holds a {meta.get('model')} model; load it with {meta.get('model')}, "
            f"not {expected_model}"
        )
    return meta, blobs
