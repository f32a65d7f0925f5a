"""Reference runtimes for a compiled network: PyTorch eager, ``torch.compile`` (inductor, CPU) and ONNX
Runtime (CPU execution provider), timed in interleaved rounds with any extra callables (TVM's VM) on the
same inputs and intra-op thread count, each output checked against one reference output.

A runtime that cannot run here (no C++ compiler for inductor, ``onnxruntime`` not installed, a module
``torch.onnx.export`` cannot export) is reported ``"not available: <reason>"``; one that raises while
running is reported ``"failed: <one line>"``; neither stops the comparison.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tenset_tools.atomic import atomic_output
from tvm_transfer.common.errors import error_chain, one_line

if TYPE_CHECKING:
    import onnxruntime
    import torch

__all__ = [
    "RUNTIMES",
    "CallLatency",
    "ComparedModel",
    "RuntimeResult",
    "as_arrays",
    "compare_runtimes",
    "export_onnx",
    "format_results",
    "onnxruntime_options",
    "time_interleaved",
    "tvm_threads",
]

#: Runtime keys accepted by :func:`compare_runtimes` -> the name its result carries.
RUNTIMES: dict[str, str] = {
    "eager": "PyTorch eager",
    "torch.compile": "torch.compile",
    "onnxruntime": "ONNX Runtime",
}


@dataclass
class ComparedModel:
    """What is compared: one model, its example inputs and the thread count every runtime gets.

    ``torch_module`` must be in eval mode (``None`` for a model that exists only as ONNX); ``onnx_path`` is
    an ONNX file of the same model (``None``: exported from ``torch_module`` when ONNX Runtime runs).
    ``threads`` is the intra-op thread count of every runtime.
    """

    name: str
    inputs: list[np.ndarray]
    torch_module: torch.nn.Module | None
    onnx_path: Path | None
    threads: int

    def __post_init__(self) -> None:
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise ValueError(f"ComparedModel.threads must be a positive integer, got {self.threads!r}")
        if not self.inputs or not all(isinstance(x, np.ndarray) for x in self.inputs):
            kinds = [type(x).__name__ for x in self.inputs] if isinstance(self.inputs, Sequence) else None
            raise ValueError(
                f"ComparedModel.inputs must be a non-empty list of numpy arrays, got {kinds or self.inputs!r}"
            )
        if self.torch_module is None and self.onnx_path is None:
            raise ValueError(f"ComparedModel {self.name!r} needs a torch_module or an onnx_path, got neither")
        if self.torch_module is not None and self.torch_module.training:
            raise ValueError(
                f"ComparedModel.torch_module of {self.name!r} is in training mode; pass module.eval()"
            )
        if self.onnx_path is not None:
            self.onnx_path = Path(self.onnx_path)
            if not self.onnx_path.is_file():
                raise FileNotFoundError(f"ComparedModel.onnx_path {self.onnx_path} is not a file")


@dataclass
class RuntimeResult:
    """One runtime's outcome.

    ``seconds``: latency of one call in the fastest timed round (seconds), ``None`` unless ``status`` is
    ``"ok"``; ``fastest_call_seconds``: the fastest single call of those rounds (seconds; ``None`` likewise).
    ``max_abs_error``: largest absolute difference from the output of ``reference`` over every
    output element (``None`` when there is no reference output). ``setup_seconds``: wall time from nothing
    to the first output (ONNX export and session creation, or ``torch.compile``'s compilation, plus that
    first call); ``None`` for the caller's candidates, which arrive ready.
    """

    name: str
    seconds: float | None
    status: str
    max_abs_error: float | None = None
    reference: str | None = None
    setup_seconds: float | None = None
    fastest_call_seconds: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class CallLatency(NamedTuple):
    """Latency of one call (seconds) by two statistics of the same timed rounds: ``seconds``, the mean per
    call of the fastest round, and ``fastest_call_seconds``, the fastest single call of any round."""

    seconds: float
    fastest_call_seconds: float


#: Pause before each callable's turn (seconds). The thread pools of PyTorch (OpenMP), ONNX Runtime and TVM
#: spin for a while after their work, waiting for more; a runtime timed right after another otherwise
#: shares the cores with those spinning threads (docs/runtimes.md has a measurement).
SETTLE_SECONDS = 0.1


def time_interleaved(
    calls: Mapping[str, Callable[[], object]], rounds: int, min_seconds: float
) -> dict[str, CallLatency]:
    """Latency of one call of each callable over ``rounds`` interleaved rounds (:class:`CallLatency`).

    In every round each callable in turn, after a pause of :data:`SETTLE_SECONDS` and one untimed call
    (its warm-up), runs repeatedly until its calls have taken ``min_seconds`` (at least once), and both its
    mean per call and its fastest call are kept; the order rotates from round to round so that no
    callable always follows the same one. The fastest round and the fastest call are the results, since
    noise from other programs on the machine only ever slows a call down: a round's mean still holds the
    calls a busy period slowed, its fastest call does not. An exception of a callable propagates as a
    :class:`RuntimeError` naming it.
    """
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    if not (isinstance(min_seconds, int | float) and math.isfinite(min_seconds) and min_seconds > 0):
        raise ValueError(f"min_seconds must be a positive number of seconds, got {min_seconds!r}")
    names = list(calls)
    best_round, best_call = dict.fromkeys(names, math.inf), dict.fromkeys(names, math.inf)
    for round_index in range(rounds):
        shift = round_index % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            fn = calls[name]
            time.sleep(SETTLE_SECONDS)
            _call_named(name, fn)  # warm: its data back in cache after the previous callable's
            count, elapsed = 0, 0.0
            while elapsed < min_seconds:
                start = time.perf_counter()
                _call_named(name, fn)
                took = time.perf_counter() - start
                count, elapsed = count + 1, elapsed + took
                best_call[name] = min(best_call[name], took)
            best_round[name] = min(best_round[name], elapsed / count)
    return {name: CallLatency(best_round[name], best_call[name]) for name in names}


class _TimedCallFailed(RuntimeError):
    def __init__(self, name: str, error: Exception) -> None:
        super().__init__(f"{name} failed while timed: {one_line(error)}")
        self.name = name
        self.reason = one_line(error)


def _call_named(name: str, fn: Callable[[], object]) -> object:
    try:
        return fn()
    except Exception as error:
        raise _TimedCallFailed(name, error) from error


def compare_runtimes(
    model: ComparedModel,
    candidates: Mapping[str, Callable[[], Sequence[np.ndarray]]],
    *,
    runtimes: Sequence[str] = ("eager", "torch.compile", "onnxruntime"),
    rounds: int = 5,
    min_seconds: float = 0.2,
) -> list[RuntimeResult]:
    """Run ``model`` on the reference ``runtimes`` and the caller's ``candidates``, check every output
    against the reference and time all that ran in the same interleaved rounds (:func:`time_interleaved`).

    ``candidates`` maps a display name (e.g. ``"TVM"``) to a callable returning the model's outputs, in
    order, as numpy arrays. ``runtimes`` are keys of :data:`RUNTIMES`. The reference output is PyTorch
    eager's when ``model.torch_module`` is given and runs, else ONNX Runtime's. PyTorch runs with
    ``torch.set_num_threads(model.threads)`` and gradients off, TVM's thread pool of the calling thread
    with ``model.threads`` workers (:func:`tvm_threads`), both restored afterwards; ``torch.compile``
    compiles into a temporary inductor cache removed afterwards, with dynamo's compiled frames dropped
    before and after (``torch.compiler.reset``), so its setup time is a cold compile and no run reuses
    another's artefacts. Results come in the order: candidates, then ``runtimes``.
    """
    unknown = [key for key in runtimes if key not in RUNTIMES]
    if unknown or len(set(runtimes)) != len(runtimes):
        raise ValueError(f"runtimes must be distinct keys among {list(RUNTIMES)}, got {list(runtimes)}")
    clash = sorted(set(candidates) & {RUNTIMES[key] for key in runtimes})
    if clash:
        raise ValueError(f"candidate names {clash} are taken by the reference runtimes {list(runtimes)}")
    # Checked before anything slow runs, with the same messages as time_interleaved.
    time_interleaved({}, rounds, min_seconds)

    with contextlib.ExitStack() as stack:
        stack.enter_context(_torch_settings(model.threads))
        stack.enter_context(tvm_threads(model.threads))
        results: dict[str, RuntimeResult] = {}
        timed: dict[str, Callable[[], object]] = {}
        outputs: dict[str, list[np.ndarray]] = {}

        def run(name: str, setup: Callable[[], Callable[[], object]], *, measure_setup: bool) -> None:
            """Set a runtime up and call it once: its first outputs, its setup time, or its status."""
            start = time.perf_counter()
            try:
                fn = setup()
                first = as_arrays(fn())
            except _NotAvailable as reason:
                results[name] = RuntimeResult(name, None, f"not available: {reason}")
                return
            except Exception as error:
                results[name] = RuntimeResult(name, None, f"failed: {one_line(error)}")
                return
            setup_seconds = time.perf_counter() - start if measure_setup else None
            results[name] = RuntimeResult(name, None, "ok", setup_seconds=setup_seconds)
            timed[name] = fn
            outputs[name] = first

        for name, fn in candidates.items():
            run(name, lambda fn=fn: fn, measure_setup=False)
        for key in runtimes:
            setup = {
                "eager": lambda: _eager(model),
                "torch.compile": lambda: _compiled(model, stack),
                "onnxruntime": lambda: _onnxruntime(model, stack),
            }[key]
            run(RUNTIMES[key], setup, measure_setup=True)
        # The reference is PyTorch eager's output even when eager is not among the timed runtimes; when
        # eager cannot run the model (an ONNX file), ONNX Runtime's, timed or not.
        if model.torch_module is not None and RUNTIMES["eager"] not in results:
            with contextlib.suppress(Exception):
                outputs[RUNTIMES["eager"]] = as_arrays(_eager(model)())
        if RUNTIMES["eager"] not in outputs and RUNTIMES["onnxruntime"] not in results:
            with contextlib.suppress(Exception):
                outputs[RUNTIMES["onnxruntime"]] = as_arrays(_onnxruntime(model, stack)())
        reference = next((n for n in (RUNTIMES["eager"], RUNTIMES["onnxruntime"]) if n in outputs), None)
        for name in timed:
            if reference is not None:
                results[name].reference = reference
                try:
                    results[name].max_abs_error = _max_abs_error(outputs[name], outputs[reference])
                except ValueError as mismatch:
                    results[name].status = f"failed: {mismatch}"
        timed = {name: fn for name, fn in timed.items() if results[name].ok}

        while timed:
            try:
                latencies = time_interleaved(timed, rounds, min_seconds)
                break
            except _TimedCallFailed as error:  # one callable failed while timed: drop it, time the others
                results[error.name].status = f"failed while timed: {error.reason}"
                del timed[error.name]
        else:
            latencies = {}
        for name, latency in latencies.items():
            results[name].seconds, results[name].fastest_call_seconds = latency
        return list(results.values())


def format_results(results: Sequence[RuntimeResult], *, relative_to: str | None = None) -> str:
    """A plain-text table of ``results``: latency (ms), speed relative to ``relative_to`` (default: the
    first result that ran), error against the reference, setup time (s) and status."""
    base = next((r for r in results if r.ok and (relative_to is None or r.name == relative_to)), None)
    rows = [("runtime", "ms/call", f"time / {base.name}" if base else "", "max |err|", "setup s", "status")]
    for r in results:
        rows.append(
            (
                r.name,
                f"{r.seconds * 1e3:.4g}" if r.seconds is not None else "-",
                f"{r.seconds / base.seconds:.2f}x" if base and r.seconds is not None else "",
                f"{r.max_abs_error:.3g}" if r.max_abs_error is not None else "-",
                f"{r.setup_seconds:.3g}" if r.setup_seconds is not None else "-",
                r.status,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join([*(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)), row[-1]]) for row in rows
    ]
    reference = next((r.reference for r in results if r.reference), None)
    if reference:
        lines.append(f"max |err|: largest absolute difference from {reference}'s output")
    return "\n".join(line.rstrip() for line in lines)


def export_onnx(module: torch.nn.Module, inputs: Sequence[np.ndarray], path: str | os.PathLike) -> Path:
    """Write ``module`` (eval mode) called on ``inputs`` to the ONNX file ``path``, in one file (weights
    inside), through ``torch.onnx.export``'s ``torch.export``-based exporter; atomically (the previous
    file stays if export fails)."""
    import torch

    path = Path(path)
    args = tuple(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs)
    with atomic_output(path) as temporary, warnings.catch_warnings():
        # The exporter's own deprecation notices (pytree internals) say nothing about this model.
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(module, args, temporary, dynamo=True, external_data=False, verbose=False)
    return path


@contextlib.contextmanager
def tvm_threads(threads: int) -> Iterator[None]:
    """TVM's runtime thread pool of the calling thread with ``threads`` workers, restored on exit.

    TVM gives each thread its own pool, sized when the thread first runs a parallel TVM function (or asks
    :func:`tvm.runtime.num_threads`): ``TVM_NUM_THREADS``, else ``OMP_NUM_THREADS``, else half the logical
    CPUs on x86 (it assumes two hyper-threads per core), i.e. one worker on a two-CPU machine without
    hyper-threading. Using fewer workers than CPUs also pins the calling thread to one CPU, and every
    thread created afterwards (PyTorch's and ONNX Runtime's workers) inherits that pin. This sets
    ``TVM_NUM_THREADS`` while the block runs, so that a pool created inside it has a worker per CPU, uses
    ``threads`` of them, and restores the calling thread's CPU affinity on exit. A pool cannot grow once
    created: raises :class:`RuntimeError` when this thread's pool already has fewer workers than
    ``threads``; enter this context before TVM first runs in the thread.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    import tvm

    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    previous_setting = os.environ.get("TVM_NUM_THREADS")
    # A pool created here gets a worker per available CPU (or ``threads`` if more) and uses ``threads``
    # of them, so that a later block in the same thread may ask for more than this one.
    available = len(affinity) if affinity else os.cpu_count() or 1
    os.environ["TVM_NUM_THREADS"] = str(max(threads, available))
    try:
        # Mode 1 is TVM's "big cores": every core of a uniform CPU.
        configure = tvm.get_global_func("runtime.config_threadpool")
        previous = tvm.runtime.num_threads()  # creates this thread's pool if it has none yet
        configure(1, threads)
        if tvm.runtime.num_threads() != threads:
            configure(1, previous)
            raise RuntimeError(
                f"TVM's thread pool of this thread was created with {previous} worker(s) and cannot grow "
                f"to {threads}: set TVM_NUM_THREADS={threads} (or enter tvm_threads({threads})) before TVM "
                "first runs in this thread"
            )
        try:
            yield
        finally:
            configure(1, previous)
    finally:
        if previous_setting is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        else:
            os.environ["TVM_NUM_THREADS"] = previous_setting
        if affinity is not None:
            os.sched_setaffinity(0, affinity)


