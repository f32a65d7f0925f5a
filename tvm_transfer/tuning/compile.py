"""Compiling a network of :data:`tvm_transfer.networks.NETWORKS` with its tuned schedules, checked and
timed against PyTorch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms

from tvm_transfer.builder import import_tensor_intrin_fast
from tvm_transfer.networks import NETWORKS, NetworkSpec, import_network, prepare_for_inference
from tvm_transfer.target import as_target
from tvm_transfer.tuning.session import open_database
from tvm_transfer.workloads import median_seconds


@dataclass
class CompileResult:
    """A network built with a tuned database and run once: its error against PyTorch and its speed
    (latencies in seconds)."""

    name: str
    max_abs_error: float
    tvm_seconds: float
    torch_seconds: float

    def table(self) -> str:
        """One line: the error against PyTorch and both latencies."""
        return (
            f"{self.name}: max |TVM - PyTorch| = {self.max_abs_error:.3g}; "
            f"TVM {self.tvm_seconds * 1e3:.4f} ms, PyTorch {self.torch_seconds * 1e3:.4f} ms "
            f"({self.torch_seconds / self.tvm_seconds:.2f}x)"
        )


def compile_network(
    name: str, work_dir: str | Path, *, target: tvm.target.Target | dict | None = None
) -> CompileResult:
    """Build network ``name`` with the schedules tuned in ``work_dir``, run it, and compare with PyTorch.

    Operators without a tuned schedule are compiled with TVM's default (unscheduled) lowering.
    """
    from tvm import relax

    target = as_target(target)
    import_tensor_intrin_fast()
    network = import_network(name)
    executable = ms.relax_integration.compile_relax(
        open_database(Path(work_dir)), prepare_for_inference(network), target, params=None
    )
    vm = relax.VirtualMachine(executable, tvm.cpu())
    data = tvm.runtime.tensor(network.example_input)
    output = vm["main"](data)
    output = output[0] if isinstance(output, tvm.ir.Array | list | tuple) else output
    error = float(np.max(np.abs(output.numpy() - network.torch_output)))
    timer = vm.time_evaluator("main", tvm.cpu(), number=10, repeat=3, min_repeat_ms=100)
    tvm_seconds = float(np.median(timer(data).results))
    return CompileResult(name, error, tvm_seconds, _torch_seconds(NETWORKS[name], network.example_input))


def _torch_seconds(spec: NetworkSpec, example: np.ndarray) -> float:
    """Median latency of the PyTorch model of ``spec`` on ``example``, in seconds."""
    import torch

    torch.manual_seed(0)
    model = spec.factory().eval()
    x = torch.from_numpy(example)
    with torch.no_grad():
        return median_seconds(lambda: model(x), min_seconds=0.2, repeats=5)
