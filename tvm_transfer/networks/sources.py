"""Where a network comes from: one resolver for every command that takes a model.

A model is named by one string:

- a built-in name of :data:`~tvm_transfer.networks.builtin.NETWORKS` (``resnet_block``, ``bert_base``, ...);
- ``torchvision:NAME``, any torchvision classification builder (random weights, nothing downloaded);
- a path ending in ``.onnx``;
- ``package.module:factory``, a callable of the user's returning ``(torch.nn.Module, example_inputs)``.

A built-in, torchvision or ONNX name may end in ``@SHAPE`` (``torchvision:resnet50@1,3,160,160``): the
input shape, batch first, as ``--input-shape`` gives it. Any name may then end in ``@nhwc``
(``torchvision:resnet50@1,3,160,160@nhwc``): its 2-d convolutions imported channels last, as
``--conv-layout NHWC`` gives it (:data:`CONV_LAYOUTS`), or ``@nchw``, as the frontends import them. One
string then names one set of tasks, which is what a corpus or a dataset's ``network`` column needs: a name
without a layout suffix is NCHW. The commands' default layout, :data:`AUTO_CONV_LAYOUT`, picks channels
last for a model with 2-d convolutions and spells it in the model's name.

Built-in and torchvision networks get seeded random weights, then their normalisation statistics are
calibrated on random inputs and weights that their initialiser leaves at zero are drawn small: left as
initialised, several of them output almost exactly zero, which would make any numeric check pass.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import tvm
from torch import nn

from tvm_transfer.common.errors import one_line
from tvm_transfer.networks.builtin import NETWORKS

__all__ = [
    "AUTO_CONV_LAYOUT",
    "CONV_LAYOUTS",
    "TORCHVISION_PREFIX",
    "LoadedModel",
    "ModelSourceError",
    "conv_layout_of",
    "load_model",
    "model_slug",
    "network_family",
    "parse_input_shape",
    "with_conv_layout",
]

TORCHVISION_PREFIX = "torchvision:"
DEFAULT_IMAGE_SHAPE = (1, 3, 224, 224)
#: Activation layouts a network's 2-d convolutions may be imported in: as the frontends import them
#: (``NCHW``, PyTorch's and ONNX's, the default) or channels last (``NHWC``, named by an ``@nhwc`` suffix).
CONV_LAYOUTS = ("NCHW", "NHWC")
#: The layout to ask :func:`load_model` for to get the faster one: ``NHWC`` for a model with 2-d
#: convolutions (channels last runs faster on x86 CPUs), ``NCHW`` for one without (nothing to convert).
AUTO_CONV_LAYOUT = "AUTO"


class ModelSourceError(ValueError):
    """A model that cannot be found, loaded or imported; the message names the model and the cause."""

    def __init__(self, model: str, cause: str) -> None:
        super().__init__(f"model {model!r}: {cause}")
        self.model = model


@dataclass
class LoadedModel:
    """A model ready to import: its example inputs and either a PyTorch module or an ONNX file."""

    name: str
    kind: str  # "built-in", "torchvision", "onnx" or "factory"
    inputs: list[np.ndarray]
    torch_module: nn.Module | None = None
    onnx_path: Path | None = None
    conv_layout: str = "NCHW"  # one of CONV_LAYOUTS
    # Its Relax module once imported (tvm_transfer.networks.relax_import.relax_module): import is the slow
    # step (torch.export or the ONNX frontend), and IRModules are immutable, so one import serves all.
    relax: tvm.IRModule | None = field(default=None, repr=False, compare=False)


def load_model(
    name: str, input_shape: Sequence[int] | None = None, seed: int = 0, conv_layout: str | None = None
) -> LoadedModel:
    """The model ``name`` names (see the module docstring), with seeded example inputs.

    ``input_shape`` (batch first) replaces the default input shape of a built-in or torchvision network
    (``1,3,224,224`` for torchvision) or fixes the first input of an ONNX model; a factory's example inputs
    are its own; a name's ``@SHAPE`` suffix does the same. ``conv_layout`` (one of :data:`CONV_LAYOUTS` or
    :data:`AUTO_CONV_LAYOUT`, any case) is the layout its convolutions are imported in; a name's ``@nhwc``
    or ``@nchw`` suffix gives it too, and wins over ``AUTO``; without either it is ``NCHW``. The model's
    ``name`` is ``name`` with its layout spelt as a suffix when it is channels last, so that it names the
    model's tasks. Raises :class:`ModelSourceError` naming the model and the cause."""
    base, named_layout = _split_layout(name)
    asked = conv_layout.upper() if conv_layout is not None else None
    if asked is not None and asked not in (*CONV_LAYOUTS, AUTO_CONV_LAYOUT):
        choices = ", ".join((*CONV_LAYOUTS, AUTO_CONV_LAYOUT))
        raise ModelSourceError(name, f"unknown conv layout {conv_layout!r}: use one of {choices}")
    if named_layout is not None and asked not in (None, AUTO_CONV_LAYOUT, named_layout):
        raise ModelSourceError(name, f"the name asks for {named_layout} convolutions, not {asked}")
    plain, named_shape = _split_shape(base)
    if named_shape is not None and input_shape is not None:
        raise ModelSourceError(name, "the name already gives an input shape; drop --input-shape")
    input_shape = named_shape if named_shape is not None else input_shape
    if plain.startswith(TORCHVISION_PREFIX):
        model = _torchvision(plain, input_shape, seed)
    elif plain.endswith(".onnx"):
        model = _onnx(plain, input_shape, seed)
    elif ":" in plain:
        if input_shape is not None:
            raise ModelSourceError(name, "a factory returns its own example inputs; drop --input-shape")
        model = _factory(plain)
    else:
        model = _builtin(plain, input_shape, seed)
    layout = named_layout or asked or "NCHW"
    if layout == AUTO_CONV_LAYOUT:
        layout = "NHWC" if _has_conv2d(model) else "NCHW"
    model.name = _with_layout(base, layout)
    model.conv_layout = layout
    return model


