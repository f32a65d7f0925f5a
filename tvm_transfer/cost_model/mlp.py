"""A small PyTorch MLP cost model on the shared features."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from tvm.ir.utils import derived_object

from tvm_transfer.common.archive import arrays_bytes, checked_arrays, read_arrays, weight_arrays, weights_like
from tvm_transfer.cost_model.base import LearnedCostModel


def _mlp(width: int, hidden: int, layers: int) -> nn.Sequential:
    blocks: list[nn.Module] = []
    for i in range(layers):
        blocks += [nn.Linear(width if i == 0 else hidden, hidden), nn.ReLU()]
    return nn.Sequential(*blocks, nn.Linear(hidden, 1))


@derived_object
class MLPCostModel(LearnedCostModel):
    """Multi-layer perceptron regressing normalised throughput from standardised features.

    Retrained from scratch (seeded, full batch, Adam) at every update: tuning data is small and a fresh
    fit on all of it is both deterministic and cheaper than tracking a drifting warm start.

    Parameters
    ----------
    hidden, layers:
        Width and number of hidden ReLU layers.
    epochs, learning_rate, weight_decay:
        Adam training schedule.
    """

    def __init__(
        self,
        *,
        hidden: int = 128,
        layers: int = 2,
        epochs: int = 300,
        learning_rate: float = 3e-3,
        weight_decay: float = 1e-4,
        seed: int = 0,
        use_hardware_features: bool = True,
    ) -> None:
        super().__init__(seed=seed, use_hardware_features=use_hardware_features)
        self.hidden = hidden
        self.layers = layers
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self._net: nn.Sequential | None = None
        self._mean: np.ndarray | None = None
        self._scale: np.ndarray | None = None

    def _standardise(self, features: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(((features - self._mean) / self._scale).astype(np.float32))

    def _fit(self, features: np.ndarray, targets: np.ndarray, groups: np.ndarray) -> None:
        torch.manual_seed(self.seed)
        self._mean = features.mean(axis=0)
        self._scale = features.std(axis=0) + 1e-6
        net = _mlp(features.shape[1], self.hidden, self.layers)
        optimiser = torch.optim.Adam(net.parameters(), lr=self.learning_rate, weight_decay=self.weight_decay)
        x, y = self._standardise(features), torch.from_numpy(targets.astype(np.float32))
        for _ in range(self.epochs):
            optimiser.zero_grad()
            loss = nn.functional.mse_loss(net(x).squeeze(1), y)
            loss.backward()
            optimiser.step()
        self._net = net.eval()

    def _predict(self, features: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self._net(self._standardise(features)).squeeze(1).numpy()

    def _state_bytes(self) -> bytes:
        weights = weight_arrays(self._net.state_dict(), "net/")
        return arrays_bytes({**weights, "scaling/mean": self._mean, "scaling/scale": self._scale})

    def _load_state(self, blob: bytes) -> None:
        arrays = read_arrays(blob, "model.bin")
        width = len(
            checked_arrays(arrays, {"mean": (None,), "scale": (None,)}, "scaling/", "model.bin")["mean"]
        )
        scaling = checked_arrays(arrays, {"mean": (width,), "scale": (width,)}, "scaling/", "model.bin")
        net = _mlp(width, self.hidden, self.layers)
        weights = weights_like(arrays, net.state_dict(), "net/", "model.bin")
        net.load_state_dict({key: torch.from_numpy(value) for key, value in weights.items()})
        self._mean, self._scale, self._net = scaling["mean"], scaling["scale"], net.eval()
