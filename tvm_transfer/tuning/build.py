"""Building a network with the schedules of a tuning database, as ``compile`` and the re-pick build it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.fast_math import use_fast_math
from tvm_transfer.networks import fusion_passes, lowering_passes, prepack_passes
from tvm_transfer.runtimes import as_arrays

__all__ = ["LoadedNetwork", "build_network"]


def build_network(
    mod: tvm.IRModule, database: ms.database.Database, target: tvm.target.Target, layout_free: bool = True
) -> relax.VMExecutable:
    """Build ``mod`` with the schedules of ``database``: fused as at task extraction, tuned functions
    replaced by their best records, weight layouts pre-packed (``layout_free``), the rest lowered by TVM's
    default, with the vectorisable ``exp`` and ``erf`` the tuning runs measured
    (:func:`~tvm_transfer.fast_math.use_fast_math`). Tasks without a record keep TVM's default
    (unscheduled) lowering."""

    @tvm.transform.module_pass(opt_level=3)
    def pipeline(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
        mod = tvm.transform.Sequential(fusion_passes(target, layout_free))(mod)
        mod = relax.transform.MetaScheduleApplyDatabase()(mod)
        if layout_free:
            mod = tvm.transform.Sequential(prepack_passes())(mod)
        return tvm.transform.Sequential(lowering_passes(target))(mod)

    import_tensor_intrin_fast()
    use_fast_math()
    with target, database, tvm.transform.PassContext(opt_level=3):
        return relax.build(mod, target=target, relax_pipeline=pipeline)


class LoadedNetwork:
    """A built network loaded in a Relax VM on the CPU with fixed inputs: calling it runs the network once.

    ``vm`` is the loaded virtual machine (for its ``set_instrument`` hook); the inputs are copied to TVM
    tensors once, so a call times the network alone."""

    def __init__(self, executable: relax.VMExecutable, inputs: Sequence[np.ndarray]) -> None:
        self.vm = relax.VirtualMachine(executable, tvm.cpu())
        self._arguments = [tvm.runtime.tensor(x) for x in inputs]

    def __call__(self) -> object:
        return self.vm["main"](*self._arguments)

    def outputs(self) -> list[np.ndarray]:
        """One run's outputs as NumPy arrays."""
        return as_arrays(self())
