"""The knob tuners by name, as the ``ml2tune`` command and the benchmark choose them."""

from __future__ import annotations

from tvm_transfer.vta.ml2tuner.base import KnobTuner
from tvm_transfer.vta.ml2tuner.baseline import BaselineTuner
from tvm_transfer.vta.ml2tuner.ml2_tuner import ML2Tuner
from tvm_transfer.vta.ml2tuner.runs import TunerInputError

KNOB_TUNER_METHODS = ("baseline", "ml2tuner")


def make_tuner(method: str, **options) -> KnobTuner:
    """``baseline`` or ``ml2tuner`` with the given constructor options."""
    if method == "baseline":
        return BaselineTuner(**options)
    if method == "ml2tuner":
        return ML2Tuner(**options)
    raise TunerInputError(f"unknown method {method!r}; choose from {', '.join(KNOB_TUNER_METHODS)}")
