"""Benchmarks of tvm_transfer, tenset_tools and vta_ext; run each from the repository root as
``python -m benchmarks.<name> [--quick]``. Results: ``benchmarks/results/`` (see its ``INDEX.md``);
inputs: ``benchmarks/data/``."""

import os

# No runtime spins, as under the tvm-transfer command (tvm_transfer/cli/__init__.py, docs/runtimes.md): the
# machine is shared while a study runs. Set here, before any benchmark imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
