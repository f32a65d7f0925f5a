"""Vectorisable float32 ``exp`` and ``erf`` for LLVM CPU targets.

TVM lowers ``exp`` (and so sigmoid, SiLU, tanh and softmax) to ``llvm.exp``, and ``erf`` (GELU) to a
call of libm's ``erff``. LLVM has no vector form of either without a vector math library, so a vectorised
loop calls libm once per lane: on networks built of SiLU or GELU layers that scalar code, not the
tensor contractions, is a large share of the run time. ONNX Runtime and oneDNN use polynomial
approximations for these functions instead; :func:`use_fast_math` makes TVM do the same, for every
float32 ``exp`` and ``erf`` built afterwards in this process (the measured candidates of a tuning run
and the compiled network alike). Float64 keeps libm's precision.

Accuracy, checked against NumPy and SciPy in the tests: ``exp`` within a few float32 ulp on
``[-87, 88]``; inputs beyond clamp to it (``exp`` of anything below -87.3 is about 1e-38, not 0, and a
NaN input yields a finite value). ``erf`` within about 1e-6 absolute, exactly ±1 beyond ±4.
"""

from __future__ import annotations

import functools

from tvm import tirx

__all__ = ["fast_erf", "fast_exp", "use_fast_math"]

# Above TVM's built-in rules (level 10), so these win for the llvm target.
_LEVEL = 20

_LOG2_E = 1.44269504088896341
# ln 2 split in two (Cody and Waite), so that x - n ln 2 keeps its precision for |n| up to 127.
_LN2_HIGH, _LN2_LOW = 0.693359375, -2.12194440e-4
# Cephes' single-precision minimax polynomial for (exp(r) - 1 - r) / r^2 on |r| <= ln 2 / 2.
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
             5.0000001201e-1)  # fmt: skip
# The rational minimax approximation of erf on [-4, 4] used by Eigen and TVM's fast_erf: odd numerator in
# x (coefficients of x^13 ... x^1), even denominator (x^8 ... x^0).
_ERF_NUMERATOR = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                  -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                  -1.60960333262415e-02)  # fmt: skip
_ERF_DENOMINATOR = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                    -7.37332916720468e-03, -1.42647390514189e-02)  # fmt: skip


@functools.cache  # TVM refuses a second registration at the same level
def use_fast_math() -> None:
    """Lower float32 ``exp`` and ``erf`` to :func:`fast_exp` and :func:`fast_erf` in every LLVM build of
    this process from now on (idempotent). Float64 keeps TVM's lowering; half precision is computed in
    float32."""
    tirx.register_intrin_lowering("tirx.exp", target="llvm", f=_lower(fast_exp, _llvm_exp), level=_LEVEL)
    tirx.register_intrin_lowering("tirx.erf", target="llvm", f=_lower(fast_erf, _libm_erf), level=_LEVEL)


def fast_exp(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """``exp(x)`` of a float32 (scalar or vector) expression in multiplies, adds and one bit shift:
    ``2^n * p(r)`` with ``n = round(x / ln 2)`` and ``r = x - n ln 2``."""
    x = tirx.max(tirx.min(x, _f32(88.0)), _f32(-87.3))  # keeps 2^n a normal float32
    n = tirx.floor(x * _f32(_LOG2_E) + _f32(0.5))
    r = x - n * _f32(_LN2_HIGH) - n * _f32(_LN2_LOW)
    y = _horner(_EXP_POLY, r) * r * r + r + _f32(1.0)
    int_type = _dtype(x).replace("float", "int")
    two_to_n = tirx.reinterpret(_dtype(x), (n.astype(int_type) + 127) << 23)
    return y * two_to_n


def fast_erf(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """``erf(x)`` of a float32 (scalar or vector) expression as a ratio of two polynomials."""
    x = tirx.max(tirx.min(x, _f32(4.0)), _f32(-4.0))
    x2 = x * x
    return x * _horner(_ERF_NUMERATOR, x2) / _horner(_ERF_DENOMINATOR, x2)


def _lower(approximation, float64):
    def rule(call: tirx.Call) -> tirx.PrimExpr:
        (x,) = call.args
        dtype = _dtype(x)
        if dtype.startswith("float64"):
            return float64(dtype, x)
        lanes = dtype.partition("x")[2]
        as_float32 = "float32" + (f"x{lanes}" if lanes else "")
        # Half precision is computed in float32, as LLVM's own lowering does.
        return approximation(x) if dtype == as_float32 else approximation(x.astype(as_float32)).astype(dtype)

    return rule


def _llvm_exp(dtype: str, x: tirx.PrimExpr) -> tirx.PrimExpr:
    return tirx.call_llvm_pure_intrin(dtype, "llvm.exp", x)


def _libm_erf(dtype: str, x: tirx.PrimExpr) -> tirx.PrimExpr:
    return tirx.call_pure_extern(dtype, "erf", x)


def _horner(coefficients: tuple[float, ...], x: tirx.PrimExpr) -> tirx.PrimExpr:
    result = _f32(coefficients[0])
    for coefficient in coefficients[1:]:
        result = result * x + _f32(coefficient)
    return result


def _f32(value: float) -> tirx.PrimExpr:
    return tirx.const(value, "float32")


def _dtype(x: tirx.PrimExpr) -> str:
    return str(x.ty.dtype)
