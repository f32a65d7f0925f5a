"""Attention BiLSTM transfer cost model (after Verma et al., "Transfer Learning Across Heterogeneous
Features For Efficient Tensor Program Generation", ExHET 2023, arXiv 2304.05430).

The network (:mod:`.bilstm.network`) reads a candidate (its inputs: :mod:`.bilstm.inputs`) as

- its **schedule trace** (one :data:`~tenset_tools.features.TRACE_ROW_WIDTH`-float row per instruction,
  :func:`tenset_tools.features.encode_trace`) through a bidirectional LSTM (3 layers by default) whose
  outputs are pooled by multi-head attention (2 heads by default: learned queries over the valid steps);
- with ``store_sequence=True``, its **per-store feature rows** (MetaSchedule's ``PerStoreFeature``, one
  164-float row per ``BufferStore``, signed-log, standardised) through a one-layer bidirectional LSTM
  pooled by attention;
- its **pooled per-store kernel features** (328 floats, signed-log, then standardised or, with
  ``kernel_scaling="quantile"``, mapped through their training quantiles) through a small MLP;
- a **task embedding** (op kind one-hot, log FLOPs, argument shapes: :func:`.bilstm.inputs.task_vector`);
- the target's eight **hardware features**;

and regresses the normalised throughput (or ranks within a task with LambdaRank) from their concatenation.

The trace states the scheduling decisions in order (tile factors, loop order, annotations), which is what
the LSTM is for; the per-store rows describe the program they produced, store by store, which the pooled
vector (sum and max over stores) summarises but mixes across stores. While tuning, the per-store rows come
with the extraction every model here pays for; encoding a trace is cheap next to it.

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
to the scores of that workload's candidates. Without it the network, re-adapted from the base on a few
hundred target rows of which the run's own are a few, only shifted its level for the task and kept its
ranking: the search exploited the same mis-ranked neighbourhood for the whole run (flat best-latency
curves, ``docs/bilstm.md``).

This module runs past 400 lines for its documentation only: the docstrings of the module and of
:class:`BiLSTMCostModel` (the transfer modes, the hyper-parameters) take a third of it; the network,
its inputs and its training loop live in :mod:`.bilstm.network`, :mod:`.bilstm.inputs` and
:mod:`.bilstm.training`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import pandas as pd
import torch
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.utils import shash2hex

from tenset_tools.frame import group_keys, normalised_throughput, throughput_labels
from tvm_transfer.common.archive import arrays_bytes, checked_arrays, read_arrays, weight_arrays, weights_like
from tvm_transfer.cost_model.base import LearnedCostModel
from tvm_transfer.cost_model.bilstm import inputs as data
from tvm_transfer.cost_model.bilstm.network import BiLSTMNet
from tvm_transfer.cost_model.bilstm.training import LOSSES, predict_network, train_network
from tvm_transfer.features import (
    PER_STORE_WIDTH,
    POOLED_WIDTH,
    candidate_trace_json,
    encode_trace,
    hardware_features,
    pool_per_store,
)

__all__ = ["FINE_TUNE_MODES", "KERNEL_SCALINGS", "BiLSTMCostModel"]

FINE_TUNE_MODES = ("full", "head", "task", "plus")
KERNEL_SCALINGS = ("standard", "quantile")


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

    choices: ClassVar[dict[str, tuple]] = {
        "loss": LOSSES, "fine_tune_mode": FINE_TUNE_MODES, "kernel_scaling": KERNEL_SCALINGS,
    }  # fmt: skip
    #: The arguments that shape the network or its inputs.
    fixed_once_fitted: ClassVar[tuple[str, ...]] = (
        "hidden", "lstm_layers", "heads", "task_dim", "max_sequence", "kernel_scaling", "store_sequence",
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
        self._keep_hyper_parameters(locals())
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

    def _forget(self) -> None:
        super()._forget()
        self._base_state, self._pretrain_rows, self._residual = None, 0, None
        self._adapted_on = {}

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
        """:meth:`pretrain` on one frame: train from scratch and keep the result as the base."""
        return self.pretrain(frame)

    def pretrain(self, frames: pd.DataFrame | Sequence[pd.DataFrame]) -> BiLSTMCostModel:
        """Train from scratch on source datasets (one frame or several, e.g. one per target) and keep the
        result as the base that :meth:`fine_tune` and tuning updates adapt. Forgets earlier data."""
        frames = [frames] if isinstance(frames, pd.DataFrame) else list(frames)
        if not frames or not sum(len(f) for f in frames):
            raise ValueError("pretrain needs at least one non-empty frame")
        frame = pd.concat(frames, ignore_index=True)
        self.fit_features(self.frame_features(frame), throughput_labels(frame), group_keys(frame))
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
        if self._base_state is None:
            raise RuntimeError("fine_tune needs a pretrained model: call pretrain or load a pretrained file")
        if mode is not None:
            if mode not in FINE_TUNE_MODES:
                raise ValueError(f"unknown fine-tune mode {mode!r}; choose one of {FINE_TUNE_MODES}")
            self.fine_tune_mode = mode
        labels = throughput_labels(frame)
        if self.fine_tune_mode == "task":
            wanted = set(tasks) if tasks is not None else set(frame["task_id"])
            chosen = frame["task_id"].isin(wanted).to_numpy()
            frame, labels = frame[chosen], labels[chosen]
            self._fine_tune_tasks = set(group_keys(frame))
        if not len(frame):
            raise ValueError("no target records to fine-tune on")
        return self.update_features(self.frame_features(frame), labels, group_keys(frame))

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
        group = self._record(context, self.features(context, candidates), results)
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
                self._stats = data.input_statistics(features, self.kernel_scaling)
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
        residual = targets - predict_network(self._net, features, self._stats)
        kernel, hardware, task, _, _ = data.unpack(features)
        params = {"max_depth": 4, "eta": 0.2, "min_child_weight": 2, "seed": self.seed, "nthread": 1}
        matrix = xgboost.DMatrix(np.hstack([kernel, hardware, task]), label=residual)
        self._residual = xgboost.train(params, matrix, num_boost_round=self.residual_rounds)

    def _train(self, features, targets, groups, parameters, epochs: int, learning_rate: float) -> None:
        self.last_fit = train_network(
            self._net,
            features,
            targets,
            groups,
            self._stats,
            parameters,
            epochs=epochs,
            learning_rate=learning_rate,
            loss=self.loss,
            batch_size=self.batch_size,
            weight_decay=self.weight_decay,
            patience=self.patience,
            validation_fraction=self.validation_fraction,
            seed=self.seed,
        )

    def _predict(self, features: np.ndarray) -> np.ndarray:
        with self._torch_threads():
            scores = predict_network(self._net, features, self._stats)
        if self._residual is not None:
            import xgboost

            kernel, hardware, task, _, _ = data.unpack(features)
            scores = scores + self._residual.predict(xgboost.DMatrix(np.hstack([kernel, hardware, task])))
        return scores

    # ---- persistence -----------------------------------------------------------------------------------
    def _state_bytes(self) -> bytes:
        arrays = {
            **weight_arrays(self._net.state_dict(), "net/"),
            **{f"stats/{key}": value for key, value in self._stats.items()},
            "state/pretrain_rows": np.int64(self._pretrain_rows),
        }
        if self._base_state is not None:
            arrays.update(weight_arrays(self._base_state, "base/"))
        if self._fine_tune_tasks is not None:
            arrays["state/fine_tune_tasks"] = np.asarray(sorted(self._fine_tune_tasks), dtype=str)
        if self._residual is not None:
            arrays["state/residual"] = np.frombuffer(bytes(self._residual.save_raw("ubj")), np.uint8)
        return arrays_bytes(arrays)

    def _load_state(self, blob: bytes) -> None:
        arrays = read_arrays(blob, "model.bin")
        net = self._new_net()
        net.load_state_dict(_tensors(weights_like(arrays, net.state_dict(), "net/", "model.bin")))
        base = None
        if any(name.startswith("base/") for name in arrays):
            base = _tensors(weights_like(arrays, net.state_dict(), "base/", "model.bin"))
        self._stats = checked_arrays(
            arrays, self._stats_shapes(), "stats/", "model.bin", optional=("s_mean", "s_scale")
        )
        state = checked_arrays(
            arrays,
            {"pretrain_rows": (), "fine_tune_tasks": (None,), "residual": (None,)},
            "state/",
            "model.bin",
            optional=("fine_tune_tasks", "residual"),
        )
        self._net, self._base_state = net.eval(), base
        self._pretrain_rows = int(state["pretrain_rows"])
        tasks = state.get("fine_tune_tasks")
        self._fine_tune_tasks = {str(task) for task in tasks} if tasks is not None else None
        self._residual, self._online = None, None
        if "residual" in state:
            import xgboost

            self._residual = xgboost.Booster()
            self._residual.load_model(bytearray(state["residual"].tobytes()))

    def _stats_shapes(self) -> dict[str, tuple[int | None, ...]]:
        """Shapes of the scaling statistics (:func:`.bilstm.inputs.input_statistics`) as this model saves
        them."""
        widths = {"k": POOLED_WIDTH, "s": PER_STORE_WIDTH, "h": data.HW_WIDTH, "t": data.TASK_WIDTH}
        shapes = {
            f"{prefix}_{kind}": (width,) for prefix, width in widths.items() for kind in ("mean", "scale")
        }
        if self.kernel_scaling == "quantile":
            shapes["k_quantiles"] = (None, POOLED_WIDTH)
        return shapes


def _tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {key: torch.from_numpy(value) for key, value in arrays.items()}


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