def conv_layout_of(name: str) -> str:
    """The layout (of :data:`CONV_LAYOUTS`) the convolutions of the model ``name`` names are imported in:
    ``NHWC`` for a name ending in ``@nhwc``, else ``NCHW`` (a model's ``name`` as :func:`load_model` gives
    it spells every layout but ``NCHW``)."""
    return _split_layout(name)[1] or "NCHW"


def with_conv_layout(name: str, layout: str) -> str:
    """The name of the model ``name`` names with its convolutions in ``layout`` (of :data:`CONV_LAYOUTS`):
    ``torchvision:resnet18@nhwc`` for ``("torchvision:resnet18", "NHWC")`` and back."""
    return _with_layout(_split_layout(name)[0], layout)


def network_family(name: str) -> str:
    """``name`` without its ``@SHAPE`` and ``@nhwc`` suffixes: the network whose weights and layers it
    shares with every other shape and layout of it (what holding a network out of a corpus holds out)."""
    return _split_shape(_split_layout(name)[0])[0]


def model_slug(name: str, input_shape: Sequence[int] | None = None, conv_layout: str | None = None) -> str:
    """A file-name-safe name of a model (work dirs, reports): ``torchvision-resnet18``, an ONNX file's stem,
    ``package.module-factory``; an input shape (``input_shape`` or the name's ``@SHAPE``) is appended as
    ``-1x3x160x160``, and channels last (``conv_layout`` or the name's suffix) as ``@nhwc``."""
    base, named_layout = _split_layout(name)
    name, named_shape = _split_shape(base)
    input_shape = named_shape if named_shape is not None else input_shape
    slug = Path(name).stem if name.endswith(".onnx") else name.replace(":", "-").replace("/", "-")
    slug += "-" + "x".join(map(str, input_shape)) if input_shape else ""
    return _with_layout(slug, conv_layout or named_layout or "NCHW")


def parse_input_shape(text: str) -> tuple[int, ...]:
    """An input shape from comma-separated positive integers, batch first (``1,3,224,224``); raises
    ``ValueError`` with an example otherwise."""
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(v < 1 for v in shape):
        raise ValueError(f"{text!r} is not a shape: comma-separated positive integers, e.g. 1,3,224,224")
    return shape


def split_model_names(text: str) -> list[str]:
    """Model names from a comma-separated list, each name's input shape kept whole: a comma followed by a
    digit belongs to a shape (``torchvision:resnet50@1,3,160,160@nhwc,bert_base`` is two names), so a name
    of the list may not begin with a digit (write a file ``./1.onnx``)."""
    return [name for name in re.split(r",(?![0-9])", text) if name]


