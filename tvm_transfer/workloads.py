"""Named tensor-operator workloads: their TE definition, FLOPs, and a PyTorch reference.

Shapes follow TVM's ``te_workload`` conventions: conv2d is NHWC with HWIO weights, depthwise conv2d is
NHWC with HWC weights, dense multiplies by a transposed (out, in) weight.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import te, topi

# kind -> ordered shape parameter names (the order of ``--shape`` on the command line) and defaults.
SHAPE_PARAMS: dict[str, tuple[str, ...]] = {
    "matmul": ("M", "N", "K"),
    "batch_matmul": ("B", "M", "N", "K"),
    "dense": ("M", "N", "K"),
    "conv2d": ("N", "H", "W", "CI", "CO", "K", "stride", "pad"),
    "depthwise_conv2d": ("N", "H", "W", "C", "K", "stride", "pad"),
}
DEFAULT_SHAPES: dict[str, tuple[int, ...]] = {
    "matmul": (256, 256, 256),
    "batch_matmul": (8, 128, 128, 64),
    "dense": (64, 1024, 1024),
    "conv2d": (1, 14, 14, 256, 256, 3, 1, 1),
    "depthwise_conv2d": (1, 56, 56, 128, 3, 1, 1),
}


@dataclass(frozen=True)
class Workload:
    """One operator instance: ``kind`` (a key of :data:`SHAPE_PARAMS`) and its integer shape parameters."""

    kind: str
    shape: dict[str, int] = field(hash=False)

    @property
    def name(self) -> str:
        return f"{self.kind}_" + "x".join(str(v) for v in self.shape.values())

    def tensors(self) -> list[te.Tensor]:
        """TE placeholders followed by the output tensor."""
        return _BUILDERS[self.kind](**self.shape)

    def prim_func(self) -> tvm.tirx.PrimFunc:
        return te.create_prim_func(self.tensors())

    def ir_module(self) -> tvm.IRModule:
        """The operator as the one-function module MetaSchedule tunes (entry ``main``)."""
        return tvm.IRModule({"main": self.prim_func().with_attr("global_symbol", "main")})

    def input_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(int(d) for d in t.shape) for t in self.tensors()[:-1]]

    @property
    def flops(self) -> float:
        """Floating-point operations of one run (a multiply-add counts as 2)."""
        return _FLOPS[self.kind](**self.shape)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(s, dtype=np.float32) for s in self.input_shapes()]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        """The operator's output computed by PyTorch (the ground truth for correctness checks)."""
        import torch

        prepare, compute, to_tvm_layout = _TORCH_OPS[self.kind]
        with torch.no_grad():
            native = prepare(self.shape, *map(torch.from_numpy, inputs))
            return to_tvm_layout(compute(self.shape, *native)).numpy()

    def reference_seconds(self, min_seconds: float = 0.2, repeats: int = 5) -> float:
        """Median wall time of the PyTorch (oneDNN/BLAS) implementation of this operator, in seconds, on
        inputs already in PyTorch's native layout."""
        import torch

        prepare, compute, _ = _TORCH_OPS[self.kind]
        with torch.no_grad():
            native = prepare(self.shape, *(torch.from_numpy(x) for x in self.random_inputs()))
            return median_seconds(lambda: compute(self.shape, *native), min_seconds, repeats)


def median_seconds(fn: Callable[[], object], min_seconds: float, repeats: int) -> float:
    """Median wall time of one call of ``fn`` in seconds, over ``repeats`` timed groups of calls that
    together last about ``min_seconds``, after one warm-up call."""
    fn()  # warm-up: allocations, kernel selection
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < min_seconds / repeats:
        fn()
        calls += 1
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return float(np.median(samples))


def make_workload(kind: str, shape: tuple[int, ...] | list[int] | None = None) -> Workload:
    """Build a workload from its kind and positional shape (``None``: the kind's default shape)."""
    if kind not in SHAPE_PARAMS:
        raise ValueError(f"unknown workload kind {kind!r}; choose one of {', '.join(SHAPE_PARAMS)}")
    names = SHAPE_PARAMS[kind]
    values = tuple(shape) if shape is not None else DEFAULT_SHAPES[kind]
    if len(values) != len(names):
        raise ValueError(f"{kind} takes {len(names)} shape values ({','.join(names)}), got {len(values)}")
    shape = dict(zip(names, (int(v) for v in values), strict=True))
    bad = [f"{n}={v}" for n, v in shape.items() if v < (0 if n == "pad" else 1)]
    if bad:
        allowed = "at least 1 (pad at least 0)" if "pad" in shape else "at least 1"
        raise ValueError(f"{kind} {', '.join(bad)}: shape values must be {allowed}")
    if "pad" in shape:
        for size in ("H", "W"):
            if _out_size(shape[size], shape["K"], shape["stride"], shape["pad"]) < 1:
                raise ValueError(
                    f"{kind} K={shape['K']} is larger than {size}={shape[size]} plus padding 2x{shape['pad']}"
                )
    return Workload(kind, shape)


def parse_workload(kind: str, shape_text: str | None) -> Workload:
    """Parse a command-line shape such as ``"256,256,256"`` (``None`` or ``""``: the kind's default);
    raises :class:`~tenset_tools.command.UsageError` naming ``--shape``, the value and the kind's shape
    order when it is not that many integers (positive; ``pad`` may be 0)."""
    from tenset_tools.command import UsageError

    if shape_text is None or not shape_text.strip():
        return make_workload(kind)
    order = ",".join(SHAPE_PARAMS.get(kind, ()))
    try:
        shape = [int(v) for v in shape_text.replace("x", ",").split(",")]
    except ValueError:
        raise UsageError(f"--shape {shape_text!r}: {kind} takes integers {order}") from None
    try:
        return make_workload(kind, shape)
    except ValueError as error:
        raise UsageError(f"--shape {shape_text!r}: {error}") from None


