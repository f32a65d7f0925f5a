"""The built-in networks: blocks of well-known models, and a BERT-base encoder, defined with ``torch.nn``.

Nothing is downloaded: every network is initialised from a fixed seed; what is measured is its structure
(the same layers and shapes as the original).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn


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


class BertEncoderLayer(nn.Module):
    """One BERT encoder layer (post-norm self-attention and feed-forward); the defaults are BERT-tiny's
    (hidden 128, 2 heads, feed-forward 512)."""

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


def _conv_bn(
    channels_in: int, channels_out: int, kernel: int, stride: int = 1, groups: int = 1
) -> list[nn.Module]:
    return [
        nn.Conv2d(channels_in, channels_out, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(channels_out),
    ]


class BertEncoder(nn.Module):
    """A stack of :class:`BertEncoderLayer`: the encoder of BERT without its embeddings (input: hidden
    states). The defaults are BERT-base's (12 layers, hidden 768, 12 heads, feed-forward 3072)."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> None:
        super().__init__()
        self.layers = nn.Sequential(*(BertEncoderLayer(hidden, heads, ffn) for _ in range(layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class MobileNetV2Block(nn.Module):
    """MobileNet-V2's inverted residual block (1x1 expand x6, ReLU6; 3x3 depthwise, ReLU6; 1x1 project;
    identity shortcut), 32 channels at 28x28 as in the network's third stage."""

    def __init__(self, channels: int = 32, expansion: int = 6) -> None:
        super().__init__()
        hidden = channels * expansion
        self.layers = nn.Sequential(
            *_conv_bn(channels, hidden, 1),
            nn.ReLU6(),
            *_conv_bn(hidden, hidden, 3, groups=hidden),
            nn.ReLU6(),
            *_conv_bn(hidden, channels, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.layers(x)


class MobileNetV1Block(nn.Module):
    """MobileNet-V1's depthwise-separable layer: 3x3 depthwise (stride 2)-BN-ReLU, 1x1 pointwise-BN-ReLU,
    64 -> 128 channels from 56x56 to 28x28."""

    def __init__(self, channels_in: int = 64, channels_out: int = 128) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            *_conv_bn(channels_in, channels_in, 3, stride=2, groups=channels_in),
            nn.ReLU(),
            *_conv_bn(channels_in, channels_out, 1),
            nn.ReLU(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class EfficientNetMBConv(nn.Module):
    """EfficientNet-B0's MBConv6 block with a 5x5 depthwise convolution: 1x1 expand x6-BN-SiLU, 5x5
    depthwise-BN-SiLU, squeeze-and-excitation (global pool, 1x1 reduce to 1/24, SiLU, 1x1, sigmoid gate),
    1x1 project-BN, identity shortcut; 40 channels at 28x28 as in the network's third stage."""

    def __init__(self, channels: int = 40, expansion: int = 6) -> None:
        super().__init__()
        hidden = channels * expansion
        self.expand = nn.Sequential(*_conv_bn(channels, hidden, 1), nn.SiLU())
        self.depthwise = nn.Sequential(*_conv_bn(hidden, hidden, 5, groups=hidden), nn.SiLU())
        self.excite = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(hidden, hidden // 24, 1),
            nn.SiLU(),
            nn.Conv2d(hidden // 24, hidden, 1),
            nn.Sigmoid(),
        )
        self.project = nn.Sequential(*_conv_bn(hidden, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.depthwise(self.expand(x))
        return x + self.project(y * self.excite(y))


class ResNetBottleneck(nn.Module):
    """ResNet-50's bottleneck block (1x1 reduce, 3x3, 1x1 expand, each with BN; ReLU; identity shortcut),
    256 channels at 14x14 as in the network's fourth stage; ``groups`` > 1 makes it ResNeXt's block."""

    def __init__(self, channels: int = 256, width: int = 64, groups: int = 1) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            *_conv_bn(channels, width, 1),
            nn.ReLU(),
            *_conv_bn(width, width, 3, groups=groups),
            nn.ReLU(),
            *_conv_bn(width, channels, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.layers(x))


@dataclass(frozen=True)
class NetworkSpec:
    """A network by name: its module factory and its input shape (batch first)."""

    factory: Callable[[], nn.Module]
    input_shape: tuple[int, ...]


NETWORKS: dict[str, NetworkSpec] = {
    "resnet_block": NetworkSpec(ResNetBasicBlock, (1, 64, 56, 56)),
    "mlp": NetworkSpec(MLP, (1, 784)),
    "bert_tiny_layer": NetworkSpec(BertEncoderLayer, (1, 64, 128)),
    # A whole language model's encoder, sequence 128: 12 identical layers, so few distinct tasks.
    "bert_base": NetworkSpec(BertEncoder, (1, 128, 768)),
    "mobilenet_v2_block": NetworkSpec(MobileNetV2Block, (1, 32, 28, 28)),
    # More pretraining data for transfer: other networks' blocks, other shapes of the same
    # operator families (depthwise 3x3 and 5x5, grouped, 1x1 and 3x3 convolutions; matmuls).
    "mobilenet_v1_block": NetworkSpec(MobileNetV1Block, (1, 64, 56, 56)),
    "efficientnet_mbconv": NetworkSpec(EfficientNetMBConv, (1, 40, 28, 28)),
    "resnet_bottleneck": NetworkSpec(ResNetBottleneck, (1, 256, 14, 14)),
    "resnext_block": NetworkSpec(partial(ResNetBottleneck, width=128, groups=32), (1, 256, 14, 14)),
    "bert_mini_layer": NetworkSpec(partial(BertEncoderLayer, hidden=256, heads=4, ffn=1024), (1, 32, 256)),
    # BERT-small's layer (hidden 512, 8 heads, feed-forward 2048) at sequence 128: dense layers of the size
    # of a real language model's that are neither BERT-base's nor ViT's.
    "bert_small_layer": NetworkSpec(partial(BertEncoderLayer, hidden=512, heads=8, ffn=2048), (1, 128, 512)),
    # BERT-small's whole encoder (4 such layers): the same tasks, with weights (50 MB) that outgrow a
    # CPU's last-level cache as a real language model's do, where the layer's alone fit.
    "bert_small": NetworkSpec(partial(BertEncoder, layers=4, hidden=512, heads=8, ffn=2048), (1, 128, 512)),
    # BERT-large's layer (hidden 1024, 16 heads, feed-forward 4096) at sequence 128, collected into the
    # corpus: its 24 layers are this one's tasks, and ViT's sequences (197, 101 and 50 tokens) give a dense
    # layer's token axis no power-of-two tiling to transfer to a language model's.
    "bert_large_layer": NetworkSpec(
        partial(BertEncoderLayer, hidden=1024, heads=16, ffn=4096), (1, 128, 1024)
    ),
}
