"""From a loaded model to the Relax module that is tuned and compiled, and the passes both steps share.

Weights are bound as constants. Two things follow from that: batch norm's statistics and transposes of
weights fold into new constants at compile time (batch norm itself stays a per-channel epilogue of the
convolution before it: :func:`import_passes` says why), and :func:`fusion_passes` can mark the weights of
every fused function as *layout-free* (``AttachAttrLayoutFreeBuffers``), so that MetaSchedule's
``RewriteLayout`` post-processor may store them in the layout its schedule reads best;
:func:`prepack_passes` then applies that rewrite to the constants once, at compile time (as oneDNN and
ONNX Runtime pre-pack weights).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.relax import dpl

from tvm_transfer.common.errors import one_line
from tvm_transfer.networks.sources import CONV_LAYOUTS, LoadedModel, ModelSourceError
from tvm_transfer.target import last_level_cache_bytes

__all__ = [
    "constant_bytes",
    "frontend_module",
    "fused_for_extraction",
    "fusion_passes",
    "import_passes",
    "imported_module",
    "lowering_passes",
    "prepack_passes",
    "relax_module",
    "weights_outgrow_cache",
]


def relax_module(model: LoadedModel) -> tvm.IRModule:
    """``model`` in Relax with its weights bound as constants, batch-norm in inference form and its
    convolutions in the model's ``conv_layout``.

    Imported once per loaded model (kept in ``model.relax``). Raises :class:`ModelSourceError` when
    ``torch.export`` or TVM's frontend cannot import it."""
    if model.relax is None:
        model.relax = imported_module(model)
    return model.relax


def imported_module(
    model: LoadedModel, fold_batch_norm: bool = False, conv_layout: str | None = None
) -> tvm.IRModule:
    """``model`` imported afresh: :func:`frontend_module` through :func:`import_passes`
    (``fold_batch_norm`` and ``conv_layout`` as there; default the model's ``conv_layout``). Not kept in
    ``model.relax``; setting it there makes that form the one :func:`relax_module` returns."""
    passes = import_passes(fold_batch_norm, conv_layout or model.conv_layout)
    return tvm.transform.Sequential(passes)(frontend_module(model))


def frontend_module(model: LoadedModel) -> tvm.IRModule:
    """``model`` as TVM's PyTorch or ONNX frontend imports it, weights bound as constants, before
    :func:`import_passes`. Raises :class:`ModelSourceError` when ``torch.export`` or the frontend cannot
    import it."""
    return _from_onnx(model) if model.onnx_path is not None else _from_torch(model)


