"""Op kind, tensor shapes and FLOPs recovered from an Ansor workload key, without TVM.

A hashed key is ``[md5-of-the-compute-DAG, *flattened shapes of all input and output tensors]``: the
ranks are lost, so the shapes are recovered by matching the patterns of common operators, tried in a
fixed order (the first match wins):

================  =====================================================  ==============================
op kind           pattern on the flattened integers ``v``                 FLOPs (multiply-add = 2)
================  =====================================================  ==============================
conv2d (NHWC)     data ``v[0:4]`` (N,H,W,C), kernel ``v[4:8]``             2·N·OH·OW·CO·KH·KW·CI
                  (KH,KW,C,CO), output ``v[-4:]`` (N,OH,OW,CO), OH≤H
conv2d (NCHW)     data (N,C,H,W), kernel (CO,C,KH,KW), output (N,CO,OH,OW)  same
depthwise_conv2d  NHWC kernel (KH,KW,C,M) with output channels C·M;         2·N·OH·OW·C·M·KH·KW
                  NCHW kernel (C,M,KH,KW)
batch_matmul      (B,M,K) × (B or 1,N,K) or (B or 1,K,N) → (B,M,N)          2·B·M·N·K
elementwise       n ≥ 2 tensors of one identical shape                     elements · max(1, n-1)
pool              rank-4 input and output, same batch and channel, the      input elements (a lower
                  output smaller in both spatial dims alike (to 1x1, or     bound: the window is unknown)
                  square stays square), NHWC or NCHW; tensors between
                  them broadcast to the input (a fused bias)
dense             (M,K) × (N,K) → (M,N)                                    2·M·N·K
matmul            (M,K) × (K,N) → (M,N)                                    2·M·N·K
unknown           anything else                                            NaN
================  =====================================================  ==============================

Fused element-wise work (bias, activation, residual) is not counted: FLOPs are those of the main
operator. Extra tensors between the kernel and the output (bias, residual) are allowed by the patterns
because only the leading tensors and the last one are inspected. Softmax keys (input and output of one
shape) are classified as elementwise; keys of the same rank-free shape can be ambiguous, which is why
this is a heuristic, not a parser.

Registered-function keys (log v0.2/v0.3, e.g. ``["matmul_add", N, L, M, "float32"]``) are decoded from
the TVM tutorial definitions listed in :data:`REGISTERED_WORKLOADS`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["REGISTERED_WORKLOADS", "WorkloadInfo", "parse_workload_key"]

_MD5 = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class WorkloadInfo:
    """What a workload key tells about its task.

    ``shapes`` are the recovered tensor shapes (inputs first, output last), empty when unknown;
    ``flops`` is the operation count of one run (NaN when unknown); ``layout`` is "NHWC"/"NCHW" for
    convolutions and pools, else "".
    """

    op_kind: str
    flops: float
    shapes: tuple[tuple[int, ...], ...] = ()
    layout: str = ""
    function: str = ""


UNKNOWN = WorkloadInfo("unknown", math.nan)


def _prod(values: tuple[int, ...]) -> int:
    return math.prod(values)


def _conv(layout: str, data, kernel, out, depthwise: bool) -> WorkloadInfo:
    if layout == "NHWC":
        kh, kw = kernel[0], kernel[1]
        n, oh, ow, co = out
        reduce_channels = 1 if depthwise else kernel[2]
    else:
        kh, kw = kernel[2], kernel[3]
        n, co, oh, ow = out
        reduce_channels = 1 if depthwise else kernel[1]
    flops = 2.0 * n * oh * ow * co * kh * kw * reduce_channels
    kind = "depthwise_conv2d" if depthwise else "conv2d"
    return WorkloadInfo(kind, flops, (tuple(data), tuple(kernel), tuple(out)), layout)


def _match_conv(v: list[int]) -> WorkloadInfo | None:
    if len(v) < 12:
        return None
    x, k, o = v[0:4], v[4:8], v[-4:]
    if o[0] != x[0]:
        return None
    nhwc_spatial_ok = o[1] <= x[1] and o[2] <= x[2]
    nchw_spatial_ok = o[2] <= x[2] and o[3] <= x[3]
    if nhwc_spatial_ok and k[2] == x[3] and o[3] == k[3]:
        return _conv("NHWC", x, k, o, depthwise=False)
    if nchw_spatial_ok and k[1] == x[1] and o[1] == k[0]:
        return _conv("NCHW", x, k, o, depthwise=False)
    if nhwc_spatial_ok and k[2] == x[3] and o[3] == k[2] * k[3]:
        return _conv("NHWC", x, k, o, depthwise=True)
    if nchw_spatial_ok and k[0] == x[1] and o[1] == k[0] * k[1]:
        return _conv("NCHW", x, k, o, depthwise=True)
    return None


def _match_batch_matmul(v: list[int]) -> WorkloadInfo | None:
    if len(v) < 9:
        return None
    x, y, o = v[0:3], v[3:6], v[-3:]
    if y[0] not in (x[0], 1) or o[0] != x[0] or o[1] != x[1]:
        return None
    if y[2] == x[2] and o[2] == y[1]:
        n = y[1]
    elif y[1] == x[2] and o[2] == y[2]:
        n = y[2]
    else:
        return None
    flops = 2.0 * x[0] * x[1] * n * x[2]
    return WorkloadInfo("batch_matmul", flops, (tuple(x), tuple(y), tuple(o)))


def _match_dense(v: list[int]) -> WorkloadInfo | None:
    if len(v) < 6:
        return None
    x, w, o = v[0:2], v[2:4], v[-2:]
    if w[1] == x[1] and o == [x[0], w[0]]:
        kind = "dense"
    elif w[0] == x[1] and o == [x[0], w[1]]:
        kind = "matmul"
    else:
        return None
    return WorkloadInfo(kind, 2.0 * o[0] * o[1] * x[1], (tuple(x), tuple(w), tuple(o)))


def _match_elementwise(v: list[int]) -> WorkloadInfo | None:
    for rank in range(1, len(v) // 2 + 1):
        if len(v) % rank:
            continue
        shape = tuple(v[:rank])
        count = len(v) // rank
        if all(tuple(v[i : i + rank]) == shape for i in range(rank, len(v), rank)):
            return WorkloadInfo("elementwise", float(_prod(shape) * max(1, count - 1)), (shape,) * count)
    return None


def _shrinks(spatial_in, spatial_out) -> bool:
    """A pooling window shrinks both spatial dims alike: to 1x1 (global) or keeping square inputs square."""
    if not (spatial_out[0] <= spatial_in[0] and spatial_out[1] <= spatial_in[1]):
        return False
    is_global = spatial_out[0] == spatial_out[1] == 1
    return is_global or (spatial_in[0] == spatial_in[1]) == (spatial_out[0] == spatial_out[1])


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    return all(d in (1, t) for d, t in zip(shape, target, strict=True))


def _match_pool(v: list[int]) -> WorkloadInfo | None:
    if len(v) < 8 or len(v) % 4:
        return None
    x, o = tuple(v[:4]), tuple(v[-4:])
    fused = [tuple(v[i : i + 4]) for i in range(4, len(v) - 4, 4)]
    if o[0] != x[0] or x == o or not all(_broadcasts_to(t, x) for t in fused):
        return None
    if o[3] == x[3] and _shrinks(x[1:3], o[1:3]):
        layout = "NHWC"
    elif o[1] == x[1] and _shrinks(x[2:4], o[2:4]):
        layout = "NCHW"
    else:
        return None
    return WorkloadInfo("pool", float(_prod(x)), (x, o), layout)


_MATCHERS: tuple[Callable[[list[int]], WorkloadInfo | None], ...] = (
    _match_conv,
    _match_batch_matmul,
    _match_elementwise,
    _match_pool,
    _match_dense,
)


def _matmul_add(n: int, l_: int, m: int, dtype: str) -> WorkloadInfo:
    return WorkloadInfo("matmul", 2.0 * n * l_ * m, ((n, l_), (l_, m), (n, m), (n, m)))


def _conv2d_layer(n, h, w, co, ci, kh, kw, stride, padding) -> WorkloadInfo:
    sh, sw = stride if isinstance(stride, list) else (stride, stride)
    ph, pw = padding if isinstance(padding, list) else (padding, padding)
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (w + 2 * pw - kw) // sw + 1
    return _conv("NCHW", (n, ci, h, w), (co, ci, kh, kw), (n, co, oh, ow), depthwise=False)


# Workloads registered with ``@auto_scheduler.register_workload`` in TVM's tutorials and CI logs, keyed by
# function name; the key holds the function's arguments in order.
REGISTERED_WORKLOADS: dict[str, Callable[..., WorkloadInfo]] = {
    "matmul_add": _matmul_add,
    "conv2d_layer": _conv2d_layer,
}


@lru_cache(maxsize=65536)
def parse_workload_key(workload_key: str) -> WorkloadInfo:
    """Recover op kind, shapes and FLOPs from a workload key string (cached: keys repeat per record).

    Never raises for a well-formed JSON key; anything not recognised is ``op_kind="unknown"``, NaN FLOPs.
    """
    try:
        parts = json.loads(workload_key)
    except ValueError:
        return UNKNOWN
    if not isinstance(parts, list) or not parts or not isinstance(parts[0], str):
        return UNKNOWN
    head, args = parts[0], parts[1:]
    if _MD5.match(head):
        if not args or not all(isinstance(a, int) for a in args):
            return UNKNOWN
        for match in _MATCHERS:
            info = match(args)
            if info is not None:
                return info
        return UNKNOWN
    decode = REGISTERED_WORKLOADS.get(head)
    if decode is None:
        return WorkloadInfo("unknown", math.nan, function=head)
    try:
        info = decode(*args)
    except (TypeError, ValueError):
        return WorkloadInfo("unknown", math.nan, function=head)
    return WorkloadInfo(info.op_kind, info.flops, info.shapes, info.layout, function=head)
