"""Versioned model archives: a zip of ``meta.json`` and named binary blobs, never a pickle.

A model file is something users exchange, so reading one must never run code: blobs hold plain arrays
(:func:`arrays_bytes`, read by :func:`read_arrays` with NumPy's pickle support off) or a library's own
data format (e.g. XGBoost's UBJSON), and :func:`checked_arrays` checks names and shapes before use.
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import tvm_ffi

from tenset_tools.atomic import atomic_output


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
    and the named binary ``blobs``. :func:`read_archive` reads it back. A file path is replaced only when
    the whole archive is written (see :func:`~tenset_tools.atomic.atomic_output`)."""
    header = {"format": format_name, "format_version": version, **meta}
    if not isinstance(target, (str, os.PathLike)):
        _write_zip(target, header, blobs)
        return
    with atomic_output(target) as temporary:
        _write_zip(temporary, header, blobs)


def _write_zip(target: Path | IO[bytes], header: dict, blobs: dict[str, bytes]) -> None:
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


def short_reason(error: BaseException) -> str:
    """The first line of a library's error message, without a leading ``[time] file:line:`` stamp
    (XGBoost's), at most 160 characters: enough to say why a blob was refused, on one line."""
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return re.sub(r"^\[[\d:]+\] \S+: ", "", text)[:160]


def checked_params(params: object, defaults: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The hyper-parameters ``params`` read from an archive, checked against a fresh model's
    ``defaults`` (its ``get_params()``): raises :class:`CostModelFileError` naming ``where`` and the
    parameter when one is unknown or has another type than its default (an int may stand for a float;
    a default of ``None`` accepts anything)."""
    if not isinstance(params, dict):
        raise CostModelFileError(f"{where}: the hyper-parameters are not an object of name -> value")
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise CostModelFileError(f"{where}: unknown hyper-parameter(s) {unknown}; known: {sorted(defaults)}")
    for name, value in params.items():
        default = defaults[name]
        if default is None or value is None:
            continue
        expected = float if isinstance(default, float) else type(default)
        fits = isinstance(value, expected) and isinstance(value, bool) == isinstance(default, bool)
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            fits = True
        if not fits:
            raise CostModelFileError(
                f"{where}: hyper-parameter {name}={value!r} is not a {expected.__name__} like its default "
                f"{default!r}"
            )
    return dict(params)


def arrays_bytes(arrays: Mapping[str, Any]) -> bytes:
    """Named arrays as one NumPy ``.npz`` blob, which :func:`read_arrays` reads back without unpickling.

    Object arrays (which NumPy would pickle) are refused with ``ValueError``."""
    plain = {name: np.asarray(value) for name, value in arrays.items()}
    pickled = [name for name, value in plain.items() if value.dtype.hasobject]
    if pickled:
        raise ValueError(f"object arrays cannot be stored without pickle: {', '.join(pickled)}")
    buffer = io.BytesIO()
    np.savez(buffer, **plain)
    return buffer.getvalue()


def read_arrays(blob: bytes, where: str) -> dict[str, np.ndarray]:
    """The named arrays of a blob written by :func:`arrays_bytes`, all read at once and never unpickled;
    raises :class:`CostModelFileError` (its message starts with ``where``, e.g. ``"path: data.npz"``) for
    anything else, e.g. a pickle or an object array."""
    try:
        loaded = np.load(io.BytesIO(blob), allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("a single array, not named arrays")
        with loaded:
            arrays = {name: loaded[name] for name in loaded.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        # NumPy's own message about pickled data suggests loading it unsafely: say what happens instead.
        reason = "NumPy would have to unpickle it, which is never done" if "pickle" in str(err) else str(err)
        raise CostModelFileError(f"{where}: not readable as plain arrays ({reason})") from err
    stray = [name for name, value in arrays.items() if not isinstance(value, np.ndarray)]
    if stray:
        raise CostModelFileError(f"{where}: {', '.join(stray)} are not arrays")
    return arrays


def checked_arrays(
    arrays: Mapping[str, np.ndarray],
    shapes: Mapping[str, tuple[int | None, ...]],
    prefix: str,
    where: str,
    optional: Collection[str] = (),
) -> dict[str, np.ndarray]:
    """The arrays named ``prefix + key`` for the keys of ``shapes``, by ``key``; raises
    :class:`CostModelFileError` naming ``where`` and the key when one is missing (unless ``optional``), has
    another shape (``None`` in a shape matches any length) or when another array starts with ``prefix``."""
    found = {}
    for key, shape in shapes.items():
        value = arrays.get(prefix + key)
        if value is None and key in optional:
            continue
        if value is None:
            raise CostModelFileError(f"{where}: lacks the array {prefix + key!r}")
        if not _fits(value.shape, shape):
            raise CostModelFileError(
                f"{where}: the array {prefix + key!r} has shape {value.shape}, expected {shape}"
            )
        found[key] = value
    unexpected = sorted(n for n in arrays if n.startswith(prefix) and n[len(prefix) :] not in shapes)
    if unexpected:
        raise CostModelFileError(f"{where}: unexpected arrays {', '.join(map(repr, unexpected))}")
    return found


def _fits(shape: tuple[int, ...], expected: tuple[int | None, ...]) -> bool:
    """Whether ``shape`` is ``expected``, where ``None`` matches any length."""
    return len(shape) == len(expected) and all(e in (None, s) for e, s in zip(expected, shape, strict=True))


def weight_arrays(state: Mapping[str, Any], prefix: str) -> dict[str, np.ndarray]:
    """A network's state dict (tensors by key) as float32 arrays named ``prefix + key``."""
    return {prefix + key: np.asarray(value, np.float32) for key, value in state.items()}


def weights_like(
    arrays: Mapping[str, np.ndarray], template: Mapping[str, Any], prefix: str, where: str
) -> dict[str, np.ndarray]:
    """:func:`checked_arrays` with the keys and shapes of ``template``, e.g. a freshly built network's
    state dict: the float32 weights that :func:`weight_arrays` stored under ``prefix``, by key."""
    shapes = {key: tuple(value.shape) for key, value in template.items()}
    weights = checked_arrays(arrays, shapes, prefix, where)
    other = [prefix + key for key, value in weights.items() if value.dtype != np.float32]
    if other:
        raise CostModelFileError(f"{where}: the arrays {', '.join(map(repr, other))} are not float32")
    return weights