class _NotAvailable(Exception):
    """A runtime cannot run here at all (missing package or compiler, model not exportable)."""


@contextlib.contextmanager
def _torch_settings(threads: int) -> Iterator[None]:
    """PyTorch's intra-op threads set to ``threads`` and gradients off, both restored on exit."""
    try:
        import torch
    except ImportError:  # an ONNX-only comparison without PyTorch installed
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            yield
    finally:
        torch.set_num_threads(previous)


def _torch_args(model: ComparedModel) -> tuple:
    import torch

    # Copies: a module writing into its input must not change the arrays the other runtimes read.
    return tuple(torch.from_numpy(np.array(x, copy=True)) for x in model.inputs)


def _eager(model: ComparedModel) -> Callable[[], object]:
    if model.torch_module is None:
        raise _NotAvailable("no PyTorch module (the model is given as ONNX only)")
    module, args = model.torch_module, _torch_args(model)
    return lambda: module(*args)


def _compiled(model: ComparedModel, stack: contextlib.ExitStack) -> Callable[[], object]:
    if model.torch_module is None:
        raise _NotAvailable("no PyTorch module (the model is given as ONNX only)")
    import torch

    compiler = _inductor_compiler()
    if compiler is not None:
        raise _NotAvailable(compiler)
    # A fresh inductor cache for this comparison, kept until the timing is over (the compiled kernels
    # live there), and dynamo's compiled frames dropped before and after: the setup time is a cold
    # compile, and a later comparison of the same module class neither reuses these kernels nor counts
    # against dynamo's recompilation limit (past it, torch.compile silently runs eager).
    torch.compiler.reset()
    stack.callback(torch.compiler.reset)
    stack.enter_context(_fresh_inductor_cache())
    try:
        compiled = torch.compile(model.torch_module, backend="inductor")
    except RuntimeError as error:  # e.g. dynamo does not support this Python
        raise _NotAvailable(f"torch.compile: {one_line(error)}") from error
    args = _torch_args(model)

    def call() -> object:
        try:
            return compiled(*args)
        except Exception as error:
            if any(type(e).__name__ == "InvalidCxxCompiler" for e in error_chain(error)):
                raise _NotAvailable(f"inductor found no C++ compiler: {one_line(error)}") from error
            raise

    return call