def _split_layout(name: str) -> tuple[str, str | None]:
    """``name`` without an ``@nhwc`` or ``@nchw`` suffix (any case), and that layout (``None`` if none)."""
    base, at, suffix = name.rpartition("@")
    layout = suffix.upper()
    return (base, layout) if at and layout in CONV_LAYOUTS else (name, None)


def _with_layout(name: str, layout: str) -> str:
    """``name`` with the suffix of ``layout`` (of :data:`CONV_LAYOUTS`, any case) unless it is ``NCHW``."""
    if layout.upper() not in CONV_LAYOUTS:
        raise ValueError(f"unknown conv layout {layout!r}: use one of {', '.join(CONV_LAYOUTS)}")
    return name if layout.upper() == "NCHW" else f"{name}@{layout.lower()}"


def _split_shape(name: str) -> tuple[str, tuple[int, ...] | None]:
    """``name`` without its ``@SHAPE`` suffix, and that shape (``None`` without one)."""
    base, at, shape = name.rpartition("@")
    if not at or not re.fullmatch(r"[0-9,x]+", shape):  # a path may hold an '@' of its own
        return name, None
    try:
        return base, parse_input_shape(shape)
    except ValueError as error:
        raise ModelSourceError(name, f"after '@': {error}") from None


def _builtin(name: str, input_shape: Sequence[int] | None, seed: int) -> LoadedModel:
    if name not in NETWORKS:
        raise ModelSourceError(
            name,
            f"not a built-in network ({', '.join(NETWORKS)}), a torchvision:NAME, a .onnx file "
            "or a package.module:factory",
        )
    spec = NETWORKS[name]
    torch.manual_seed(seed)
    shape = tuple(input_shape or spec.input_shape)
    return _seeded(name, "built-in", spec.factory(), shape, seed)


def _torchvision(name: str, input_shape: Sequence[int] | None, seed: int) -> LoadedModel:
    from tvm_transfer.networks.torchvision_models import classification_models, torchvision_model

    builder = name[len(TORCHVISION_PREFIX) :]
    try:
        torch.manual_seed(seed)
        module = torchvision_model(builder)
    except ImportError as error:
        raise ModelSourceError(name, str(error)) from error
    except KeyError:
        close = difflib.get_close_matches(builder, classification_models(), n=6, cutoff=0.6)
        hint = f"; similar: {', '.join(close)}" if close else ""
        raise ModelSourceError(name, f"not a torchvision classification model{hint}") from None
    shape = tuple(input_shape or DEFAULT_IMAGE_SHAPE)
    module = _built_for_image_size(name, builder, module, shape, seed)
    return _seeded(name, "torchvision", module, shape, seed)


def _built_for_image_size(
    name: str, builder: str, module: nn.Module, shape: tuple[int, ...], seed: int
) -> nn.Module:
    """``module``, or torchvision's ``builder`` built anew for the images of ``shape`` when ``module`` was
    built for one image size (a vision transformer: its position embedding has one row per patch)."""
    from tvm_transfer.networks.torchvision_models import torchvision_model

    fixed_size = getattr(module, "image_size", None)
    if not isinstance(fixed_size, int) or tuple(shape[-2:]) == (fixed_size, fixed_size):
        return module
    patch = getattr(module, "patch_size", 1)
    if len(shape) != 4 or shape[-1] != shape[-2] or shape[-1] % patch:
        raise ModelSourceError(name, f"takes square images of a side divisible by {patch}, not {shape}")
    torch.manual_seed(seed)
    return torchvision_model(builder, image_size=shape[-1])


def _seeded(name: str, kind: str, module: nn.Module, shape: tuple[int, ...], seed: int) -> LoadedModel:
    """``module`` with calibrated random weights, and a seeded random input of ``shape``."""
    generator = torch.Generator().manual_seed(seed)
    _calibrate(module, shape, generator)
    example = torch.randn(*shape, generator=generator)
    return LoadedModel(name, kind, [example.numpy()], torch_module=module.eval())


def _calibrate(module: nn.Module, shape: tuple[int, ...], generator: torch.Generator) -> None:
    """Draw weights left at zero (e.g. a ViT's head) small, and set batch-norm statistics from one batch of
    random inputs, as training would have: activations then keep a realistic scale through deep networks."""
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.dim() >= 2 and not parameter.any():
                parameter.normal_(0.0, 0.02, generator=generator)
        norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        if not norms:
            return
        momenta = [norm.momentum for norm in norms]
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None  # a cumulative average over the calibration batch
        module.train()
        module(torch.randn(max(shape[0], 4), *shape[1:], generator=generator))
        for norm, momentum in zip(norms, momenta, strict=True):
            norm.momentum = momentum
        module.eval()


