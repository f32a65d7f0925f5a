"""ML2Tuner (Cha et al., arXiv 2411.10764) on the extended VTA: validity model V, performance model P,
advanced model A on hidden compilation features, and a multi-level tuner that profiles fewer invalid
configurations than an AutoTVM-like baseline. See ``docs/ml2tuner.md``."""

from tvm_transfer.common.estimators import (
    FORMAT_VERSION,
    AdvancedModel,
    FeatureShapeError,
    NotFittedError,
    PerformanceModel,
    ValidityModel,
)
from tvm_transfer.vta.ml2tuner.knob_tuner import (
    METHODS,
    WARM_START_OPTIONS,
    BaselineTuner,
    Event,
    ML2Tuner,
    TunerInputError,
    TuneRun,
    VtaMeasurer,
    load_log,
    make_tuner,
)
from tvm_transfer.vta.ml2tuner.prior import PriorError, TransferPrior
from tvm_transfer.vta.ml2tuner.runs import read_log

__all__ = [
    "FORMAT_VERSION",
    "METHODS",
    "WARM_START_OPTIONS",
    "AdvancedModel",
    "BaselineTuner",
    "Event",
    "FeatureShapeError",
    "ML2Tuner",
    "NotFittedError",
    "PerformanceModel",
    "PriorError",
    "TransferPrior",
    "TuneRun",
    "TunerInputError",
    "ValidityModel",
    "VtaMeasurer",
    "load_log",
    "make_tuner",
    "read_log",
]
