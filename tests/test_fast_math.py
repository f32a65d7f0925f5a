"""The vectorisable exp and erf: accurate against NumPy/SciPy over the float32 range that matters, and
built without a libm call per lane."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from scipy.special import erf
from tvm import te, tirx

from tvm_transfer.fast_math import use_fast_math
from tvm_transfer.target import host_target

N = 1 << 16


def _vectorised(function, dtype: str = "float32") -> tvm.runtime.Module:
    a = te.placeholder((N,), dtype, name="a")
    b = te.compute((N,), lambda i: function(a[i]), name="b")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
    (loop,) = sch.get_loops(sch.get_sblock("b"))
    sch.vectorize(sch.split(loop, [None, 8])[1])
    return tvm.compile(sch.mod, target=host_target())


def _run(function, x: np.ndarray) -> np.ndarray:
    out = tvm.runtime.tensor(np.empty_like(x))
    _vectorised(function, str(x.dtype))(tvm.runtime.tensor(x), out)
    return out.numpy()


def _libm_calls(function, dtype: str = "float32") -> set[str]:
    asm = _vectorised(function, dtype).mod.inspect_source("asm")
    return {name for name in re.findall(r"call\w*\s+(\w+)", asm) if re.fullmatch("(exp|erf)f?", name)}


@pytest.fixture(scope="module", autouse=True)
def fast_math():
    use_fast_math()


def test_exp_is_within_a_few_ulp_of_numpy_and_clamps_outside_the_float32_range():
    x = np.linspace(-87.0, 88.0, N, dtype=np.float32)
    expected = np.exp(x.astype(np.float64))
    relative = np.abs(_run(tirx.exp, x) - expected) / expected
    assert relative.max() < 4 * np.finfo(np.float32).eps
    extreme = np.array([-1e30, -np.inf, 1e30], dtype=np.float32)
    tail = _run(tirx.exp, np.resize(extreme, N))[:3]
    assert np.all(np.isfinite(tail)) and tail[0] < 1e-37 and tail[2] == pytest.approx(np.exp(88.0), rel=1e-6)


def test_sigmoid_and_tanh_go_through_the_fast_exp():
    x = np.linspace(-20.0, 20.0, N, dtype=np.float32)
    assert np.abs(_run(tirx.sigmoid, x) - 1 / (1 + np.exp(-x.astype(np.float64)))).max() < 1e-6
    assert np.abs(_run(tirx.tanh, x) - np.tanh(x.astype(np.float64))).max() < 1e-6


def test_erf_is_within_1e_6_of_scipy_and_saturates():
    x = np.linspace(-6.0, 6.0, N, dtype=np.float32)
    got = _run(tirx.erf, x)
    assert np.abs(got - erf(x.astype(np.float64))).max() < 1e-6
    assert got[0] == -1.0 and got[-1] == 1.0


def test_float32_builds_without_libm_and_float64_keeps_it():
    for function in (tirx.exp, tirx.erf, tirx.sigmoid):
        assert _libm_calls(function) == set(), function
    assert _libm_calls(tirx.exp, "float64") == {"exp"} and _libm_calls(tirx.erf, "float64") == {"erf"}
    x = np.linspace(-700.0, 700.0, N)
    assert np.allclose(_run(tirx.exp, x), np.exp(x), rtol=1e-15, atol=0)
    assert np.allclose(_run(tirx.erf, x / 100), erf(x / 100), rtol=1e-15, atol=0)
    half = np.linspace(-8.0, 8.0, N, dtype=np.float16)
    assert np.allclose(_run(tirx.exp, half), np.exp(half.astype(np.float64)), rtol=1e-3, atol=0)