def import_passes(fold_batch_norm: bool = False, conv_layout: str = "NCHW") -> list[tvm.transform.Pass]:
    """The passes from :func:`frontend_module` to :func:`relax_module`: batch norm in inference form
    (subtract the mean, divide by the standard deviation, scale, shift: an epilogue fused into the
    convolution before it), then the bindings tidied. Both run before legalisation, so that task
    extraction and compilation (which legalise and fuse on their own) see the same fused functions.

    With ``fold_batch_norm`` a batch norm right after a convolution is first folded into that
    convolution's weights and a bias, as ONNX Runtime does. That is not the default: on a development
    network the same schedules ran as fast per convolution either way and the whole network only a little
    faster (``benchmarks/batch_norm_folding.py``, ``docs/models.md``), while folding changes the task of
    every batch-norm convolution, so that none would match the schedules the default pack holds.

    ``conv_layout`` (one of :data:`CONV_LAYOUTS`) is the activation layout of the 2-d convolutions: as the
    frontend imports them (``NCHW``, PyTorch's and ONNX's), or channels last (``NHWC``, weights ``OHWI``),
    with layout transforms where the network meets an operator that keeps its own layout (``clip``, as in
    ReLU6 and hard swish, is rewritten first into operators that take any layout, and ``squeeze``'s axes
    are counted from the front). The layout changes the task of every convolution: a pack's schedules
    serve the layout they were measured in."""
    if conv_layout not in CONV_LAYOUTS:
        raise ValueError(f"unknown conv_layout {conv_layout!r}: use one of {', '.join(CONV_LAYOUTS)}")
    folding = [relax.transform.FoldBatchnormToConv2D(), relax.transform.FoldConstant()]
    inference = [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
    passes = [*folding, *inference] if fold_batch_norm else inference
    if conv_layout == "NHWC":
        layouts = {"relax.nn.conv2d": ["NHWC", "OHWI"]}
        passes += [
            _clip_as_min_max,
            _squeeze_axes_from_the_front,
            relax.transform.ConvertLayout(layouts),
            relax.transform.FoldConstant(),
        ]
    return passes


@tvm.transform.module_pass(opt_level=0, name="ClipAsMinMax")
def _clip_as_min_max(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
    """Every ``clip(x, low, high)`` as ``minimum(maximum(x, low), high)``, the same values: layout
    conversion has no rule for ``clip`` and would move a ReLU6 or a hard swish back to NCHW between two
    transposes, while it carries binary element-wise operators through in the convolution's layout."""
    pattern = dpl.is_op("relax.clip")(dpl.wildcard(), dpl.wildcard(), dpl.wildcard())

    def as_min_max(call: relax.Call, _matches: dict) -> relax.Expr:
        x, low, high = call.args
        dtype = str(x.ty.dtype)
        low, high = (relax.const(float(bound.value), dtype) for bound in (low, high))
        return relax.op.minimum(relax.op.maximum(x, low), high)

    return _rewrite_calls(mod, pattern, as_min_max)


@tvm.transform.module_pass(opt_level=0, name="SqueezeAxesFromTheFront")
def _squeeze_axes_from_the_front(mod: tvm.IRModule, _context: tvm.transform.PassContext) -> tvm.IRModule:
    """Every ``squeeze`` axis counted from the front (``-2`` of a 4-d tensor as ``2``), the same op: TVM's
    layout conversion fails (``std::bad_alloc``) on a negative one, as PyTorch's multi-head attention
    writes it downstream of a vision transformer's patch convolution."""
    pattern = dpl.is_op("relax.squeeze")(dpl.wildcard())

    def from_the_front(call: relax.Call, _matches: dict) -> relax.Expr:
        x, axes = call.args[0], call.attrs.axis
        if axes is None or all(int(axis) >= 0 for axis in axes):
            return call
        ndim = x.ty.ndim
        return relax.op.squeeze(x, [int(axis) % ndim for axis in axes])

    return _rewrite_calls(mod, pattern, from_the_front)


def _rewrite_calls(mod: tvm.IRModule, pattern, rewriter) -> tvm.IRModule:
    """``mod`` with every call of its Relax functions that matches ``pattern`` replaced by ``rewriter``'s."""
    rewritten = mod.clone()
    for gvar, function in mod.functions.items():
        if isinstance(function, relax.Function):
            rewritten[gvar] = dpl.rewrite_call(pattern, rewriter, function)
    return rewritten


def constant_bytes(mod: tvm.IRModule) -> int:
    """Bytes of the constants (a network's weights, bound by :func:`relax_module`) of ``mod``'s Relax
    functions, each counted once: what one inference reads besides its inputs and activations."""
    seen: dict[tvm.ir.expr.GenericConst, int] = {}

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, tvm.ir.expr.GenericConst) and expr not in seen:
            tensor = expr.value
            seen[expr] = math.prod(tensor.shape) * np.dtype(str(tensor.dtype)).itemsize

    for function in mod.functions.values():
        if isinstance(function, relax.Function):
            relax.analysis.post_order_visit(function, visit)
    return sum(seen.values())


def weights_outgrow_cache(mod: tvm.IRModule, *, cache_bytes: int | None = None) -> bool:
    """Whether ``mod``'s weights (:func:`constant_bytes`) exceed the last-level cache (``cache_bytes``,
    default this machine's, :func:`~tvm_transfer.target.last_level_cache_bytes`). Then, between two calls
    of a layer, every other layer's weights pass through the cache, and each layer's weights arrive from
    memory. An unknown cache size counts as holding them."""
    cache = last_level_cache_bytes() if cache_bytes is None else cache_bytes
    return cache is not None and constant_bytes(mod) > cache


def _from_torch(model: LoadedModel) -> tvm.IRModule:
    from tvm.relax.frontend.torch import from_exported_program

    inputs = tuple(torch.from_numpy(x) for x in model.inputs)
    try:
        with torch.no_grad():
            exported = torch.export.export(model.torch_module, inputs)
    except Exception as error:
        raise ModelSourceError(model.name, f"torch.export failed: {one_line(error)}") from error
    try:
        return from_exported_program(exported, keep_params_as_input=False, unwrap_unit_return_tuple=True)
    except Exception as error:  # the frontend raises assertion, key and value errors for unsupported ops
        raise ModelSourceError(
            model.name, f"TVM's PyTorch frontend cannot import it: {one_line(error)}"
        ) from error


def _from_onnx(model: LoadedModel) -> tvm.IRModule:
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    try:
        proto = onnx.load(str(model.onnx_path))  # with its external data, if any
    except Exception as error:
        raise ModelSourceError(model.name, f"cannot load the ONNX model: {one_line(error)}") from error
    weights = {init.name for init in proto.graph.initializer}
    names = [value.name for value in proto.graph.input if value.name not in weights]
    try:
        return from_onnx(
            proto,
            shape_dict={n: list(x.shape) for n, x in zip(names, model.inputs, strict=True)},
            dtype_dict={n: str(x.dtype) for n, x in zip(names, model.inputs, strict=True)},
            keep_params_in_input=False,
        )
    except Exception as error:
        raise ModelSourceError(
            model.name, f"TVM's ONNX frontend cannot import it: {one_line(error)}"
        ) from error


def fusion_passes(target: tvm.target.Target, layout_free: bool = True) -> list[tvm.transform.Pass]:
    """Dispatch, legalise and fuse as TVM's CPU pipeline does: the functions tasks are extracted from and
    schedules are looked up for at compile time. With ``layout_free`` the fused functions' weights are
    marked layout-free."""
    pipeline = _cpu_pipeline(target)
    passes = pipeline.library_dispatch_passes(target) + pipeline.legalize_passes(target)
    return [*passes, relax.transform.AttachAttrLayoutFreeBuffers()] if layout_free else passes


def lowering_passes(target: tvm.target.Target) -> list[tvm.transform.Pass]:
    """TVM's CPU dataflow-lowering and finalisation passes (after the schedules are applied)."""
    pipeline = _cpu_pipeline(target)
    return pipeline.dataflow_lower_passes(target) + pipeline.finalize_passes(target)


def _cpu_pipeline(target: tvm.target.Target):
    # TVM 0.27's generic dispatcher (relax.pipeline.dataflow_lower_passes) looks up a function the CPU
    # backend package does not export; its pipeline module has them all.
    from tvm.relax.backend.cpu_generic import pipeline

    if target.kind.name != "llvm":
        raise ValueError(f"networks are compiled for CPU (llvm) targets, not {target.kind.name!r}")
    return pipeline


def prepack_passes() -> list[tvm.transform.Pass]:
    """After the database is applied: split each tuned function's weight-layout rewrite into its own
    function and fold it over the constant weights, so the rewrite runs at compile time, not per call."""
    return [relax.transform.SplitLayoutRewritePreproc(), relax.transform.FoldConstant()]


def fused_for_extraction(
    mod: tvm.IRModule, target: tvm.target.Target, layout_free: bool = True
) -> tvm.IRModule:
    """``mod`` after :func:`fusion_passes`: the module MetaSchedule's task extraction reads."""
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(fusion_passes(target, layout_free))(mod)
