"""Hardware configuration of the (extended) VTA, in the key names of VTA's ``vta_config.json``.

Sizes are log2 values as in VTA: ``LOG_*_WIDTH`` in bits, ``LOG_*_BUFF_SIZE`` in bytes. The extended keys
follow Intel's VTA++: separate GEMM block sizes, a wider instruction and micro-op format (needed by larger
scratchpads), the memory-bus width, the clock and the GEMM/ALU initiation intervals. The timing constants
(``DMA_LATENCY``, ``PIPE_DEPTH``) are cycles and are documented in ``docs/vta_ext.md``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass

from tenset_tools.atomic import atomic_output
from vta_ext.isa import check_encodable


class HwConfigError(ValueError):
    """A hardware configuration value of the wrong type or outside what the model can represent; the
    message names the key, the value and the allowed range."""


# Allowed ranges of the numeric keys (inclusive; None: unbounded): wide enough for every VTA variant
# published (stock, VTA++, the larger-scratchpad eVTA), narrow enough that derived sizes stay meaningful
# (a 2**60-byte scratchpad or a negative shift would otherwise surface as an arithmetic error deep inside).
_INT_RANGES: dict[str, tuple[int, int | None]] = {
    "LOG_INP_WIDTH": (0, 6),
    "LOG_WGT_WIDTH": (0, 6),
    "LOG_ACC_WIDTH": (0, 6),
    "LOG_BATCH": (0, 6),
    "LOG_BLOCK": (0, 8),
    "LOG_BLOCK_IN": (0, 8),
    "LOG_BLOCK_OUT": (0, 8),
    "LOG_UOP_BUFF_SIZE": (0, 30),
    "LOG_INP_BUFF_SIZE": (0, 30),
    "LOG_WGT_BUFF_SIZE": (0, 30),
    "LOG_ACC_BUFF_SIZE": (0, 30),
    "INSN_BITS": (32, 4096),
    "UOP_BITS": (8, 1024),
    "LOOP_ITER_BITS": (1, 32),
    "LOG_BUS_WIDTH": (3, 12),
    "GEMM_II": (1, 1024),
    "ALU_II": (1, 1024),
    "DMA_LATENCY": (0, 1_000_000),
    "PIPE_DEPTH": (0, 1_000_000),
}
_OPTIONAL = ("LOG_BLOCK_IN", "LOG_BLOCK_OUT")
_MAX_CLOCK_MHZ = 100_000.0


def _check_value(key: str, value: object) -> None:
    """Raise :class:`HwConfigError` naming ``key`` when ``value`` has the wrong type or is out of range."""
    if key in ("TARGET", "HW_VER"):
        if not isinstance(value, str):
            raise HwConfigError(f"{key}={value!r}: a string is expected")
    elif key == "CLOCK_MHZ":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise HwConfigError(f"CLOCK_MHZ={value!r}: a number of MHz is expected")
        if not (math.isfinite(value) and 0 < value <= _MAX_CLOCK_MHZ):
            raise HwConfigError(
                f"CLOCK_MHZ={value!r}: must be a finite number in (0, {_MAX_CLOCK_MHZ:g}] MHz"
            )
    elif key in _INT_RANGES:
        if value is None and key in _OPTIONAL:
            return
        low, high = _INT_RANGES[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise HwConfigError(f"{key}={value!r}: an integer in [{low}, {high}] is expected")
        if not low <= value <= high:
            raise HwConfigError(f"{key}={value}: must be in [{low}, {high}]")


@dataclass(frozen=True)
class HwConfig:
    """One VTA hardware configuration; construction validates that the ISA can address it."""

    TARGET: str = "sim"
    HW_VER: str = "0.0.2"
    LOG_INP_WIDTH: int = 3
    LOG_WGT_WIDTH: int = 3
    LOG_ACC_WIDTH: int = 5
    LOG_BATCH: int = 0
    LOG_BLOCK: int = 4
    LOG_UOP_BUFF_SIZE: int = 15
    LOG_INP_BUFF_SIZE: int = 15
    LOG_WGT_BUFF_SIZE: int = 18
    LOG_ACC_BUFF_SIZE: int = 17
    # Extended keys. None means "as LOG_BLOCK" (stock VTA has square GEMM blocks).
    LOG_BLOCK_IN: int | None = None
    LOG_BLOCK_OUT: int | None = None
    INSN_BITS: int = 128
    UOP_BITS: int = 32
    LOOP_ITER_BITS: int = 14
    LOG_BUS_WIDTH: int = 6  # AXI data bus of 2**6 = 64 bits, as on the Pynq board
    CLOCK_MHZ: float = 100.0
    GEMM_II: int = 1  # cycles per micro-op execution of GEMM
    ALU_II: int = 2  # cycles per micro-op execution of ALU (the HLS design pipelines it at II=2)
    DMA_LATENCY: int = 32  # cycles from a DMA row request to its first beat
    PIPE_DEPTH: int = 8  # cycles to fill and drain the GEMM/ALU pipeline, once per instruction

    def __post_init__(self) -> None:
        for key, value in dataclasses.asdict(self).items():
            _check_value(key, value)
        if (self.LOG_INP_WIDTH, self.LOG_WGT_WIDTH, self.LOG_ACC_WIDTH) != (3, 3, 5):
            raise HwConfigError("only the int8 x int8 -> int32 data path is modelled (LOG widths 3, 3, 5)")
        # A scratchpad that holds less than one element cannot be addressed at all.
        for name in ("INP", "WGT", "ACC", "UOP"):
            if self.log_depth(name) < 0:
                raise HwConfigError(
                    f"LOG_{name}_BUFF_SIZE={getattr(self, f'LOG_{name}_BUFF_SIZE')} is smaller than one "
                    f"{name} element ({self.elem_bytes(name)} bytes)"
                )
        check_encodable(self)  # the ISA's field widths follow this config; it must be able to address it

    # ---- derived shapes -------------------------------------------------------------------------
    @property
    def BATCH(self) -> int:
        return 1 << self.LOG_BATCH

    @property
    def BLOCK_IN(self) -> int:
        return 1 << (self.LOG_BLOCK if self.LOG_BLOCK_IN is None else self.LOG_BLOCK_IN)

    @property
    def BLOCK_OUT(self) -> int:
        return 1 << (self.LOG_BLOCK if self.LOG_BLOCK_OUT is None else self.LOG_BLOCK_OUT)

    def elem_bytes(self, buffer: str) -> int:
        """Bytes of one scratchpad element ("tensor register") of ``buffer`` (INP, WGT, ACC, OUT, UOP)."""
        bits = {
            "INP": self.BATCH * self.BLOCK_IN << self.LOG_INP_WIDTH,
            "WGT": self.BLOCK_OUT * self.BLOCK_IN << self.LOG_WGT_WIDTH,
            "ACC": self.BATCH * self.BLOCK_OUT << self.LOG_ACC_WIDTH,
            "OUT": self.BATCH * self.BLOCK_OUT << self.LOG_INP_WIDTH,
            "UOP": self.UOP_BITS,
        }[buffer]
        return max(1, bits // 8)

    def buff_bytes(self, buffer: str) -> int:
        """Capacity of scratchpad ``buffer`` in bytes (OUT is the narrow view of ACC)."""
        if buffer == "OUT":
            return self.depth("ACC") * self.elem_bytes("OUT")
        return 1 << getattr(self, f"LOG_{buffer}_BUFF_SIZE")

    def log_depth(self, buffer: str) -> int:
        """log2 of the number of elements scratchpad ``buffer`` holds (this is its index width in bits)."""
        return getattr(self, f"LOG_{buffer}_BUFF_SIZE") - (self.elem_bytes(buffer).bit_length() - 1)

    def depth(self, buffer: str) -> int:
        """Number of elements scratchpad ``buffer`` holds."""
        return 1 << self.log_depth(buffer)

    @property
    def bus_bytes(self) -> int:
        """Bytes the memory bus moves per cycle."""
        return max(1, (1 << self.LOG_BUS_WIDTH) // 8)

    @property
    def peak_macs_per_cycle(self) -> float:
        """Multiply-accumulates per cycle of the GEMM core at its initiation interval."""
        return self.BATCH * self.BLOCK_IN * self.BLOCK_OUT / self.GEMM_II

    @property
    def bitstream(self) -> str:
        """VTA's bitstream name, e.g. ``1x16_i8w8a32_15_15_18_17`` (``BATCHxBLOCK_IN[xBLOCK_OUT]``)."""
        blocks = (
            f"{self.BLOCK_IN}" if self.BLOCK_IN == self.BLOCK_OUT else f"{self.BLOCK_IN}x{self.BLOCK_OUT}"
        )
        widths = f"i{1 << self.LOG_INP_WIDTH}w{1 << self.LOG_WGT_WIDTH}a{1 << self.LOG_ACC_WIDTH}"
        sizes = "_".join(str(getattr(self, f"LOG_{b}_BUFF_SIZE")) for b in ("UOP", "INP", "WGT", "ACC"))
        return f"{self.BATCH}x{blocks}_{widths}_{sizes}"

    # ---- identity and I/O -----------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The VTA-style JSON dict; unset extended block keys are left out."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def short_id(self) -> str:
        """Eight hex digits identifying this configuration (stable across runs)."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:8]

    def replace(self, **changes: object) -> HwConfig:
        """A copy with some keys changed (validated like any new configuration)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: dict) -> HwConfig:
        """A configuration from VTA-style keys (missing ones take the defaults); raises
        :class:`HwConfigError` naming an unknown key or a bad value."""
        if not isinstance(data, dict):
            raise HwConfigError(f"a VTA config is a JSON object of keys, not {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise HwConfigError(f"unknown VTA config keys: {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | os.PathLike) -> HwConfig:
        """Read a VTA-style JSON config file; raises ``OSError`` for a missing file and
        :class:`HwConfigError` (a ``ValueError``) for a file that is not a valid configuration."""
        with open(path) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as error:
                raise HwConfigError(f"not JSON ({error})") from None
        return cls.from_dict(data)

    def save(self, path: str | os.PathLike) -> None:
        with atomic_output(path) as temporary, open(temporary, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")


def preset(name: str) -> HwConfig:
    """Named configurations: ``default`` (stock VTA, Pynq-like) and ``evta`` (the larger-scratchpad
    VTA attributed to ML2Tuner: uop 16, inp 16, wgt 19, acc 18, which needs a 256-bit instruction)."""
    presets = {
        "default": HwConfig(),
        "evta": HwConfig(
            LOG_UOP_BUFF_SIZE=16,
            LOG_INP_BUFF_SIZE=16,
            LOG_WGT_BUFF_SIZE=19,
            LOG_ACC_BUFF_SIZE=18,
            INSN_BITS=256,
            UOP_BITS=64,
        ),
    }
    if name not in presets:
        raise KeyError(f"unknown hardware preset {name!r}; known: {', '.join(presets)}")
    return presets[name]
