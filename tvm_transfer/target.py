"""Host target detection, and (re-exported from the data layer) the hardware feature vector of a target.

TVM 0.27 only accepts targets as JSON dicts, and ``"mcpu": "native"`` silently falls back to generic
x86-64 code with the PyPI wheel's triple, so the host CPU is asked of LLVM by name and written into the
target explicitly.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import tvm
from tvm.target import codegen

from tenset_tools.features.hardware import (  # re-exported: the hardware vector of any target
    HW_FEATURE_NAMES,
    UnsupportedTargetError,
    hardware_features,
    hardware_params,
    target_id,
)
from tenset_tools.features.hardware import usable_core_count as host_core_count

__all__ = [
    "CPU_CACHES",
    "HW_FEATURE_NAMES",
    "UnknownCpuError",
    "UnsupportedTargetError",
    "as_target",
    "check_mcpu",
    "hardware_features",
    "hardware_params",
    "host_core_count",
    "host_cpu_name",
    "host_target",
    "last_level_cache_bytes",
    "target_id",
    "target_of_id",
]


def host_cpu_name() -> str:
    """Return LLVM's name for this machine's CPU (e.g. ``"znver4"``, ``"sapphirerapids"``).

    Raises ``RuntimeError`` when LLVM cannot name it, because a target without ``mcpu`` compiles to
    SSE-only code that is several times slower and would make every tuning result misleading.
    """
    name = codegen.llvm_get_system_cpu()
    if not name or name == "generic":
        raise RuntimeError(
            "LLVM could not identify the host CPU; pass an explicit mcpu (e.g. 'skylake-avx512') "
            "to host_target(mcpu=...)"
        )
    return str(name)


#: Where Linux describes the caches of CPU 0, one ``index*`` folder per cache.
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def last_level_cache_bytes(caches: Path = CPU_CACHES) -> int | None:
    """Size in bytes of this machine's last-level data (or unified) cache as Linux reports it in
    ``caches``; ``None`` when it does not say (another OS, a container hiding ``/sys``)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    levels = {}
    for index in caches.glob("index*"):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and size[:-1].isdigit() and size[-1] in units:
            levels[level] = int(size[:-1]) * units[size[-1]]
    return levels[max(levels)] if levels else None


def host_target(mcpu: str | None = None, num_cores: int | None = None) -> tvm.target.Target:
    """Build the ``llvm`` target of this machine: detected (or given) ``mcpu`` and core count.

    Raises :class:`UnknownCpuError` for an ``mcpu`` LLVM does not know and ``ValueError`` for a core count
    below 1 (a target for another machine may have more cores than this one)."""
    if num_cores is not None and int(num_cores) < 1:
        raise ValueError(f"num_cores must be at least 1, got {num_cores}")
    return tvm.target.Target(
        {
            "kind": "llvm",
            "mcpu": check_mcpu(mcpu) if mcpu else host_cpu_name(),
            "num-cores": int(num_cores or host_core_count()),
        }
    )


def as_target(target: tvm.target.Target | dict[str, Any] | str | None) -> tvm.target.Target:
    """Coerce a target given as a Target, JSON dict, JSON string or ``None`` (the host) to a Target."""
    if target is None:
        return host_target()
    if isinstance(target, tvm.target.Target):
        return target
    return tvm.target.Target(target)


def target_of_id(tid: str) -> tvm.target.Target:
    """The CPU target a dataset target id names (``kind/mcpu/num-cores``, e.g. ``llvm/znver4/2``: the
    inverse of :func:`target_id` for ``llvm`` and ``c`` targets). Raises ``ValueError`` for other ids."""
    parts = tid.split("/")
    if len(parts) != 3 or parts[0] not in ("llvm", "c") or not parts[2].isdigit():
        raise ValueError(f"target id {tid!r} is not kind/mcpu/num-cores of a CPU target (e.g. llvm/znver4/2)")
    kind, mcpu, cores = parts
    return tvm.target.Target({"kind": kind, "mcpu": mcpu, "num-cores": int(cores)})


class UnknownCpuError(ValueError):
    """An ``mcpu`` LLVM does not know for the target's triple (LLVM would silently emit generic code)."""


def check_mcpu(mcpu: str, mtriple: str | None = None) -> str:
    """``mcpu`` itself when LLVM knows that CPU for ``mtriple`` (default: the host's triple); raises
    :class:`UnknownCpuError` naming it and LLVM's closest names otherwise."""
    triple = mtriple or str(codegen.llvm_get_system_triple())
    if codegen.llvm_is_valid_cpu(mcpu, triple):
        return mcpu
    known = list(codegen.llvm_get_cpu_archlist(tvm.target.Target({"kind": "llvm", "mtriple": triple})))
    close = difflib.get_close_matches(mcpu, known, n=5, cutoff=0.5)
    hint = f"closest: {', '.join(close)}" if close else f"this host's: {codegen.llvm_get_system_cpu()}"
    raise UnknownCpuError(f"LLVM knows no CPU {mcpu!r} for {triple} ({hint}; {len(known)} names in all)")
