"""The hardware feature vector of a TVM target: the eight Ansor/TenSet hardware parameters.

The same vector TenSet records carry, so that records measured here and TenSet's records share one feature
space. Lives in the data layer because every dataset row stores it; :mod:`tvm_transfer.target` re-exports it.
"""

from __future__ import annotations

import os

import numpy as np
import tvm
from tvm.target import codegen

from tenset_tools.ansor.records import HARDWARE_PARAM_NAMES

#: The eight hardware parameters of Ansor/TenSet records, in their on-disk order (defined by the format).
HW_FEATURE_NAMES = HARDWARE_PARAM_NAMES

# Defaults per target kind, as Ansor's HardwareParams filled them (TenSet's records carry exactly these
# for CPUs and GPUs, e.g. [8, 64, 64, 0, 0, 0, 0, 0] for llvm and [-1, 16, 64, 49152, 2147483647, 1024, 8,
# 32] for a K80). Target attributes override them where the target carries the information.
_CPU_DEFAULTS = dict(zip(HW_FEATURE_NAMES, (0, 64, 64, 0, 0, 0, 0, 0), strict=True))
_GPU_DEFAULTS = dict(zip(HW_FEATURE_NAMES, (-1, 16, 64, 49152, 2147483647, 1024, 8, 32), strict=True))
_KIND_DEFAULTS: dict[str, dict[str, int]] = {
    "llvm": _CPU_DEFAULTS,
    "c": _CPU_DEFAULTS,
    "cuda": _GPU_DEFAULTS,
    "rocm": {**_GPU_DEFAULTS, "warp_size": 64},
    "vulkan": _GPU_DEFAULTS,
    "opencl": _GPU_DEFAULTS,
    "metal": _GPU_DEFAULTS,
}
# GPU target attribute -> hardware parameter it determines.
_GPU_ATTRS = {
    "max_shared_memory_per_block": "max_shared_memory_per_block",
    "max_num_threads": "max_threads_per_block",
    "max_threads_per_block": "max_threads_per_block",
    "thread_warp_size": "warp_size",
}


class UnsupportedTargetError(ValueError):
    """The target's kind has no hardware-feature definition here."""


def target_id(target: tvm.target.Target) -> str:
    """A short, stable name of a target as hardware, e.g. ``llvm/znver4/2``; used as dataset target id."""
    attrs = target.attrs
    kind = target.kind.name
    if kind in ("llvm", "c"):
        return f"{kind}/{attrs.get('mcpu', 'generic')}/{int(attrs.get('num-cores', 0))}"
    return f"{kind}/{attrs.get('arch', attrs.get('model', 'default'))}"


def hardware_params(target: tvm.target.Target) -> dict[str, int]:
    """The eight Ansor/TenSet hardware parameters of ``target``, by name.

    CPU targets (``llvm``, ``c``): ``num_cores`` from ``num-cores`` (the host's count when absent),
    ``vector_unit_bytes`` from the widest vector ISA LLVM enables for the target's ``mcpu`` (64 with
    AVX-512, 32 with AVX, 16 with SSE/NEON/generic; ``c`` targets keep Ansor's 64), cache lines of 64
    bytes, and zeros for the GPU-only parameters. GPU targets: Ansor's
    CUDA defaults (49152 bytes of shared memory, 1024 threads per block, 8 virtual threads, warp 32; warp 64
    on ROCm), overridden by the target's ``max_shared_memory_per_block``, ``max_num_threads`` and
    ``thread_warp_size`` attributes. Raises :class:`UnsupportedTargetError` for any other kind.
    """
    kind = target.kind.name
    if kind not in _KIND_DEFAULTS:
        raise UnsupportedTargetError(
            f"no hardware features are defined for target kind {kind!r}; "
            f"supported kinds: {', '.join(sorted(_KIND_DEFAULTS))}"
        )
    params = dict(_KIND_DEFAULTS[kind])
    attrs = target.attrs
    if kind == "llvm":
        params["num_cores"] = int(attrs.get("num-cores", 0)) or usable_core_count()
        params["vector_unit_bytes"] = _llvm_vector_bytes(target)
    elif kind == "c":
        params["num_cores"] = int(attrs.get("num-cores", 0)) or usable_core_count()
    else:
        for attr, name in _GPU_ATTRS.items():
            if attr in attrs:
                params[name] = int(attrs[attr])
    return params


# Widest vector register per CPU feature, in bytes, widest first. LLVM's "preferred vector width" query
# answers 512 bits for every x86 CPU in this TVM build, so the features are read instead.
_VECTOR_FEATURE_BYTES = (("avx512f", 64), ("avx", 32), ("sse2", 16), ("neon", 16))


def _llvm_vector_bytes(target: tvm.target.Target) -> int:
    features = set(codegen.llvm_get_cpu_features(target))
    return next((size for feature, size in _VECTOR_FEATURE_BYTES if feature in features), 16)


def hardware_features(target: tvm.target.Target) -> np.ndarray:
    """:func:`hardware_params` as a float64 vector, in ``HW_FEATURE_NAMES`` order."""
    params = hardware_params(target)
    return np.array([params[name] for name in HW_FEATURE_NAMES], dtype=np.float64)


def usable_core_count() -> int:
    """Number of cores this process may run on (respects CPU affinity, e.g. in containers)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
