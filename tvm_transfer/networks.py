"""Small real networks, imported from PyTorch through ``torch.export`` and TVM's Relax frontend.

TVM ships no model zoo and this machine cannot download weights, so the networks are defined here and
initialised from a fixed seed; what is measured is their structure (the same layers as the originals).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import tvm
from torch import nn
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program


class ResNetBasicBlock(nn.Module):
    """ResNet-18's basic block (conv-BN-ReLU, conv-BN, identity shortcut, ReLU), 64 channels at 56x56."""

    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class MLP(nn.Module):
    """A three-layer perceptron (784-512-256-10), the classic MNIST classifier shape."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class BertTinyLayer(nn.Module):
    """One BERT-tiny encoder layer (hidden 128, 2 heads, feed-forward 512) on a 64-token sequence."""

    def __init__(self, hidden: int = 128, heads: int = 2, ffn: int = 512) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, hidden = x.shape
        q, k, v = self.qkv(x).reshape(batch, tokens, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attention = torch.softmax(q @ k.transpose(-1, -2) / (hidden // self.heads) ** 0.5, dim=-1)
        context = (attention @ v).transpose(1, 2).reshape(batch, tokens, hidden)
        x = self.norm1(x + self.out(context))
        return self.norm2(x + self.ffn(x))


class MobileNetV2Block(nn.Module):
    """MobileNet-V2's inverted residual block (1x1 expand x6, ReLU6; 3x3 depthwise, ReLU6; 1x1 project;
    identity shortcut), 32 channels at 28x28 as in the network's third stage."""

    def __init__(self, channels: int = 32, expansion: int = 6) -> None:
        super().__init__()
        hidden = channels * expansion
        self.layers = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, channels, 1, bias=False),
            nn.BatchNorm2d(channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.layers(x)


@dataclass(frozen=True)
class NetworkSpec:
    """A network by name: its module factory and its input shape (batch first)."""

    factory: Callable[[], nn.Module]
    input_shape: tuple[int, ...]


NETWORKS: dict[str, NetworkSpec] = {
    "resnet_block": NetworkSpec(ResNetBasicBlock, (1, 64, 56, 56)),
    "mlp": NetworkSpec(MLP, (1, 784)),
    "bert_tiny_layer": NetworkSpec(BertTinyLayer, (1, 64, 128)),
    "mobilenet_v2_block": NetworkSpec(MobileNetV2Block, (1, 32, 28, 28)),
}


@dataclass
class ImportedNetwork:
    """A PyTorch network imported into Relax, with its parameters and a reference input and output."""

    name: str
    mod: tvm.IRModule
    params: dict[relax.Var, tvm.runtime.Tensor]
    example_input: np.ndarray
    torch_output: np.ndarray


def import_network(name: str, seed: int = 0) -> ImportedNetwork:
    """Export ``NETWORKS[name]`` with ``torch.export`` and convert it to Relax (weights as params)."""
    if name not in NETWORKS:
        raise ValueError(f"unknown network {name!r}; choose one of {', '.join(NETWORKS)}")
    spec = NETWORKS[name]
    torch.manual_seed(seed)
    model = spec.factory().eval()
    example = torch.randn(*spec.input_shape)
    with torch.no_grad():
        expected = model(example).numpy()
        exported = torch.export.export(model, (example,))
    mod = from_exported_program(exported, keep_params_as_input=True)
    mod, detached = relax.frontend.detach_params(mod)
    # detach_params returns the weights in the order of main's trailing parameters.
    weights = detached.get("main", [])
    variables = mod["main"].params[len(mod["main"].params) - len(weights) :]
    return ImportedNetwork(name, mod, dict(zip(variables, weights, strict=True)), example.numpy(), expected)


def bind_params(network: ImportedNetwork) -> tvm.IRModule:
    """The network's Relax module with its weights bound as constants (what is tuned and compiled)."""
    return relax.transform.BindParams("main", network.params)(network.mod)


def _inference_passes() -> list[tvm.transform.Pass]:
    # Batch-norm in inference form, then the bindings tidied; both before legalisation so that task
    # extraction and compilation (which legalises and fuses on its own) see the same fused functions.
    return [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]


def prepare_for_inference(network: ImportedNetwork) -> tvm.IRModule:
    """Bound weights, batch-norm decomposed for inference: the module that is tuned and compiled."""
    return tvm.transform.Sequential(_inference_passes())(bind_params(network))


def fused_for_extraction(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """Legalise and fuse ``mod`` exactly as ``ms.relax_integration.compile_relax`` does before it looks
    schedules up, so that every extracted task is found again at compile time."""
    try:
        dispatch = relax.pipeline.library_dispatch_passes(target)
    except (ValueError, AttributeError):  # targets without a registered dispatcher
        dispatch = []
    passes = [
        *dispatch,
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(mod)
