"""ML2Tuner (Cha et al., arXiv 2411.10764) on the extended VTA: a multi-level tuner that profiles fewer
invalid configurations than an AutoTVM-like baseline, using the validity, performance and advanced models
of :mod:`tvm_transfer.common.estimators`. See ``docs/ml2tuner.md``."""

from tvm_transfer.vta.ml2tuner.base import KnobTuner
from tvm_transfer.vta.ml2tuner.baseline import BaselineTuner
from tvm_transfer.vta.ml2tuner.measurer import VtaMeasurer
from tvm_transfer.vta.ml2tuner.methods import KNOB_TUNER_METHODS, make_tuner
from tvm_transfer.vta.ml2tuner.ml2_tuner import WARM_START_OPTIONS, ML2Tuner
from tvm_transfer.vta.ml2tuner.prior import PriorError, TransferPrior
from tvm_transfer.vta.ml2tuner.runs import Event, TunerInputError, TuneRun, load_log, read_log

__all__ = [
    "KNOB_TUNER_METHODS",
    "WARM_START_OPTIONS",
    "BaselineTuner",
    "Event",
    "KnobTuner",
    "ML2Tuner",
    "PriorError",
    "TransferPrior",
    "TuneRun",
    "TunerInputError",
    "VtaMeasurer",
    "load_log",
    "make_tuner",
    "read_log",
]
