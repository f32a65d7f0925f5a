"""Workloads VTA runs: packed conv2d and dense with VTA's epilogue, their NumPy references, ResNet-18.

Every workload computes ``int32 acc = sum(int8 x * int8 w)``, then ``(acc >> 8) + bias``, clips to
[0, 127] and casts to int8 (the epilogue of VTA's tutorials). On the device, activations are packed as
NCHW{BATCH}n{BLOCK_IN}c and weights as OIHW{BLOCK_OUT}o{BLOCK_IN}i; a dense layer is the H = W = K = 1
case of the same layouts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vta_ext.errors import InvalidConfigError
from vta_ext.hw import HwConfig

SHIFT = 8  # the epilogue's arithmetic right shift (VTA's tutorials use the weight width, 8 bits)
CLIP_MAX = 127


@dataclass(frozen=True)
class Conv2D:
    """A 2-D convolution with square kernel, symmetric padding and equal strides (NCHW, OIHW)."""

    name: str
    batch: int
    height: int
    width: int
    in_channels: int
    out_channels: int
    kernel: int
    pad: int
    stride: int

    op_kind = "vta_conv2d"

    @property
    def out_height(self) -> int:
        return (self.height + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def out_width(self) -> int:
        return (self.width + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def macs(self) -> int:
        """Multiply-accumulates of one run."""
        return (
            self.batch
            * self.out_height
            * self.out_width
            * self.out_channels
            * self.in_channels
            * self.kernel**2
        )

    @property
    def key(self) -> str:
        return (
            f"conv2d_N{self.batch}_H{self.height}_W{self.width}_CI{self.in_channels}"
            f"_CO{self.out_channels}_K{self.kernel}_P{self.pad}_S{self.stride}"
        )

    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Unpacked shapes of data (NCHW), weight (OIHW) and output (NCHW)."""
        return (
            (self.batch, self.in_channels, self.height, self.width),
            (self.out_channels, self.in_channels, self.kernel, self.kernel),
            (self.batch, self.out_channels, self.out_height, self.out_width),
        )


@dataclass(frozen=True)
class Dense:
    """A fully connected layer ``y = x @ w.T`` with x (batch, in_features), w (out_features, in_features)."""

    name: str
    batch: int
    in_features: int
    out_features: int

    op_kind = "vta_dense"

    @property
    def macs(self) -> int:
        return self.batch * self.in_features * self.out_features

    @property
    def key(self) -> str:
        return f"dense_N{self.batch}_CI{self.in_features}_CO{self.out_features}"

    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return (
            (self.batch, self.in_features),
            (self.out_features, self.in_features),
            (self.batch, self.out_features),
        )


VtaWorkload = Conv2D | Dense


def flops(workload: VtaWorkload) -> float:
    """Operations of one run, a multiply-add counted as 2."""
    return 2.0 * workload.macs


def _resnet18() -> dict[str, Conv2D]:
    shapes = [
        (56, 56, 64, 64, 3, 1, 1),
        (56, 56, 64, 128, 3, 1, 2),
        (56, 56, 64, 128, 1, 0, 2),
        (28, 28, 128, 128, 3, 1, 1),
        (28, 28, 128, 256, 3, 1, 2),
        (28, 28, 128, 256, 1, 0, 2),
        (14, 14, 256, 256, 3, 1, 1),
        (14, 14, 256, 512, 3, 1, 2),
        (14, 14, 256, 512, 1, 0, 2),
        (7, 7, 512, 512, 3, 1, 1),
    ]
    return {f"C{i}": Conv2D(f"resnet-18.C{i}", 1, *shape) for i, shape in enumerate(shapes, start=2)}


RESNET18: dict[str, Conv2D] = _resnet18()
"""The ten conv2d layers C2..C11 of ResNet-18 that VTA's tuning scripts use, batch 1."""

LSTM_DENSE: dict[str, Dense] = {
    "lstm.dense.1": Dense("lstm.dense.1", 1, 256, 128),
    "lstm.dense.4": Dense("lstm.dense.4", 4, 256, 128),
}
"""The dense workloads of VTA's ``tune_dense.py`` (batch, in, out)."""


