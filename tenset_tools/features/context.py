"""A MetaSchedule ``TuneContext`` for feature extraction, without the slow ``tensor_intrin`` import.

``TuneContext`` imports ``tvm.s_tir.tensor_intrin``, which takes tens of seconds per process because
TVMScript's parser calls ``inspect.stack()`` (which scans ``sys.modules`` for every frame) for each of ~500
intrinsic definitions. A cheap frame walker stands in for ``inspect.stack`` during that import, which
then takes a few seconds.
Lives in the data layer because reading a MetaSchedule database needs it; :mod:`tvm_transfer.builder`
re-exports :func:`import_tensor_intrin_fast`.
"""

from __future__ import annotations

import inspect
import sys

import tvm
from tvm.s_tir import meta_schedule as ms

__all__ = ["feature_context", "import_tensor_intrin_fast"]

_TENSOR_INTRIN = "tvm.s_tir.tensor_intrin"


def _frames_without_source(context: int = 1) -> list[inspect.FrameInfo]:
    # Same frames as inspect.stack(), minus the source lines and module look-ups nobody here reads.
    frame = sys._getframe(1)
    frames = []
    while frame is not None:
        code = frame.f_code
        frames.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name, None, None))
        frame = frame.f_back
    return frames


def import_tensor_intrin_fast() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` with a cheap frame walker (no-op when already imported)."""
    if _TENSOR_INTRIN in sys.modules:
        return
    original = inspect.stack
    inspect.stack = _frames_without_source
    try:
        __import__(_TENSOR_INTRIN)
    finally:
        inspect.stack = original


def feature_context(
    mod: tvm.IRModule, target: tvm.target.Target, num_threads: int, task_name: str = "main"
) -> ms.TuneContext:
    """A ``TuneContext`` that is enough for feature extraction (no space generator or search strategy)."""
    import_tensor_intrin_fast()
    return ms.TuneContext(mod=mod, target=target, num_threads=num_threads, task_name=task_name)
