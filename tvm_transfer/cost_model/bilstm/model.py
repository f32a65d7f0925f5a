"""Attention BiLSTM transfer cost model (after Verma et al., "Transfer Learning Across Heterogeneous
Features For Efficient Tensor Program Generation", ExHET 2023, arXiv 2304.05430).

The network reads a candidate as

- its **schedule trace** (one :data:`~tenset_tools.features.TRACE_ROW_WIDTH`-float row per instruction,
  :func:`tenset_tools.features.encode_trace`) through a bidirectional LSTM (3 layers by default) whose
  outputs are pooled by multi-head attention (2 heads by default: learned queries over the valid steps);
- with ``store_sequence=True``, its **per-store feature rows** (MetaSchedule's ``PerStoreFeature``, one
  164-float row per ``BufferStore``, signed-log, standardised) through a one-layer bidirectional LSTM
  pooled by attention;
- its **pooled per-store kernel features** (328 floats, signed-log, then standardised or, with
  ``kernel_scaling="quantile"``, mapped through their training quantiles) through a small MLP;
- a **task embedding** (op kind one-hot, log FLOPs, argument shapes: :func:`inputs.task_vector`);
- the target's eight **hardware features**;

and regresses the normalised throughput (or ranks within a task with LambdaRank) from their concatenation.

The trace states the scheduling decisions in order (tile factors, loop order, annotations), which is what
the LSTM is for; the per-store rows describe the program they produced, store by store, which the pooled
vector (sum and max over stores) summarises but mixes across stores. While tuning, the per-store rows come
with the extraction every model here pays for; encoding a trace costs ~0.5 ms per candidate.

Transfer: :meth:`BiLSTMCostModel.pretrain` fits on source datasets and remembers those weights as the
*base*; every later fit (:meth:`~BiLSTMCostModel.fine_tune` on target records, or MetaSchedule's
``update`` while tuning) starts again from the base and adapts it on the target rows seen so far, in the
model's ``fine_tune_mode``:

``full``
    every parameter trains (lower learning rate ``fine_tune_learning_rate``);
``head``
    the encoders (sequence LSTM + attention, kernel MLP, task embedding) are frozen, only the regression
    head trains;
``task``
    selective task retraining: only the task embedding and the head train, and only on the target records
    of the tasks at hand (``fine_tune(frame, tasks=...)``; while tuning, the workload being tuned);
``plus``
    the base network stays frozen and a small XGBoost model is fitted on its residuals on the target
    records (TenSet's transfer-tune); prediction = base + residual.

While tuning, every ``update`` also fits an **online residual**: a small XGBoost model on the network's
residuals on the measurements of the workload being tuned only (``online_rounds``; 0 turns it off), added
to the scores of that workload's candidates. Without it the network, re-adapted from the base on ~200
target rows of which the run's own are a few, only shifted its level for the task and kept its ranking:
the search exploited the same mis-ranked neighbourhood for the whole run (flat best-latency curves,
``docs/bilstm.md``).
"""

from __future__ import annotations

import copy
import io
import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
from torch import nn
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import shash2hex

from tvm_transfer.cost_model.base import LearnedCostModel, normalised_throughput
from tvm_transfer.cost_model.bilstm import inputs as data
from tvm_transfer.features import (
    PER_STORE_WIDTH,
    TRACE_ROW_WIDTH,
    candidate_trace_json,
    encode_trace,
    hardware_features,
    pool_per_store,
)

__all__ = ["FINE_TUNE_MODES", "KERNEL_SCALINGS", "LOSSES", "BiLSTMCostModel", "BiLSTMNet"]

FINE_TUNE_MODES = ("full", "head", "task", "plus")
LOSSES = ("rmse", "lambdarank")
KERNEL_SCALINGS = ("standard", "quantile")
#: Quantiles per kernel feature kept by ``kernel_scaling="quantile"``.
_QUANTILES = 65
#: Hyper-parameters that take one of a fixed set of values.
_CHOICES = {"loss": LOSSES, "fine_tune_mode": FINE_TUNE_MODES, "kernel_scaling": KERNEL_SCALINGS}


#: Constructor arguments that shape the network or its inputs: fixed once a model is fitted.
_ARCHITECTURE = (
    "hidden", "lstm_layers", "heads", "task_dim", "max_sequence", "kernel_scaling", "store_sequence",
)  # fmt: skip