def _out_size(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def _matmul(M: int, N: int, K: int) -> list[te.Tensor]:
    a = te.placeholder((M, K), name="A")
    b = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    return [a, b, te.compute((M, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")]


def _batch_matmul(B: int, M: int, N: int, K: int) -> list[te.Tensor]:
    a = te.placeholder((B, M, K), name="A")
    b = te.placeholder((B, K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    out = te.compute((B, M, N), lambda n, i, j: te.sum(a[n, i, k] * b[n, k, j], axis=k), name="C")
    return [a, b, out]


def _dense(M: int, N: int, K: int) -> list[te.Tensor]:
    x = te.placeholder((M, K), name="X")
    w = te.placeholder((N, K), name="W")
    k = te.reduce_axis((0, K), name="k")
    return [x, w, te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), name="Y")]


def _conv2d(N: int, H: int, W: int, CI: int, CO: int, K: int, stride: int, pad: int) -> list[te.Tensor]:
    data = te.placeholder((N, H, W, CI), name="data")
    weight = te.placeholder((K, K, CI, CO), name="weight")
    padded = topi.nn.pad(data, [0, pad, pad, 0], name="pad")
    rh, rw, rc = (te.reduce_axis((0, n), name=s) for n, s in ((K, "rh"), (K, "rw"), (CI, "rc")))
    out = te.compute(
        (N, _out_size(H, K, stride, pad), _out_size(W, K, stride, pad), CO),
        lambda n, h, w, co: te.sum(
            padded[n, h * stride + rh, w * stride + rw, rc] * weight[rh, rw, rc, co], axis=[rh, rw, rc]
        ),
        name="conv2d_nhwc",
    )
    return [data, weight, out]


def _depthwise_conv2d(N: int, H: int, W: int, C: int, K: int, stride: int, pad: int) -> list[te.Tensor]:
    data = te.placeholder((N, H, W, C), name="data")
    weight = te.placeholder((K, K, C), name="weight")
    padded = topi.nn.pad(data, [0, pad, pad, 0], name="pad")
    rh, rw = te.reduce_axis((0, K), name="rh"), te.reduce_axis((0, K), name="rw")
    out = te.compute(
        (N, _out_size(H, K, stride, pad), _out_size(W, K, stride, pad), C),
        lambda n, h, w, c: te.sum(
            padded[n, h * stride + rh, w * stride + rw, c] * weight[rh, rw, c], axis=[rh, rw]
        ),
        name="depthwise_conv2d_nhwc",
    )
    return [data, weight, out]


_BUILDERS: dict[str, Callable[..., list[te.Tensor]]] = {
    "matmul": _matmul,
    "batch_matmul": _batch_matmul,
    "dense": _dense,
    "conv2d": _conv2d,
    "depthwise_conv2d": _depthwise_conv2d,
}

_FLOPS: dict[str, Callable[..., float]] = {
    "matmul": lambda M, N, K: 2.0 * M * N * K,
    "batch_matmul": lambda B, M, N, K: 2.0 * B * M * N * K,
    "dense": lambda M, N, K: 2.0 * M * N * K,
    "conv2d": lambda N, H, W, CI, CO, K, stride, pad: (
        2.0 * N * _out_size(H, K, stride, pad) * _out_size(W, K, stride, pad) * CO * CI * K * K
    ),
    "depthwise_conv2d": lambda N, H, W, C, K, stride, pad: (
        2.0 * N * _out_size(H, K, stride, pad) * _out_size(W, K, stride, pad) * C * K * K
    ),
}


# PyTorch implementations as (prepare, compute, to_tvm_layout): ``prepare`` moves the TVM-layout inputs to
# PyTorch's native layout (NCHW, OIHW) outside the timed region, ``compute`` is the timed operator, and
# ``to_tvm_layout`` brings its output back for comparison. Timing PyTorch on permuted NHWC views instead
# makes oneDNN reorder every call (several times slower), which would flatter TVM.
def _nchw_conv_inputs(s, data, weight):
    return data.permute(0, 3, 1, 2).contiguous(), weight.permute(3, 2, 0, 1).contiguous()


def _nchw_depthwise_inputs(s, data, weight):
    return data.permute(0, 3, 1, 2).contiguous(), weight.permute(2, 0, 1).unsqueeze(1).contiguous()


def _conv(s, x, w):
    import torch.nn.functional as F

    return F.conv2d(x, w, stride=s["stride"], padding=s["pad"], groups=s.get("C", 1))


def _unchanged(s, *args):
    return args


def _nhwc(y):
    return y.permute(0, 2, 3, 1)


_TORCH_OPS: dict[str, tuple[Callable, Callable, Callable]] = {
    "matmul": (_unchanged, lambda s, a, b: a @ b, lambda y: y),
    "batch_matmul": (_unchanged, lambda s, a, b: a @ b, lambda y: y),
    "dense": (_unchanged, lambda s, x, w: x @ w.T, lambda y: y),
    "conv2d": (_nchw_conv_inputs, _conv, _nhwc),
    "depthwise_conv2d": (_nchw_depthwise_inputs, _conv, _nhwc),
}
