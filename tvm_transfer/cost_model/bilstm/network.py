"""The networks of the BiLSTM cost model: an attention-pooled bidirectional LSTM encoder and the whole
network that joins the trace, per-store, kernel, task and hardware inputs into one score."""

from __future__ import annotations

import torch
from torch import nn

from tvm_transfer.cost_model.bilstm.inputs import HW_WIDTH, TASK_WIDTH
from tvm_transfer.features import PER_STORE_WIDTH, POOLED_WIDTH, TRACE_ROW_WIDTH

__all__ = ["AttentionLSTM", "BiLSTMNet"]


class AttentionLSTM(nn.Module):
    """A bidirectional LSTM over a sequence of feature rows, pooled by multi-head attention (a learned
    query over the valid steps): the encoder of the trace and of the per-store rows."""

    def __init__(self, width: int, hidden: int, layers: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.step = nn.Sequential(nn.Linear(width, hidden), nn.ReLU())
        self.lstm = nn.LSTM(
            hidden,
            hidden,
            num_layers=layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if layers > 1 else 0.0,
        )
        self.query = nn.Parameter(torch.randn(1, 1, 2 * hidden) * 0.1)
        self.attention = nn.MultiheadAttention(2 * hidden, heads, batch_first=True)

    def forward(self, lengths: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``(n, 2 * hidden)`` pooled encodings of ``rows`` ``(n, steps, width)``, of which the first
        ``lengths`` are valid (an empty sequence reads one zero row)."""
        # Padded, not packed: the CPU LSTM runs much faster on a dense batch. Padding only touches the
        # backward direction's first steps, and the attention never looks at padded positions.
        encoded, _ = self.lstm(self.step(rows))
        padding = torch.arange(rows.shape[1])[None, :] >= lengths.clamp(min=1)[:, None]
        query = self.query.expand(len(encoded), -1, -1)
        pooled, _ = self.attention(query, encoded, encoded, key_padding_mask=padding, need_weights=False)
        return pooled[:, 0]


class BiLSTMNet(nn.Module):
    """The network: trace encoder, per-store encoder (optional), kernel encoder, task embedding, hardware
    input, regression head."""

    def __init__(
        self,
        hidden: int,
        lstm_layers: int,
        heads: int,
        task_dim: int,
        dropout: float,
        hardware: bool,
        stores: bool = False,
    ) -> None:
        super().__init__()
        if (2 * hidden) % heads:
            raise ValueError(f"2 * hidden ({2 * hidden}) must be divisible by heads ({heads})")
        self.use_hardware = hardware
        self.trace = AttentionLSTM(TRACE_ROW_WIDTH, hidden, lstm_layers, heads, dropout)
        self.kernel = nn.Sequential(nn.Linear(POOLED_WIDTH, hidden), nn.ReLU())
        self.task = nn.Sequential(nn.Linear(TASK_WIDTH, task_dim), nn.ReLU())
        self.stores = AttentionLSTM(PER_STORE_WIDTH, hidden, 1, heads, 0.0) if stores else None
        joined = 2 * hidden + hidden + task_dim + HW_WIDTH + (2 * hidden if stores else 0)
        self.head = nn.Sequential(
            nn.Linear(joined, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1)
        )

    def forward(self, kernel, hardware, task, lengths, sequences, store_counts, stores) -> torch.Tensor:
        """``(n,)`` scores of a batch of scaled inputs (the tensors of ``inputs.ScaledInputs.batch``)."""
        if not self.use_hardware:
            hardware = torch.zeros_like(hardware)
        parts = [self.trace(lengths, sequences), self.kernel(kernel), self.task(task), hardware]
        if self.stores is not None:
            parts.append(self.stores(store_counts, stores))
        return self.head(torch.cat(parts, dim=1)).squeeze(1)