def _check_choices(params: dict) -> None:
    """Raise ``ValueError`` naming the first of ``params`` outside its :data:`_CHOICES`."""
    for name, allowed in _CHOICES.items():
        if name in params and params[name] not in allowed:
            raise ValueError(f"unknown {name} {params[name]!r}; choose one of {', '.join(allowed)}")


def _signed_log(x: np.ndarray) -> np.ndarray:
    # Kernel features span 0..1e9 (byte and FLOP counts): compress them before standardising.
    return np.sign(x) * np.log1p(np.abs(x))


class _AttentionLSTM(nn.Module):
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
        # Padded, not packed: the CPU LSTM runs ~3x faster on a dense batch. Padding only touches the
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
        self.trace = _AttentionLSTM(TRACE_ROW_WIDTH, hidden, lstm_layers, heads, dropout)
        self.kernel = nn.Sequential(nn.Linear(data.POOLED_WIDTH, hidden), nn.ReLU())
        self.task = nn.Sequential(nn.Linear(data.TASK_WIDTH, task_dim), nn.ReLU())
        self.stores = _AttentionLSTM(PER_STORE_WIDTH, hidden, 1, heads, 0.0) if stores else None
        joined = 2 * hidden + hidden + task_dim + data.HW_WIDTH + (2 * hidden if stores else 0)
        self.head = nn.Sequential(
            nn.Linear(joined, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1)
        )

    def forward(self, kernel, hardware, task, lengths, sequences, store_counts, stores) -> torch.Tensor:
        if not self.use_hardware:
            hardware = torch.zeros_like(hardware)
        parts = [self.trace(lengths, sequences), self.kernel(kernel), self.task(task), hardware]
        if self.stores is not None:
            parts.append(self.stores(store_counts, stores))
        return self.head(torch.cat(parts, dim=1)).squeeze(1)


class _Inputs:
    """Standardised tensors of packed rows (the statistics are the model's, fixed at (pre)training)."""

    def __init__(self, rows: np.ndarray, stats: dict[str, np.ndarray]) -> None:
        kernel, hardware, task, lengths, sequences = data.unpack(rows)
        longest = _bucket(int(lengths.max(initial=0)))
        self.kernel = torch.from_numpy(_scaled_kernel(kernel, stats))
        self.hardware = torch.from_numpy(
            ((np.log2(1 + np.abs(hardware)) - stats["h_mean"]) / stats["h_scale"]).astype(np.float32)
        )
        self.task = torch.from_numpy(((task - stats["t_mean"]) / stats["t_scale"]).astype(np.float32))
        self.lengths = torch.from_numpy(lengths)
        counts, stores = data.unpack_stores(rows)
        self.store_counts = torch.from_numpy(counts)
        self.stores = torch.from_numpy(_scaled_stores(stores, stats))
        if sequences.shape[1] < longest:  # keep whole buckets
            sequences = np.pad(sequences, ((0, 0), (0, longest - sequences.shape[1]), (0, 0)))
        self.sequences = torch.from_numpy(np.ascontiguousarray(sequences[:, :longest]))

    def __len__(self) -> int:
        return len(self.lengths)

    def batch(self, index) -> tuple[torch.Tensor, ...]:
        """Rows ``index``, their sequences padded to the :func:`_bucket` of the longest."""
        index = torch.as_tensor(index)
        lengths = self.lengths[index]
        longest = min(self.sequences.shape[1], _bucket(int(lengths.max())))
        return (
            self.kernel[index],
            self.hardware[index],
            self.task[index],
            lengths,
            self.sequences[index, :longest],
            self.store_counts[index],
            self.stores[index],
        )


#: Sequences are padded to a multiple of this many steps: a candidate's score then depends on its own
#: length only, not on the other candidates of its prediction batch.
_BUCKET = 16


def _bucket(length: int) -> int:
    return max(1, math.ceil(length / _BUCKET)) * _BUCKET