def _inductor_compiler() -> str | None:
    """Why inductor cannot compile C++ here, or ``None`` when it finds its compiler."""
    try:
        from torch._inductor import config
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # inductor's layout moved: let the compilation itself tell
        return None
    try:
        get_cpp_compiler()
    except Exception as error:
        searched = [c for c in config.cpp.cxx if c is not None]
        return f"no working C++ compiler for inductor (tried {searched}; set CXX): {type(error).__name__}"
    return None


@contextlib.contextmanager
def _fresh_inductor_cache() -> Iterator[None]:
    try:
        from torch._inductor.utils import fresh_cache
    except ImportError:  # no such helper in this torch: a temporary directory through the public variable
        with tempfile.TemporaryDirectory(prefix="inductor-") as directory:
            previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = directory
            try:
                yield
            finally:
                if previous is None:
                    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
                else:
                    os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous
        return
    with fresh_cache():
        yield


def onnxruntime_options(threads: int) -> onnxruntime.SessionOptions:
    """ONNX Runtime's session options for a comparison on ``threads`` intra-op threads: one inter-op
    thread, and idle workers that spin exactly when PyTorch's OpenMP workers do. Under
    ``OMP_WAIT_POLICY=PASSIVE`` (which the ``tvm-transfer`` command and the benchmarks set, with TVM's
    ``TVM_THREAD_POOL_SPIN_COUNT=0``) no runtime spins; otherwise all three keep their default, spinning."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    spin = "0" if os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE" else "1"
    options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    return options


def _onnxruntime(model: ComparedModel, stack: contextlib.ExitStack) -> Callable[[], object]:
    try:
        import onnxruntime
    except ImportError as error:
        raise _NotAvailable(f"onnxruntime cannot be imported ({one_line(error)})") from error
    path = model.onnx_path
    if path is None:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="compare-onnx-")))
        try:
            path = export_onnx(model.torch_module, model.inputs, directory / f"{_file_stem(model.name)}.onnx")
        except Exception as error:
            raise _NotAvailable(f"torch.onnx.export failed: {one_line(error)}") from error
    options = onnxruntime_options(model.threads)
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(model.inputs):
        raise ValueError(f"the ONNX model takes {len(names)} inputs {names}, given {len(model.inputs)}")
    feed = dict(zip(names, model.inputs, strict=True))
    return lambda: session.run(None, feed)


def as_arrays(outputs: Any) -> list[np.ndarray]:
    """The leaves of a (nested) model output as numpy arrays, in order."""
    if isinstance(outputs, np.ndarray):
        return [outputs]
    if isinstance(outputs, Sequence) and not isinstance(outputs, str):  # lists, tuples, TVM's Array
        return [a for item in outputs for a in as_arrays(item)]
    if isinstance(outputs, dict):
        return [a for item in outputs.values() for a in as_arrays(item)]
    if hasattr(outputs, "detach") and hasattr(outputs, "numpy"):  # a torch.Tensor
        tensor = outputs.detach().cpu()
        if not tensor.dtype.is_floating_point or tensor.dtype.itemsize >= 4:
            return [tensor.numpy()]
        return [tensor.float().numpy()]  # bfloat16 has no numpy type; float16 compared in float32 anyway
    if hasattr(outputs, "numpy"):  # a tvm.runtime.Tensor
        return [np.asarray(outputs.numpy())]
    if isinstance(outputs, int | float | bool | np.generic):
        return [np.asarray(outputs)]
    raise TypeError(f"cannot read a model output of type {type(outputs).__name__} as arrays")


def _max_abs_error(outputs: list[np.ndarray], reference: list[np.ndarray]) -> float:
    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs, the reference has {len(reference)}")
    error = 0.0
    for i, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
        if out.shape != ref.shape:
            raise ValueError(f"output {i} has shape {out.shape}, the reference's has {ref.shape}")
        if out.size:
            largest = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64))))
            if math.isnan(largest):
                return math.nan  # a NaN where the other has a number (or NaN) is no match
            error = max(error, largest)
    return error


def _file_stem(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "model"