def _onnx(name: str, input_shape: Sequence[int] | None, seed: int) -> LoadedModel:
    import onnx

    path = Path(name)
    if not path.is_file():
        raise ModelSourceError(name, "no such file")
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as error:  # onnx raises DecodeError, ValueError, ... for a damaged file
        raise ModelSourceError(name, f"not a readable ONNX model ({one_line(error)})") from error
    weights = {init.name for init in graph.initializer}
    inputs = [value for value in graph.input if value.name not in weights]
    if not inputs:
        raise ModelSourceError(name, "the ONNX graph has no inputs")
    generator = np.random.default_rng(seed)
    arrays = []
    for index, value in enumerate(inputs):
        shape = _onnx_input_shape(name, value, input_shape if index == 0 else None)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        array = generator.standard_normal(shape) if np.issubdtype(dtype, np.floating) else np.zeros(shape)
        arrays.append(array.astype(dtype))
    return LoadedModel(name, "onnx", arrays, onnx_path=path)


def _onnx_input_shape(name: str, value, override: Sequence[int] | None) -> tuple[int, ...]:
    dims = value.type.tensor_type.shape.dim
    if override is not None:
        if len(override) != len(dims):
            raise ModelSourceError(
                name, f"--input-shape has {len(override)} dimensions, input {value.name!r} has {len(dims)}"
            )
        return tuple(override)
    dynamic = [d.dim_param or "?" for d in dims if d.dim_value <= 0]
    if dynamic:
        raise ModelSourceError(
            name, f"input {value.name!r} has dynamic dimensions ({', '.join(dynamic)}): give --input-shape"
        )
    return tuple(int(d.dim_value) for d in dims)


def _has_conv2d(model: LoadedModel) -> bool:
    """Whether ``model`` has a 2-d convolution, the operator a layout converts."""
    if model.torch_module is not None:
        return any(isinstance(module, nn.Conv2d) for module in model.torch_module.modules())
    import onnx

    proto = onnx.load(str(model.onnx_path), load_external_data=False)
    convs = [node for node in proto.graph.node if node.op_type == "Conv"]
    if not convs:
        return False
    # A Conv's weight is (out, in, *kernel); kernel_shape is optional, so the weight's rank decides.
    graph = onnx.shape_inference.infer_shapes(proto).graph
    ranks = {init.name: len(init.dims) for init in graph.initializer}
    for value in (*graph.input, *graph.value_info):
        ranks.setdefault(value.name, len(value.type.tensor_type.shape.dim))
    return any(ranks.get(node.input[1]) == 4 for node in convs)


def _factory(name: str) -> LoadedModel:
    module_name, _, attribute = name.partition(":")
    try:
        with _working_directory_importable():
            module = importlib.import_module(module_name)
        factory = getattr(module, attribute)
    except ImportError as error:
        raise ModelSourceError(name, f"cannot import module {module_name!r} ({error})") from error
    except AttributeError:
        raise ModelSourceError(name, f"module {module_name!r} has no attribute {attribute!r}") from None
    try:
        made = factory()
    except Exception as error:
        raise ModelSourceError(name, f"the factory failed: {one_line(error)}") from error
    return _factory_result(name, made)


@contextlib.contextmanager
def _working_directory_importable() -> Iterator[None]:
    """Console scripts do not put the working directory on ``sys.path`` (``python -m`` does): a user's
    factory module next to them is found either way, and ``sys.path`` is left as it was."""
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        yield
    finally:
        if added:
            sys.path.remove(os.getcwd())


def _factory_result(name: str, made: object) -> LoadedModel:
    expected = "must return (torch.nn.Module, example_inputs), example_inputs a tensor or a tuple of tensors"
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], nn.Module)):
        raise ModelSourceError(name, f"the factory returned {type(made).__name__}; it {expected}")
    module, example = made
    examples = (example,) if isinstance(example, torch.Tensor) else example
    if not (
        isinstance(examples, tuple | list) and examples and all(isinstance(t, torch.Tensor) for t in examples)
    ):
        raise ModelSourceError(
            name, f"the factory's example_inputs are {type(example).__name__}; it {expected}"
        )
    return LoadedModel(name, "factory", [t.detach().numpy() for t in examples], torch_module=module.eval())