def _scaled(values: np.ndarray, stats: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    """Signed-log features, standardised, or mapped to [-1, 1] through the training quantiles when the
    statistics hold them (``kernel_scaling="quantile"``; values outside the training range clip).
    ``prefix`` picks the statistics: ``"k"`` the pooled kernel features, ``"s"`` the per-store rows."""
    values = _signed_log(values)
    quantile_table = stats.get(f"{prefix}_quantiles")
    if quantile_table is None:
        return ((values - stats[f"{prefix}_mean"]) / stats[f"{prefix}_scale"]).astype(np.float32)
    grid = np.linspace(-1.0, 1.0, len(quantile_table))
    scaled = np.empty(values.shape, dtype=np.float32)
    for j, quantiles in enumerate(quantile_table.T):
        scaled[..., j] = np.interp(values[..., j], quantiles, grid)
    return scaled


def _scaled_kernel(kernel: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
    """The pooled kernel features as the network reads them (:func:`_scaled`)."""
    return _scaled(kernel, stats, "k")


def _scaled_stores(stores: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
    """The per-store rows as the network reads them (:func:`_scaled`); zeros for a model without them."""
    if "s_mean" not in stats:
        return np.zeros(stores.shape, dtype=np.float32)
    return _scaled(stores, stats, "s")


def _feature_statistics(values: np.ndarray, prefix: str, kernel_scaling: str) -> dict[str, np.ndarray]:
    """Mean, scale (floored) and, for ``kernel_scaling="quantile"``, the quantiles of signed-log features."""
    values = _signed_log(values)
    stats = {f"{prefix}_mean": values.mean(0), f"{prefix}_scale": np.maximum(values.std(0), 0.1)}
    if kernel_scaling == "quantile":
        # Heavy-tailed byte and FLOP counts: ranks carry the order the trees split on, not the scale.
        stats[f"{prefix}_quantiles"] = np.quantile(values, np.linspace(0.0, 1.0, _QUANTILES), axis=0)
    return stats


def _statistics(rows: np.ndarray, kernel_scaling: str = "standard") -> dict[str, np.ndarray]:
    counts, stores = data.unpack_stores(rows)
    present = stores[np.arange(data.MAX_STORES)[None, :] < counts[:, None]]
    kernel, hardware, task, _, _ = data.unpack(rows)
    hardware = np.log2(1 + np.abs(hardware))
    # Floors on the scales: a feature (nearly) constant in the training data, e.g. the hardware vector when
    # pretraining on one target, must not turn a new target's values into inputs in the thousands.
    return {
        **_feature_statistics(kernel, "k", kernel_scaling),
        # Standardised whatever kernel_scaling says: quantile-mapped store rows ranked worse (dev splits).
        **(_feature_statistics(present, "s", "standard") if len(present) else {}),
        "h_mean": hardware.mean(0), "h_scale": np.maximum(hardware.std(0), 1.0),
        "t_mean": task.mean(0), "t_scale": np.maximum(task.std(0), 0.1),
    }  # fmt: skip


def _lambdarank_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """LambdaRank loss of one group: pairwise logistic loss, each pair weighted by |delta NDCG| of
    swapping it (gains = normalised throughput, discounts by the current predicted ranks)."""
    n = len(scores)
    if n < 2:
        return scores.sum() * 0.0
    ranks = torch.empty(n)
    ranks[torch.argsort(scores.detach(), descending=True)] = torch.arange(1, n + 1, dtype=torch.float32)
    discount = 1.0 / torch.log2(1.0 + ranks)
    ideal = (torch.sort(labels, descending=True).values / torch.log2(torch.arange(2, n + 2).float())).sum()
    delta = (labels[:, None] - labels[None, :]).abs() * (discount[:, None] - discount[None, :]).abs()
    delta = delta / ideal.clamp(min=1e-9)
    better = (labels[:, None] > labels[None, :]).float()
    pair_loss = nn.functional.softplus(-(scores[:, None] - scores[None, :]))
    return (better * delta * pair_loss).sum() / better.sum().clamp(min=1.0)


@derived_object
class BiLSTMCostModel(LearnedCostModel):
    """Attention BiLSTM cost model with pretraining and fine-tuning (see the module docstring).

    Parameters
    ----------
    hidden, lstm_layers, heads, task_dim, dropout:
        Width of the LSTM (per direction) and of the other layers, LSTM depth (the paper: 3), attention
        heads (the paper: 2), width of the task embedding, dropout.
    loss:
        ``"rmse"`` (the paper) or ``"lambdarank"`` (pairwise ranking within each (task, target) group;
        its scores are not on the throughput scale, so its RMSE is meaningless).
    epochs, batch_size, learning_rate, weight_decay, patience, validation_fraction:
        Adam training from scratch / pretraining. The paper trains 200 epochs of batch 16 at lr 1e-3;
        the defaults keep its batch and learning rate and stop early instead of running 200 epochs (at
        most 60; ``patience`` epochs without a better validation loss on ``validation_fraction`` of the
        rows, at least 8 rows; the best epoch's weights are kept).
    fine_tune_mode, fine_tune_epochs, fine_tune_learning_rate:
        How fits after :meth:`pretrain` adapt the base (:data:`FINE_TUNE_MODES`), for how many epochs
        (with the same early stopping) and at which learning rate.
    residual_rounds:
        Boosting rounds of the ``plus`` mode's residual XGBoost model.
    online_rounds:
        Boosting rounds of the online residual model fitted, while tuning, on the network's residuals on
        the measurements of the workload being tuned (0: no online residual; the network alone then
        decides the ranking within the workload).
    online_growth:
        While tuning a pretrained model, the network is re-adapted from the base (the expensive part of an
        ``update``) only when the workload's measurements have grown by this factor since its last
        adaptation (2: after 8, 16, 32, 64 ... measurements; 1: every update); the online residual is
        refitted at every update. A model trained from scratch refits at every update.
    kernel_scaling:
        How the (signed-log) kernel features enter the network: ``"quantile"`` (each feature through
        its pretraining quantiles onto [-1, 1]; the default) or ``"standard"`` (standardised). Fixed at
        (pre)training.
    store_sequence:
        Also read (the default) the candidate's per-store feature rows (``store_features``, at most
        :data:`~inputs.MAX_STORES`) through a one-layer bidirectional LSTM pooled by attention, joined
        with the other inputs. Datasets need the column (schema version 2 or
        ``tvm_transfer.tuning.collect.add_store_features``); while tuning the rows come with the
        features every
        model extracts. Fixed at (pre)training.
    max_sequence:
        Trace instructions kept per candidate (longer traces are truncated).
    threads:
        Torch intra-op threads while training and predicting (0: leave torch's setting alone).
    """

    hyper_parameters: ClassVar[tuple[str, ...]] = (
        *LearnedCostModel.hyper_parameters,
        "hidden", "lstm_layers", "heads", "task_dim", "dropout", "loss", "epochs", "batch_size",
        "learning_rate", "weight_decay", "patience", "validation_fraction", "fine_tune_mode",
        "fine_tune_epochs", "fine_tune_learning_rate", "residual_rounds", "online_rounds", "online_growth",
        "kernel_scaling", "store_sequence", "max_sequence", "threads",
    )  # fmt: skip

    def __init__(
        self,
        *,
        hidden: int = 32,
        lstm_layers: int = 3,
        heads: int = 2,
        task_dim: int = 16,
        dropout: float = 0.1,
        loss: str = "rmse",
        epochs: int = 60,
        batch_size: int = 16,
        learning_rate: float = 1e-3,
        weight_decay: float = 1e-5,
        patience: int = 8,
        validation_fraction: float = 0.15,
        fine_tune_mode: str = "full",
        fine_tune_epochs: int = 30,
        fine_tune_learning_rate: float = 5e-4,
        residual_rounds: int = 50,
        online_rounds: int = 40,
        online_growth: float = 2.0,
        kernel_scaling: str = "quantile",
        store_sequence: bool = True,
        max_sequence: int = data.MAX_SEQUENCE,
        threads: int = 1,
        seed: int = 0,
        use_hardware_features: bool = True,
    ) -> None:
        super().__init__(seed=seed, use_hardware_features=use_hardware_features)
        _check_choices({"loss": loss, "fine_tune_mode": fine_tune_mode, "kernel_scaling": kernel_scaling})
        self.hidden, self.lstm_layers, self.heads = hidden, lstm_layers, heads
        self.task_dim, self.dropout, self.loss = task_dim, dropout, loss
        self.epochs, self.batch_size = epochs, batch_size
        self.learning_rate, self.weight_decay = learning_rate, weight_decay
        self.patience, self.validation_fraction = patience, validation_fraction
        self.fine_tune_mode, self.fine_tune_epochs = fine_tune_mode, fine_tune_epochs
        self.fine_tune_learning_rate, self.residual_rounds = fine_tune_learning_rate, residual_rounds
        self.online_rounds, self.online_growth = online_rounds, online_growth
        self.kernel_scaling, self.max_sequence, self.threads = kernel_scaling, max_sequence, threads
        self.store_sequence = store_sequence
        self._net: BiLSTMNet | None = None
        self._stats: dict[str, np.ndarray] | None = None
        self._base_state: dict | None = None  # pretrained weights every fine-tuning starts from
        self._pretrain_rows = 0  # rows [0, _pretrain_rows) are the pretraining (source) data
        self._fine_tune_tasks: set[str] | None = None  # task mode: groups of the tasks at hand
        self._residual = None  # plus mode: xgboost.Booster on the target residuals
        self._online: tuple[str, object] | None = None  # (workload hash, xgboost.Booster) while tuning
        self._adapted_on: dict[str, int] = {}  # workload hash -> its measurements at the last network fit
        self._task_cache: dict[str, np.ndarray] = {}
        self.last_fit: dict[str, float] = {}

    def set_params(self, **params) -> BiLSTMCostModel:
        """Change hyper-parameters (scikit-learn convention), e.g. ``fine_tune_mode`` of a loaded model.
        The architecture and inputs of a fitted model (``_ARCHITECTURE``: ``hidden``, ``lstm_layers``,
        ``heads``, ``task_dim``, ``max_sequence``, ``kernel_scaling``, ``store_sequence``) cannot change."""
        unknown = sorted(set(params) - set(self.hyper_parameters))
        if unknown:
            raise ValueError(
                f"unknown BiLSTM hyper-parameter(s) {unknown}; known: {list(self.hyper_parameters)}"
            )
        fixed = sorted(
            name
            for name in _ARCHITECTURE
            if name in params and self._net is not None and params[name] != getattr(self, name)
        )
        if fixed:
            raise ValueError(f"cannot change {fixed} of a fitted model (its weights were fitted with them)")
        _check_choices(params)
        for name, value in params.items():
            setattr(self, name, value)
        return self._public()

    def _public(self) -> BiLSTMCostModel:
        # Under @derived_object, methods run on the inner Python object; hand back the MetaSchedule
        # object that wraps it, so that `model.pretrain(frame)` can go straight into ms.tune_tir.
        outer = getattr(self, "_outer", None)
        wrapper = outer() if outer is not None else None
        return wrapper if wrapper is not None else self

    # ---- inputs ----------------------------------------------------------------------------------------
    def _task_of(self, context: ms.TuneContext, candidate: ms.MeasureCandidate) -> np.ndarray:
        from tenset_tools.flops import estimate_flops
        from tenset_tools.metaschedule import op_kind_of

        key = shash2hex(context.mod)
        if key not in self._task_cache:
            flops = estimate_flops(context.mod)
            shapes = [[int(d) for d in arg.shape] for arg in candidate.args_info]
            self._task_cache[key] = data.task_vector(op_kind_of(context.mod), flops, shapes)
        return self._task_cache[key]

    def features(self, context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate]) -> np.ndarray:
        """Packed rows (:mod:`~tvm_transfer.cost_model.bilstm.inputs`) of MetaSchedule candidates."""
        if not candidates:
            return np.zeros((0, data.row_width(self.max_sequence)), dtype=np.float32)
        stores = self._extractor.per_store(context, candidates)
        kernel = pool_per_store(stores, PER_STORE_WIDTH)
        hardware = np.broadcast_to(hardware_features(context.target).astype(np.float32), (len(kernel), 8))
        task = np.broadcast_to(self._task_of(context, candidates[0]), (len(kernel), data.TASK_WIDTH))
        sequences = [encode_trace(candidate_trace_json(c)) for c in candidates]
        return data.pack(kernel, hardware, task, sequences, self.max_sequence, stores)

    def frame_features(self, frame: pd.DataFrame) -> np.ndarray:
        """Packed rows of a schema frame's records (the columns of :meth:`features`)."""
        return data.frame_rows(frame, self.max_sequence, stores=self.store_sequence)

    # ---- transfer API ----------------------------------------------------------------------------------
    def fit_frame(self, frame: pd.DataFrame) -> BiLSTMCostModel:
        """Add a frame's records (``norm_throughput`` filled) and refit, like ``fit_features``."""
        self.fit_features(self.frame_features(frame), frame["norm_throughput"].to_numpy(), _groups(frame))
        return self._public()

    def pretrain(self, frames: pd.DataFrame | Sequence[pd.DataFrame]) -> BiLSTMCostModel:
        """Train from scratch on source datasets (one frame or several, e.g. one per target) and keep the
        result as the base that :meth:`fine_tune` and tuning updates adapt. Forgets earlier data."""
        from tenset_tools.schema import add_normalised_throughput

        frames = [frames] if isinstance(frames, pd.DataFrame) else list(frames)
        if not frames or not sum(len(f) for f in frames):
            raise ValueError("pretrain needs at least one non-empty frame")
        frame = pd.concat(frames, ignore_index=True)
        if frame["norm_throughput"].isna().any():
            frame = add_normalised_throughput(frame)
        self._features, self._costs, self._groups = [], [], []
        self._base_state, self._pretrain_rows, self._residual = None, 0, None
        self._adapted_on = {}
        self.fit_frame(frame)
        self._base_state = copy.deepcopy(self._net.state_dict())
        self._pretrain_rows = self.num_samples
        return self._public()

    def fine_tune(
        self,
        frame: pd.DataFrame,
        mode: str | None = None,
        tasks: Sequence[str] | None = None,
    ) -> BiLSTMCostModel:
        """Adapt the pretrained base to target records (``norm_throughput`` filled, or it is computed).

        ``mode`` (default: the model's ``fine_tune_mode``) is one of :data:`FINE_TUNE_MODES`. ``tasks``
        (task ids) restricts the ``task`` mode to those tasks (default: every task of ``frame``). The
        records are kept: later tuning updates fine-tune on them together with the new measurements.
        """
        from tenset_tools.schema import add_normalised_throughput

        if self._base_state is None:
            raise RuntimeError("fine_tune needs a pretrained model: call pretrain or load a pretrained file")
        if mode is not None:
            if mode not in FINE_TUNE_MODES:
                raise ValueError(f"unknown fine-tune mode {mode!r}; choose one of {FINE_TUNE_MODES}")
            self.fine_tune_mode = mode
        if frame["norm_throughput"].isna().any():
            frame = add_normalised_throughput(frame)
        if self.fine_tune_mode == "task":
            wanted = set(tasks) if tasks is not None else set(frame["task_id"])
            frame = frame[frame["task_id"].isin(wanted)]
            self._fine_tune_tasks = set(_groups(frame))
        if not len(frame):
            raise ValueError("no target records to fine-tune on")
        return self.fit_frame(frame)

    @property
    def pretrained(self) -> bool:
        """Whether the model holds a pretrained base (fits then fine-tune it)."""
        return self._base_state is not None

    # ---- PyCostModel -----------------------------------------------------------------------------------
    def update(self, context, candidates, results) -> None:
        """Add a measured batch; refit the network (from scratch, or, pretrained, fine-tune the base on
        the target rows, following ``online_growth``; the ``task`` mode then fine-tunes on this workload's
        measurements only) and the online residual on this workload's measurements."""
        if not candidates:
            return
        group = self._record(context, candidates, results)
        if self.fine_tune_mode == "task":
            self._fine_tune_tasks = {group}
        mine = self._groups[self._pretrain_rows :].count(group)
        if (
            not self._fitted
            or self._base_state is None
            or mine >= self.online_growth * self._adapted_on.get(group, 0)
        ):
            self.refit()
            self._adapted_on[group] = mine
        if self._fitted:
            self._fit_online(group)

    def predict(self, context: ms.TuneContext, candidates: list[ms.MeasureCandidate]) -> np.ndarray:
        """Predicted normalised throughput (higher is better), plus the online residual of the workload
        being tuned; seeded random scores before any fit."""
        if not self._fitted or not candidates:
            return super().predict(context, candidates)
        rows = self.features(context, candidates)
        scores = self.predict_features(rows)
        if self._online is not None and self._online[0] == shash2hex(context.mod):
            scores = scores + self._online_residual(rows)
        return scores

    def _fit_online(self, group: str) -> None:
        """Fit the online residual on this workload's measurements (normalised per workload)."""
        self._online = None
        if self.online_rounds <= 0:
            return
        import xgboost

        groups = np.asarray(self._groups)
        mine = np.flatnonzero(groups[self._pretrain_rows :] == group) + self._pretrain_rows
        costs = np.asarray(self._costs)[mine]
        if len(mine) < 2 or not np.isfinite(costs).any():
            return
        rows = np.concatenate(self._features)[mine]
        targets = normalised_throughput(costs, groups[mine])
        residual = targets - self._predict(rows)
        params = {"max_depth": 3, "eta": 0.3, "min_child_weight": 1, "seed": self.seed, "nthread": 1}
        matrix = xgboost.DMatrix(data.unpack(rows)[0], label=residual)
        self._online = (group, xgboost.train(params, matrix, num_boost_round=self.online_rounds))

    def _online_residual(self, rows: np.ndarray) -> np.ndarray:
        import xgboost

        return self._online[1].predict(xgboost.DMatrix(data.unpack(rows)[0])).astype(np.float64)

    # ---- estimator hooks -------------------------------------------------------------------------------
    def _torch_threads(self):
        return _Threads(self.threads)

    def _new_net(self) -> BiLSTMNet:
        return BiLSTMNet(
            self.hidden,
            self.lstm_layers,
            self.heads,
            self.task_dim,
            self.dropout,
            self.use_hardware_features,
            self.store_sequence,
        )

    def _fit(self, features: np.ndarray, targets: np.ndarray, groups: np.ndarray) -> None:
        self._online = None  # it belongs to the network it was fitted against; update refits it
        with self._torch_threads():
            if self._base_state is None:
                torch.manual_seed(self.seed)
                self._stats = _statistics(features, self.kernel_scaling)
                self._net = self._new_net()
                self._train(
                    features, targets, groups, self._net.parameters(), self.epochs, self.learning_rate
                )
                return
            self._fine_tune_rows(
                features[self._pretrain_rows :], targets[self._pretrain_rows :], groups[self._pretrain_rows :]
            )

    def _fine_tune_rows(self, features: np.ndarray, targets: np.ndarray, groups: np.ndarray) -> None:
        torch.manual_seed(self.seed)
        self._net = self._new_net()
        self._net.load_state_dict(self._base_state)
        self._residual = None
        if self.fine_tune_mode == "task" and self._fine_tune_tasks is not None:
            keep = np.isin(groups, list(self._fine_tune_tasks))
            features, targets, groups = features[keep], targets[keep], groups[keep]
        if not len(features):
            self._net.eval()
            return
        if self.fine_tune_mode == "plus":
            self._fit_residual(features, targets)
            return
        trainable = {
            "full": lambda: list(self._net.parameters()),
            "head": lambda: list(self._net.head.parameters()),
            "task": lambda: [*self._net.task.parameters(), *self._net.head.parameters()],
        }[self.fine_tune_mode]()
        chosen = {id(p) for p in trainable}
        for parameter in self._net.parameters():
            parameter.requires_grad_(id(parameter) in chosen)
        self._train(features, targets, groups, trainable, self.fine_tune_epochs, self.fine_tune_learning_rate)
        for parameter in self._net.parameters():
            parameter.requires_grad_(True)

    def _fit_residual(self, features: np.ndarray, targets: np.ndarray) -> None:
        import xgboost

        self._net.eval()
        residual = targets - self._net_predict(features)
        kernel, hardware, task, _, _ = data.unpack(features)
        params = {"max_depth": 4, "eta": 0.2, "min_child_weight": 2, "seed": self.seed, "nthread": 1}
        matrix = xgboost.DMatrix(np.hstack([kernel, hardware, task]), label=residual)
        self._residual = xgboost.train(params, matrix, num_boost_round=self.residual_rounds)

    def _split(self, n: int, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.random.default_rng(self.seed).permutation(n)
        n_valid = round(self.validation_fraction * n)
        if n_valid < 8 or n - n_valid < 8:
            return order, np.zeros(0, dtype=np.int64)
        return order[n_valid:], order[:n_valid]

    def _batches(self, index: np.ndarray, groups: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
        if self.loss == "rmse":
            index = rng.permutation(index)
            return [index[i : i + self.batch_size] for i in range(0, len(index), self.batch_size)]
        # lambdarank: a batch holds records of one group only (pairs are compared within a task)
        batches = []
        for group in np.unique(groups[index]):
            members = rng.permutation(index[groups[index] == group])
            batches += [members[i : i + self.batch_size] for i in range(0, len(members), self.batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def _loss(self, scores: torch.Tensor, labels: torch.Tensor, groups: np.ndarray) -> torch.Tensor:
        if self.loss == "rmse":
            return torch.sqrt(nn.functional.mse_loss(scores, labels) + 1e-12)
        losses = [_lambdarank_loss(scores[groups == g], labels[groups == g]) for g in np.unique(groups)]
        return torch.stack(losses).mean()

    def _train(self, features, targets, groups, parameters, epochs: int, learning_rate: float) -> None:
        net = self._net
        inputs = _Inputs(features, self._stats)
        labels = torch.from_numpy(targets.astype(np.float32))
        rng = np.random.default_rng(self.seed)
        train_index, valid_index = self._split(len(features), groups)
        optimiser = torch.optim.Adam(parameters, lr=learning_rate, weight_decay=self.weight_decay)
        best_loss, best_state, stale, epochs_run = math.inf, copy.deepcopy(net.state_dict()), 0, 0
        for epoch in range(1, epochs + 1):
            epochs_run = epoch
            net.train()
            for batch in self._batches(train_index, groups, rng):
                optimiser.zero_grad()
                loss = self._loss(net(*inputs.batch(batch)), labels[batch], groups[batch])
                loss.backward()
                optimiser.step()
            if not len(valid_index):
                continue
            net.eval()
            with torch.no_grad():
                valid = float(
                    self._loss(net(*inputs.batch(valid_index)), labels[valid_index], groups[valid_index])
                )
            if valid < best_loss - 1e-6:
                best_loss, best_state, stale = valid, copy.deepcopy(net.state_dict()), 0
            else:
                stale += 1
                if stale >= self.patience:
                    break
        if len(valid_index):
            net.load_state_dict(best_state)
        net.eval()
        self.last_fit = {"epochs": epochs_run, "rows": len(features), "best_validation_loss": best_loss}

    def _net_predict(self, features: np.ndarray, batch: int = 1024) -> np.ndarray:
        inputs = _Inputs(features, self._stats)
        # One length bucket per forward pass: little padding, and scores independent of the batch.
        buckets = np.array([_bucket(int(n)) for n in inputs.lengths.numpy()])
        out = np.empty(len(features), dtype=np.float64)
        with torch.no_grad():
            for bucket in np.unique(buckets):
                members = np.flatnonzero(buckets == bucket)
                for start in range(0, len(members), batch):
                    index = members[start : start + batch]
                    out[index] = self._net(*inputs.batch(index)).numpy()
        return out

    def _predict(self, features: np.ndarray) -> np.ndarray:
        with self._torch_threads():
            scores = self._net_predict(features)
        if self._residual is not None:
            import xgboost

            kernel, hardware, task, _, _ = data.unpack(features)
            scores = scores + self._residual.predict(xgboost.DMatrix(np.hstack([kernel, hardware, task])))
        return scores

    # ---- persistence -----------------------------------------------------------------------------------
    def _state_bytes(self) -> bytes:
        buffer = io.BytesIO()
        state = {
            "net": self._net.state_dict(),
            "stats": self._stats,
            "base": self._base_state,
            "pretrain_rows": self._pretrain_rows,
            "fine_tune_tasks": sorted(self._fine_tune_tasks) if self._fine_tune_tasks is not None else None,
            "residual": bytes(self._residual.save_raw("ubj")) if self._residual is not None else None,
        }
        torch.save(state, buffer)
        return buffer.getvalue()

    def _load_state(self, blob: bytes) -> None:
        state = torch.load(io.BytesIO(blob), weights_only=False)
        self._stats, self._base_state = state["stats"], state["base"]
        self._pretrain_rows = int(state["pretrain_rows"])
        tasks = state["fine_tune_tasks"]
        self._fine_tune_tasks = set(tasks) if tasks is not None else None
        self._net = self._new_net()
        self._net.load_state_dict(state["net"])
        self._net.eval()
        self._residual, self._online = None, None
        if state["residual"] is not None:
            import xgboost

            self._residual = xgboost.Booster()
            self._residual.load_model(bytearray(state["residual"]))


def _groups(frame: pd.DataFrame) -> np.ndarray:
    return (frame["task_id"] + "/" + frame["target_id"]).to_numpy()


class _Threads:
    """Context manager: torch intra-op threads set to ``n`` inside (0 = unchanged), restored after."""

    def __init__(self, n: int) -> None:
        self.n, self.before = n, None

    def __enter__(self) -> None:
        if self.n:
            self.before = torch.get_num_threads()
            torch.set_num_threads(self.n)

    def __exit__(self, *exc) -> None:
        if self.before is not None:
            torch.set_num_threads(self.before)