def check_layout(workload: VtaWorkload, hw: HwConfig) -> None:
    """Raise ``layout`` if the batch or channels cannot be packed into BATCH / BLOCK_IN / BLOCK_OUT."""
    cin = workload.in_channels if isinstance(workload, Conv2D) else workload.in_features
    cout = workload.out_channels if isinstance(workload, Conv2D) else workload.out_features
    for what, size, block in (
        ("batch", workload.batch, hw.BATCH),
        ("in_channels", cin, hw.BLOCK_IN),
        ("out_channels", cout, hw.BLOCK_OUT),
    ):
        if size % block:
            raise InvalidConfigError(
                "compile", "layout", size, block, what, "", "not a multiple of the block"
            )


def random_inputs(workload: VtaWorkload, seed: int = 0) -> dict[str, np.ndarray]:
    """Unpacked int8 data and weights over the full int8 range and a small int32 bias per channel."""
    rng = np.random.default_rng(seed)
    data_shape, weight_shape, out_shape = workload.shapes()
    return {
        "data": rng.integers(-128, 128, size=data_shape, dtype=np.int8),
        "weight": rng.integers(-128, 128, size=weight_shape, dtype=np.int8),
        "bias": rng.integers(-64, 64, size=out_shape[1], dtype=np.int32),
    }


def _epilogue(acc: np.ndarray, bias: np.ndarray) -> np.ndarray:
    acc = acc.astype(np.int32)
    return np.clip((acc >> SHIFT) + bias, 0, CLIP_MAX).astype(np.int8)


def reference(workload: VtaWorkload, data: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The workload's int8 output (unpacked NCHW or NC), computed directly with NumPy."""
    if isinstance(workload, Dense):
        # float64 products and sums of int8 values are exact far beyond these reduction lengths.
        acc = np.rint(data.astype(np.float64) @ weight.astype(np.float64).T)
        return _epilogue(acc, bias[None, :])
    p, k, s = workload.pad, workload.kernel, workload.stride
    padded = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(2, 3))
    windows = windows[:, :, ::s, ::s][:, :, : workload.out_height, : workload.out_width]
    acc = np.rint(np.einsum("nchwij,ocij->nohw", windows, weight.astype(np.float64), optimize=True))
    return _epilogue(acc, bias[None, :, None, None])


def pack_activations(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """NCHW (or NC) -> DRAM elements (N/B * C/block * H * W, B, block) in VTA's NCHWnc order."""
    x4 = x.reshape(x.shape[0], x.shape[1], *(x.shape[2:] or (1, 1)))
    n, c, h, w = x4.shape
    packed = x4.reshape(n // batch, batch, c // block, block, h, w).transpose(0, 2, 4, 5, 1, 3)
    return np.ascontiguousarray(packed).reshape(-1, batch, block)


def unpack_activations(elems: np.ndarray, shape: tuple[int, ...], batch: int) -> np.ndarray:
    """Inverse of :func:`pack_activations` for an output of unpacked ``shape``."""
    n, c = shape[:2]
    h, w = shape[2:] or (1, 1)
    block = elems.shape[-1]
    x = elems.reshape(n // batch, c // block, h, w, batch, block).transpose(0, 4, 1, 5, 2, 3)
    return x.reshape(shape)


def pack_weights(weight: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    """OIHW (or OI) -> DRAM elements (O/bo * I/bi * KH * KW, bo, bi)."""
    w4 = weight.reshape(weight.shape[0], weight.shape[1], *(weight.shape[2:] or (1, 1)))
    o, i, kh, kw = w4.shape
    packed = w4.reshape(o // block_out, block_out, i // block_in, block_in, kh, kw).transpose(
        0, 2, 4, 5, 1, 3
    )
    return np.ascontiguousarray(packed).reshape(-1, block_out, block_in)


def pack_bias(bias: np.ndarray, hw: HwConfig) -> np.ndarray:
    """Per-channel bias -> accumulator elements (CO/BLOCK_OUT, BATCH, BLOCK_OUT), same for every batch row."""
    blocks = bias.reshape(-1, 1, hw.BLOCK_OUT)
    return np.ascontiguousarray(np.broadcast_to(blocks, (blocks.shape[0], hw.BATCH, hw.BLOCK_OUT)))
