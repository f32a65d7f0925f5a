"""torchvision's classification networks, built without importing torchvision's package ``__init__``.

The torchvision wheel on PyPI for torch 2.13 links its C++ extension against CUDA torch libraries; with the
CPU torch this package pins, ``import torchvision`` fails while it registers fake kernels for its detection
operators (``operator torchvision::nms does not exist``). The classification builders in
``torchvision.models`` are pure PyTorch and need none of those operators, so the package object is created
from its import spec *without running its* ``__init__`` and only ``torchvision.models`` is imported. The
operators that do need the extension (detection, video) fail when called, which no classification network
does.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from functools import cache
from types import ModuleType

from torch import nn

__all__ = ["classification_models", "torchvision_model", "torchvision_models_module"]


@cache
def torchvision_models_module() -> ModuleType:
    """``torchvision.models``, imported without running ``torchvision/__init__.py``.

    Raises ``ImportError`` when torchvision is not installed."""
    if "torchvision.models" in sys.modules:
        return sys.modules["torchvision.models"]
    if "torchvision" not in sys.modules:
        spec = importlib.util.find_spec("torchvision")
        if spec is None:
            raise ImportError("torchvision is not installed (pip install torchvision==0.28.0)")
        package = importlib.util.module_from_spec(spec)
        # Registered before anything inside it is imported, so that submodules find their parent.
        sys.modules["torchvision"] = package
    return importlib.import_module("torchvision.models")


def classification_models() -> list[str]:
    """Names of torchvision's image classification builders (``resnet18``, ``vit_b_16``, ...)."""
    models = torchvision_models_module()
    return sorted(models.list_models(module=models))


def torchvision_model(name: str, **config: object) -> nn.Module:
    """torchvision's classification network ``name`` with random initial weights (``weights=None``: nothing
    is downloaded), built with the builder's keyword arguments ``config`` (e.g. a vision transformer's
    ``image_size``, in pixels). Raises ``KeyError`` for a name that is not a classification builder."""
    if name not in classification_models():
        raise KeyError(name)
    return torchvision_models_module().get_model(name, weights=None, **config)
