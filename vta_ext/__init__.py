"""An extended VTA accelerator: hardware config, ISA, compiler, functional and timing simulators.

Re-created in Python + NumPy from the description of Apache TVM's VTA (which TVM no longer ships): a
configurable GEMM/ALU accelerator with load, compute and store modules coupled by dependency tokens.
``measure(workload, knobs, hw)`` compiles one knob setting of a conv2d or dense workload, checks it the
way VTA's compiler and runtime would (invalid configurations fail with an :class:`InvalidConfigError` kind)
and returns its cycles, latency, profiler counters and visible/hidden features. See ``docs/vta_ext.md``.
"""

from vta_ext.compiler import Program, compile_program
from vta_ext.errors import InvalidConfigError
from vta_ext.hw import HwConfig, preset
from vta_ext.knobs import KnobSpace
from vta_ext.measure import MeasureResult, VtaCompileResult, compile_only, measure
from vta_ext.workloads import LSTM_DENSE, RESNET18, Conv2D, Dense

__all__ = [
    "LSTM_DENSE",
    "RESNET18",
    "Conv2D",
    "Dense",
    "HwConfig",
    "InvalidConfigError",
    "KnobSpace",
    "MeasureResult",
    "Program",
    "VtaCompileResult",
    "compile_only",
    "compile_program",
    "measure",
    "preset",
]
