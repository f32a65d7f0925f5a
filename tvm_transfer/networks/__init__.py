"""Networks as the unit of work: built-in blocks, torchvision models, ONNX files and user factories,
loaded by one resolver (:func:`load_model`) and imported into Relax (:func:`relax_module`)."""

from tvm_transfer.networks.builtin import NETWORKS, NetworkSpec
from tvm_transfer.networks.relax_import import (
    constant_bytes,
    frontend_module,
    fused_for_extraction,
    fusion_passes,
    import_passes,
    imported_module,
    lowering_passes,
    prepack_passes,
    relax_module,
    weights_outgrow_cache,
)
from tvm_transfer.networks.sources import (
    CONV_LAYOUTS,
    TORCHVISION_PREFIX,
    LoadedModel,
    ModelSourceError,
    conv_layout_of,
    load_model,
    model_slug,
    network_family,
    parse_input_shape,
    with_conv_layout,
)

__all__ = [
    "CONV_LAYOUTS",
    "NETWORKS",
    "TORCHVISION_PREFIX",
    "LoadedModel",
    "ModelSourceError",
    "NetworkSpec",
    "constant_bytes",
    "conv_layout_of",
    "frontend_module",
    "fused_for_extraction",
    "fusion_passes",
    "import_passes",
    "imported_module",
    "load_model",
    "lowering_passes",
    "model_slug",
    "network_family",
    "parse_input_shape",
    "prepack_passes",
    "relax_module",
    "weights_outgrow_cache",
    "with_conv_layout",
]
